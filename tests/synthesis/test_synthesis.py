"""Memory-bounded synthesis: valid orders, never over the limit, never below the lower bound
on the step (a check that can fail: the bound is computed apart from the search), a literal
table for a tiny case. Optimality on tiny shapes is in test_exact."""

from __future__ import annotations

import dataclasses
import itertools

import pytest
from hypothesis import given, settings, target
from hypothesis import strategies as st

from pipesim.costs.pipeline_costs import PipelineCosts, StageCosts
from pipesim.costs.synthetic import synthetic_costs
from pipesim.engine import simulate
from pipesim.errors import ScheduleError
from pipesim.hardware.network import Link, Network, Topology
from pipesim.parallel.placement import looped, v_shape
from pipesim.schedules import Kind, build
from pipesim.schedules.schedule import Schedule
from pipesim.schedules.v_family import v_block_schedule
from pipesim.synthesis.bounds import lower_bound
from pipesim.synthesis.list_scheduler import (
    GreedyPolicy,
    byte_count,
    greedy_schedule,
    pair_count,
    policies,
)
from pipesim.synthesis.local_search import improve
from pipesim.synthesis.synthesis import (
    activation_peaks,
    in_flight_peaks,
    largest_stage_span_s,
    memory_tradeoff,
    minimum_limit,
    step_time_s,
    synthesize,
)
from tests.schedules.strategies import in_flight_peaks as reference_peaks
from tests.schedules.strategies import (
    pipeline_costs,
    placed_pipeline_costs,
    reference_runs_to_completion,
    schedules,
)

POLICIES = policies(1)


def test_a_tiny_case_literally() -> None:
    """K=2, M=3, F=I=W=1: with one micro-batch in flight each device runs F, I, W per
    micro-batch; with two, device 0 runs a second F ahead and W fills device 1's wait."""
    costs = synthetic_costs(2, 1, 1.0, 1.0, 1.0)
    rows = {
        limit: [" ".join(map(str, row)) for row in greedy_schedule(
            costs, 3, limit, GreedyPolicy()).device_actions]  # type: ignore[union-attr]
        for limit in (1, 2)
    }  # fmt: skip
    assert rows[1] == [
        "0F0 0I0 0W0 0F1 0I1 0W1 0F2 0I2 0W2",
        "1F0 1I0 1W0 1F1 1I1 1W1 1F2 1I2 1W2",
    ]
    assert rows[2] == [
        "0F0 0F1 0I0 0W0 0I1 0F2 0W1 0I2 0W2",
        "1F0 1I0 1F1 1I1 1W0 1W1 1F2 1I2 1W2",
    ]


@settings(max_examples=60)
@given(schedules(max_devices=5, max_microbatches=8, max_chunks=3))
def test_in_flight_peaks_equal_the_reference_count(schedule: object) -> None:
    assert list(in_flight_peaks(schedule)) == reference_peaks(schedule, Kind.W)  # type: ignore[arg-type]


@settings(max_examples=60)
@given(
    pipeline_costs(),
    st.integers(1, 8),
    st.integers(1, 9),
    st.sampled_from(POLICIES),
)
def test_every_greedy_order_is_complete_and_within_the_limit(
    costs: PipelineCosts, microbatches: int, limit: int, policy: GreedyPolicy
) -> None:
    schedule = greedy_schedule(costs, microbatches, limit, policy)
    assert schedule is not None
    assert reference_runs_to_completion(
        schedule.stages, schedule.placement, schedule.device_actions
    )
    assert max(reference_peaks(schedule, Kind.W)) <= limit


@settings(max_examples=40, deadline=None)
@given(pipeline_costs(), st.integers(1, 8), st.integers(1, 9))
def test_synthesis_keeps_the_limit_and_never_goes_below_the_lower_bound(
    costs: PipelineCosts, microbatches: int, limit: int
) -> None:
    """The synthesised step, simulated again, is at or above the lower bound on any schedule
    within the limit, which the synthesis reports; the gap to it is searched for (target)."""
    found = synthesize(costs, microbatches, limit)
    assert found.schedule.name == "synth"
    assert max(reference_peaks(found.schedule, Kind.W)) <= limit
    step = simulate(found.schedule, costs).iteration_time_s
    assert step == pytest.approx(found.step_time_s)
    bound = lower_bound(costs, microbatches, memory=(pair_count(len(costs.stages)), limit))
    assert found.lower_bound_s == bound.value_s
    assert bound.value_s <= step * (1 + 1e-9), bound
    target(found.gap, label="step above the lower bound")


