"""Both engines against an independent reference: the longest path through the dependency graph.

When links never queue, a step's time is the longest path through the graph whose nodes are
actions (weighted by duration) and whose edges are each device's list order and every
dependency (plus the transfer time when it crosses devices). Under the alpha-beta link model
latency-only links (infinite bandwidth) never queue, whatever the message sizes and however
long the latency, so there the engines must give exactly the longest path. The reference below
is written from the IR's rules, not imported from the engine.
"""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

from pipesim.costs import PipelineCosts, StageCosts
from pipesim.engine import simulate
from pipesim.hardware import Link, Network, Topology
from pipesim.schedules import Action, Kind, Schedule

from ..schedules.strategies import reference_runs_to_completion, schedules


def reference_iteration_time(
    schedule: Schedule, durations: dict[Action, float], comm_s: float | Network
) -> float:
    """``comm_s``: one latency for every transfer, or a network whose routes' latencies count."""
    per_copy = schedule.model_stages  # S, or with copies of the model one copy's stages
    backward = {
        (a.stage, a.microbatch): a.kind for a in schedule.actions() if a.kind in (Kind.B, Kind.I)
    }

    def needs(a: Action) -> list[Action]:
        s, m = a.stage, a.microbatch
        if a.kind is Kind.F:
            return [] if s % per_copy == 0 else [Action(s - 1, Kind.F, m)]
        if a.kind is Kind.W:
            return [Action(s, Kind.I, m)]
        own = [Action(s, Kind.F, m)]
        if s % per_copy == per_copy - 1:
            return own
        return [*own, Action(s + 1, backward[(s + 1, m)], m)]

    def latency(source: int, target: int) -> float:
        if source == target:
            return 0.0
        if isinstance(comm_s, Network):
            return comm_s.route(source, target).latency_s
        return comm_s

    finish: dict[Action, float] = {}
    heads = [0] * schedule.devices
    device_free = [0.0] * schedule.devices
    progress = True
    while progress:  # sweep until every action has a finish time
        progress = False
        for device, row in enumerate(schedule.device_actions):
            while heads[device] < len(row) and all(n in finish for n in needs(row[heads[device]])):
                a = row[heads[device]]
                ready = [finish[n] + latency(schedule.placement[n.stage], device) for n in needs(a)]
                start = max([device_free[device], *ready])
                finish[a] = device_free[device] = start + durations[a]
                heads[device] += 1
                progress = True
    return max(finish.values())


def durations_of(schedule: Schedule, stage_costs: tuple[StageCosts, ...]) -> dict[Action, float]:
    durations = {}
    for a in schedule.actions():
        c = stage_costs[a.stage]
        durations[a] = {
            Kind.F: c.forward_s,
            Kind.I: c.input_grad_s,
            Kind.W: c.weight_grad_s,
            Kind.B: c.input_grad_s + c.weight_grad_s,
        }[a.kind]
    return durations


@given(
    schedules(max_devices=5, max_microbatches=10, max_chunks=3),
    st.lists(st.integers(1, 9), min_size=3, max_size=3),
    st.sampled_from(list(Topology)),
    st.sampled_from([0.0, 0.01, 0.1, 5.0, 40.0]),
    st.sampled_from(["simpy", "fast"]),
    st.randoms(use_true_random=False),
)
def test_iteration_time_is_the_longest_path_on_latency_only_links(
    schedule: Schedule,
    weights: list[int],
    topology: Topology,
    latency: float,
    engine: str,
    rng: random.Random,
) -> None:
    # Random, unequal per-stage costs and message sizes (up to 1 TB): the reference relies on
    # neither uniform stages nor small messages. Latencies far above the action times included.
    stage_costs = tuple(
        StageCosts(
            weights[0] * rng.uniform(0.5, 1.5),
            weights[1] * rng.uniform(0.5, 1.5),
            weights[2] * rng.uniform(0.5, 1.5),
            output_bytes=rng.choice([0.0, 1.0, 1e6, 1e12]),
        )
        for _ in range(schedule.stages)
    )
    link = Link("l", float("inf"), latency)
    if topology is Topology.HIERARCHICAL:
        inter = Link("ib", float("inf"), 2 * latency)
        network = Network(
            schedule.devices,
            topology,
            link,
            inter_node_link=inter,
            devices_per_node=rng.randint(1, schedule.devices),
        )
    else:
        network = Network(schedule.devices, topology, link)
    result = simulate(schedule, PipelineCosts(stage_costs, network), engine=engine)
    assert all(t.start_s == t.queued_s for t in result.transfers)  # nothing ever queues
    expected = reference_iteration_time(schedule, durations_of(schedule, stage_costs), network)
    assert abs(result.iteration_time_s - expected) <= 1e-9 * max(1.0, expected)


@given(schedules(max_devices=4, max_microbatches=8), st.randoms(use_true_random=False))
def test_random_valid_reorderings_match_too(schedule: Schedule, rng: random.Random) -> None:
    """Orders no generator makes: shuffle a device list until it can still run."""
    rows = [list(r) for r in schedule.device_actions]
    device = rng.randrange(len(rows))
    for _ in range(20):
        candidate = rows[device][:]
        i, j = sorted(rng.sample(range(len(candidate)), 2)) if len(candidate) > 1 else (0, 0)
        candidate[i], candidate[j] = candidate[j], candidate[i]
        trial = [*rows[:device], candidate, *rows[device + 1 :]]
        if reference_runs_to_completion(
            schedule.stages, schedule.placement, trial, schedule.model_stages
        ):
            rows = trial
    shuffled = schedule.replace(name="shuffled", device_actions=tuple(tuple(r) for r in rows))
    stage_costs = tuple(
        StageCosts(rng.uniform(1, 3), rng.uniform(1, 3), rng.uniform(0, 2))
        for _ in range(schedule.stages)
    )
    network = Network(schedule.devices, Topology.ALL_TO_ALL, Link("l", float("inf"), 0.0))
    result = simulate(shuffled, PipelineCosts(stage_costs, network))
    durations = durations_of(shuffled, stage_costs)
    assert abs(result.iteration_time_s - reference_iteration_time(shuffled, durations, 0.0)) < 1e-9
