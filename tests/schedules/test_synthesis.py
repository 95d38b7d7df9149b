"""Memory-bounded synthesis: valid orders, never over the limit, never slower than the fixed
schedules that keep within it, a literal table for a tiny case."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipesim.costs.pipeline_costs import PipelineCosts
from pipesim.costs.synthetic import synthetic_costs
from pipesim.engine import simulate
from pipesim.errors import ScheduleError
from pipesim.schedules import Kind, build
from pipesim.schedules.synthesis import (
    POLICIES,
    GreedyPolicy,
    activation_peaks,
    fixed_within,
    greedy_schedule,
    in_flight_peaks,
    memory_tradeoff,
    synthesize,
)

from .strategies import in_flight_peaks as reference_peaks
from .strategies import pipeline_costs, reference_runs_to_completion, schedules


def test_a_tiny_case_literally() -> None:
    """K=2, M=3, F=I=W=1: with one micro-batch in flight each device runs F, I, W per
    micro-batch; with two, device 0 runs a second F ahead and W fills device 1's wait."""
    costs = synthetic_costs(2, 1, 1.0, 1.0, 1.0)
    rows = {
        limit: [" ".join(map(str, row)) for row in greedy_schedule(
            costs, 3, limit, GreedyPolicy()).device_actions]
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
    assert reference_runs_to_completion(
        schedule.stages, schedule.placement, schedule.device_actions
    )
    assert max(reference_peaks(schedule, Kind.W)) <= limit


@settings(max_examples=40, deadline=None)
@given(pipeline_costs(), st.integers(1, 8), st.integers(1, 9))
def test_synthesis_keeps_the_limit_and_beats_every_fixed_schedule_within_it(
    costs: PipelineCosts, microbatches: int, limit: int
) -> None:
    found = synthesize(costs, microbatches, limit)
    assert found.schedule.name == "synth"
    assert max(reference_peaks(found.schedule, Kind.W)) <= limit
    assert simulate(found.schedule, costs).iteration_time_s == pytest.approx(found.step_time_s)
    for name, fixed in fixed_within(len(costs.stages), microbatches, limit):
        assert found.step_time_s <= simulate(fixed, costs).iteration_time_s + 1e-9, name


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
        ScheduleError, match=rf"^--memory-limit must be an integer >= 1, got {limit}$"
    ):
        synthesize(synthetic_costs(2, 1, 1.0, 1.0, 1.0), 4, limit)


def test_the_memory_tradeoff_places_each_schedule_by_its_peak() -> None:
    """F=I=W=1, K=4, M=8: the fixed schedules at their own peaks (1F1B and ZB-H1 at K, ZB-H2
    at 2K-1, GPipe at M), the synthesised one at each limit, never above it."""
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
    assert [p.step_time_s for p in curve] == pytest.approx([72.0, 41.0, 33.0, 27.0])


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
        assert max(activation_peaks(greedy, weight_fraction)) <= limit + 1e-9
    assert activation_peaks(found.schedule, 1.0) == tuple(
        float(p) for p in in_flight_peaks(found.schedule)
    )


def test_activation_peaks_literally() -> None:
    """Device 0 of the K=2, M=3, N=2 greedy order (0F0 0F1 0I0 0W0 0I1 0F2 0W1 0I2 0W2) with
    M_W = 0.25 M_B: 1, 2, 1.25, 1, 0.25, 1.25, 1, 0.25, 0: peak 2."""
    schedule = greedy_schedule(synthetic_costs(2, 1, 1.0, 1.0, 1.0), 3, 2, GreedyPolicy())
    assert activation_peaks(schedule, 0.25)[0] == 2.0
    assert activation_peaks(schedule, 1.0) == (2.0, 2.0)