def test_on_a_uniform_pipeline_more_memory_is_never_slower() -> None:
    """F=I=W=1 on K=4, M=8: from one micro-batch in flight (72 s: no overlap at all) down to
    1F1B's K=4 (ZB-H1's 27 s)."""
    costs = synthetic_costs(4, 1, 1.0, 1.0, 1.0)
    times = [synthesize(costs, 8, limit).step_time_s for limit in range(1, 9)]
    assert times[0] == pytest.approx(72.0)
    assert times[3] == pytest.approx(simulate(build("zb-h1", 4, 8), costs).iteration_time_s)
    assert all(later <= earlier + 1e-9 for earlier, later in itertools.pairwise(times))


@pytest.mark.parametrize("limit", [0, -1])
def test_a_limit_below_one_is_refused(limit: int) -> None:
    with pytest.raises(
        ScheduleError, match=rf"^memory_limit must be an integer >= 1, got {limit}$"
    ):
        synthesize(synthetic_costs(2, 1, 1.0, 1.0, 1.0), 4, limit)


def test_the_memory_tradeoff_places_each_schedule_by_its_peak() -> None:
    """F=I=W=1, K=4, M=8: the fixed schedules at their own peaks (1F1B and ZB-H1 at K, ZB-H2
    at 2K-1, GPipe at M), the synthesised one at each limit, never above it (at 3, the
    warm-up counts' search finds 31 s where the greedy orders alone gave 33; the lower bounds
    are 72, 36, 28 and 27 s)."""
    costs = synthetic_costs(4, 1, 1.0, 1.0, 1.0)
    fixed, curve = memory_tradeoff(costs, 8, [1, 2, 3, 4])
    assert {(p.name, p.in_flight) for p in fixed} == {
        ("1f1b", 4),
        ("zb-h1", 4),
        ("zb-h2", 7),
        ("gpipe", 8),
    }
    assert [p.limit for p in curve] == [1, 2, 3, 4]
    assert all(p.in_flight <= p.limit for p in curve)  # type: ignore[operator]
    assert [p.step_time_s for p in curve] == pytest.approx([72.0, 41.0, 31.0, 27.0])


@settings(max_examples=40, deadline=None)
@given(
    pipeline_costs(),
    st.integers(1, 8),
    st.integers(1, 9),
    st.sampled_from([0.0, 0.37, 1.0]),
)
def test_the_finer_memory_count_is_kept_and_lets_more_wait_for_w(
    costs: PipelineCosts, microbatches: int, limit: int, weight_fraction: float
) -> None:
    """With an I freeing all but ``weight_fraction`` of a micro-batch's activations, every
    candidate keeps that count within the limit; at 1 it is the micro-batch count."""
    found = synthesize(costs, microbatches, limit, weight_fraction)
    assert max(activation_peaks(found.schedule, weight_fraction)) <= limit + 1e-9
    for policy in POLICIES:
        greedy = greedy_schedule(costs, microbatches, limit, policy, weight_fraction)
        assert greedy is not None
        assert max(activation_peaks(greedy, weight_fraction)) <= limit + 1e-9
    assert activation_peaks(found.schedule, 1.0) == tuple(
        float(p) for p in in_flight_peaks(found.schedule)
    )


def test_activation_peaks_literally() -> None:
    """Device 0 of the K=2, M=3, N=2 greedy order (0F0 0F1 0I0 0W0 0I1 0F2 0W1 0I2 0W2) with
    M_W = 0.25 M_B: 1, 2, 1.25, 1, 0.25, 1.25, 1, 0.25, 0: peak 2."""
    schedule = greedy_schedule(synthetic_costs(2, 1, 1.0, 1.0, 1.0), 3, 2, GreedyPolicy())
    assert schedule is not None
    assert activation_peaks(schedule, 0.25)[0] == 2.0
    assert activation_peaks(schedule, 1.0) == (2.0, 2.0)


