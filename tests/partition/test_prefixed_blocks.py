"""The feasibility test over a model's leading layers' families
(:mod:`pipesim.partition.prefixed_blocks`) gives the depth-first search's own answer: on random
embedding + leading layers of other kinds + identical blocks + output layer problems, at every
limit a bisection can try, the same first partition (or the same None), with ``--recompute N``
twins too; every limit at once is the test asked limit by limit; the memory-aware partition is
brute force's; and a DeepSeek-V3-like problem the search alone gives up on is answered."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipesim.costs.pipeline_costs import StageCosts
from pipesim.partition import (
    NoPartitionFits,
    PartitionProblem,
    RecomputeFirst,
    device_peaks,
    memory_aware,
    memory_forms,
    solver,
)
from pipesim.partition.prefixed_blocks import PrefixedFeasibility, leading_layers
from pipesim.schedules import build
from tests.partition.reference import brute_memory_aware
from tests.partition.test_blocks import SHAPES, _costs, drawn_problem


@st.composite
def prefixed(draw: st.DrawFn) -> tuple[PartitionProblem, tuple[object, ...]]:
    """An embedding, 1 to 3 leading layers of their own costs, identical blocks and an output
    layer, on K devices of one schedule, with capacities from tight to loose; sometimes
    recompute N (the leading layers blocks with twins of their own, or not blocks)."""
    name, chunks = draw(st.sampled_from(SHAPES))
    devices = draw(st.integers(2, 3))
    stages = devices * chunks
    lead = draw(st.integers(2, 4))  # the embedding and lead - 1 layers of other kinds
    count = draw(st.integers(max(stages - 2, 1), stages + 4))
    block = _costs(draw)
    leading = tuple(  # each unlike the blocks (heavier weights), so not the block test's shape
        dataclasses.replace(_costs(draw), parameter_bytes=block.parameter_bytes + 1 + i)
        for i in range(lead)
    )
    layers = (*leading, *([block] * count), _costs(draw))
    schedule = build(name, devices, devices * draw(st.integers(1, 2)), chunks)
    recompute = None
    if draw(st.booleans()):
        twin = _costs(draw, stash_scale=0.25)
        own = tuple(_costs(draw, stash_scale=0.25) for _ in range(lead - 1))
        dense = tuple(draw(st.booleans()) for _ in range(lead - 1))
        twins = (layers[0], *own, *([twin] * count), layers[-1])
        flags = (False, *dense, *([True] * count), False)
        recompute = RecomputeFirst(draw(st.integers(1, 3)), twins, flags)
    problem = drawn_problem(draw, layers, schedule.placement, recompute)
    return problem, memory_forms(schedule, 1)


def _answers(
    problem: PartitionProblem,
    forms: tuple[object, ...],
    shaped: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> list[object]:
    """The feasibility test's first partition at every limit a bisection can try, and with
    no limit: the families' test, or (``shaped`` False) the depth-first search alone."""
    matrices = solver._time_matrices(problem)
    parts = solver._SpanMemory(problem, forms)  # type: ignore[arg-type]
    with monkeypatch.context() as patched:
        if not shaped:
            patched.setattr(solver, "shaped_feasibility", lambda *_: None)
        else:
            assert isinstance(
                solver.shaped_feasibility(problem, parts, matrices), PrefixedFeasibility
            )
        budget = [10**9]
        feasible = solver._depth_first(problem, parts, matrices, budget)
    limits = np.unique(np.concatenate([m[np.isfinite(m)] for m in matrices]))
    asked = [*(float(x) * (1 + 1e-9) for x in limits), math.inf]
    return [feasible(limit, True) for limit in asked]


@settings(max_examples=80, deadline=None)
@given(prefixed())
def test_the_families_find_the_depth_first_search_s_first_partition(
    case: tuple[PartitionProblem, tuple[object, ...]],
) -> None:
    problem, forms = case
    with pytest.MonkeyPatch.context() as monkeypatch:
        assert _answers(problem, forms, True, monkeypatch) == _answers(
            problem, forms, False, monkeypatch
        )


@settings(max_examples=60, deadline=None)
@given(prefixed())
def test_every_limit_at_once_is_the_families_asked_limit_by_limit(
    case: tuple[PartitionProblem, tuple[object, ...]],
) -> None:
    problem, forms = case
    matrices = solver._time_matrices(problem)
    test = PrefixedFeasibility.of(problem, solver._SpanMemory(problem, forms), matrices)  # type: ignore[arg-type]
    assert test is not None
    limits = np.unique(np.concatenate([m[np.isfinite(m)] for m in matrices]))
    limits = np.concatenate([limits * (1 + 1e-9), limits * (1 - 1e-9), [0.0, 1e30]])
    at_once = test.feasible_limits(limits)
    if at_once is None:
        return  # a family's tables are not read so: the bisection asks limit by limit
    assert at_once.tolist() == [test.first_fit(float(x), False) is True for x in limits]


