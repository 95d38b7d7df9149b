"""Size limits: the work a request implies is estimated before anything is allocated, and a
request beyond a limit is refused with one line that names the limit and how to raise it.

Without them a typo (``-M 1000000000``, ``layers = 10000000``, ``--jobs 100000``) grows a
process to gigabytes or forks thousands of workers before anything is reported. The defaults
leave every published setting and the fast engine's target case (1F1B, K=64, M=1024: 131,072
actions) far inside; each can be raised for one run with its environment variable, e.g.
``PIPESIM_MAX_ACTIONS=5000000 pipesim simulate ...``.

=========================  ================================  =========  ==========================
limit                      environment variable              default    what it bounds
=========================  ================================  =========  ==========================
actions                    ``PIPESIM_MAX_ACTIONS``           1,048,576  a schedule's actions x steps
devices                    ``PIPESIM_MAX_DEVICES``           1,024      K
cluster devices            ``PIPESIM_MAX_CLUSTER_DEVICES``   65,536     K x data parallelism
chunks                     ``PIPESIM_MAX_CHUNKS``            64         v
layers                     ``PIPESIM_MAX_LAYERS``            100,000    a model's layers, repeated
configurations             ``PIPESIM_MAX_CONFIGS``           100,000    sweep points, a plan's space
partition table cells      ``PIPESIM_MAX_PARTITION_CELLS``   2**26      stages x (layers + 1)**2
input file bytes           ``PIPESIM_MAX_INPUT_BYTES``       64 MiB     a TOML or CSV file read
=========================  ================================  =========  ==========================

Worker processes (``--jobs``) are not a limit but a cap: never more than the CPUs this process
may run on (:func:`cpu_count`), nor than there is work for.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum

from pipesim.errors import LimitError, PipesimError


@dataclass(frozen=True)
class _Spec:
    variable: str
    default: int
    unit: str


class Limit(Enum):
    """Each documented limit: its environment variable, default and unit."""

    ACTIONS = _Spec("PIPESIM_MAX_ACTIONS", 1 << 20, "actions")
    DEVICES = _Spec("PIPESIM_MAX_DEVICES", 1024, "devices")
    # The whole cluster, pipeline depth times data-parallel replicas: what a plan searches and
    # a data-parallel all-reduce spans (65,536 GPUs: beyond today's largest published runs).
    CLUSTER_DEVICES = _Spec("PIPESIM_MAX_CLUSTER_DEVICES", 1 << 16, "devices in the cluster")
    CHUNKS = _Spec("PIPESIM_MAX_CHUNKS", 64, "chunks per device")
    LAYERS = _Spec("PIPESIM_MAX_LAYERS", 100_000, "layers")
    CONFIGS = _Spec("PIPESIM_MAX_CONFIGS", 100_000, "configurations")
    # The exact partitioner's tables: one float per (stage, first layer, end layer), several
    # tables at once (2**26 cells: 0.5 GB each); 1,000 layers on 64 stages fit.
    PARTITION_CELLS = _Spec("PIPESIM_MAX_PARTITION_CELLS", 1 << 26, "table cells")
    INPUT_BYTES = _Spec("PIPESIM_MAX_INPUT_BYTES", 64 << 20, "bytes")

    @property
    def variable(self) -> str:
        """The environment variable that raises (or lowers) this limit."""
        return self.value.variable


def limit(which: Limit, environ: Mapping[str, str] | None = None) -> int:
    """The value of ``which`` now: its environment variable if set, else the default."""
    env = os.environ if environ is None else environ
    text = env.get(which.variable)
    if text is None or not text.strip():
        return which.value.default
    try:
        value = int(text.strip().replace("_", ""))
    except ValueError:
        value = 0
    if value < 1:
        raise PipesimError(f"{which.variable} must be an integer >= 1, got {text!r}")
    return value


def check_environment(environ: Mapping[str, str] | None = None) -> None:
    """Refuse a limit's environment variable that is set but not an integer >= 1, whichever
    command runs (a command that never reads that limit would otherwise ignore it)."""
    for which in Limit:
        limit(which, environ)


def check(which: Limit, amount: int | float, what: str) -> None:
    """Refuse ``amount`` beyond the limit ``which``; ``what`` says what was asked for, e.g.
    "1f1b K=8 M=1,000,000,000: 16,000,000,000 actions"."""
    bound = limit(which)
    if amount > bound:
        raise LimitError(
            f"{what}: beyond the limit of {bound:,} {which.value.unit}; set "
            f"{which.variable} to raise it"
        )


def cpu_count() -> int:
    """The CPUs this process may run on (its affinity mask, where the OS has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def cap_jobs(jobs: int, work_items: int) -> int:
    """Worker processes to start for ``jobs`` asked and ``work_items`` to do: at most the CPU
    count, at most one per item, at least one."""
    return max(1, min(jobs, cpu_count(), work_items))
