"""DualPipe's computation-communication overlap of a forward-backward pair (DeepSeek-V3,
arXiv 2412.19437 §3.2.1, Figure 4): the backward of each overlapped pair is shortened by
min(F's comm, B's compute) + min(B's comm, F's compute), in the durations both engines read."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipesim.costs import PipelineCosts, StageCosts
from pipesim.engine import durations, simulate
from pipesim.engine.durations import overlap_saving_s, overlap_savings_s
from pipesim.hardware import Link, Network, Topology
from pipesim.schedules import Action, Kind, Schedule, build

from .strategies import any_schedule, costs_for
from .test_engines_agree import check_against_simpy

_FRACTIONS = st.sampled_from([0.0, 0.25, 0.5, 1.0])


def ideal(devices: int) -> Network:
    return Network(devices, Topology.ALL_TO_ALL, Link("l", float("inf"), 0.0))


def two_devices() -> PipelineCosts:
    """F = 2 (0.5 of it communication), I = 2 (1 of it), W = 1, per model stage."""
    stage = StageCosts(2.0, 2.0, 1.0, forward_comm_s=0.5, input_grad_comm_s=1.0)
    return PipelineCosts((stage, stage), ideal(2))


def test_two_devices_four_microbatches_by_hand() -> None:
    """K=2, M=4: "0F0 3F2 0F1 3B2 3F3 0B0 3B3 0I1 0W1" and "2F2 1F0 2F3 1B0 1F1 2B2 1B1 2I3
    2W3". Both devices are middle ranks, so their first F-B (0F1 3B2, 2F3 1B0) runs apart and
    the one pair overlapped is 3F3 0B0 on device 0 and 1F1 2B2 on device 1. B = 3 of which 1
    is comm (compute 2), F = 2 of which 0.5 (compute 1.5): the pair hides min(0.5, 2) +
    min(1, 1.5) = 1.5. Without it: 0B0 at [11, 14], 2B2 at [11, 14], the step 20 s; with it
    both at [11, 12.5], and every later action 1.5 s sooner: 18.5 s."""
    schedule = build("dualpipe", 2, 4)
    costs = two_devices()
    assert overlap_saving_s(costs.stages[0], costs.stages[0], 3.0, full=True) == 1.5
    times = {}
    for engine in ("fast", "simpy"):
        result = simulate(schedule, costs, engine=engine)
        times[engine] = result.makespan_s
        spans = {(r.device, r.action): (r.start_s, r.end_s) for r in result.compute}
        assert spans[(0, Action(0, Kind.B, 0))] == (11.0, 12.5)
        assert spans[(1, Action(2, Kind.B, 2))] == (11.0, 12.5)
        assert spans[(0, Action(3, Kind.B, 2))] == (6.0, 9.0)  # first pair: apart
        assert spans[(0, Action(0, Kind.W, 1))] == (17.5, 18.5)
        assert spans[(1, Action(2, Kind.W, 3))] == (17.5, 18.5)
    assert times == {"fast": 18.5, "simpy": 18.5}


def test_the_switch_off_runs_the_pair_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(durations, "OVERLAPPED_SCHEDULES", frozenset())
    for engine in ("fast", "simpy"):
        assert simulate(build("dualpipe", 2, 4), two_devices(), engine=engine).makespan_s == 20.0


def test_only_the_overlapping_schedules_save() -> None:
    costs = two_devices()
    assert overlap_savings_s(build("dualpipe", 2, 4), simulate_costs(costs, 4)).sum() == 3.0
    for name in ("1f1b", "zbv"):
        schedule = build(name, 2, 4)
        assert not overlap_savings_s(schedule, simulate_costs(costs, schedule.stages)).any()


def simulate_costs(costs: PipelineCosts, stages: int) -> PipelineCosts:
    return dataclasses.replace(costs, stages=(costs.stages[0],) * stages)


def test_the_saving_is_bounded_by_both_passes() -> None:
    f = StageCosts(2.0, 0.0, 0.0, forward_comm_s=5.0)  # comm past the pass: all of it
    i = StageCosts(0.0, 1.0, 0.0, input_grad_comm_s=0.25)
    assert overlap_saving_s(f, i, 1.0, full=False) == 0.75 + 0.0  # F all comm: I's compute
    assert overlap_saving_s(i, f, 0.0, full=False) == 0.0


@st.composite
def with_comm(draw: st.DrawFn, costs: PipelineCosts) -> PipelineCosts:
    """``costs`` with a communication part of each F and I (a fraction of it, ties at 0 and
    the whole pass included)."""
    stages = tuple(
        dataclasses.replace(
            s,
            forward_comm_s=s.forward_s * draw(_FRACTIONS),
            input_grad_comm_s=s.input_grad_s * draw(_FRACTIONS),
        )
        for s in costs.stages
    )
    return dataclasses.replace(costs, stages=stages)


@st.composite
def overlapping_runs(draw: st.DrawFn) -> tuple[Schedule, PipelineCosts, int]:
    schedule = draw(any_schedule(names=("dualpipe", "dualpipev")))
    costs = draw(with_comm(draw(costs_for(schedule))))
    return schedule, costs, draw(st.integers(1, 3))


@given(overlapping_runs())
@settings(max_examples=40)
def test_the_engines_agree_with_communication(run: tuple[Schedule, PipelineCosts, int]) -> None:
    schedule, costs, steps = run
    check_against_simpy(
        schedule, costs, steps, lambda: simulate(schedule, costs, steps, engine="fast")
    )


@given(overlapping_runs())
@settings(max_examples=30)
def test_without_communication_nothing_changes(run: tuple[Schedule, PipelineCosts, int]) -> None:
    """Comm 0: every duration, every start and the step are those of the switch off."""
    schedule, costs, steps = run
    plain = dataclasses.replace(
        costs,
        stages=tuple(
            dataclasses.replace(s, forward_comm_s=0.0, input_grad_comm_s=0.0) for s in costs.stages
        ),
    )
    on = simulate(schedule, plain, steps).to_json()
    original = durations.OVERLAPPED_SCHEDULES
    try:
        durations.OVERLAPPED_SCHEDULES = frozenset()
        off = simulate(schedule, plain, steps).to_json()
    finally:
        durations.OVERLAPPED_SCHEDULES = original
    assert on == off


@given(overlapping_runs())
@settings(max_examples=30)
def test_the_overlap_never_lengthens_a_step(run: tuple[Schedule, PipelineCosts, int]) -> None:
    """Shorter durations, the same order: no action ends later (on ideal links each device
    runs its list in order, so a start is a max of earlier ends: no scheduling anomaly)."""
    schedule, costs, steps = run
    costs = dataclasses.replace(costs, network=ideal(schedule.devices))  # no channel to share
    on = simulate(schedule, costs, steps)
    original = durations.OVERLAPPED_SCHEDULES
    try:
        durations.OVERLAPPED_SCHEDULES = frozenset()
        off = simulate(schedule, costs, steps)
    finally:
        durations.OVERLAPPED_SCHEDULES = original
    assert on.makespan_s <= off.makespan_s + 1e-9


@given(overlapping_runs())
@settings(max_examples=30)
def test_the_speedup_stays_the_pipelines(run: tuple[Schedule, PipelineCosts, int]) -> None:
    """The one-device baseline runs the same actions one after another, the overlapped pairs'
    hidden communication hidden there too: the baseline is the sum of every action's duration
    the engines use (and one copy's optimizer step), so the speedup on ideal links never
    exceeds K."""
    schedule, costs, _ = run
    costs = dataclasses.replace(costs, network=ideal(schedule.devices))
    result = simulate(schedule, costs, 1)
    costs = result.costs  # per IR stage (a schedule with copies expands per-model-stage costs)
    durations_sum = sum(
        durations.action_duration_s(schedule, costs, a) for a in schedule.actions()
    ) - float(durations.overlap_savings_s(schedule, costs).sum())
    first = schedule.stages_of_copy(0)
    optimizer = sum(costs.stages[s].optimizer_step_s for s in first)
    assert result.unpipelined_time_s == pytest.approx(durations_sum + optimizer, rel=1e-9)
    assert (result.speedup or 0.0) <= schedule.devices * (1 + 1e-9)
