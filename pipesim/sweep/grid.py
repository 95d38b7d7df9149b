"""Sweeps: one cost request over many schedules and shapes, optionally in parallel processes.

Shapes a schedule cannot take are skipped with the reason, never silently dropped. The whole
grid is checked before any work: its size (:attr:`Limit.CONFIGS` points, each within the action
limit over its steps) and the cost request's names and files (:func:`preflight`), so input that
no row could use is refused at once instead of repeated as an error in every row.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pipesim.common import checks
from pipesim.common.limits import Limit, check
from pipesim.errors import LimitError, PipesimError, named
from pipesim.files.strict_json import overflow_checked, result_problem
from pipesim.parallel.placement import looped
from pipesim.request.cost_request import (
    CostRequest,
    ModelRequest,
    check_split_backward_recompute,
)
from pipesim.schedules import build, schedule_info, unsupported_reason
from pipesim.schedules.registry import check_size
from pipesim.synthesis.synthesis import SYNTH_NAME

# A synthesised schedule's series in a sweep: one per memory limit, "synth N=<limit>".
_SYNTH_SERIES = f"{SYNTH_NAME} N="


def synth_series(limit: int) -> str:
    """The schedule column of a synthesised schedule's rows: ``synth N=4``."""
    return f"{_SYNTH_SERIES}{limit}"


def synth_limit(name: str) -> int | None:
    """The memory limit of a ``synth N=<limit>`` series, None for a registered schedule."""
    digits = name[len(_SYNTH_SERIES) :]
    if name.startswith(_SYNTH_SERIES) and digits.isascii() and digits.isdigit():
        return int(digits)
    return None


@dataclass(frozen=True)
class SweepPoint:
    """One configuration of a sweep."""

    schedule: str
    devices: int
    microbatches: int
    chunks: int
    remat: bool = False


@dataclass(frozen=True)
class Skipped:
    """A configuration the schedule cannot take, and why."""

    point: SweepPoint
    reason: str


def sweep_points(
    schedules: Sequence[str],
    devices: Sequence[int],
    microbatches: Sequence[int],
    chunks: Sequence[int] | None = None,
    remat: bool = False,
    steps: int = 1,
    memory_limits: Sequence[int] | None = None,
) -> tuple[list[SweepPoint], list[Skipped]]:
    """The grid, split into buildable points and skipped ones (with reasons).

    ``synth`` among ``schedules`` stands for a synthesised schedule at each of
    ``memory_limits`` ((stage, micro-batch) pairs in flight per device, looped over each
    ``chunks``), a series each: ``synth N=2``, ``synth N=4``.

    ``chunks`` None takes each schedule's default number of chunks. A grid of more than
    :attr:`Limit.CONFIGS` points, or a point beyond the size limits over ``steps`` steps, is
    refused before any point is built (:class:`LimitError`).
    """
    for name in schedules:
        if name.startswith(_SYNTH_SERIES):  # series are made from --memory-limits, not typed
            raise PipesimError(
                f"unknown schedule {name!r}: give {SYNTH_NAME} with {named('memory_limits')} "
                "N,N,... for the synthesised series"
            )
    limits = list(memory_limits or [])
    if (SYNTH_NAME in schedules) != bool(limits):
        raise PipesimError(
            f"{named('schedules')} {SYNTH_NAME} goes with {named('memory_limits')} N,N,... "
            f"(pairs in flight), and {named('memory_limits')} with it"
        )
    series = [
        name
        for schedule in schedules
        for name in ([synth_series(n) for n in limits] if schedule == SYNTH_NAME else [schedule])
    ]
    for name in series:
        if synth_limit(name) is None:
            schedule_info(name)  # unknown names fail before any work
    schedules = series
    size = len(schedules) * len(devices) * len(microbatches) * (len(chunks) if chunks else 1)
    check(Limit.CONFIGS, size, f"the sweep's {size:,} points")
    points, skipped = [], []
    oversized: list[str] = []
    for name, k, m in itertools.product(schedules, devices, microbatches):
        limit = synth_limit(name)
        # A synthesised schedule: looped over v stages per device, I/W split (sized as ZB-H1
        # is, 3·K·v·M actions).
        registered = "zb-h1" if limit is not None else name
        for v in chunks or [schedule_info(registered).default_chunks]:
            point = SweepPoint(name, k, m, v, remat)
            if limit is None:
                reason = unsupported_reason(name, k, m, v, remat)
            elif remat:
                reason = f"{SYNTH_NAME}: splits backwards into I and W, no re-materialization"
            elif limit < v:
                reason = (
                    f"{SYNTH_NAME}: a limit of {limit} is below the {v} stages per device (a "
                    "device holds every stage of a micro-batch it has at once)"
                )
            else:
                reason = None
            if reason is not None:
                skipped.append(Skipped(point, reason))
                continue
            try:
                check_size(schedule_info(registered), k, m, v, steps)
            except LimitError as error:
                oversized.append(str(error))
                continue
            points.append(point)
    if oversized:
        more = f" (and {len(oversized) - 1:,} more points)" if len(oversized) > 1 else ""
        raise LimitError(f"{oversized[0]}{more}")
    return points, skipped


def preflight(costs: CostRequest) -> None:
    """Check what every row of a sweep shares before any row runs: a synthetic request's
    figures, or a model request's layers as one tensor-parallel rank holds them and its batch
    (the run's configuration checked itself when it was made). Errors that depend on the shape
    (more stages than layers, a batch M does not divide) stay per row."""
    if not isinstance(costs, ModelRequest):
        costs.build(1, 1, 1)
        return
    costs.run.sharded()
    if costs.batch is not None:
        checks.positive_int(named("batch"), costs.batch)


def run_point(
    point: SweepPoint, costs: CostRequest, steps: int = 1, engine: str = "auto"
) -> dict[str, Any]:
    """Simulate one point with ``engine`` (simpy, fast or auto); the result's JSON object, or
    the point with an ``error`` text if the costs cannot be built for this shape (e.g. more
    stages than layers) or the result cannot be saved (costs that overflow, or all zero: see
    :func:`pipesim.files.strict_json.result_problem`)."""
    from pipesim.engine import simulate
    from pipesim.synthesis.synthesis import synthesize

    limit = synth_limit(point.schedule)
    name = point.schedule
    if limit is not None:  # a synthesis costs the shape of 1F1B, or of looped BFS over v
        name = "1f1b" if point.chunks == 1 else "looped-bfs"
    schedule = build(name, point.devices, point.microbatches, point.chunks, remat=point.remat)
    try:
        pipeline = costs.build(point.devices, point.chunks, point.microbatches, schedule, steps)
    except PipesimError as error:
        return {**_identity(point), "error": str(error)}
    if limit is not None:
        if isinstance(costs, ModelRequest):
            try:
                check_split_backward_recompute(SYNTH_NAME, costs.run.parallelism.recompute)
            except PipesimError as error:
                return {**_identity(point), "error": str(error)}
        placement = looped(point.devices, point.chunks)
        schedule = synthesize(pipeline, point.microbatches, limit, placement=placement).schedule
    with overflow_checked():  # a non-finite result becomes an error row just below
        result = simulate(schedule, pipeline, steps=steps, engine=engine).to_json()
    problem = result_problem(result)
    if problem is not None:
        return {**_identity(point), "error": problem}
    result["schedule"] = point.schedule  # a synthesised row keeps its series' name
    return result


def _identity(point: SweepPoint) -> dict[str, Any]:
    return {
        "schedule": point.schedule,
        "devices": point.devices,
        "microbatches": point.microbatches,
        "chunks": point.chunks,
    }
