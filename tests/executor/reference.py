"""Unpipelined references the executor is checked against, written independently of it."""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence

import torch
from torch import nn

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def reference_step(
    model: nn.Module,
    inputs: torch.Tensor,
    targets: torch.Tensor,
    loss_fn: LossFn,
    microbatches: int,
) -> tuple[float, dict[str, torch.Tensor]]:
    """Loss and gradients of (1/M)·Σ_m loss_fn(model(x_m), y_m) on a copy of ``model``."""
    clone = copy.deepcopy(model)
    clone.zero_grad(set_to_none=True)
    total = torch.zeros((), dtype=torch.float64)
    for x, y in zip(inputs.chunk(microbatches), targets.chunk(microbatches), strict=True):
        loss = loss_fn(clone(x), y) / microbatches
        loss.backward()  # type: ignore[no-untyped-call]
        total = total + loss.detach().double()
    grads = {n: p.grad.detach().clone() for n, p in clone.named_parameters() if p.grad is not None}
    return float(total), grads


def assert_close(
    actual: torch.Tensor | None, expected: torch.Tensor, rtol: float = 1e-10, what: str = ""
) -> None:
    """Relative error (to the larger norm) within ``rtol``; ``what`` names the tensor in the
    failure message. A missing tensor (a gradient that was never computed) fails."""
    assert actual is not None, f"{what}: no tensor (a gradient that was never computed?)"
    scale = max(float(expected.abs().max()), float(actual.abs().max()), 1e-30)
    error = float((actual - expected).abs().max()) / scale
    assert error <= rtol, f"{what}: relative error {error:.3g} > {rtol:g}".lstrip(": ")


def sgd_reference(
    stages: Sequence[nn.Module],
    batches: Sequence[tuple[torch.Tensor, torch.Tensor]],
    loss_fn: LossFn,
    microbatches: int,
    lr: float,
    staleness: Sequence[int],
) -> list[list[torch.Tensor]]:
    """Plain SGD where stage s computes with its weights from ``staleness[s]`` steps ago:
    W_s(t+1) = W_s(t) - lr·∂/∂W_s f(W_1(t-k_1), ..., W_S(t-k_S)), with W(t) = W(0) for t < 0.
    Staleness 0 everywhere is ordinary training; 1 everywhere is PipeDream-2BW's rule; K-1-d on
    device d is PipeDream's weight stashing. Returns each stage's parameters after each step."""
    live = [[p.detach().clone() for p in stage.parameters()] for stage in stages]
    history = [[[t.clone() for t in params]] for params in live]
    after = []
    for inputs, targets in batches:
        used = [history[s][max(0, len(history[s]) - 1 - staleness[s])] for s in range(len(stages))]
        copies = [copy.deepcopy(stage) for stage in stages]
        for module, version in zip(copies, used, strict=True):
            for p, value in zip(module.parameters(), version, strict=True):
                p.data.copy_(value)
                p.grad = None
        for x, y in zip(inputs.chunk(microbatches), targets.chunk(microbatches), strict=True):
            h = x
            for module in copies:
                h = module(h)
            (loss_fn(h, y) / microbatches).backward()  # type: ignore[no-untyped-call]
        for s, module in enumerate(copies):
            for value, p in zip(live[s], module.parameters(), strict=True):
                assert p.grad is not None
                value -= lr * p.grad
            history[s].append([t.clone() for t in live[s]])
        after.append([t.clone() for params in live for t in params])
    return after
