"""What costs to use, independent of the pipeline shape: synthetic figures, or a model on a
hardware spec. A request builds :class:`PipelineCosts` for any (K, v, M), which is what a
command line or a sweep over shapes needs. Requests are plain data, so they pickle to worker
processes.

A model request holds a run's configuration (:class:`~pipesim.config.run_config.RunConfig`,
resolved and checked once), splits the batch and chooses the partition its objective asks for
(:mod:`pipesim.partition`) for each shape, and builds the costs with
:func:`~pipesim.costs.model_on_hardware.model_on_hardware`, the function the planner's finalists
use too.

A schedule whose stages hold copies of the model (DualPipe) gets costs for the model cut into
K·v stages, as any other (``chunks`` is v, the model chunks a device holds of each copy), each
copy's stage then costing its model stage's (:func:`on_copies`): each device holds the weights
of every copy it has a stage of. The copies' gradients of each model stage are summed across
the devices that hold them before the optimizer step; a model request costs that all-reduce
and adds it to the optimizer step of each copy's stage, as the data-parallel reduction is
(:func:`copy_sync_s`); synthetic costs have no gradient bytes, and their description says the
all-reduce is not costed."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pipesim.common.checks import SpecError, non_negative, positive_int, slack
from pipesim.common.limits import Limit, check
from pipesim.costs.data_parallel import add_to_optimizer_step, exposed_sync_s
from pipesim.costs.synthetic import synthetic_costs
from pipesim.errors import named
from pipesim.hardware.collectives import Collective, collective_time_s
from pipesim.parallel.config import Parallelism, Recompute, RecomputeMode
from pipesim.parallel.groups import TensorGroup
from pipesim.parallel.ranks import RankLayout
from pipesim.workload.model import Model

if TYPE_CHECKING:  # a model request's own: loaded when one is built (synthetic costs need none)
    from pipesim.config.run_config import RunConfig
    from pipesim.costs.pipeline_costs import PipelineCosts
    from pipesim.hardware.catalogue import HardwareSpec
    from pipesim.schedules.schedule import Schedule


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
        """Equal stages for K = ``devices``, v = ``chunks``; the schedule plays no part but
        for copies of the model, whose every stage gets the same costs (:func:`on_copies`)."""
        costs = synthetic_costs(
            devices,
            chunks,
            self.forward_s,
            self.backward_s,
            self.weight_s,
            self.comm_s,
            self.activation_bytes,
        )
        if schedule is None or schedule.copies == 1:
            return costs
        return on_copies(costs, schedule, None)


@dataclass(frozen=True)
class ModelRequest:
    """A run's configuration (:class:`~pipesim.config.run_config.RunConfig`: the model, the
    hardware, the parallel layout and the software recipe, checked when it was made) and how
    its batch and layers are cut for each pipeline shape.

    ``batch`` is the global batch (None: the model's own); ``microbatch_size`` fixes b instead
    (the batch is then b x M x D, or must equal it). ``partition`` is layer counts per stage,
    or an objective of :mod:`pipesim.partition` (``balanced``, ``memory-aware``, ``even``,
    ``blocks``); ``memory-aware`` needs the schedule at :meth:`build`. ``optimizer=False``
    leaves the optimizer step's time out.
    """

    run: RunConfig
    batch: int | None = None
    partition: tuple[int, ...] | str | None = None
    optimizer: bool = True
    microbatch_size: int | None = None

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
        from pipesim.costs.model_on_hardware import model_on_hardware
        from pipesim.partition.from_model import choose_partition, objective

        run = self.run
        parallelism = run.parallelism
        tensor, replicas = parallelism.tensor, parallelism.data
        cluster = devices * tensor * replicas
        check(
            Limit.CLUSTER_DEVICES,
            cluster,
            f"{named('pipeline_devices')} {devices:,}"
            + (f" x {named('tensor_parallel')} {tensor:,}" if tensor > 1 else "")
            + f" x {named('data_parallel')} {replicas:,}: {cluster:,} devices",
        )
        batch = resolved_batch(run.model, self.batch, self.microbatch_size, microbatches, replicas)
        if schedule is not None:
            check_schedule_pairing(schedule, parallelism)
        microbatch_size = batch / (microbatches * replicas)
        sharded = run.sharded()
        partition = self.partition
        if isinstance(partition, str):
            hardware = run.job_hardware
            partition = choose_partition(
                objective(partition),
                run.trained_model,
                hardware.cluster(devices, rank_stride=parallelism.ranks_per_device),
                microbatch_size,
                chunks,
                schedule,
                steps,
                optimizer=self.optimizer,
                parallelism=parallelism,
                tensor_group=tensor_group_of(hardware, parallelism, devices),
            )
        placement = None
        if schedule is not None:  # with copies, copy 0's: the model's stages in order
            placement = schedule.placement[: schedule.model_stages]
        costs = model_on_hardware(
            run,
            devices,
            chunks,
            microbatch_size,
            partition,
            optimizer=self.optimizer,
            placement=placement,
            sharded=sharded,
        )
        if schedule is None or schedule.copies == 1:
            return costs
        return on_copies(costs, schedule, copy_sync_s(run, costs, schedule))


def on_copies(
    costs: PipelineCosts, schedule: Schedule, sync_s: list[float] | None
) -> PipelineCosts:
    """``costs`` of the model's stages (S_model of them) on every stage of ``schedule``, whose
    stages hold copies of the model: each copy's stage costs its model stage's, and each
    device holds the weights of every copy it has a stage of. ``sync_s`` is the copies'
    gradient all-reduce of each model stage (added to the optimizer step of each copy's
    stage, which waits for it), or None where it is not costed (synthetic costs)."""
    stages = costs.stages
    if sync_s is not None:
        stages = tuple(
            add_to_optimizer_step(stage, extra) if extra else stage
            for stage, extra in zip(stages, sync_s, strict=True)
        )
    copies = schedule.copies
    if sync_s is None:
        note = f"{copies} model copies, their gradient all-reduce not costed"
    else:
        note = f"{copies} model copies, their gradient all-reduce before the optimizer step"
    return dataclasses.replace(
        costs,
        stages=schedule.on_stages(stages),
        description=f"{costs.description}; {note}",
    )


def copy_sync_s(run: RunConfig, costs: PipelineCosts, schedule: Schedule) -> list[float]:
    """Per model stage, what of the all-reduce that sums its copies' gradients (over the
    devices holding them, tensor rank by tensor rank, on the job's network: every stage's
    ``whole_gradient_bytes``) its optimizer step waits for: all of it, or with the recipe's
    overlapped gradient reduce the part its last backward does not hide. With data
    parallelism it runs after each copy's reduction over the replicas (a two-level
    reduction; one all-reduce over all 2D ranks would be cheaper)."""
    parallelism = run.parallelism
    tensor, replicas = parallelism.tensor, parallelism.data
    devices = schedule.devices
    layout = RankLayout(tensor, devices, replicas)
    job = run.job_hardware.network(tensor * devices * replicas)
    out = []
    for model_stage, stage in enumerate(costs.stages):
        holders = [
            schedule.placement[copy * schedule.model_stages + model_stage]
            for copy in range(schedule.copies)
        ]
        group = [layout.rank(0, device) for device in holders]
        seconds = collective_time_s(job, group, Collective.ALL_REDUCE, stage.whole_gradient_bytes)
        out.append(exposed_sync_s(stage, seconds, run.recipe.overlap_grad_reduce))
    return out


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
    alike: :func:`~pipesim.config.run_config.check_tensor_placement`)."""
    layout = parallelism.layout(devices)
    return TensorGroup.of(hardware.network(layout.devices), layout)


