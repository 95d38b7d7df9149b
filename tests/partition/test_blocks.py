"""The transformer-shaped feasibility test (:mod:`pipesim.partition.blocks`) gives the
depth-first search's own answer: on random embedding + identical blocks + output layer
problems, for every limit a bisection can try, the same first partition (or the same None);
with ``--recompute N`` twins too. And the planner's compute limit
(``memory_aware(compute_limit_s=...)``) changes no answer it gives, and is only claimed where
every fitting partition exceeds it (checked by brute force)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipesim.costs.pipeline_costs import StageCosts
from pipesim.hardware.network import Link, Network, Topology
from pipesim.partition import (
    BeyondComputeLimit,
    NoPartitionFits,
    PartitionProblem,
    RecomputeFirst,
    device_peaks,
    memory_aware,
    memory_forms,
    merge_layers,
    solver,
)
from pipesim.partition import blocks as blocks_module
from pipesim.schedules import build
from tests.partition.reference import brute_memory_aware, compositions

SHAPES = [("interleaved-1f1b", 2), ("zbv", 2), ("interleaved-1f1b", 3), ("1f1b", 1)]


def _costs(draw: st.DrawFn, stash_scale: float = 1.0) -> StageCosts:
    small = st.integers(1, 9)
    stash = draw(small) * stash_scale
    return StageCosts(
        forward_s=draw(small) * 1.0,
        input_grad_s=draw(small) * 1.0,
        weight_grad_s=draw(st.integers(0, 9)) * 1.0,
        activation_bytes=stash,
        weight_grad_activation_bytes=stash * draw(st.sampled_from([0.0, 0.5, 1.0])),
        output_bytes=4.0,
        parameter_bytes=draw(small) * 1.0,
        gradient_bytes=draw(small) * 1.0,
        optimizer_bytes=draw(st.integers(0, 9)) * 1.0,
    )


@st.composite
def shaped(draw: st.DrawFn) -> tuple[PartitionProblem, tuple[object, ...], int]:
    """An embedding, B identical blocks and an output layer, on K devices of one schedule,
    with capacities from tight to loose; sometimes recompute N with identical twins."""
    name, chunks = draw(st.sampled_from(SHAPES))
    devices = draw(st.integers(2, 3))
    stages = devices * chunks
    count = draw(st.integers(max(stages - 1, 2), stages + 5))
    block = _costs(draw)
    layers = (_costs(draw), *([block] * count), _costs(draw))
    microbatches = devices * draw(st.integers(1, 2))  # every schedule here takes it
    schedule = build(name, devices, microbatches, chunks)
    forms = memory_forms(schedule, 1)
    recompute = None
    if draw(st.booleans()):
        twin = _costs(draw, stash_scale=0.25)
        twins = (layers[0], *([twin] * count), layers[-1])
        flags = (False, *([True] * count), False)
        recompute = RecomputeFirst(draw(st.integers(1, 2)), twins, flags)
    return drawn_problem(draw, layers, schedule.placement, recompute), forms, microbatches


def drawn_problem(
    draw: st.DrawFn,
    layers: tuple[StageCosts, ...],
    placement: tuple[int, ...],
    recompute: RecomputeFirst | None,
) -> PartitionProblem:
    """``layers`` on ``placement``'s devices, all of one kind, joined all to all by a link of
    infinite or finite bandwidth, a drawn input size, and one capacity from tight to loose."""
    devices = max(placement) + 1
    return PartitionProblem(
        layers,
        draw(st.integers(0, 5)) * 1.0,
        placement,
        Network(
            devices, Topology.ALL_TO_ALL, Link("l", draw(st.sampled_from([math.inf, 2.0])), 0.0)
        ),
        (1.0,) * devices,
        (draw(st.integers(40, 900)) * 1.0,) * devices,
        False,
        None,
        recompute_first=recompute,
    )


def _first_fits(problem: PartitionProblem, forms: tuple[object, ...], use_blocks: bool) -> list:
    """The feasibility test's answer at every limit a bisection can try."""
    matrices = solver._time_matrices(problem)
    parts = solver._SpanMemory(problem, forms)  # type: ignore[arg-type]
    budget = [10**9]
    if not use_blocks:
        original = blocks_module.BlockFeasibility.of
        solver.BlockFeasibility.of = classmethod(lambda cls, *a: None)  # type: ignore[method-assign]
    try:
        feasible = solver._depth_first(problem, parts, matrices, budget)
    finally:
        if not use_blocks:
            solver.BlockFeasibility.of = original  # type: ignore[method-assign]
    limits = np.unique(np.concatenate([m[np.isfinite(m)] for m in matrices]))
    return [feasible(float(limit) * (1 + 1e-9), True) for limit in limits]


