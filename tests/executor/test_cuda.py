"""CUDA paths: run when a GPU is present, skip cleanly otherwise."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from executor import run_step, split_model
from executor.models import transformer
from pipesim.schedules import build, schedule_names

from .reference import assert_close, reference_step

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


@pytest.mark.parametrize("name", schedule_names())
def test_every_schedule_on_cuda_matches_unpipelined(name: str) -> None:
    schedule = build(name, 2, 4)
    model = transformer(16, 2, schedule.stages, dtype=torch.float64).cuda()
    reference = copy.deepcopy(model)
    gpus = torch.cuda.device_count()
    stages = split_model(model, schedule)
    for s, stage in enumerate(stages):
        stage.to(f"cuda:{schedule.device_of(s) % gpus}")
    x = torch.randn(8, 5, 16, dtype=torch.float64, device="cuda")
    y = torch.randn(8, 5, 16, dtype=torch.float64, device="cuda")
    result = run_step(schedule, stages, x, y, nn.MSELoss())
    loss, expected = reference_step(reference, x, y, nn.MSELoss(), 4)
    assert abs(result.loss - loss) <= 1e-10 * abs(loss)
    for n, p in model.named_parameters():
        assert_close(p.grad, expected[n].to(p.device), what=n)
    assert all(peak is not None and peak > 0 for peak in result.peak_allocated_bytes)
    assert all(r.end_s >= r.start_s >= 0 for r in result.timeline.compute)