@settings(max_examples=30, deadline=None)
@given(placed_pipeline_costs(), st.integers(1, 6), st.integers(0, 6), st.sampled_from([1.0, 0.4]))
def test_with_several_stages_per_device_the_limit_holds_and_the_bound_too(
    placed: tuple[PipelineCosts, tuple[int, ...]],
    microbatches: int,
    extra: int,
    weight_fraction: float,
) -> None:
    """Every greedy policy (both admission rules) finishes or gives no order, never over the
    limit; the synthesis is complete, within the limit, and neither its step nor its largest
    stage span is below the lower bound of its placement."""
    costs, placement = placed
    limit = minimum_limit(placement) + extra
    for policy in policies(minimum_limit(placement)):
        greedy = greedy_schedule(costs, microbatches, limit, policy, weight_fraction, placement)
        if greedy is not None:
            assert max(activation_peaks(greedy, weight_fraction)) <= limit + 1e-9, policy.name
    found = synthesize(
        costs, microbatches, limit, weight_fraction, placement=placement, search_evaluations=20
    )
    assert found.schedule.placement == placement
    assert reference_runs_to_completion(
        found.schedule.stages, found.schedule.placement, found.schedule.device_actions
    )
    assert max(activation_peaks(found.schedule, weight_fraction)) <= limit + 1e-9
    memory = (pair_count(len(placement), weight_fraction), float(limit))
    step = lower_bound(costs, microbatches, placement, memory=memory)
    assert step.value_s <= found.step_time_s * (1 + 1e-9), step
    span = lower_bound(costs, microbatches, placement, objective="stage-span", memory=memory)
    assert span.value_s <= largest_stage_span_s(found.result) * (1 + 1e-9), span


def test_every_policy_finishes_at_the_smallest_limits() -> None:
    """At the smallest limits a V or a looped placement allows, no policy stalls: those that
    promise a micro-batch every stage it will need on a device, and those that grant every
    stash by the banker's rule (with three stages per device, a younger micro-batch granted
    its second stage could otherwise take what the oldest needs: one device, M=2, limit 4)."""
    for placement in (v_shape(3), looped(3, 2), looped(2, 3), looped(1, 3)):
        costs = PipelineCosts(
            tuple(StageCosts(1.0, 2.0, 1.0) for _ in placement),
            Network(max(placement) + 1, Topology.ALL_TO_ALL, Link("l", 1e9, 0.0)),
        )
        fewest = minimum_limit(placement)
        for policy in policies(fewest):
            for limit, microbatches in ((fewest, 6), (fewest + 1, 2), (fewest + 1, 6)):
                found = greedy_schedule(costs, microbatches, limit, policy, 1.0, placement)
                assert found is not None, (placement, policy.name, limit, microbatches)


def test_a_limit_below_the_stages_per_device_is_refused() -> None:
    costs = synthetic_costs(2, 2, 1.0, 1.0, 1.0)
    with pytest.raises(
        ScheduleError,
        match=r"^memory_limit must be >= 2 with 2 stages per device \(a device holds every "
        r"stage of a micro-batch it has at once\), got 1$",
    ):
        synthesize(costs, 4, 1, placement=v_shape(2))


def test_the_largest_stage_span_literally() -> None:
    """GPipe, K=2, M=2, F=1, B=2: device 0 runs its forwards from 0 to 2 and its backwards
    from 5 to 9 (span 9); device 1 starts at 1 and ends at 7 (span 6): the largest is 9, the
    step 9."""
    costs = synthetic_costs(2, 1, 1.0, 2.0, 0.0)
    result = simulate(build("gpipe", 2, 2), costs)
    assert largest_stage_span_s(result) == pytest.approx(9.0)
    assert step_time_s(result) == pytest.approx(9.0)
    one_device = simulate(build("gpipe", 2, 2), costs).run
    assert min(one_device.start_s[one_device.device == 1]) == pytest.approx(1.0)
    found = synthesize(costs, 2, 2, objective="stage-span")
    assert found.objective == "stage-span"
    assert found.objective_value == pytest.approx(largest_stage_span_s(found.result))
    with pytest.raises(
        ScheduleError, match=r"^objective must be one of step, stage-span, got 'x'$"
    ):
        synthesize(costs, 2, 2, objective="x")


def test_the_local_search_keeps_the_limit_and_never_worsens() -> None:
    """From V-Half's building block (K=4, M=16, one slot per chunk pass), 200 seeded moves
    within its 6 pairs: a valid order, never over 6, its span never above the block's 108."""
    costs = synthetic_costs(4, 2, 2.0, 2.0, 2.0)
    block = v_block_schedule("v-half", 4, 16)

    def fits(order: Schedule) -> bool:
        return max(in_flight_peaks(order)) <= 6

    searched = improve(block, costs, largest_stage_span_s, fits, 200)
    assert searched.tried == 200 and fits(searched.schedule)
    assert largest_stage_span_s(searched.result) <= 108.0
    assert largest_stage_span_s(simulate(searched.schedule, costs)) == pytest.approx(
        largest_stage_span_s(searched.result)
    )
    assert (searched.kept == 0) == (searched.schedule == block)


