"""The exact search and the synthesiser against optima found apart from them
(:mod:`tests.synthesis.reference`): every combination of orders tried, or a dynamic program
over the actions done; on tiny shapes (K = 2-3, M <= 4) the synthesiser's schedule is optimal."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings, target
from hypothesis import strategies as st

from pipesim.costs.pipeline_costs import PipelineCosts, StageCosts
from pipesim.costs.synthetic import synthetic_costs
from pipesim.engine import simulate
from pipesim.errors import ScheduleError
from pipesim.hardware.network import Link, Network, Topology
from pipesim.synthesis.exact import MAX_ACTIONS, optimum
from pipesim.synthesis.list_scheduler import GreedyPolicy, greedy_schedule, pair_count
from pipesim.synthesis.synthesis import activation_peaks, largest_stage_span_s, synthesize
from tests.schedules.strategies import reference_runs_to_completion
from tests.synthesis.reference import as_actions, brute_force, pareto_step


@st.composite
def tiny(draw: st.DrawFn, devices: int, microbatches: int) -> tuple[PipelineCosts, int, float]:
    """Random whole-second F, I (1-5) and W (0-5) per stage, an optimizer step of 0 or 1, a
    latency-only link (the engine's timing is then the synthesiser's), a limit of 1 to M + 1
    pairs and the part of a stash W keeps."""
    stages = tuple(
        StageCosts(
            float(draw(st.integers(1, 5))),
            float(draw(st.integers(1, 5))),
            float(draw(st.integers(0, 5))),
            optimizer_step_s=float(draw(st.sampled_from([0, 0, 1]))),
        )
        for _ in range(devices)
    )
    latency = draw(st.sampled_from([0.0, 0.5, 2.0]))
    network = Network(devices, Topology.ALL_TO_ALL, Link("l", math.inf, latency))
    limit = draw(st.integers(1, microbatches + 1))
    return PipelineCosts(stages, network), limit, draw(st.sampled_from([1.0, 0.5, 0.0]))


# Shapes small enough to try every combination of orders (at most 42^2 or 5^3 of them).
SMALL = [(2, 2), (2, 3), (3, 2)]
TINY = [(2, 2), (2, 3), (2, 4), (3, 2), (3, 3), (3, 4)]


@pytest.mark.parametrize(("devices", "microbatches"), SMALL)
@settings(max_examples=20, deadline=None)
@given(data=st.data(), objective=st.sampled_from(["step", "stage-span"]))
def test_the_exact_search_equals_every_combination_of_orders(
    devices: int, microbatches: int, data: st.DataObject, objective: str
) -> None:
    """The branch and bound's value is the least over every combination of the devices'
    orders within the limit, and its order, simulated by the engine, has that value."""
    costs, limit, kept = data.draw(tiny(devices, microbatches))
    best, _ = brute_force(costs, microbatches, limit, kept, objective)
    count = pair_count(devices, kept)
    found = optimum(costs, microbatches, count, limit, objective=objective)
    assert found.proven
    assert found.value_s == pytest.approx(best)
    assert found.schedule is not None
    result = simulate(found.schedule, costs)
    measured = (
        largest_stage_span_s(result) if objective == "stage-span" else result.iteration_time_s
    )
    assert measured == pytest.approx(best)
    assert max(activation_peaks(found.schedule, kept)) <= limit + 1e-9


@pytest.mark.parametrize(("devices", "microbatches"), TINY)
@settings(max_examples=12, deadline=None)
@given(data=st.data())
def test_the_synthesised_step_is_the_optimum_on_tiny_shapes(
    devices: int, microbatches: int, data: st.DataObject
) -> None:
    """K = 2-3, M = 2-4, random F/I/W, limits and W's share: the synthesised schedule's step
    is the least any order within the limit has (the dynamic program's), it says so, and it
    is at or above its lower bound."""
    costs, limit, kept = data.draw(tiny(devices, microbatches))
    best = pareto_step(costs, microbatches, limit, kept)
    found = synthesize(costs, microbatches, limit, kept, search_evaluations=0)
    assert found.step_time_s == pytest.approx(best)
    assert found.optimal
    assert found.lower_bound_s <= found.step_time_s * (1 + 1e-9)
    assert max(activation_peaks(found.schedule, kept)) <= limit + 1e-9
    target(found.gap, label="step above the lower bound")


@pytest.mark.parametrize(("devices", "microbatches"), SMALL)
@settings(max_examples=10, deadline=None)
@given(data=st.data())
def test_the_synthesised_stage_span_is_the_optimum_on_tiny_shapes(
    devices: int, microbatches: int, data: st.DataObject
) -> None:
    """The same for the zero-bubble paper's measure, against every combination of orders."""
    costs, limit, kept = data.draw(tiny(devices, microbatches))
    best, rows = brute_force(costs, microbatches, limit, kept, "stage-span")
    assert rows is not None
    assert reference_runs_to_completion(devices, range(devices), as_actions(rows))
    found = synthesize(
        costs, microbatches, limit, kept, objective="stage-span", search_evaluations=0
    )
    assert found.objective_value == pytest.approx(best)
    assert found.optimal and found.lower_bound_s <= found.objective_value * (1 + 1e-9)


def test_a_tiny_optimum_literally() -> None:
    """K=2, M=3, F=I=W=1, two micro-batches in flight: the greedy order of the literal test
    (test_synthesis) takes 11 s; the optimum takes 10, its lower bound (device 0 runs its 9 s
    of work after its first forward, and its last W ends the step)."""
    costs = synthetic_costs(2, 1, 1.0, 1.0, 1.0)
    greedy = greedy_schedule(costs, 3, 2, GreedyPolicy())
    assert greedy is not None and simulate(greedy, costs).iteration_time_s == 11.0
    found = optimum(costs, 3, pair_count(2), 2)
    assert found.proven and found.value_s == 10.0 and found.schedule is not None
    assert [" ".join(map(str, row)) for row in found.schedule.device_actions] == [
        "0F0 0F1 0I0 0W0 0F2 0I1 0W1 0I2 0W2",
        "1F0 1I0 1F1 1I1 1W0 1F2 1I2 1W1 1W2",
    ]
    synthesised = synthesize(costs, 3, 2)
    assert synthesised.step_time_s == 10.0 and synthesised.optimal
    assert synthesised.lower_bound_s == 10.0


def test_a_search_beyond_its_size_is_refused() -> None:
    costs = synthetic_costs(3, 1, 1.0, 1.0, 1.0)
    assert MAX_ACTIONS == 36
    with pytest.raises(
        ScheduleError,
        match=r"^microbatches 5 with 3 stages is 45 actions: an exact search takes at most 36 ",
    ):
        optimum(costs, 5, pair_count(3), 3)
    with pytest.raises(ScheduleError, match=r"^objective must be one of step, stage-span"):
        optimum(costs, 2, pair_count(3), 3, objective="x")


def test_a_forward_that_takes_no_time_is_refused() -> None:
    """The search builds orders by start time: an input that arrives as its producer starts
    could come after what needs it."""
    costs = synthetic_costs(2, 1, 0.0, 1.0, 1.0)
    with pytest.raises(
        ScheduleError, match=r"^stage 0's forward_s must be > 0 for an exact search"
    ):
        optimum(costs, 2, pair_count(2), 2)
    # with a transfer to wait for, it may
    assert optimum(synthetic_costs(2, 1, 0.0, 1.0, 1.0, comm_s=0.5), 2, pair_count(2), 2).proven


def test_a_node_limit_stops_the_search_unproven() -> None:
    costs = PipelineCosts(
        tuple(StageCosts(f, i, w) for f, i, w in ((5.0, 1.0, 0.0), (3.0, 5.0, 1.0))),
        Network(2, Topology.ALL_TO_ALL, Link("l", math.inf, 0.0)),
    )
    stopped = optimum(costs, 4, pair_count(2), 4, node_limit=3)
    assert not stopped.proven and stopped.nodes == 4
    whole = optimum(costs, 4, pair_count(2), 4)
    assert whole.proven and whole.value_s <= stopped.value_s
    # a bound no order beats: nothing found, and that is proven
    beaten = optimum(costs, 4, pair_count(2), 4, upper_bound=whole.value_s)
    assert beaten.proven and beaten.schedule is None and beaten.value_s == whole.value_s
