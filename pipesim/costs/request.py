"""What costs to use, independent of the pipeline shape: synthetic figures, or a model on a
hardware spec. A request builds :class:`PipelineCosts` for any (K, v, M), which is what a
command line or a sweep over shapes needs. Requests are plain data, so they pickle to worker
processes."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pipesim.checks import SpecError
from pipesim.costs.pipeline_costs import PipelineCosts
from pipesim.costs.spec_derived import costs_from_model
from pipesim.costs.synthetic import synthetic_costs

if TYPE_CHECKING:
    from pipesim.hardware.catalogue import HardwareSpec
    from pipesim.workload.model import Model


@dataclass(frozen=True)
class SyntheticRequest:
    """``--costs F,B[,W] [--comm T] [--activation-bytes N]``."""

    forward_s: float
    backward_s: float
    weight_s: float = 0.0
    comm_s: float = 0.0
    activation_bytes: float = 0.0

    def build(self, devices: int, chunks: int, microbatches: int) -> PipelineCosts:
        """Equal stages for K = ``devices``, v = ``chunks``."""
        return synthetic_costs(
            devices,
            chunks,
            self.forward_s,
            self.backward_s,
            self.weight_s,
            self.comm_s,
            self.activation_bytes,
        )


@dataclass(frozen=True)
class ModelRequest:
    """``--model NAME|FILE --hardware NAME|FILE [--batch N] [--partition ...]``."""

    model: str
    hardware: str
    batch: int | None = None
    partition: tuple[int, ...] | None = None
    optimizer: bool = True
    dtype: str | None = None

    def build(self, devices: int, chunks: int, microbatches: int) -> PipelineCosts:
        """The model cut into K·v stages on K devices, the batch split into M micro-batches."""
        from pipesim.hardware import resolve_hardware
        from pipesim.workload import resolve_model

        model = resolve_model(self.model)
        batch = model.default_batch if self.batch is None else self.batch
        if batch < 1 or batch % microbatches:
            raise SpecError(
                f"--batch {batch} must be a positive multiple of the {microbatches} micro-batches"
            )
        return model_on_hardware(
            model,
            resolve_hardware(self.hardware),
            devices,
            chunks,
            batch / microbatches,
            self.partition,
            optimizer=self.optimizer,
            dtype=self.dtype,
        )


def model_on_hardware(
    model: Model,
    hardware: HardwareSpec,
    devices: int,
    chunks: int,
    microbatch_size: float,
    partition: Sequence[int] | None = None,
    *,
    optimizer: bool = True,
    dtype: str | None = None,
) -> PipelineCosts:
    """The one composition of a model and a hardware spec into pipeline costs: ``model`` (in
    ``dtype`` when given) cut into K·v stages (``partition`` layers per stage, or the even
    split) on K devices of ``hardware``, at ``microbatch_size`` samples per micro-batch."""
    if dtype is not None:
        model = dataclasses.replace(model, dtype=dtype)
    return costs_from_model(
        model,
        hardware.cluster(devices),
        devices * chunks,
        microbatch_size,
        partition,
        optimizer=optimizer,
    )


CostRequest = SyntheticRequest | ModelRequest