@st.composite
def costs_with_bytes(draw: st.DrawFn) -> tuple[PipelineCosts, tuple[int, ...], float]:
    """Random placed costs whose stages stash random bytes (W keeping none, a part or all of
    them after I), and a byte limit from the least any order needs to four times it."""
    costs, placement = draw(placed_pipeline_costs() | pipeline_costs().map(lambda c: (c, None)))
    placement = placement or tuple(range(len(costs.stages)))
    stages = []
    for stage in costs.stages:
        stash = float(draw(st.sampled_from([0, 1, 3, 10])))
        kept = stash * draw(st.sampled_from([0.0, 0.25, 1.0]))
        stages.append(
            dataclasses.replace(stage, activation_bytes=stash, weight_grad_activation_bytes=kept)
        )
    if not any(stage.activation_bytes for stage in stages):  # a byte limit needs some
        stages[0] = dataclasses.replace(stages[0], activation_bytes=1.0)
    costs = dataclasses.replace(costs, stages=tuple(stages))
    fewest = max(
        sum(stages[s].activation_bytes for s, d in enumerate(placement) if d == device)
        for device in set(placement)
    )
    limit = draw(st.floats(1.0, 4.0)) * fewest
    return costs, placement, limit


@settings(max_examples=30, deadline=None)
@given(costs_with_bytes(), st.integers(1, 6))
def test_a_byte_limit_holds_in_the_engines_memory_and_the_bound_too(
    drawn: tuple[PipelineCosts, tuple[int, ...], float], microbatches: int
) -> None:
    """Limited in bytes, the synthesised schedule's peak activation memory as the engine
    simulates it never exceeds the limit, and its step is not below the lower bound with the
    limit counted in bytes."""
    costs, placement, limit = drawn
    found = synthesize(
        costs,
        microbatches,
        None,
        memory_limit_bytes=limit,
        placement=placement,
        search_evaluations=10,
    )
    assert found.memory_limit is None and found.memory_limit_bytes == limit
    simulated = simulate(found.schedule, costs)
    assert max(d.peak_activation_bytes for d in simulated.per_device) <= limit * (1 + 1e-9)
    bound = lower_bound(costs, microbatches, placement, memory=(byte_count(costs), limit))
    assert found.lower_bound_s == bound.value_s
    assert bound.value_s <= simulated.iteration_time_s * (1 + 1e-9), bound


def test_a_byte_limit_is_one_of_two_and_no_less_than_a_micro_batch_needs() -> None:
    costs = synthetic_costs(2, 1, 1.0, 1.0, 1.0, activation_bytes=8.0)
    with pytest.raises(ScheduleError, match=r"^give one memory limit"):
        synthesize(costs, 4, 2, memory_limit_bytes=16.0)
    with pytest.raises(ScheduleError, match=r"^give one memory limit"):
        synthesize(costs, 4, None)
    with pytest.raises(
        ScheduleError,
        match=r"^memory_limit_bytes must be >= 8 \(8 B: a device holds every stage of a "
        r"micro-batch it has at once\), got 7$",
    ):
        synthesize(costs, 4, None, memory_limit_bytes=7.0)
    with pytest.raises(
        ScheduleError,
        match=r"^memory_limit_bytes 16: the costs stash no activation bytes, so it would "
        r"limit nothing \(give activation bytes, or a model\)$",
    ):
        synthesize(synthetic_costs(2, 1, 1.0, 1.0, 1.0), 4, None, memory_limit_bytes=16.0)
    with pytest.raises(ScheduleError, match=r"^placement \(0, 2\) must hold the same number"):
        synthesize(costs, 4, 2, placement=(0, 2))
    # 8 bytes a micro-batch, W keeping all of it: 16 bytes is two micro-batches in flight.
    by_bytes = synthesize(costs, 4, None, memory_limit_bytes=16.0, search_evaluations=0)
    by_pairs = synthesize(costs, 4, 2, search_evaluations=0)
    assert by_bytes.schedule == by_pairs.schedule
