"""The planner's search space: every (K, DP, schedule, v, M, micro-batch size, remat) that
the schedule can take, for N devices and a global batch B.

K divides N and DP = N / K; each replica takes B / DP samples per step as M micro-batches of
b samples. Schedules with chunks take v in ``chunk_options`` (interleaved) or their fixed v
(V-shaped); re-materialization is tried where the schedule supports it. One device (K = 1) is
plain data parallelism with gradient accumulation: every flush schedule is the same there, so
only 1F1B is kept.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from pipesim.schedules import schedule_info, unsupported_reason
from pipesim.schedules.synthesis import SYNTH_NAME

DEFAULT_SCHEDULES = (
    "gpipe",
    "1f1b",
    "interleaved-1f1b",
    "zb-h1",
    "zb-h2",
    "zbv",
    "pipedream-2bw",
)


@dataclass(frozen=True)
class Candidate:
    """One configuration of the search.

    Attributes:
        devices: K, pipeline depth.
        data_parallel: DP = N / K replicas.
        schedule: registered schedule name.
        chunks: v.
        microbatches: M per replica and step.
        microbatch_size: b samples per micro-batch.
        remat: re-materialization.
        memory_limit: for a synthesised schedule (``synth``), the micro-batches in flight it
            was made for; None for a registered one.
    """

    devices: int
    data_parallel: int
    schedule: str
    chunks: int
    microbatches: int
    microbatch_size: int
    remat: bool
    memory_limit: int | None = None

    @property
    def schedule_label(self) -> str:
        """The schedule's name, with the limit of a synthesised one: ``synth N=3``."""
        if self.memory_limit is None:
            return self.schedule
        return f"{self.schedule} N={self.memory_limit}"

    @property
    def stages(self) -> int:
        """S = K·v."""
        return self.devices * self.chunks

    def label(self) -> str:
        """A short name: ``1f1b K=8 DP=8 v=1 M=32 b=2``."""
        remat = " remat" if self.remat else ""
        return (
            f"{self.schedule_label} K={self.devices} DP={self.data_parallel} v={self.chunks} "
            f"M={self.microbatches} b={self.microbatch_size}{remat}"
        )


def divisors(n: int) -> list[int]:
    """The divisors of ``n`` in increasing order, found in sqrt(n) steps (``--batch 10**9``
    takes 31,623 steps, not a billion)."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return small + [n // d for d in reversed(small) if d * d != n]


def candidates(
    devices: int,
    batch: int,
    layers: int,
    schedules: Sequence[str] = DEFAULT_SCHEDULES,
    chunk_options: Sequence[int] = (2, 4),
    max_microbatches: int = 512,
) -> Iterator[Candidate]:
    """Every buildable configuration (skipping shapes a schedule cannot take, and more stages
    than layers)."""
    schedules = [name for name in schedules if name != SYNTH_NAME]  # offered after the search
    for name in schedules:
        schedule_info(name)  # unknown names fail before any work
    for k in divisors(devices):
        if k > layers:
            continue
        dp = devices // k
        if batch % dp:
            continue
        per_replica = batch // dp
        # Micro-batch counts up to the cap that divide the batch, fewest samples each first:
        # at most max_microbatches steps whatever --batch is.
        counts = range(min(max_microbatches, per_replica), 0, -1)
        for m in (m for m in counts if per_replica % m == 0):
            b = per_replica // m
            for name in schedules if k > 1 else ("1f1b",):
                info = schedule_info(name)
                if k == 1 or info.default_chunks == 1:
                    chunk_list: Sequence[int] = [1]
                elif name in ("zbv", "dualpipev"):
                    chunk_list = [2]
                else:
                    chunk_list = chunk_options
                for v in chunk_list:
                    if k * v > layers:
                        continue
                    for remat in (False, True) if info.supports_remat else (False,):
                        if unsupported_reason(name, k, m, v, remat) is None:
                            yield Candidate(k, dp, name, v, m, b, remat)