def check_schedule_pairing(schedule: Schedule, parallelism: Parallelism) -> None:
    """Refuse recomputation a schedule cannot carry: with re-materialization (``--remat``,
    the stage-level recomputation), and full recomputation with a backward split into I and
    W (W would need the recomputed inputs kept from I: use selective recomputation there).
    Refuse activation offloading with either too: re-materialization throws the stash away
    (nothing to copy; the recomputed activations are on the device), and a weight gradient
    run apart from its input gradient reads inputs that would stay on the device from I to W
    or be reloaded a second time, which the offloading rule does not cost (Megatron-Core
    offloads without a pipeline, where no schedule splits the backward)."""
    offloaded = parallelism.offload_activations
    if offloaded and schedule.rematerialize:
        raise SpecError(
            f"{named('offload_activations')} {offloaded} with {named('remat')}: "
            "re-materialization recomputes the stash that offloading would copy; choose one"
        )
    if offloaded and schedule.uses_split_backward():
        raise SpecError(
            f"{named('offload_activations')} {offloaded} with {schedule.name}, whose backward "
            "is split into I and W: W's inputs would be reloaded a second time or kept from I, "
            "which is not modelled; use a schedule with a full backward"
        )
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
    name: str | Model,
    optimizer_state: str | None,
    master_weights: bool | None,
    dtype: str | None,
    seq_length: int | None = None,
) -> Model:
    """The model named (or the file at, or stated inline as) ``name`` with its optimizer state
    and master weights as asked, in ``dtype`` and trained on sequences of ``seq_length`` tokens
    when given: the one reading of the model, optimizer, master weights, dtype and sequence
    fields that simulating and planning share (how the software runs it is the run's recipe).
    A Hugging Face config is read at that sequence directly (its checks depend on it)."""
    from pipesim.workload import resolve_model
    from pipesim.workload.optimizer import with_optimizer
    from pipesim.workload.transformer import at_sequence_length

    if isinstance(name, Model):  # a run file's inline one
        found = name
    elif seq_length is not None and name.endswith(".json"):
        from pipesim.workload.huggingface import model_from_hf_config

        found = model_from_hf_config(name, seq=seq_length)
    else:
        found = resolve_model(name)
    if seq_length is not None:
        found = at_sequence_length(found, seq_length)
    model = with_optimizer(found, optimizer_state, master_weights)
    if dtype is not None:
        model = dataclasses.replace(model, dtype=dtype)
    return model


CostRequest = SyntheticRequest | ModelRequest
