"""Pipelined gradients equal unpipelined ones, for every schedule, through the local backend."""

from __future__ import annotations

import copy

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from executor import PipelineTrainer, run_step, split_model
from executor.models import mlp, transformer
from pipesim.costs.pipeline_costs import PipelineCosts
from pipesim.schedules import Schedule, build
from pipesim.schedules.looped_schedules import interleaved_flexible
from pipesim.synthesis.synthesis import minimum_limit, synthesize

from ..schedules.strategies import pipeline_costs, placed_pipeline_costs, schedules
from .reference import assert_close, reference_step


def model_for(kind: str, layers: int, width: int, seed: int) -> nn.Sequential:
    if kind == "mlp":
        return mlp(width, layers, bias=seed % 2 == 0, dtype=torch.float64, seed=seed)
    return transformer(width, 2, layers, dtype=torch.float64, seed=seed)


def batch_for(kind: str, size: int, width: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    shape = (size, width) if kind == "mlp" else (size, 3, width)
    x = torch.randn(shape, generator=generator, dtype=torch.float64)
    return x, torch.randn(shape, generator=generator, dtype=torch.float64)


def check_step(
    schedule: Schedule, kind: str, extra_layers: int, width: int, seed: int, per_microbatch: int
) -> None:
    model = model_for(kind, schedule.stages + extra_layers, width, seed)
    reference = copy.deepcopy(model)
    x, y = batch_for(kind, schedule.microbatches * per_microbatch, width, seed)
    loss_fn = nn.MSELoss()
    stages = split_model(model, schedule)
    result = run_step(schedule, stages, x, y, loss_fn, check_finite=True)  # and no false alarm
    expected_loss, expected = reference_step(reference, x, y, loss_fn, schedule.microbatches)
    assert abs(result.loss - expected_loss) <= 1e-10 * abs(expected_loss)
    for name, parameter in model.named_parameters():
        assert parameter.grad is not None, name
        assert_close(parameter.grad, expected[name])


@given(
    schedules(max_devices=4, max_microbatches=8, max_chunks=3),
    st.integers(0, 2),
    st.integers(2, 6),
    st.integers(0, 2**16),
    st.integers(1, 2),
)
def test_mlp_gradients_equal_unpipelined(
    schedule: Schedule, extra: int, width: int, seed: int, per_microbatch: int
) -> None:
    check_step(schedule, "mlp", extra, width, seed, per_microbatch)


@given(
    schedules(max_devices=3, max_microbatches=6, max_chunks=2),
    st.integers(0, 1),
    st.sampled_from([4, 8]),
    st.integers(0, 2**16),
)
def test_transformer_gradients_equal_unpipelined(
    schedule: Schedule, extra: int, width: int, seed: int
) -> None:
    check_step(schedule, "transformer", extra, width, seed, 1)


def test_remat_gives_the_same_gradients() -> None:
    check_step(build("gpipe", 3, 4, remat=True), "mlp", 1, 5, 7, 2)
    check_step(build("interleaved-1f1b", 2, 4, 2, remat=True), "transformer", 0, 4, 3, 1)


def test_flexible_interleaving_gives_the_same_gradients() -> None:
    """Llama 3's interleaving for M that PyTorch's equal rounds refuse: groups of 3 and 2 (K=2,
    M=5), of 4 and 3 over three chunks (K=3, M=7), a group size chosen by hand (K=2, M=6 in
    groups of 3), and with re-materialization."""
    flexible = "interleaved-1f1b-flexible"
    check_step(build(flexible, 2, 5, 2), "mlp", 1, 4, 11, 2)
    check_step(build(flexible, 3, 7, 3), "mlp", 0, 3, 12, 1)
    check_step(interleaved_flexible(2, 6, 2, group_size=3), "transformer", 1, 4, 13, 1)
    check_step(build(flexible, 2, 3, 2, remat=True), "transformer", 0, 4, 14, 1)


def test_gradients_accumulate_over_calls() -> None:
    schedule = build("zb-h1", 2, 2)
    model = model_for("mlp", 4, 3, 1)
    stages = split_model(model, schedule)
    x, y = batch_for("mlp", 4, 3, 1)
    run_step(schedule, stages, x, y, nn.MSELoss())
    once = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    assert len(once) == len(list(model.parameters()))
    run_step(schedule, stages, x, y, nn.MSELoss())
    for name, parameter in model.named_parameters():
        assert_close(parameter.grad, 2 * once[name])


@settings(max_examples=15, deadline=None)
@given(pipeline_costs(max_devices=4), st.integers(1, 6), st.integers(1, 8), st.integers(0, 2**16))
def test_synthesised_schedules_give_unpipelined_gradients(
    costs: PipelineCosts, microbatches: int, limit: int, seed: int
) -> None:
    """Orders made by the memory-bounded synthesiser, on random costs and limits, run by the
    executor: the same gradients as the unpipelined model."""
    check_step(synthesize(costs, microbatches, limit).schedule, "mlp", 1, 4, seed, 1)


@settings(max_examples=10, deadline=None)
@given(placed_pipeline_costs(), st.integers(1, 6), st.integers(0, 4), st.integers(0, 2**16))
def test_synthesised_schedules_of_several_stages_per_device_give_unpipelined_gradients(
    placed: tuple[PipelineCosts, tuple[int, ...]], microbatches: int, extra: int, seed: int
) -> None:
    """Synthesised in a V or looped over 2 or 3 chunks per device, on random costs and limits
    (greedy orders, V-Min and V-Half blocks, the searched ones): unpipelined gradients."""
    costs, placement = placed
    limit = minimum_limit(placement) + extra
    found = synthesize(costs, microbatches, limit, placement=placement, search_evaluations=10)
    check_step(found.schedule, "mlp", 1, 4, seed, 1)


@pytest.mark.parametrize(
    ("devices", "microbatches", "kind"),
    [(2, 4, "mlp"), (4, 8, "mlp"), (4, 10, "transformer")],
)
def test_dualpipe_copies_add_up_to_the_unpipelined_gradients(
    devices: int, microbatches: int, kind: str
) -> None:
    """Two copies of the model initialised equal, half the micro-batches through each: the
    sum of the copies' gradients of each model stage is the unpipelined gradient of the mean
    loss; after the all-reduce the executor runs by default each copy holds it, and an
    optimizer step keeps the copies identical."""
    schedule = build("dualpipe", devices, microbatches)
    model = model_for(kind, schedule.model_stages + 1, 4, seed=devices)
    reference = copy.deepcopy(model)
    x, y = batch_for(kind, 2 * microbatches, 4, devices)
    stages = split_model(model, schedule)
    copy_0, copy_1 = stages[: schedule.model_stages], stages[schedule.model_stages :]
    names = {id(p): n for n, p in model.named_parameters()}
    pairs = [
        (names[id(a)], a, b)
        for first, second in zip(copy_0, copy_1, strict=True)
        for a, b in zip(first.parameters(), second.parameters(), strict=True)
    ]
    assert len(pairs) == len(names)  # copy 0 is the model itself, copy 1 a copy of it
    assert all(a is not b and torch.equal(a, b) for _, a, b in pairs)
    loss, expected = reference_step(reference, x, y, nn.MSELoss(), microbatches)

    result = run_step(schedule, stages, x, y, nn.MSELoss(), check_finite=True, reduce_copies=False)
    assert abs(result.loss - loss) <= 1e-10 * abs(loss)
    for name, a, b in pairs:
        assert a.grad is not None and b.grad is not None, name
        assert_close(a.grad + b.grad, expected[name], what=name)
        assert float((b.grad - expected[name]).abs().max()) > 1e-6  # each copy has half

    for stage in stages:
        stage.zero_grad(set_to_none=True)
    run_step(schedule, stages, x, y, nn.MSELoss())  # the copies' gradients summed
    for name, a, b in pairs:
        assert_close(a.grad, expected[name], what=name)
        assert torch.equal(a.grad, b.grad)

    trainer = PipelineTrainer(schedule, stages, nn.MSELoss())
    trainer.step(x, y)
    assert all(torch.equal(a, b) for _, a, b in pairs)
