"""Hypothesis strategies for engine tests: schedules (generated, and valid reorderings no
generator makes), per-stage costs with ties and zeros, and networks of every topology."""

from __future__ import annotations

import math
from collections.abc import Sequence

from hypothesis import strategies as st

from pipesim.costs import PipelineCosts, StageCosts
from pipesim.hardware import Link, Network, Topology
from pipesim.schedules import Schedule, build, unsupported_reason

from ..schedules.strategies import reference_runs_to_completion, schedules

# Small dyadic values make ties (equal end times, equal requests on one channel) common.
_TIMES = st.one_of(st.sampled_from([0.0, 0.5, 1.0, 2.0]), st.floats(0.01, 3.0))
_BYTES = st.one_of(st.sampled_from([0.0, 100.0, 300.0]), st.floats(1.0, 1000.0))


@st.composite
def reordered(draw: st.DrawFn, schedule: Schedule) -> Schedule:
    """``schedule`` with a device's list shuffled by random swaps that keep it runnable."""
    rng = draw(st.randoms(use_true_random=False))
    rows = [list(r) for r in schedule.device_actions]
    for _ in range(draw(st.integers(0, 3))):
        device = rng.randrange(len(rows))
        if len(rows[device]) < 2:
            continue
        for _ in range(10):
            candidate = rows[device][:]
            i, j = sorted(rng.sample(range(len(candidate)), 2))
            candidate[i], candidate[j] = candidate[j], candidate[i]
            trial = [*rows[:device], candidate, *rows[device + 1 :]]
            if reference_runs_to_completion(
                schedule.stages, schedule.placement, trial, schedule.model_stages
            ):
                rows = trial
    return Schedule(
        "reordered",
        schedule.microbatches,
        schedule.placement,
        tuple(tuple(row) for row in rows),
        schedule.update_rule,
        schedule.rematerialize,
        schedule.copies,
        schedule.routes,
    )


@st.composite
def any_schedule(
    draw: st.DrawFn,
    max_devices: int = 5,
    max_microbatches: int = 8,
    names: Sequence[str] | None = None,
) -> Schedule:
    """A generated schedule (sometimes with remat), or a valid reordering of one."""
    schedule = draw(
        schedules(names=names, max_devices=max_devices, max_microbatches=max_microbatches)
    )
    if draw(st.booleans()) and schedule.generator is not None:
        name = schedule.generator
        k, m, v = schedule.devices, schedule.microbatches, schedule.chunks
        if unsupported_reason(name, k, m, v, remat=True) is None:
            schedule = build(name, k, m, v, remat=True)
    if draw(st.booleans()):
        schedule = draw(reordered(schedule))
    return schedule


@st.composite
def networks(draw: st.DrawFn, devices: int) -> Network:
    """Any topology over ``devices`` devices; links ideal (infinite bandwidth) or not."""
    bandwidth = draw(st.sampled_from([math.inf, 100.0, 250.0, 1000.0]))
    latency = draw(_TIMES)
    link = Link("l", bandwidth, latency)
    topology = draw(st.sampled_from(list(Topology)))
    if topology is Topology.HIERARCHICAL:
        per_node = draw(st.integers(1, max(1, devices)))
        inter = Link("ib", draw(st.sampled_from([math.inf, 50.0, 200.0])), draw(_TIMES))
        return Network(devices, topology, link, inter_node_link=inter, devices_per_node=per_node)
    return Network(devices, topology, link)


@st.composite
def costs_for(draw: st.DrawFn, schedule: Schedule) -> PipelineCosts:
    """Random per-stage costs (zeros and ties included) on a random network; for a schedule
    whose stages hold copies of the model, per stage of every copy or per model stage (the
    engines give each copy's stage its model stage's costs)."""
    uniform = draw(st.booleans())
    per_model = schedule.copies > 1 and draw(st.booleans())
    stage_count = schedule.model_stages if per_model else schedule.stages
    count = 1 if uniform else stage_count
    stages = []
    for _ in range(count):
        stash = draw(_BYTES)
        stages.append(
            StageCosts(
                forward_s=draw(_TIMES),
                input_grad_s=draw(_TIMES),
                weight_grad_s=draw(_TIMES),
                activation_bytes=stash,
                weight_grad_activation_bytes=stash * draw(st.sampled_from([0.0, 0.5, 1.0])),
                input_bytes=draw(_BYTES),
                output_bytes=draw(_BYTES),
                parameter_bytes=draw(_BYTES),
                optimizer_step_s=draw(st.sampled_from([0.0, 0.25, 1.0])),
            )
        )
    if uniform:
        stages = stages * stage_count
    return PipelineCosts(
        tuple(stages),
        draw(networks(schedule.devices)),
        memory_capacity_bytes=draw(st.sampled_from([math.inf, 5000.0])),
        transfers_use_compute=draw(st.booleans()),
    )