@settings(max_examples=60, deadline=None)
@given(prefixed())
def test_memory_aware_with_leading_layers_equals_brute_force(
    case: tuple[PartitionProblem, tuple[object, ...]],
) -> None:
    problem, forms = case
    expected = brute_memory_aware(problem, forms)  # type: ignore[arg-type]
    if expected is None:
        with pytest.raises(NoPartitionFits):
            memory_aware(problem, forms)  # type: ignore[arg-type]
        return
    found = memory_aware(problem, forms)  # type: ignore[arg-type]
    assert found.exact
    assert found.bottleneck_s == pytest.approx(expected, rel=1e-9)
    peaks = device_peaks(problem, forms, found.counts)  # type: ignore[arg-type]
    assert all(p <= c for p, c in zip(peaks, problem.memory_capacity_bytes or (), strict=True))


def _layer(forward_s: float, stash: float, weights: float) -> StageCosts:
    return StageCosts(
        forward_s,
        forward_s,
        forward_s,
        activation_bytes=stash,
        output_bytes=4.0,
        parameter_bytes=weights,
    )


def test_leading_layers_counts_the_layers_before_the_identical_blocks() -> None:
    edge, dense, expert = _layer(0.5, 1.0, 5.0), _layer(1.0, 10.0, 10.0), _layer(2, 10.0, 40.0)
    placement = (0, 1)
    uniform = PartitionProblem((edge, *[expert] * 6, edge), 0.0, placement)
    assert leading_layers(uniform) == 1
    deepseek_like = PartitionProblem(
        (edge, dense, dense, dense, *[expert] * 6, edge), 0.0, placement
    )
    assert leading_layers(deepseek_like) == 4
    twins = (edge, dense, dense, dense, *[_layer(2, 1.0, 40.0)] * 5, _layer(2, 2.0, 40.0), edge)
    flags = (False, *[True] * 9, False)
    recomputed = PartitionProblem(
        deepseek_like.layers,
        0.0,
        placement,
        recompute_first=RecomputeFirst(1, twins, flags),
    )
    assert leading_layers(recomputed) == 9  # the last block's twin differs from the others'


def test_a_last_block_not_recomputed_as_one_is_left_to_the_search() -> None:
    """Under recompute N with the last block not flagged as a block, a middle stage holding
    it does not swap in its twin: the blocks are not alike, the families' test declines, and
    the search's answer stands (once, a partition over the limit was returned here)."""

    def layer(forward_s: float, weights: float = 1.0) -> StageCosts:
        return StageCosts(
            forward_s, 0.0, 0.0, activation_bytes=1.0, output_bytes=4.0, parameter_bytes=weights
        )

    edge, dense, block, twin = layer(1.0), layer(1.0, 2.0), layer(3.0), layer(2.0)
    flags = (False, False, True, False, False)
    problem = PartitionProblem(
        (edge, dense, block, block, edge),
        0.0,
        (0, 1, 2, 3),
        None,
        None,
        (1e9,) * 4,
        recompute_first=RecomputeFirst(1, (edge, dense, twin, twin, edge), flags),
    )
    assert leading_layers(problem) == 4  # no run of blocks alike
    forms = memory_forms(build("1f1b", 4, 4, 1), 1)
    matrices = solver._time_matrices(problem)
    parts = solver._SpanMemory(problem, forms)
    assert solver.shaped_feasibility(problem, parts, matrices) is None
    assert solver._depth_first(problem, parts, matrices, [10**9])(2.0) is None


@pytest.mark.parametrize("name", ["interleaved-1f1b", "zbv"])
def test_a_deepseek_like_problem_is_answered_without_the_node_budget(name: str) -> None:
    """An embedding, 3 dense blocks, 58 expert blocks and an output layer over 16 devices x 2
    stages, memory binding: the depth-first search alone spends its 5,000 nodes and finds no
    partition; the families' test finds the fastest one that fits (exact)."""
    edge, dense, expert = _layer(0.5, 1.0, 5.0), _layer(1.0, 10.0, 10.0), _layer(1.2, 10.0, 40.0)
    schedule = build(name, 16, 48, 2)
    forms = memory_forms(schedule, 1)
    layers = (edge, dense, dense, dense, *([expert] * 58), edge)
    loose = PartitionProblem(layers, 0.0, schedule.placement, None, None, (math.inf,) * 16)
    balanced_peak = max(device_peaks(loose, forms, solver.balanced(loose).counts))
    capacity = balanced_peak * 0.97  # the balanced partition overflows a little
    problem = PartitionProblem(layers, 0.0, schedule.placement, None, None, (capacity,) * 16)
    found = memory_aware(problem, forms, 5_000)
    assert found.exact
    assert max(device_peaks(problem, forms, found.counts)) <= capacity
    with pytest.MonkeyPatch.context() as patched:
        patched.setattr(solver, "shaped_feasibility", lambda *_: None)
        try:
            searched = memory_aware(problem, forms, 5_000)
        except NoPartitionFits:
            searched = None
    assert searched is None or not searched.exact  # the search alone gave up
