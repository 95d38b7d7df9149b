"""The stash meter counts what autograd saves, and the executor frees it all by the end."""

from __future__ import annotations

import torch
from torch import nn

from executor.models import mlp
from executor.stage import StageRunner
from executor.stash import StashMeter


def runner(last: bool = False) -> tuple[StageRunner, StashMeter]:
    meter = StashMeter()
    model = mlp(32, 3, seed=0)
    return StageRunner(
        1, model, last=last, loss_fn=nn.MSELoss(), microbatches=1, meter=meter
    ), meter


def test_full_backward_frees_every_saved_byte() -> None:
    stage, meter = runner()
    x = torch.randn(4, 32)
    for _ in range(3):
        out = stage.forward(0, x, None, split=False)
        assert out is not None and meter.live_bytes > 0
        stage.backward(0, torch.randn_like(out), split=False)
        assert meter.live_bytes == 0


def test_split_backward_keeps_the_weight_part_until_w_then_frees_all() -> None:
    """Regression: holding a saved output in the pack hook closed a cycle through its grad_fn
    and leaked every activation the W pass did not touch."""
    stage, meter = runner(last=True)
    x, y = torch.randn(4, 32), torch.randn(4, 32)
    for _ in range(3):
        stage.forward(0, x, y, split=True)
        after_forward = meter.live_bytes
        stage.backward(0, None, split=True)
        assert 0 < meter.live_bytes < after_forward
        stage.weight(0)
        assert meter.live_bytes == 0
    assert meter.peak_bytes == after_forward


def test_weights_are_not_stash() -> None:
    stage, meter = runner()
    stage.forward(0, torch.randn(4, 32), None, split=False)
    # Per layer: its input and its ReLU output, 4 x 32 floats each; weights are excluded.
    assert meter.live_bytes == 3 * 2 * 4 * 32 * 4
