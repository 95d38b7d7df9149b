"""Weight-update rules over several steps, against a small reference implementation."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from executor import PipelineTrainer, split_model
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
