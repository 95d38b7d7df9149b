"""Benchmark (``pytest -m bench``): what the NaN/Inf check costs inside a pipelined step."""

from __future__ import annotations

import json
import statistics
import time
from typing import Any

import pytest
import torch
from torch import nn

import executor.nonfinite
import executor.worker
from executor import run_step, split_model
from executor.models import mlp, transformer
from pipesim.schedules import build


@pytest.mark.bench
@pytest.mark.parametrize("kind", ["mlp", "transformer"])
@pytest.mark.parametrize("name", ["1f1b", "zb-h1"])
def test_finite_check_share_of_a_step(
    kind: str, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The quick validation suite's shapes, K=2, M=8, one thread: the checks' share of the
    step's wall time (median of 4 steps after one warm-up). Target: under 10%."""
    torch.set_num_threads(1)
    spent = [0.0]
    check = executor.nonfinite.check_outputs

    def timed(*args: Any, **kwargs: Any) -> None:
        began = time.perf_counter()
        try:
            check(*args, **kwargs)
        finally:
            spent[0] += time.perf_counter() - began

    monkeypatch.setattr(executor.worker, "check_outputs", timed)
    schedule = build(name, 2, 8)
    shape: tuple[int, ...]
    if kind == "mlp":
        model, shape = mlp(1024, 8), (8 * 64, 1024)
    else:
        model, shape = transformer(256, 4, 4), (8 * 4, 64, 256)
    stages = split_model(model, schedule)
    x, y = torch.randn(shape), torch.randn(shape)
    shares = []
    for round_ in range(5):
        spent[0] = 0.0
        began = time.perf_counter()
        run_step(schedule, stages, x, y, nn.MSELoss(), check_finite=True)
        if round_:
            shares.append(spent[0] / (time.perf_counter() - began))
        model.zero_grad(set_to_none=True)
    share = statistics.median(shares)
    print(json.dumps({"model": kind, "schedule": name, "check_share": round(share, 4)}))
    assert share < 0.10
