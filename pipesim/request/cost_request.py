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

from pipesim.common.checks import SpecError, non_negative, positive_int, slack
from pipesim.common.limits import Limit, check
from pipesim.costs.model_on_hardware import check_tensor_placement, model_on_hardware
from pipesim.costs.pipeline_costs import PipelineCosts
from pipesim.costs.synthetic import synthetic_costs
from pipesim.errors import named
from pipesim.hardware import resolve_hardware
from pipesim.hardware.catalogue import HardwareSpec
from pipesim.parallel.config import IDENTITY, Parallelism, Recompute, RecomputeMode
from pipesim.parallel.groups import TensorGroup
from pipesim.partition.from_model import choose_partition, objective
from pipesim.workload import resolve_model
from pipesim.workload.optimizer import with_optimizer
from pipesim.workload.sharding import sharded_layers, with_attention

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
    [--optimizer NAME|BYTES] [--master-weights] [--data-parallel N] [--tensor-parallel T]
    [--sequence-parallel] [--recompute MODE] [--zero 0|1] [--microbatch-size b] ...``.

    ``partition`` is layer counts per stage, or an objective of :mod:`pipesim.partition`
    (``balanced``, ``memory-aware``, ``even``, ``blocks``); ``memory-aware`` needs the schedule
    at :meth:`build`. ``parallelism`` holds the tensor, sequence, recompute, ZeRO and overlap
    settings; ``data_parallel`` replicas add their gradient communication
    (:mod:`pipesim.costs.data_parallel`). ``microbatch_size`` fixes b (the batch is then
    b x M x D, or must equal it). ``attention`` (eager or flash) overrides the model's.
    ``blocking_p2p`` makes sends occupy their sender. ``memory_reserve_bytes`` and
    ``fragmentation`` override the hardware's allowances. ``tensor_across_nodes`` lets T
    exceed a node.
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
    parallelism: Parallelism = IDENTITY
    microbatch_size: int | None = None
    attention: str | None = None
    blocking_p2p: bool = False
    memory_reserve_bytes: float | None = None
    fragmentation: float | None = None
    tensor_across_nodes: bool = False

    def resolved_parallelism(self) -> Parallelism:
        """The parallel configuration with the data-parallel size of ``--data-parallel``."""
        positive_int(named("data_parallel"), self.data_parallel)
        return dataclasses.replace(self.parallelism, data=self.data_parallel)

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
        memory-aware partition and the checks that pair a schedule with recomputation."""
        parallelism = self.resolved_parallelism()
        tensor, replicas = parallelism.tensor, parallelism.data
        cluster = devices * tensor * replicas
        check(
            Limit.CLUSTER_DEVICES,
            cluster,
            f"{named('pipeline_devices')} {devices:,}"
            + (f" x {named('tensor_parallel')} {tensor:,}" if tensor > 1 else "")
            + f" x {named('data_parallel')} {replicas:,}: {cluster:,} devices",
        )
        model = resolved_model(
            self.model, self.optimizer_state, self.master_weights, self.dtype, self.attention
        )
        batch = resolved_batch(model, self.batch, self.microbatch_size, microbatches, replicas)
        hardware = with_allowances(
            resolve_hardware(self.hardware), self.memory_reserve_bytes, self.fragmentation
        )
        check_tensor_placement(hardware, tensor, across_nodes=self.tensor_across_nodes)
        if schedule is not None:
            check_schedule_pairing(schedule, parallelism)
        microbatch_size = batch / (microbatches * replicas)
        sharded = sharded_layers(model, parallelism)
        partition = self.partition
        if isinstance(partition, str):
            goal = objective(partition)
            partition = choose_partition(
                goal,
                model,
                hardware.cluster(devices, rank_stride=tensor),
                microbatch_size,
                chunks,
                schedule,
                steps,
                optimizer=self.optimizer,
                parallelism=parallelism,
                tensor_group=tensor_group_of(hardware, parallelism, devices),
            )
        return model_on_hardware(
            model,
            hardware,
            devices,
            chunks,
            microbatch_size,
            partition,
            optimizer=self.optimizer,
            placement=None if schedule is None else schedule.placement,
            parallelism=parallelism,
            blocking_p2p=self.blocking_p2p,
            sharded=sharded,
        )


def resolved_batch(
    model: Model,
    batch: int | None,
    microbatch_size: int | None,
    microbatches: int,
    replicas: int,
) -> int:
    """The global batch: ``--batch``, or b x M x D from ``--microbatch-size``, or the model's
    own; the two given together must agree, and the batch must split into the M micro-batches
    of every replica."""
    replicated = f" x {replicas} data-parallel replicas" if replicas > 1 else ""
    if microbatch_size is not None:
        positive_int(named("microbatch_size"), microbatch_size)
        implied = microbatch_size * microbatches * replicas
        if batch is not None and batch != implied:
            raise SpecError(
                f"{named('batch')} {batch} and {named('microbatch_size')} {microbatch_size} "
                "disagree: "
                f"{microbatch_size} x {microbatches} micro-batches{replicated} is {implied}"
            )
        return implied
    chosen = model.default_batch if batch is None else batch
    if chosen < 1 or chosen % (microbatches * replicas):
        raise SpecError(
            f"{named('batch')} {chosen} must be a positive multiple of the {microbatches} "
            f"micro-batches{replicated}"
        )
    return chosen


def with_allowances(
    hardware: HardwareSpec, reserve_bytes: float | None, fragmentation: float | None
) -> HardwareSpec:
    """``hardware`` with the runtime reserve and fragmentation allowance asked for (None keeps
    the spec's own)."""
    if reserve_bytes is None and fragmentation is None:
        return hardware
    if reserve_bytes is not None:
        non_negative(named("memory_reserve"), reserve_bytes)
    if fragmentation is not None:
        slack(named("fragmentation"), fragmentation)
    accelerator = hardware.accelerator
    return dataclasses.replace(
        hardware,
        accelerator=dataclasses.replace(
            accelerator,
            runtime_reserve_bytes=accelerator.runtime_reserve_bytes
            if reserve_bytes is None
            else reserve_bytes,
            fragmentation_fraction=accelerator.fragmentation_fraction
            if fragmentation is None
            else fragmentation,
        ),
    )


def tensor_group_of(
    hardware: HardwareSpec, parallelism: Parallelism, devices: int
) -> TensorGroup | None:
    """Where the first pipeline device's tensor-parallel collectives run (every group is
    alike: :func:`~pipesim.costs.model_on_hardware.check_tensor_placement`)."""
    tensor = parallelism.tensor
    return TensorGroup.first(hardware.network(tensor * devices * parallelism.data), tensor)


def check_schedule_pairing(schedule: Schedule, parallelism: Parallelism) -> None:
    """Refuse recomputation a schedule cannot carry: with re-materialization (``--remat``,
    the stage-level recomputation), and full recomputation with a backward split into I and
    W (W would need the recomputed inputs kept from I: use selective recomputation there)."""
    mode = parallelism.recompute.mode
    if mode is RecomputeMode.NONE:
        return
    if schedule.rematerialize:
        raise SpecError(
            f"{named('recompute')} {parallelism.recompute.label} and {named('remat')} both "
            f"recompute: {named('remat')} re-runs each stage's forward, {named('recompute')} "
            "each layer's; choose one"
        )
    if schedule.uses_split_backward():
        check_split_backward_recompute(schedule.name, parallelism.recompute)


def check_split_backward_recompute(schedule_name: str, recompute: Recompute) -> None:
    """Refuse full recomputation for a schedule whose backward is split into I and W (a
    zero-bubble schedule, or a synthesised one): W needs the layers' inputs that full
    recomputation frees."""
    if recompute.mode is RecomputeMode.FULL:
        raise SpecError(
            f"{named('recompute')} {recompute.label} with {schedule_name}, whose backward "
            "is split into I and W: W needs the recomputed layers' inputs, which full "
            f"recomputation frees; use {named('recompute')} selective or a schedule with a full "
            "backward"
        )


def resolved_model(
    name: str,
    optimizer_state: str | None,
    master_weights: bool | None,
    dtype: str | None,
    attention: str | None = None,
) -> Model:
    """The model named (or the TOML file at) ``name`` with its optimizer state and master
    weights as asked, in ``dtype`` when given, with the attention implementation asked for:
    the one reading of ``--model``, ``--optimizer``, ``--master-weights``, ``--dtype`` and
    ``--attention`` that simulating and planning share."""
    model = with_optimizer(resolve_model(name), optimizer_state, master_weights)
    if dtype is not None:
        model = dataclasses.replace(model, dtype=dtype)
    if attention is not None:
        model = with_attention(model, attention)
    return model


CostRequest = SyntheticRequest | ModelRequest
