"""The partitioner under ``--recompute N`` (each stage fully recomputes its first N blocks):
its tables against brute force over every partition, a literal case, and the model's own
stage costs (``pipesim simulate``'s)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipesim.common.checks import SpecError
from pipesim.costs.pipeline_costs import StageCosts
from pipesim.costs.spec_derived import costs_from_model
from pipesim.hardware import resolve_hardware
from pipesim.parallel.config import Parallelism, Recompute
from pipesim.partition import (
    MemoryForm,
    NoPartitionFits,
    PartitionProblem,
    RecomputeFirst,
    balanced,
    device_peaks,
    memory_aware,
    memory_forms,
    partition_stage_costs,
)
from pipesim.partition.from_model import model_problem
from pipesim.partition.solver import certainly_overflows
from pipesim.schedules import build
from pipesim.workload import resolve_model
from tests.partition.reference import brute_bottleneck, brute_memory_aware
from tests.partition.test_solver import SCHEDULES, problems


def _twin(layer: StageCosts, recompute_s: float, kept: float) -> StageCosts:
    """``layer`` fully recomputed: its forward again in the input-gradient pass, ``kept`` of
    its stash kept (its input), the recomputed activations held while its backward runs."""
    return dataclasses.replace(
        layer,
        input_grad_s=layer.input_grad_s + recompute_s,
        activation_bytes=kept,
        weight_grad_activation_bytes=min(kept, layer.weight_grad_activation_bytes),
        input_grad_transient_bytes=layer.input_grad_transient_bytes + layer.activation_bytes,
    )


@st.composite
def recomputing(draw: st.DrawFn, chunks: int = 1) -> PartitionProblem:
    """A random problem of :func:`tests.partition.test_solver.problems` on devices of one kind,
    with twins for its layers, some of them blocks, and an N from 0 to 3."""
    problem = draw(problems(chunks=chunks))
    layers = problem.layers
    twins = tuple(
        _twin(x, draw(st.integers(1, 4)) * 1.0, draw(st.integers(0, 2)) * 1.0) for x in layers
    )
    blocks = tuple(draw(st.booleans()) for _ in layers)
    first = RecomputeFirst(draw(st.integers(0, 3)), twins, blocks)
    remat = problem.rematerialize if chunks == 1 else False
    return dataclasses.replace(
        problem, device_layers=None, rematerialize=remat, recompute_first=first
    )


@settings(max_examples=60, deadline=None)
@given(recomputing(chunks=1))
def test_balanced_with_recompute_n_equals_brute_force(problem: PartitionProblem) -> None:
    assert balanced(problem).bottleneck_s == pytest.approx(brute_bottleneck(problem), rel=1e-9)


@settings(max_examples=30, deadline=None)
@given(recomputing(chunks=2))
def test_balanced_with_recompute_n_and_two_chunks_equals_brute_force(
    problem: PartitionProblem,
) -> None:
    assert balanced(problem).bottleneck_s == pytest.approx(brute_bottleneck(problem), rel=1e-9)


@st.composite
def memory_cases(draw: st.DrawFn, chunks: int) -> tuple[PartitionProblem, tuple[MemoryForm, ...]]:
    """A :func:`recomputing` problem placed by a schedule of ``chunks`` chunks, and its memory
    forms, each device's memory near the fullest device's peak under the balanced partition
    (0.9 to 1.3 times it: the memory-aware tables decide many cases, not the balanced
    partition alone)."""
    problem = draw(recomputing(chunks=chunks))
    name, _, _ = draw(st.sampled_from([s for s in SCHEDULES if s[1] == chunks]))
    schedule = build(name, problem.devices, 4, chunks, remat=False)
    problem = dataclasses.replace(problem, placement=schedule.placement, rematerialize=False)
    forms = memory_forms(schedule, 2 if name == "pipedream-2bw" else 1)
    fullest = max(device_peaks(problem, forms, balanced(problem).counts))
    shares = st.sampled_from([0.9, 1.0, 1.1, 1.3])
    capacities = tuple(fullest * draw(shares) for _ in range(problem.devices))
    return dataclasses.replace(problem, memory_capacity_bytes=capacities), forms


@settings(max_examples=80, deadline=None)
@given(memory_cases(chunks=1))
def test_memory_aware_with_recompute_n_equals_brute_force(
    case: tuple[PartitionProblem, tuple[MemoryForm, ...]],
) -> None:
    """One stage per device: the masked tables; the certificate never refuses a problem that
    brute force fits (its stash is the smaller of a layer's and its twin's)."""
    _check_memory_aware(*case)


@settings(max_examples=30, deadline=None)
@given(memory_cases(chunks=2))
def test_memory_aware_with_recompute_n_and_two_chunks_equals_brute_force(
    case: tuple[PartitionProblem, tuple[MemoryForm, ...]],
) -> None:
    """Several stages per device: the depth-first search's rows."""
    _check_memory_aware(*case)


