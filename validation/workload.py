"""The workload of a validation case: its model, its mini-batch and its loss.

Every process of a case builds them the same way (seeded), so the calibration, the measured
runs, the unpipelined baseline and the cross-check against ``torch.distributed.pipelining``
all train the same model on the same data. This module holds them alone so that the process
orchestration (:mod:`validation.session`) and the cross-check (:mod:`validation.crosscheck`)
both import it and neither imports the other.
"""

from __future__ import annotations

import torch
from torch import nn

from executor.models import mlp, transformer
from pipesim.errors import PipesimError
from validation.suites import ModelKind, ModelSpec

LOSS = nn.MSELoss()


def make_model(spec: ModelSpec, device: torch.device) -> nn.Sequential:
    """The case's model, identical in every process."""
    if spec.kind is ModelKind.MLP:
        model = mlp(spec.width, spec.layers, seed=0)
    elif spec.kind is ModelKind.TRANSFORMER:
        model = transformer(spec.width, spec.heads, spec.layers, seed=0)
    else:  # pragma: no cover - the Enum has no other member
        raise PipesimError(f"model kind must be mlp or transformer, got {spec.kind!r}")
    return model.to(device)


def make_batch(
    spec: ModelSpec, microbatches: int, device: torch.device, seed: int = 1
) -> tuple[torch.Tensor, torch.Tensor]:
    """A mini-batch of ``microbatches`` micro-batches and its targets (float32)."""
    generator = torch.Generator().manual_seed(seed)
    rows = spec.microbatch_size * microbatches
    shape = (
        (rows, spec.sequence, spec.width)
        if spec.kind is ModelKind.TRANSFORMER
        else (rows, spec.width)
    )
    return (
        torch.randn(shape, generator=generator).to(device),
        torch.randn(shape, generator=generator).to(device),
    )