@settings(max_examples=80, deadline=None)
@given(shaped())
def test_the_block_test_finds_the_depth_first_search_s_first_partition(
    case: tuple[PartitionProblem, tuple[object, ...], int],
) -> None:
    problem, forms, _ = case
    assert (
        blocks_module.BlockFeasibility.of(
            problem,
            solver._SpanMemory(problem, forms),  # type: ignore[arg-type]
            solver._time_matrices(problem),
        )
        is not None
    )
    assert _first_fits(problem, forms, True) == _first_fits(problem, forms, False)


@settings(max_examples=80, deadline=None)
@given(shaped())
def test_every_limit_at_once_is_the_block_test_asked_limit_by_limit(
    case: tuple[PartitionProblem, tuple[object, ...], int],
) -> None:
    """feasible_limits (a bisection's candidates answered at once, from each device's prefix
    maxima) says, for every limit, exactly whether first_fit finds a partition; the same on
    the least-compute tables the planner's proof reads."""
    problem, forms, _ = case
    parts = solver._SpanMemory(problem, forms)  # type: ignore[arg-type]
    answered = 0
    for matrices in (solver._time_matrices(problem), solver._least_compute_matrices(problem)):
        shaped_test = blocks_module.BlockFeasibility.of(problem, parts, matrices)
        assert shaped_test is not None
        limits = np.unique(np.concatenate([m[np.isfinite(m)] for m in matrices]))
        limits = np.concatenate([limits * (1 + 1e-9), limits * (1 - 1e-9), [0.0, 1e30]])
        at_once = shaped_test.feasible_limits(limits)
        one_by_one = [shaped_test.first_fit(float(x), False) for x in limits]
        if at_once is None:
            continue
        answered += 1
        assert blocks_module.UNKNOWN not in one_by_one
        assert at_once.tolist() == [answer is True for answer in one_by_one]
    assert answered >= 1  # the shape's tables are read at once


def test_the_block_test_declines_other_shapes() -> None:
    """Blocks that differ (a mixture-of-experts model's leading dense blocks): not its shape."""
    a = StageCosts(1.0, 1.0, 1.0, activation_bytes=1.0, output_bytes=4.0, parameter_bytes=1.0)
    b = StageCosts(2.0, 1.0, 1.0, activation_bytes=1.0, output_bytes=4.0, parameter_bytes=1.0)
    schedule = build("interleaved-1f1b", 2, 4, 2)
    problem = PartitionProblem((a, a, b, b, b, a), 0.0, schedule.placement, None, None, (50.0,) * 2)
    forms = memory_forms(schedule, 1)
    parts = solver._SpanMemory(problem, forms)
    assert blocks_module.BlockFeasibility.of(problem, parts, solver._time_matrices(problem)) is None


def _least_compute(problem: PartitionProblem, counts: tuple[int, ...]) -> float:
    """The largest least compute of a stage of ``counts`` (brute force's own sum)."""
    out, start = 0.0, 0
    for stage, size in enumerate(counts):
        layers = problem.stage_layers(start, start + size, problem.placement[stage])
        out = max(out, sum(solver._least_compute_s(problem, x) for x in layers))
        start += size
    return out


