"""Optimizer state per parameter: the bytes that ``--optimizer`` and master weights add.

A model carries ``optimizer_bytes_per_parameter``, the optimizer's own state (fp32 buffers),
``master_weight_bytes_per_parameter``, the fp32 master copy of the weights under mixed
precision (both divided by the data-parallel size under ZeRO-1), and
``optimizer_temporary_bytes_per_parameter``, what its step allocates while it runs:

==========  ==================  ==========================================================
optimizer   state (fp32 bytes)  what it keeps
==========  ==================  ==========================================================
sgd         0                   nothing
momentum    4                   the momentum buffer
rmsprop     4                   the running mean square (GPipe: 4 + 4 + 4 = 12 in all)
adam        8                   first and second moments (with fp16 weights, fp16 grads and
                                fp32 master weights: 2 + 2 + 4 + 8 = 16, ZeRO's count)
==========  ==================  ==========================================================

Master weights (4 bytes) are on by default when the weights are narrower than fp32 (mixed
precision), off otherwise; a number instead of a name gives the optimizer bytes per parameter
directly (master weights included, none counted apart).
"""

from __future__ import annotations

import dataclasses
import math
from enum import Enum

from pipesim.common.checks import SpecError
from pipesim.errors import named
from pipesim.workload.model import Model

MASTER_WEIGHT_BYTES = 4.0


class Optimizer(Enum):
    """The optimizers users name, by their fp32 state bytes per parameter."""

    SGD = "sgd"
    MOMENTUM = "momentum"
    RMSPROP = "rmsprop"
    ADAM = "adam"

    @property
    def state_bytes_per_parameter(self) -> float:
        """Bytes of optimizer state per parameter (fp32 buffers)."""
        return {"sgd": 0.0, "momentum": 4.0, "rmsprop": 4.0, "adam": 8.0}[self.value]

    @property
    def temporary_bytes_per_parameter(self) -> float:
        """What PyTorch's multi-tensor (foreach) implementation allocates while it steps, per
        parameter: Adam and RMSProp the square root of their second moment (fp32); SGD and
        momentum update in place."""
        return {"sgd": 0.0, "momentum": 0.0, "rmsprop": 4.0, "adam": 4.0}[self.value]


def with_optimizer(
    model: Model, optimizer: str | None, master_weights: bool | None = None
) -> Model:
    """``model`` with the optimizer state, master weights and step temporaries that
    ``optimizer`` (a name or a number of bytes per parameter) asks for; ``master_weights``
    None means "when the weights are narrower than fp32" for a named optimizer, and keeps the
    model's own otherwise. None keeps the model's optimizer (master weights alone add or remove
    the 4-byte fp32 copy)."""
    if optimizer is None:
        if master_weights is None:
            return model
        return dataclasses.replace(
            model, master_weight_bytes_per_parameter=MASTER_WEIGHT_BYTES if master_weights else 0.0
        )
    text = optimizer.strip().lower()
    try:
        number = float(text)
    except ValueError:
        number = None
    if number is not None:
        if not math.isfinite(number) or number < 0:
            raise SpecError(
                f"{named('optimizer')} bytes per parameter must be >= 0, got {optimizer!r}"
            )
        if master_weights:
            raise SpecError(
                f"{named('optimizer')} {optimizer}: a number of bytes already includes master "
                f"weights; leave {named('master_weights')} out"
            )
        return dataclasses.replace(
            model, optimizer_bytes_per_parameter=number, master_weight_bytes_per_parameter=0.0
        )
    try:
        kind = Optimizer(text)
    except ValueError:
        names = ", ".join(o.value for o in Optimizer)
        raise SpecError(
            f"{named('optimizer')} must be one of {names} or bytes per parameter, got {optimizer!r}"
        ) from None
    if master_weights is None:
        master_weights = model.weight_bytes_per_parameter < MASTER_WEIGHT_BYTES
    return dataclasses.replace(
        model,
        optimizer_bytes_per_parameter=kind.state_bytes_per_parameter,
        master_weight_bytes_per_parameter=MASTER_WEIGHT_BYTES if master_weights else 0.0,
        optimizer_temporary_bytes_per_parameter=kind.temporary_bytes_per_parameter,
    )
