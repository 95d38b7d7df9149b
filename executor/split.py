"""Cutting a model into pipeline stages, and a mini-batch into micro-batches."""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
from torch import nn

from executor.errors import SplitError
from pipesim.common.checks import SpecError
from pipesim.schedules import Schedule
from pipesim.workload.stage_layers import layer_ranges


def split_model(
    model: nn.Sequential | Sequence[nn.Module],
    schedule: Schedule,
    partition: Sequence[int] | None = None,
) -> list[nn.Module]:
    """Cut ``model`` into the schedule's S = K·v contiguous stages.

    By default the layers are spread evenly by count (the first stages take one more when S
    does not divide them); ``partition`` gives the layer count of each stage instead. The
    stages share the layer objects with ``model`` (no copy), so gradients land on the model's
    own parameters.

    A schedule whose stages hold C copies of the model (DualPipe) cuts the model into its
    S_model = S / C stages (``partition`` counts them); copy 0's stages are those, sharing
    the model's layers, and every other copy's are deep copies of them, initialised equal.
    The list holds one module per IR stage, copy by copy.
    """
    layers = list(model)
    stages = schedule.model_stages
    if partition is None:
        if len(layers) < stages:
            raise SplitError(
                f"model has {len(layers)} layers, fewer than the schedule's {stages} stages "
                f"(K={schedule.devices} x v={schedule.chunks})"
            )
        base, extra = divmod(len(layers), stages)
        counts = [base + (1 if stage < extra else 0) for stage in range(stages)]
    else:
        counts = list(partition)
    try:
        ranges = layer_ranges(counts, stages, len(layers))
    except SpecError as error:
        raise SplitError(str(error)) from None
    first = [nn.Sequential(*layers[r.start : r.stop]) for r in ranges]
    copies = [copy.deepcopy(first) for _ in range(1, schedule.copies)]
    return [*first, *(module for modules in copies for module in modules)]


def split_microbatches(tensor: torch.Tensor, microbatches: int, what: str) -> list[torch.Tensor]:
    """``tensor`` cut along dimension 0 into ``microbatches`` equal parts (views, no copy)."""
    size = tensor.shape[0] if tensor.dim() > 0 else 0
    if size % microbatches or size == 0:
        raise SplitError(
            f"{what}: a batch of {size} does not split into {microbatches} equal micro-batches"
        )
    return list(torch.chunk(tensor, microbatches, dim=0))