@settings(max_examples=60, deadline=None)
@given(shaped(), st.floats(0.05, 1.5))
def test_a_compute_limit_changes_no_answer_and_is_claimed_only_when_true(
    case: tuple[PartitionProblem, tuple[object, ...], int], fraction: float
) -> None:
    """With a limit: either the same partition as without, or BeyondComputeLimit where every
    partition that fits memory (brute force) has a stage whose least compute exceeds it."""
    problem, forms, _ = case
    try:
        unlimited = memory_aware(problem, forms)  # type: ignore[arg-type]
    except NoPartitionFits:
        unlimited = None
    fitting = [
        counts
        for counts in compositions(len(problem.layers), problem.stages)
        if all(
            peak <= capacity
            for peak, capacity in zip(
                device_peaks(problem, forms, counts),  # type: ignore[arg-type]
                problem.memory_capacity_bytes or (),
                strict=True,
            )
        )
    ]
    least = min((_least_compute(problem, counts) for counts in fitting), default=math.inf)
    limit = fraction * (least if math.isfinite(least) else 10.0)
    try:
        limited = memory_aware(problem, forms, compute_limit_s=limit)  # type: ignore[arg-type]
    except BeyondComputeLimit:  # claimed only over partitions that fit: never vacuously
        assert unlimited is not None and least > limit * (1 + 1e-9)
        return
    except NoPartitionFits:
        assert unlimited is None
        return
    assert unlimited is not None and limited == unlimited


@pytest.mark.parametrize("name", ["interleaved-1f1b", "zbv"])
def test_a_tight_gpt3_like_problem_is_answered_without_the_node_budget(name: str) -> None:
    """96 identical blocks over 32 stages with memory binding: the depth-first search alone
    spends its 5,000 nodes without an answer; the block test answers, and the answer fits."""
    block = StageCosts(1.0, 1.0, 1.0, activation_bytes=10.0, output_bytes=4.0, parameter_bytes=10.0)
    edge = StageCosts(0.5, 0.5, 0.5, activation_bytes=1.0, output_bytes=4.0, parameter_bytes=5.0)
    schedule = build(name, 16, 48, 2)
    forms = memory_forms(schedule, 1)
    loose = PartitionProblem(
        (edge, *([block] * 96), edge), 0.0, schedule.placement, None, None, (math.inf,) * 16
    )
    balanced_peak = max(device_peaks(loose, forms, (4, *([3] * 30), 4)))
    capacity = balanced_peak * 0.97  # the balanced partition overflows a little
    problem = PartitionProblem(loose.layers, 0.0, schedule.placement, None, None, (capacity,) * 16)
    found = memory_aware(problem, forms, 5_000)
    assert found.exact
    assert max(device_peaks(problem, forms, found.counts)) <= capacity


@settings(max_examples=60, deadline=None)
@given(shaped())
def test_memory_aware_on_a_transformer_s_shape_equals_brute_force(
    case: tuple[PartitionProblem, tuple[object, ...], int],
) -> None:
    """One stage per device (its memory tables laid out per count of blocks) or several (the
    block test in the bisection): the least bottleneck among partitions that fit, by brute
    force, and a partition that fits."""
    problem, forms, _ = case
    expected = brute_memory_aware(problem, forms)  # type: ignore[arg-type]
    if expected is None:
        with pytest.raises(NoPartitionFits):
            memory_aware(problem, forms)  # type: ignore[arg-type]
        return
    found = memory_aware(problem, forms)  # type: ignore[arg-type]
    assert found.bottleneck_s == pytest.approx(expected, rel=1e-9)
    peaks = device_peaks(problem, forms, found.counts)  # type: ignore[arg-type]
    assert all(p <= c for p, c in zip(peaks, problem.memory_capacity_bytes or (), strict=True))


