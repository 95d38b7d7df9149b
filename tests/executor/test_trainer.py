"""Weight-update rules over several steps, against a small reference implementation."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from executor import NonFiniteError, PipelineTrainer, split_model
from executor.models import mlp
from pipesim.schedules import build

from .reference import assert_close, sgd_reference

LR = 0.05


def batches(count: int, size: int, width: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(11)
    return [
        (
            torch.randn(size, width, generator=generator, dtype=torch.float64),
            torch.randn(size, width, generator=generator, dtype=torch.float64),
        )
        for _ in range(count)
    ]


Trajectory = list[list[torch.Tensor]]


def train(
    name: str, devices: int, microbatches: int, chunks: int | None = None
) -> tuple[Trajectory, Trajectory, list[int]]:
    schedule = build(name, devices, microbatches, chunks)
    model = mlp(4, schedule.stages + 1, dtype=torch.float64, seed=3)
    stages = split_model(model, schedule)
    initial = copy.deepcopy(stages)
    trainer = PipelineTrainer(schedule, stages, nn.MSELoss(), lambda p: torch.optim.SGD(p, lr=LR))
    data = batches(4, 2 * microbatches, 4)
    trajectory = []
    for x, y in data:
        trainer.step(x, y)
        trajectory.append([p.detach().clone() for stage in stages for p in stage.parameters()])
    staleness = [
        schedule.weight_staleness_steps(schedule.device_of(s)) for s in range(schedule.stages)
    ]
    expected = sgd_reference(initial, data, nn.MSELoss(), microbatches, LR, staleness)
    return trajectory, expected, staleness


@pytest.mark.parametrize(
    ("name", "devices", "microbatches", "chunks", "staleness"),
    [
        ("1f1b", 3, 3, None, [0, 0, 0]),
        ("zb-h2", 2, 3, None, [0, 0]),
        ("interleaved-1f1b", 2, 2, 2, [0, 0, 0, 0]),
        ("pipedream-2bw", 3, 3, None, [1, 1, 1]),
        ("pipedream", 3, 3, None, [2, 1, 0]),
    ],
)
def test_update_rule_matches_the_reference_over_four_steps(
    name: str, devices: int, microbatches: int, chunks: int | None, staleness: list[int]
) -> None:
    trajectory, expected, used = train(name, devices, microbatches, chunks)
    assert used == staleness
    for step, (actual, wanted) in enumerate(zip(trajectory, expected, strict=True)):
        for index, (a, w) in enumerate(zip(actual, wanted, strict=True)):
            assert_close(a, w, what=f"{name} step {step} parameter {index}")


def test_stale_rules_really_differ_from_flush() -> None:
    """Not vacuous: 2BW and PipeDream end elsewhere than synchronous training."""
    flush, _, _ = train("1f1b", 3, 3)
    two_bw, _, _ = train("pipedream-2bw", 3, 3)
    stashing, _, _ = train("pipedream", 3, 3)
    assert not torch.allclose(flush[-1][0], two_bw[-1][0])
    assert not torch.allclose(two_bw[-1][0], stashing[-1][0])
    assert torch.equal(flush[0][0], two_bw[0][0])  # the first step uses W(0) either way


def nan_in_stage_one(check_finite: bool) -> tuple[PipelineTrainer, list[torch.Tensor]]:
    """A 1F1B trainer whose stage 1 turns micro-batch 2's activation into NaN."""
    schedule = build("1f1b", 2, 3)
    stages = split_model(mlp(4, 2, dtype=torch.float64, seed=3), schedule)
    calls = iter(range(100))

    def poison(_m: nn.Module, _i: object, output: torch.Tensor) -> torch.Tensor | None:
        return output * float("nan") if next(calls) == 2 else None

    stages[1].register_forward_hook(poison)
    trainer = PipelineTrainer(schedule, stages, nn.MSELoss(), check_finite=check_finite)
    return trainer, [p.detach().clone() for stage in stages for p in stage.parameters()]


def test_a_nan_stops_the_step_at_its_action_before_the_update() -> None:
    trainer, before = nan_in_stage_one(check_finite=True)
    x, y = batches(1, 6, 4)[0]
    with pytest.raises(NonFiniteError) as error:
        trainer.step(x, y)
    assert str(error.value) == (
        "device 1: NaN first appeared in the output of 1F2 (stage 1 forward of micro-batch 2, "
        "step 0)"
    )
    after = [p.detach() for stage in trainer.stages for p in stage.parameters()]
    assert all(torch.equal(a, b) for a, b in zip(after, before, strict=True))  # no update


def test_without_the_check_a_nan_passes_silently() -> None:
    """What the check prevents: the step completes and NaN reaches the weights."""
    trainer, _ = nan_in_stage_one(check_finite=False)
    x, y = batches(1, 6, 4)[0]
    result = trainer.step(x, y)
    assert result.loss != result.loss  # NaN
    weights = [p for stage in trainer.stages for p in stage.parameters()]
    assert not all(bool(torch.isfinite(p).all()) for p in weights)
