"""How busy the host was while validation measured: load average and CPU steal.

A verdict on the simulator means something only if the measurements behind it were not
dominated by other work on the machine, so every case records the host's load (``os.getloadavg``,
the run-queue length averaged over a minute) and, where the kernel shows it, the fraction of CPU
time a hypervisor stole (``/proc/stat``'s ``steal`` column), over the time it was measured.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipesim.common.limits import cpu_count
from pipesim.errors import PipesimError
from validation.fields import require

PROC_STAT = Path("/proc/stat")
BUSY_MARGIN = 0.5


@dataclass(frozen=True)
class HostSample:
    """A reading of the host: when, the 1-minute load average, and the CPU tick counters
    (None where ``/proc/stat`` is not readable)."""

    time_s: float
    load_1min: float
    steal_ticks: int | None
    total_ticks: int | None


@dataclass(frozen=True)
class HostLoad:
    """The host over a measurement: the mean and the highest 1-minute load average of the
    readings taken while it ran (the validation's own K processes count: K on K cores is a
    machine with no other work), the cores, and the fraction of CPU time stolen (None where not
    visible)."""

    load_1min: float
    load_1min_max: float
    cores: int
    steal_fraction: float | None
    duration_s: float

    @property
    def busy(self) -> bool:
        """More runnable work than cores, by more than :data:`BUSY_MARGIN` (the validation's
        own processes included: K processes on K cores is a machine doing nothing else; the
        margin leaves room for the parent's sampling and the odd short-lived process)."""
        return self.load_1min > self.cores + BUSY_MARGIN

    def describe(self) -> str:
        """A short phrase for the report: "load 2.31 on 2 cores, steal 0.4%"."""
        steal = "not visible" if self.steal_fraction is None else f"{self.steal_fraction:.1%}"
        return (
            f"load {self.load_1min:.2f} (max {self.load_1min_max:.2f}) on {self.cores} cores, "
            f"steal {steal}"
        )

    def to_json(self) -> dict[str, Any]:
        """Every field."""
        return {
            "load_1min": self.load_1min,
            "load_1min_max": self.load_1min_max,
            "cores": self.cores,
            "steal_fraction": self.steal_fraction,
            "duration_s": self.duration_s,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> HostLoad:
        """The inverse of :meth:`to_json`; a missing field is a one-line error."""
        steal = require(data, "steal_fraction", "host")
        return cls(
            float(require(data, "load_1min", "host")),
            float(require(data, "load_1min_max", "host")),
            int(require(data, "cores", "host")),
            None if steal is None else float(steal),
            float(require(data, "duration_s", "host")),
        )


def sample_host() -> HostSample:
    """Read the load average and the CPU counters now."""
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = 0.0
    steal = total = None
    try:
        first = PROC_STAT.read_text(encoding="ascii").splitlines()[0].split()
        if first[0] == "cpu":
            ticks = [int(v) for v in first[1:]]
            # user nice system idle iowait irq softirq steal guest guest_nice; guest time is
            # already counted in user and nice.
            total = sum(ticks[:8])
            steal = ticks[7] if len(ticks) > 7 else 0
    except (OSError, ValueError, IndexError):
        pass
    return HostSample(time.monotonic(), load, steal, total)


def host_load(samples: Sequence[HostSample]) -> HostLoad:
    """The host over readings taken while a measurement ran (at least one)."""
    if not samples:
        raise PipesimError("host_load: no readings")
    start, end = samples[0], samples[-1]
    loads = [s.load_1min for s in samples]
    steal_fraction = None
    if (
        start.steal_ticks is not None
        and end.steal_ticks is not None
        and start.total_ticks is not None
        and end.total_ticks is not None
        and end.total_ticks > start.total_ticks
    ):
        steal_fraction = (end.steal_ticks - start.steal_ticks) / (
            end.total_ticks - start.total_ticks
        )
    return HostLoad(
        statistics.fmean(loads),
        max(loads),
        cpu_count(),
        steal_fraction,
        end.time_s - start.time_s,
    )
