"""The fast engine against the SimPy engine: the same run, to 1e-9 relative, everywhere.

Random schedules (every generator, remat, and valid reorderings no generator makes), random
per-stage costs with zeros and ties, every topology with ideal or finite links, compute-issued
transfers, and several steps. Both kernels of the fast engine are held to it: the in-order walk
(with its fall-back to the event loop when a shared channel needs it) and the event loop alone,
interpreted and, when numba is installed, compiled.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipesim.common.jit import numba_available
from pipesim.costs import PipelineCosts
from pipesim.engine import SimulationResult, simulate
from pipesim.engine.fast import run_fast
from pipesim.engine.result import summarize
from pipesim.engine.simulate import costs_on_stages
from pipesim.errors import ScheduleError
from pipesim.schedules import Schedule

from .strategies import any_schedule, costs_for


def close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def assert_same_run(reference: SimulationResult, fast: SimulationResult) -> None:
    assert (reference.engine, fast.engine) == ("simpy", "fast")
    assert close(reference.iteration_time_s, fast.iteration_time_s)
    assert close(reference.makespan_s, fast.makespan_s)
    assert len(reference.compute) == len(fast.compute)
    for rc, fc in zip(reference.compute, fast.compute, strict=True):
        assert (rc.device, rc.step, rc.action) == (fc.device, fc.step, fc.action)
        assert close(rc.start_s, fc.start_s) and close(rc.end_s, fc.end_s), (rc, fc)
    assert len(reference.transfers) == len(fast.transfers)
    for rt, ft in zip(reference.transfers, fast.transfers, strict=True):
        assert (rt.label, rt.step, rt.channels, rt.size_bytes) == (
            ft.label,
            ft.step,
            ft.channels,
            ft.size_bytes,
        )
        for a, b in ((rt.queued_s, ft.queued_s), (rt.start_s, ft.start_s), (rt.end_s, ft.end_s)):
            assert close(a, b), (rt, ft)
    for rd, fd in zip(reference.per_device, fast.per_device, strict=True):
        assert close(rd.busy_time_s, fd.busy_time_s)
        assert close(rd.peak_memory_bytes, fd.peak_memory_bytes)
        assert close(rd.peak_activation_bytes, fd.peak_activation_bytes)
        assert rd.memory.timeline == fd.memory.timeline
    reference_json, fast_json = reference.to_json(), fast.to_json()
    del reference_json["engine"], fast_json["engine"]
    assert reference_json == fast_json


def simpy_or_error(schedule: Schedule, costs: PipelineCosts, steps: int) -> SimulationResult | str:
    """The SimPy run, or the message of its error (steps of a reordered no-flush schedule may
    deadlock when run back to back: both engines must then refuse it alike)."""
    try:
        return simulate(schedule, costs, steps, engine="simpy")
    except ScheduleError as error:
        return str(error)


def check_against_simpy(
    schedule: Schedule, costs: PipelineCosts, steps: int, fast: Callable[[], SimulationResult]
) -> None:
    reference = simpy_or_error(schedule, costs, steps)
    if isinstance(reference, str):
        with pytest.raises(ScheduleError) as raised:
            fast()
        assert str(raised.value) == reference
        return
    assert_same_run(reference, fast())


@st.composite
def runs(
    draw: st.DrawFn, names: tuple[str, ...] | None = None
) -> tuple[Schedule, PipelineCosts, int]:
    schedule = draw(any_schedule(names=names))
    return schedule, draw(costs_for(schedule)), draw(st.integers(1, 3))


@given(runs())
def test_the_fast_engine_plays_exactly_what_simpy_plays(
    run: tuple[Schedule, PipelineCosts, int],
) -> None:
    schedule, costs, steps = run
    check_against_simpy(
        schedule, costs, steps, lambda: simulate(schedule, costs, steps, engine="fast")
    )


@given(runs(names=("dualpipe",)))
@settings(max_examples=20)
def test_the_engines_agree_on_dualpipe(run: tuple[Schedule, PipelineCosts, int]) -> None:
    """Two copies of the model: costs per model stage or per stage of each copy, reorderings,
    every topology (the draws above take DualPipe one time in thirteen)."""
    schedule, costs, steps = run
    check_against_simpy(
        schedule, costs, steps, lambda: simulate(schedule, costs, steps, engine="fast")
    )


@given(runs())
@settings(max_examples=30)
def test_the_event_loop_alone_gives_the_same_run(
    run: tuple[Schedule, PipelineCosts, int],
) -> None:
    schedule, costs, steps = run

    def by_events() -> SimulationResult:
        staged = costs_on_stages(schedule, costs)  # what simulate does first
        arrays, transfers = run_fast(schedule, staged, steps, force_events=True)
        return summarize(schedule, staged, steps, arrays, transfers, "fast")

    check_against_simpy(schedule, costs, steps, by_events)


@pytest.mark.skipif(not numba_available(), reason="the fast extra (numba) is not installed")
@given(runs(), st.booleans())
@settings(max_examples=25)
def test_compiled_kernels_give_the_same_numbers(
    run: tuple[Schedule, PipelineCosts, int], force_events: bool
) -> None:
    schedule, costs, steps = run

    def compiled() -> SimulationResult:
        staged = costs_on_stages(schedule, costs)  # what simulate does first
        arrays, transfers = run_fast(
            schedule, staged, steps, compiled=True, force_events=force_events
        )
        return summarize(schedule, staged, steps, arrays, transfers, "fast")

    check_against_simpy(schedule, costs, steps, compiled)


def test_an_unknown_engine_is_refused_with_the_choices() -> None:
    from pipesim.common.checks import SpecError
    from pipesim.costs import synthetic_costs
    from pipesim.schedules import build

    with pytest.raises(SpecError, match=r"^engine must be one of simpy, fast, auto, got 'jet'$"):
        simulate(build("1f1b", 2, 2), synthetic_costs(2, 1, 1.0, 1.0), engine="jet")


@pytest.mark.parametrize("hardware_name", ["tpu-v3", "p100-pcie", "h100-ib", "a100"])
@pytest.mark.parametrize("name", ["gpipe", "1f1b", "zb-h1", "interleaved-1f1b", "zbv"])
def test_spec_derived_costs_give_the_same_json(hardware_name: str, name: str) -> None:
    """A catalogue model on catalogue hardware (torus, shared bus, nodes over InfiniBand,
    NVSwitch): the same JSON from both engines, over two steps."""
    import dataclasses

    from pipesim.config import RunConfig
    from pipesim.hardware import hardware
    from pipesim.request.cost_request import ModelRequest
    from pipesim.schedules import build
    from pipesim.workload import model

    schedule = build(name, 4, 8)
    transformer = model("gpipe-transformer-24")
    if hardware_name == "p100-pcie":  # no bf16 on a P100
        transformer = dataclasses.replace(transformer, dtype="fp16")
    request = ModelRequest(RunConfig(transformer, hardware(hardware_name)), batch=32)
    costs = request.build(4, schedule.chunks, 8)
    reference = simulate(schedule, costs, 2, engine="simpy").to_json()
    fast = simulate(schedule, costs, 2, engine="fast").to_json()
    assert (reference.pop("engine"), fast.pop("engine")) == ("simpy", "fast")
    assert reference == fast
