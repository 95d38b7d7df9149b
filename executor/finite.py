"""Finding NaN and Inf where they first appear: in the outputs of one action.

An action's outputs are what it hands on or leaves behind: a forward's activation (the scaled
loss on the last stage), a backward's gradient for the stage input, and, for B and W, the
stage's weight gradients. The check costs one ``isfinite().all()`` per tensor after each action
(a device synchronization per action on CUDA), so it is switchable: on by default in the
launcher and :class:`~executor.trainer.PipelineTrainer`, off in :func:`~executor.run_step`,
which validation times.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from executor.errors import NonFiniteError
from pipesim.schedules import Action, Kind

_PASSES = {
    Kind.F: "forward",
    Kind.B: "backward",
    Kind.I: "input-gradient backward",
    Kind.W: "weight-gradient backward",
}


_NAMES = {"nan": "NaN", "inf": "Inf"}


def non_finite(tensors: Iterable[torch.Tensor]) -> str | None:
    """ "nan" or "inf" for the first tensor holding one (NaN wins within a tensor); None when
    every value is finite. Integer tensors are always finite."""
    for tensor in tensors:
        if not (tensor.is_floating_point() or tensor.is_complex()):
            continue
        if not bool(torch.isfinite(tensor).all()):
            return "nan" if bool(torch.isnan(tensor).any()) else "inf"
    return None


def check_outputs(tensors: Iterable[torch.Tensor], action: Action, device: int, step: int) -> None:
    """Raise a :class:`NonFiniteError` naming ``action`` when one of its outputs is not
    finite."""
    found = non_finite(tensors)
    if found is not None:
        raise NonFiniteError(
            f"device {device}: {_NAMES[found]} first appeared in the output of {action} "
            f"(stage {action.stage} {_PASSES[action.kind]} of micro-batch {action.microbatch}, "
            f"step {step})"
        )
