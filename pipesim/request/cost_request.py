"""What costs to use, independent of the pipeline shape: synthetic figures, or a model on a
hardware spec. A request builds :class:`PipelineCosts` for any (K, v, M), which is what a
command line or a sweep over shapes needs. Requests are plain data, so they pickle to worker
processes.

A model request resolves its names, chooses the partition its objective asks for
(:mod:`pipesim.partition`) and builds the costs with
:func:`~pipesim.costs.model_on_hardware.model_on_hardware`, the function the planner's finalists
use too."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pipesim.common.checks import SpecError, positive_int
from pipesim.common.limits import Limit, check
from pipesim.costs.model_on_hardware import model_on_hardware
from pipesim.costs.pipeline_costs import PipelineCosts
from pipesim.costs.synthetic import synthetic_costs
from pipesim.hardware import resolve_hardware
from pipesim.partition.from_model import choose_partition, objective
from pipesim.workload import resolve_model
from pipesim.workload.optimizer import with_optimizer

if TYPE_CHECKING:
    from pipesim.schedules.schedule import Schedule
    from pipesim.workload.model import Model


@dataclass(frozen=True)
class SyntheticRequest:
    """``--costs F,B[,W] [--comm T] [--activation-bytes N]``."""

    forward_s: float
    backward_s: float
    weight_s: float = 0.0
    comm_s: float = 0.0
    activation_bytes: float = 0.0

    def build(
        self,
        devices: int,
        chunks: int,
        microbatches: int,
        schedule: Schedule | None = None,
        steps: int = 1,
    ) -> PipelineCosts:
        """Equal stages for K = ``devices``, v = ``chunks`` (the schedule plays no part)."""
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
    """``--model NAME|FILE --hardware NAME|FILE [--batch N] [--partition ...]
    [--optimizer NAME|BYTES] [--master-weights] [--data-parallel N]``.

    ``partition`` is layer counts per stage, or an objective of :mod:`pipesim.partition`
    (``balanced``, ``memory-aware``, ``even``); ``memory-aware`` needs the schedule at
    :meth:`build`. ``data_parallel`` replicas add their gradient all-reduce
    (:mod:`pipesim.costs.data_parallel`).
    """

    model: str
    hardware: str
    batch: int | None = None
    partition: tuple[int, ...] | str | None = None
    optimizer: bool = True
    dtype: str | None = None
    optimizer_state: str | None = None
    master_weights: bool | None = None
    data_parallel: int = 1

    def build(
        self,
        devices: int,
        chunks: int,
        microbatches: int,
        schedule: Schedule | None = None,
        steps: int = 1,
    ) -> PipelineCosts:
        """The model cut into K·v stages on K devices, the batch split into M micro-batches
        (per replica under data parallelism); ``schedule`` and ``steps`` serve the
        memory-aware partition."""
        positive_int("--data-parallel", self.data_parallel)
        cluster = devices * self.data_parallel
        check(
            Limit.CLUSTER_DEVICES,
            cluster,
            f"-K {devices:,} x --data-parallel {self.data_parallel:,}: {cluster:,} devices",
        )
        model = resolved_model(self.model, self.optimizer_state, self.master_weights, self.dtype)
        batch = model.default_batch if self.batch is None else self.batch
        replicas = self.data_parallel
        if batch < 1 or batch % (microbatches * replicas):
            replicated = f" x {replicas} data-parallel replicas" if replicas > 1 else ""
            raise SpecError(
                f"--batch {batch} must be a positive multiple of the {microbatches} "
                f"micro-batches{replicated}"
            )
        hardware = resolve_hardware(self.hardware)
        microbatch_size = batch / (microbatches * replicas)
        partition = self.partition
        if isinstance(partition, str):
            partition = choose_partition(
                objective(partition),
                model,
                hardware.cluster(devices),
                microbatch_size,
                chunks,
                schedule,
                steps,
                optimizer=self.optimizer,
            )
        return model_on_hardware(
            model,
            hardware,
            devices,
            chunks,
            microbatch_size,
            partition,
            optimizer=self.optimizer,
            data_parallel=replicas,
            placement=None if schedule is None else schedule.placement,
        )


def resolved_model(
    name: str, optimizer_state: str | None, master_weights: bool | None, dtype: str | None
) -> Model:
    """The model named (or the TOML file at) ``name`` with its optimizer state and master
    weights as asked, in ``dtype`` when given: the one reading of ``--model``,
    ``--optimizer``, ``--master-weights`` and ``--dtype`` that simulating and planning share."""
    model = with_optimizer(resolve_model(name), optimizer_state, master_weights)
    if dtype is not None:
        model = dataclasses.replace(model, dtype=dtype)
    return model


CostRequest = SyntheticRequest | ModelRequest