@pytest.mark.parametrize(("name", "chunks"), [("1f1b", 1), ("interleaved-1f1b", 2)])
def test_a_compute_limit_is_not_claimed_where_nothing_fits_at_all(name: str, chunks: int) -> None:
    """Where no partition fits memory the answer is out of memory, limit or not (a limit
    claimed over no partition at all would be true only vacuously)."""
    block = StageCosts(1.0, 1.0, 1.0, activation_bytes=10.0, output_bytes=4.0, parameter_bytes=50.0)
    schedule = build(name, 2, 4, chunks)
    forms = memory_forms(schedule, 1)
    problem = PartitionProblem((block,) * 8, 0.0, schedule.placement, None, None, (60.0,) * 2)
    for limit in (math.inf, 1e30):
        with pytest.raises(NoPartitionFits):
            memory_aware(problem, forms, compute_limit_s=limit)


def test_an_infinite_stash_reads_as_an_infinite_peak() -> None:
    """A level of 0 x inf bytes is NaN; the peak passes over it as the per-level sum did (two
    stashes of 1e308 bytes merged overflow to inf: merging does not check again)."""
    half = StageCosts(1.0, 1.0, 1.0, activation_bytes=1e308, output_bytes=4.0)
    big = merge_layers([half, half], 0.0)
    assert big.activation_bytes == math.inf
    schedule = build("interleaved-1f1b", 2, 4, 2)
    forms = memory_forms(schedule, 1)
    assert all(form.peak_level_bytes([big] * 4) == math.inf for form in forms)


def _layer(draw: st.DrawFn) -> StageCosts:
    """A layer with transients of their own (not derived from its stash)."""
    small = st.integers(0, 9)
    stash = draw(small) * 1.0
    return StageCosts(
        forward_s=1.0,
        input_grad_s=1.0,
        weight_grad_s=1.0,
        activation_bytes=stash,
        weight_grad_activation_bytes=stash * draw(st.sampled_from([0.0, 0.5, 1.0])),
        output_bytes=4.0,
        parameter_bytes=draw(small) * 1.0,
        gradient_bytes=draw(small) * 1.0,
        optimizer_bytes=draw(small) * 1.0,
        forward_transient_bytes=draw(small) * 1.0,
        input_grad_transient_bytes=draw(small) * 1.0,
        weight_grad_transient_bytes=draw(small) * 1.0,
    )


@st.composite
def recomputed_rows(draw: st.DrawFn) -> tuple[PartitionProblem, tuple[object, ...]]:
    """Layers all different, some of them blocks with twins of their own (larger or
    smaller transients and stashes), recompute N from 0 to 4, on 1F1B or interleaved
    stages."""
    count = draw(st.integers(4, 12))
    layers = tuple(_layer(draw) for _ in range(count))
    twins = tuple(_layer(draw) for _ in range(count))
    flags = tuple(draw(st.booleans()) for _ in range(count))
    name, chunks = draw(st.sampled_from([("1f1b", 1), ("interleaved-1f1b", 2)]))
    schedule = build(name, 2, 4, chunks)
    problem = PartitionProblem(
        layers,
        1.0,
        schedule.placement,
        None,
        None,
        (math.inf,) * 2,
        False,
        None,
        recompute_first=RecomputeFirst(draw(st.integers(0, 4)), twins, flags),
    )
    return problem, memory_forms(schedule, 1)


@settings(max_examples=80, deadline=None)
@given(recomputed_rows())
def test_a_column_is_every_start_s_row_read_at_its_end(
    case: tuple[PartitionProblem, tuple[object, ...]],
) -> None:
    """_SpanMemory.column(stage, end) gives, for every start, exactly (bit for bit) what
    row(stage, start) gives at that end, with --recompute N's twins as each start swaps
    them in (the last stage of a transformer's shape reads its memory from one column)."""
    problem, forms = case
    parts = solver._SpanMemory(problem, forms)  # type: ignore[arg-type]
    layers = len(problem.layers)
    for stage in range(problem.stages):
        for end in range(1, layers + 1):
            static, levels = parts.column(stage, end)
            for start in range(end):
                row_static, row_levels = parts.row(stage, start)
                assert static[start] == row_static[end], (stage, start, end)
                assert levels[:, start].tolist() == row_levels[:, end].tolist()