def _check_memory_aware(problem: PartitionProblem, forms: tuple[MemoryForm, ...]) -> None:
    expected = brute_memory_aware(problem, forms)
    if expected is None:
        with pytest.raises(NoPartitionFits):
            memory_aware(problem, forms)
        return
    assert not certainly_overflows(problem, forms)
    found = memory_aware(problem, forms)
    assert found.exact
    assert found.bottleneck_s == pytest.approx(expected, rel=1e-9)


def test_each_stage_recomputes_its_own_first_blocks() -> None:
    """Six blocks of 1 s (F + B), each recomputed adds 1 s; two stages, N = 1: every stage
    pays 1 s, so 3 + 3 is balanced at 4 s; with N = 2 the same split is 5 s. A stage's first
    blocks are its own: stage 1 starting at block 3 recomputes block 3, not block 0's twin."""
    layer = StageCosts(0.5, 0.5, 0.0, activation_bytes=10.0)
    twin = StageCosts(0.5, 1.5, 0.0, activation_bytes=1.0)
    for count, bottleneck in ((1, 4.0), (2, 5.0), (3, 6.0), (0, 3.0)):
        problem = PartitionProblem(
            (layer,) * 6,
            0.0,
            (0, 1),
            recompute_first=RecomputeFirst(count, (twin,) * 6, (True,) * 6),
        )
        found = balanced(problem)
        assert found.counts == (3, 3)
        assert found.bottleneck_s == pytest.approx(bottleneck)
        stages = partition_stage_costs(problem, found.counts)
        recomputed = min(count, 3)
        assert [s.activation_bytes for s in stages] == [10.0 * (3 - recomputed) + recomputed] * 2


def test_ends_name_the_layer_after_the_nth_block() -> None:
    """Layers e b b e b (e: not a block): from 0 the second block is layer 2; from 3 there is
    one block left, so a stage starting there reaches the end."""
    first = RecomputeFirst(2, (StageCosts(1.0, 1.0, 0.0),) * 5, (False, True, True, False, True))
    assert list(first.ends()) == [3, 3, 5, 5, 5, 5]
    assert first.swapped(0, 5) == (False, True, True, False, False)
    assert first.swapped(2, 5) == (True, False, True)


def test_twins_with_devices_of_different_kinds_are_refused() -> None:
    layer = StageCosts(1.0, 1.0, 0.0)
    with pytest.raises(SpecError, match="recompute_first with device_layers"):
        PartitionProblem(
            (layer,) * 3,
            0.0,
            (0, 1),
            device_layers=((layer,) * 3, (layer,) * 3),
            recompute_first=RecomputeFirst(1, (layer,) * 3, (True,) * 3),
        )


@pytest.mark.parametrize("count", [1, 3])
def test_a_models_problem_stages_are_simulates_stages(count: int) -> None:
    """gpt-355m on 4 A100s with --recompute N: each stage of the problem's partition costs
    what ``pipesim simulate``'s costs give for the same layer counts (the first N blocks of
    each stage recomputed by both)."""
    model, hardware = resolve_model("gpt-355m"), resolve_hardware("a100")
    parallelism = Parallelism(recompute=Recompute.parse(str(count)))
    cluster = hardware.cluster(4)
    problem = model_problem(model, cluster, 2, (0, 1, 2, 3), parallelism=parallelism)
    assert problem.recompute_first is not None
    counts = balanced(problem).counts
    simulated = costs_from_model(model, cluster, 4, 2, counts, parallelism=parallelism)
    assert tuple(partition_stage_costs(problem, counts)) == simulated.stages
