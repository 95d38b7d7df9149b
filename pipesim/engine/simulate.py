"""``simulate``: play a schedule with one of two engines that share one semantics.

* ``simpy``: the readable reference (:mod:`pipesim.engine.simpy_engine`), a SimPy process per
  device.
* ``fast``: the same semantics on flat arrays in one tight loop (:mod:`pipesim.engine.fast`),
  compiled with numba when the ``fast`` extra is installed, plain Python otherwise; the numbers
  are the same either way.
* ``auto`` (the default) takes the fast engine.

The fast engine runs its kernels compiled when numba is installed and either they are loaded in
this process (:func:`warm_up`, once, for a planner or a sweep) or the run is large; otherwise
interpreted.

Property tests hold the two engines equal (every action's start and end, every transfer, busy
time and memory) over random schedules, costs, topologies and steps. The result's ``engine``
says which one ran.
"""

from __future__ import annotations

import dataclasses
import gc
from collections.abc import Iterator
from contextlib import contextmanager
from enum import Enum

from pipesim.common import checks
from pipesim.common.checks import SpecError
from pipesim.costs.pipeline_costs import PipelineCosts
from pipesim.engine.arrays import arrays_from_records
from pipesim.engine.result import SimulationResult, summarize
from pipesim.schedules.schedule import Schedule


class Engine(Enum):
    """Which engine plays the schedule."""

    SIMPY = "simpy"
    FAST = "fast"
    AUTO = "auto"


def simulate(
    schedule: Schedule,
    costs: PipelineCosts,
    steps: int = 1,
    *,
    engine: Engine | str = Engine.AUTO,
) -> SimulationResult:
    """Run ``steps`` training steps of ``schedule`` with ``costs``; return the timeline and
    metrics. ``steps`` >= 2 reports the steady-state time per step. ``engine`` is ``auto``
    (the fast engine), ``fast`` or ``simpy``; the result names the one that ran."""
    steps = checks.positive_int("steps", steps)
    chosen = engine_named(engine)
    _check_compatible(schedule, costs)
    costs = costs_on_stages(schedule, costs)
    with _collection_paused():
        return _simulate(schedule, costs, steps, chosen)


def _simulate(
    schedule: Schedule, costs: PipelineCosts, steps: int, chosen: Engine
) -> SimulationResult:
    if chosen is Engine.SIMPY:
        from pipesim.engine.simpy_engine import run_simpy

        compute, transfers = run_simpy(schedule, costs, steps)
        stored = tuple(transfers)
        return summarize(
            schedule, costs, steps, arrays_from_records(compute), lambda: stored, "simpy"
        )
    from pipesim.engine.fast import run_fast

    run, transfer_source = run_fast(schedule, costs, steps)
    return summarize(schedule, costs, steps, run, transfer_source, "fast")


@contextmanager
def _collection_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while an engine runs, and restore it after.

    A run allocates hundreds of thousands of small objects and frees none of them until it
    ends; the collector would scan them all again and again (up to a third of the SimPy
    engine's time at K=64 M=1024). Reference counting still frees what is dropped; cycles made
    meanwhile are collected once the collector is back on.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def warm_up() -> bool:
    """Load the fast engine's compiled kernels now (numba's import and cache: about a second
    and a half; a first compile on a new machine, several), so that every later simulation in
    this process uses them. Returns False when numba (the ``fast`` extra) is not installed."""
    from pipesim.engine.fast import warm_up as load

    return load()


def engine_named(engine: Engine | str) -> Engine:
    """The :class:`Engine` for ``engine`` (an Engine or its name); ``auto`` resolves to fast."""
    if isinstance(engine, str):
        try:
            engine = Engine(engine)
        except ValueError:
            choices = ", ".join(e.value for e in Engine)
            raise SpecError(f"engine must be one of {choices}, got {engine!r}") from None
    if not isinstance(engine, Engine):
        raise SpecError(f"engine must be one of simpy, fast, auto, got {engine!r}")
    return Engine.FAST if engine is Engine.AUTO else engine


def costs_on_stages(schedule: Schedule, costs: PipelineCosts) -> PipelineCosts:
    """``costs`` with one entry per stage of ``schedule``: as given, or, for a schedule whose
    stages hold copies of the model (DualPipe) and costs given per model stage, each copy's
    stage with its model stage's costs (the model is cut into S_model stages, not S)."""
    if schedule.copies == 1 or len(costs.stages) == schedule.stages:
        return costs
    return dataclasses.replace(costs, stages=schedule.on_stages(costs.stages))


def _check_compatible(schedule: Schedule, costs: PipelineCosts) -> None:
    if len(costs.stages) != schedule.stages and (
        schedule.copies == 1 or len(costs.stages) != schedule.model_stages
    ):
        copies = (
            f" ({schedule.copies} copies of a model of {schedule.model_stages} stages: costs "
            f"per stage of the model, or per stage of every copy)"
            if schedule.copies > 1
            else ""
        )
        raise SpecError(
            f"costs describe {len(costs.stages)} stage(s) but schedule {schedule.name!r} has "
            f"{schedule.stages} (K={schedule.devices} x v={schedule.chunks}){copies}"
        )
    if costs.network.devices != schedule.devices:
        raise SpecError(
            f"the network has {costs.network.devices} device(s) but schedule "
            f"{schedule.name!r} has {schedule.devices}"
        )
