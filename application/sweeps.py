"""A sweep run in processes: the library's points (:mod:`pipesim.sweep.grid`) on this process,
a local process pool or a Dask cluster, rows in the points' order whatever runs them."""

from __future__ import annotations

import signal
from collections.abc import Generator, Iterable
from typing import Any

from application.lifetime import end_with_parent
from application.workers import open_workers
from pipesim.common import checks
from pipesim.common.workers import chunk_size, ordered_map
from pipesim.request.cost_request import CostRequest
from pipesim.sweep import grid
from pipesim.sweep.grid import SweepPoint


def _start_worker() -> None:
    """Workers leave Ctrl-C to the parent, which stops the sweep and saves what finished
    (otherwise every worker prints its own traceback), and end with the parent if it dies
    without stopping them (``kill -9``)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    end_with_parent()


def run_sweep(
    points: Iterable[SweepPoint],
    costs: CostRequest,
    steps: int = 1,
    jobs: int = 1,
    engine: str = "auto",
    cluster: str | None = None,
) -> Generator[dict[str, Any], None, None]:
    """Results in the order of ``points``, each yielded as soon as it and those before it are
    done. ``jobs`` > 1 uses worker processes, capped at the CPU count and the number of
    points (:func:`pipesim.common.limits.cap_jobs`); ``cluster`` runs the points on a Dask
    cluster instead (:mod:`application.workers`: ``local`` or a scheduler's address), with
    the same rows in the same order. Closing the iterator early (Ctrl-C in the caller) cancels
    the points not started and waits only for those running."""
    steps = checks.positive_int("steps", steps)
    jobs = checks.positive_int("jobs", jobs)
    work = list(points)
    with open_workers(jobs, cluster, initializer=_start_worker, work_items=len(work)) as workers:
        chunk = chunk_size(len(work), workers.width)
        # grid.run_point looked up now, not at import: a test may stand in for it
        yield from ordered_map(workers, grid.run_point, work, costs, steps, engine, chunk=chunk)
