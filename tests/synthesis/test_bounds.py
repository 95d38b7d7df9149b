"""The lower bound on a step (and on the largest stage span): never above what any schedule
simulates to, whatever its order, placement, costs, links or memory, and tight where the
closed forms say it must be."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from pipesim.costs.pipeline_costs import PipelineCosts, StageCosts
from pipesim.costs.synthetic import synthetic_costs
from pipesim.engine import simulate
from pipesim.errors import ScheduleError
from pipesim.hardware.network import Link, Network, Topology
from pipesim.parallel.placement import v_shape
from pipesim.schedules import build
from pipesim.schedules.schedule import Schedule
from pipesim.synthesis.bounds import lower_bound, schedule_lower_bound
from pipesim.synthesis.list_scheduler import (
    GreedyPolicy,
    greedy_schedule,
    pair_count,
    policies,
)
from pipesim.synthesis.synthesis import activation_peaks, largest_stage_span_s, synthesize
from tests.schedules.strategies import pipeline_costs, schedules


@st.composite
def costs_for(draw: st.DrawFn, schedule: Schedule) -> PipelineCosts:
    """Random costs for the schedule's stages: F, I, W, an optimizer step, sometimes a full
    backward faster than I + W, outputs of random size on links of finite bandwidth (so
    transfers take longer than their latency and may queue)."""
    stages = []
    for _ in range(schedule.stages):
        grad = float(draw(st.integers(1, 5)))
        weight = float(draw(st.integers(0, 5)))
        fused = draw(st.sampled_from([None, None, (grad + weight) * 0.75]))
        stages.append(
            StageCosts(
                float(draw(st.integers(1, 5))),
                grad,
                weight,
                output_bytes=float(draw(st.sampled_from([0, 1, 4]))),
                optimizer_step_s=float(draw(st.sampled_from([0, 0, 2]))),
                full_backward_s=fused,
            )
        )
    link = Link("l", draw(st.sampled_from([1.0, 4.0, 1e9])), draw(st.sampled_from([0.0, 0.5])))
    return PipelineCosts(tuple(stages), Network(schedule.devices, Topology.ALL_TO_ALL, link))


@settings(max_examples=200, deadline=None)
@given(data=st.data(), schedule=schedules(max_devices=4, max_microbatches=8, max_chunks=3))
def test_no_schedule_beats_the_bound(data: st.DataObject, schedule: Schedule) -> None:
    """Every registered schedule (full or split backward, any placement, DualPipe's two
    copies of the model) on random costs:
    its simulated step and largest stage span are at or above the bounds, and so with its
    own peak in flight as the memory limit (the limit's terms then count too)."""
    costs = data.draw(costs_for(schedule))
    result = simulate(schedule, costs)
    kept = data.draw(st.sampled_from([1.0, 0.5]))
    peak = max(activation_peaks(schedule, kept))
    for memory in (None, (pair_count(schedule.stages, kept), peak)):
        step = schedule_lower_bound(schedule, costs, memory=memory)
        assert step.value_s <= result.iteration_time_s * (1 + 1e-9), step
        span = schedule_lower_bound(schedule, costs, objective="stage-span", memory=memory)
        assert span.value_s <= largest_stage_span_s(result) * (1 + 1e-9), span


@settings(max_examples=80, deadline=None)
@given(
    pipeline_costs(),
    st.integers(1, 10),
    st.integers(1, 6),
    st.sampled_from(policies(1)),
    st.sampled_from([1.0, 0.4, 0.0]),
)
def test_no_greedy_order_within_a_limit_beats_the_bound(
    costs: PipelineCosts, microbatches: int, limit: int, policy: GreedyPolicy, kept: float
) -> None:
    """The memory terms where they bite: one stage per device, greedy orders at small
    limits (transfers of one byte over 1 GB/s, a latency of 0 to 2 s)."""
    schedule = greedy_schedule(costs, microbatches, limit, policy, kept)
    assert schedule is not None
    result = simulate(schedule, costs)
    memory = (pair_count(len(costs.stages), kept), float(limit))
    step = lower_bound(costs, microbatches, memory=memory)
    assert step.value_s <= result.iteration_time_s * (1 + 1e-9), step
    span = lower_bound(costs, microbatches, objective="stage-span", memory=memory)
    assert span.value_s <= largest_stage_span_s(result) * (1 + 1e-9), span
    event(step.reason)


def test_gpipe_meets_the_bound_exactly() -> None:
    """Equal stages (F=1, B=2), no transfer time: GPipe's (M+K-1)(F+B) is the last device's
    fill, work and drain, which is the bound. The span's bound is device 0's: its first
    backward waits for micro-batch 0's round trip (4 forwards, 3 backwards: 10 s), then all
    8 backwards run (16 s)."""
    costs = synthetic_costs(4, 1, 1.0, 2.0)
    bound = lower_bound(costs, 8)
    assert bound.value_s == pytest.approx(11 * 3.0)
    assert (bound.device, bound.reason) == (3, "work")
    assert simulate(build("gpipe", 4, 8), costs).iteration_time_s == pytest.approx(bound.value_s)
    span = lower_bound(costs, 8, objective="stage-span")
    assert (span.value_s, span.device) == (pytest.approx(10.0 + 16.0), 0)


def test_one_micro_batch_is_its_critical_path() -> None:
    """M=1: F down, I back up, device 0's W last, with a transfer between each two devices."""
    costs = synthetic_costs(3, 1, 1.0, 2.0, 0.5, comm_s=0.25)
    bound = lower_bound(costs, 1)
    assert bound.value_s == pytest.approx(3 * 1.0 + 3 * 2.0 + 0.5 + 4 * 0.25)
    assert bound.value_s == pytest.approx(simulate(build("zb-h1", 3, 1), costs).iteration_time_s)


def test_one_micro_batch_in_flight_is_one_round_trip_after_another() -> None:
    """K=4, M=8, F=I=W=1, one micro-batch in flight: each holds device 0 from its F to its W,
    at least 4 + 4 + 1 s, one after another: 72 s, which the synthesis meets."""
    costs = synthetic_costs(4, 1, 1.0, 1.0, 1.0)
    bound = lower_bound(costs, 8, memory=(pair_count(4), 1.0))
    assert bound.value_s == pytest.approx(72.0)
    assert bound.reason == "memory: micro-batches in flight"
    assert synthesize(costs, 8, 1).step_time_s == pytest.approx(72.0)


def test_a_limit_caps_the_forwards_before_the_first_input_gradient() -> None:
    """p=32 on the zero-bubble paper's 28.3B times at 2p micro-batches in flight (W keeping
    43%): device 0's 64 forwards take less than micro-batch 0's round trip, so it waits at
    least the difference, whatever the order (the rest of its span is its work)."""
    forward, grad, weight, comm = 10.419, 10.207, 7.715, 0.408
    costs = synthetic_costs(32, 1, forward, grad, weight, comm_s=comm)
    memory = (pair_count(32, 0.43), 64.0)
    bound = lower_bound(costs, 96, objective="stage-span", memory=memory)
    trip = 32 * forward + 31 * grad + 62 * comm
    assert bound.reason == "memory: forwards before the first input gradient"
    assert bound.device == 0
    assert bound.value_s == pytest.approx(trip + 96 * (forward + grad + weight) - 64 * forward)


def test_a_full_backward_faster_than_its_parts_lowers_the_bound() -> None:
    """A calibrated B of 3 s where I + W take 4: 1F1B's step with it is not below the bound,
    which is below the split one's; with B (3.75 s) shorter than W alone (4 s), W is lowered
    too (one device, one micro-batch: F then B, 4.75 s)."""
    costs = synthetic_costs(2, 1, 1.0, 2.0, 2.0)
    fused = dataclasses.replace(
        costs, stages=tuple(dataclasses.replace(s, full_backward_s=3.0) for s in costs.stages)
    )
    one_f_one_b = simulate(build("1f1b", 2, 4), fused).iteration_time_s
    assert lower_bound(fused, 4).value_s <= one_f_one_b < lower_bound(costs, 4).value_s
    short = synthetic_costs(1, 1, 1.0, 1.0, 4.0)
    short = dataclasses.replace(
        short, stages=(dataclasses.replace(short.stages[0], full_backward_s=3.75),)
    )
    assert simulate(build("gpipe", 1, 1), short).iteration_time_s == pytest.approx(4.75)
    assert lower_bound(short, 1).value_s == pytest.approx(4.75)


def test_two_copies_of_the_model_share_the_micro_batches() -> None:
    """Four unit stages in a V on two devices (F = I = 1 s, W = 0). One copy: each of the 4
    micro-batches passes both of a device's stages (16 s of work; device 1 waits 1 s for its
    first input and its last I is followed by device 0's, 1 s). Two copies, DualPipe's way
    (micro-batches 0-1 down copy 0, 2-3 up copy 1): each stage runs 2 of them, 8 s."""
    costs = synthetic_costs(2, 2, 2.0, 2.0, 0.0)
    one = lower_bound(costs, 4, v_shape(2))
    assert (one.value_s, one.device, one.per_device_s) == (18.0, 1, (16.0, 18.0))
    two = lower_bound(costs, 4, v_shape(2), copies=2, routes=(0, 0, 1, 1))
    assert two.per_device_s == (8.0, 8.0)
    with pytest.raises(ScheduleError, match=r"^copies 3 must divide the 4 stages$"):
        lower_bound(costs, 4, v_shape(2), copies=3, routes=(0, 1, 2, 0))
    with pytest.raises(ScheduleError, match=r"^copies 2 needs each micro-batch's route$"):
        lower_bound(costs, 4, v_shape(2), copies=2)


def test_a_bad_objective_is_refused() -> None:
    with pytest.raises(ScheduleError, match=r"^objective must be one of step, stage-span"):
        lower_bound(synthetic_costs(2, 1, 1.0, 1.0), 2, objective="span")
