"""The one composition of a run's configuration into pipeline costs.

A :class:`~pipesim.config.run_config.RunConfig` (model, hardware, parallelism, recipe) and a
pipeline shape are all it takes: ``pipesim simulate --model ... --hardware ...`` (through
:class:`~pipesim.request.cost_request.ModelRequest`), the planner's finalists, the sweeps and
the reproductions all build their costs here, so a plan and the simulation of the same settings
see the very same numbers.

The job has T x K x D ranks (:mod:`pipesim.parallel.ranks`): the pipeline's K devices sit T
ranks apart on the hardware's network, each tensor-parallel group's collectives run on T
consecutive ranks, and each stage's data-parallel group spans the D replicas.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from pipesim.config.run_config import RunConfig
from pipesim.costs.data_parallel import with_data_parallel
from pipesim.costs.pipeline_costs import PipelineCosts, StageCosts
from pipesim.costs.spec_derived import costs_from_layer_costs, costs_from_model
from pipesim.hardware.catalogue import HardwareSpec
from pipesim.hardware.collectives import Collective, collective_time_s
from pipesim.hardware.network import Network
from pipesim.parallel.config import Parallelism
from pipesim.parallel.groups import TensorGroup
from pipesim.parallel.placement import looped
from pipesim.workload.sharding import ShardedLayers


def model_on_hardware(
    run: RunConfig,
    devices: int,
    chunks: int,
    microbatch_size: float,
    partition: Sequence[int] | None = None,
    *,
    optimizer: bool = True,
    placement: Sequence[int] | None = None,
    sharded: ShardedLayers | None = None,
) -> PipelineCosts:
    """``run``'s model, as its recipe trains it, cut into K·v stages (``partition`` layers per
    stage, or the even split) on K = ``devices`` pipeline devices of its hardware, at
    ``microbatch_size`` samples per micro-batch, each device one rank of a tensor-parallel
    group of ``run.parallelism.tensor``; with ``run.parallelism.data`` replicas, each stage's
    gradient communication, and tied embeddings' all-reduce between the end stages
    (:mod:`pipesim.costs.data_parallel`), over the job's T x K x D ranks, stage s on pipeline
    device ``placement[s]`` (by default the looped placement). The recipe's blocking P2P makes
    every send occupy its sender, its overlapped gradient reduce hides behind the last
    backward, and its message overhead prices every message. ``sharded``: the layers of one
    tensor-parallel rank, when the caller has them already (``run.sharded()``)."""
    job, group = _job(run, devices)
    costs = costs_from_model(
        run.trained_model,
        run.job_hardware.cluster(devices, rank_stride=run.parallelism.ranks_per_device),
        devices * chunks,
        microbatch_size,
        partition,
        optimizer=optimizer,
        parallelism=run.parallelism,
        tensor_group=group,
        sharded=run.sharded() if sharded is None else sharded,
    )
    return _on_the_job(run, costs, devices, chunks, placement, job, group)


def layer_costs_on_hardware(
    run: RunConfig,
    devices: int,
    chunks: int,
    microbatch_size: float,
    costed: Sequence[StageCosts],
    partition: Sequence[int] | None = None,
    *,
    placement: Sequence[int] | None = None,
) -> PipelineCosts:
    """:func:`model_on_hardware` from the costs the caller has of each layer one rank holds
    (``costed``: :func:`pipesim.partition.from_model.layer_costs` at ``microbatch_size``, a
    planner's cache), merged into the stages instead of costed again: the same numbers, for a
    planner's finalists."""
    job, group = _job(run, devices)
    costs = costs_from_layer_costs(
        run.trained_model,
        run.job_hardware.cluster(devices, rank_stride=run.parallelism.ranks_per_device),
        devices * chunks,
        microbatch_size,
        costed,
        partition,
        parallelism=run.parallelism,
        sharded=run.sharded(),
    )
    return _on_the_job(run, costs, devices, chunks, placement, job, group)


def _job(run: RunConfig, devices: int) -> tuple[Network, TensorGroup | None]:
    """The job's network of T x CP x K x D ranks, and where the first pipeline device's
    tensor-, context- and expert-parallel collectives run on it (every group is alike)."""
    layout = run.parallelism.layout(devices)
    job = run.job_hardware.network(layout.devices)
    return job, TensorGroup.of(job, layout, run.recipe.tp_comm_overlap)


def _on_the_job(
    run: RunConfig,
    costs: PipelineCosts,
    devices: int,
    chunks: int,
    placement: Sequence[int] | None,
    job: Network,
    group: TensorGroup | None,
) -> PipelineCosts:
    """The stages' costs with what the job and the recipe add: the job's line, blocking
    messages, the gathered messages of tensor parallelism, the data-parallel reductions."""
    parallelism, recipe = run.parallelism, run.recipe
    costs = dataclasses.replace(
        costs,
        cluster=_job_line(run.job_hardware, parallelism, devices),
        transfers_use_compute=costs.transfers_use_compute or recipe.blocking_p2p,
    )
    where = looped(devices, chunks) if placement is None else tuple(placement)
    if group is not None and not parallelism.sequence_parallel:
        if recipe.scatter_gather_p2p:
            costs = with_gathered_messages(costs, where, group)
        else:
            costs = with_whole_messages(costs, len(group.ranks))
    costs = with_data_parallel(costs, where, job, parallelism, recipe.overlap_grad_reduce)
    layout = {
        "tensor_parallel": parallelism.tensor,
        "sequence_parallel": parallelism.sequence_parallel,
        "data_parallel": parallelism.data,
        "microbatch_size": None  # the costs count the samples of every replica's micro-batch
        if costs.samples_per_microbatch is None
        else costs.samples_per_microbatch / parallelism.data,
        "recompute": parallelism.recompute.label,
        "zero": parallelism.zero,
        "reshard_after_forward": parallelism.reshard_after_forward.value,
        "context_parallel": parallelism.context,
        "cp_comm_type": parallelism.cp_comm_type.value,
        "expert_parallel": parallelism.expert,
    }
    if parallelism.folded:  # stated where set, as the results before it read
        layout["expert_tensor_parallel"] = parallelism.expert_tensor_size
    if parallelism.offload_optimizer:  # stated where on, as the results before it read
        layout["offload_optimizer"] = True
    if parallelism.offload_activations:
        layout["offload_activations"] = parallelism.offload_activations
    return dataclasses.replace(
        costs,
        description=f"{costs.description}, recipe {recipe.name}",
        recipe=recipe.to_json(),
        layout=layout,
    )


def with_gathered_messages(
    costs: PipelineCosts, placement: Sequence[int], group: TensorGroup
) -> PipelineCosts:
    """Megatron-LM's scatter/gather of pipeline messages under tensor parallelism without
    sequence parallelism: each of the T ranks sends 1/T of a stage's output (the stages'
    ``input_bytes`` and ``output_bytes`` are that share) and the receiving ranks all-gather
    the whole tensor over their group before they use it, on the compute stream
    (``gather_split_1d_tensor``): stage s > 0 before its forward, stage s < S - 1 the
    gradient of its output before its input-gradient pass, where the neighbour sits on
    another device. With sequence parallelism the message is the sequence's 1/T already and
    nothing is gathered."""
    tensor = len(group.ranks)
    stages = list(costs.stages)
    last = len(stages) - 1
    for index, stage in enumerate(stages):
        extra_forward = extra_backward = 0.0
        if index > 0 and placement[index - 1] != placement[index]:
            size = stage.input_bytes * tensor
            extra_forward = collective_time_s(
                group.network, group.ranks, Collective.ALL_GATHER, size
            )
        if index < last and placement[index + 1] != placement[index]:
            size = stage.output_bytes * tensor
            extra_backward = collective_time_s(
                group.network, group.ranks, Collective.ALL_GATHER, size
            )
        if extra_forward or extra_backward:
            full = stage.full_backward_s
            stages[index] = dataclasses.replace(
                stage,
                forward_s=stage.forward_s + extra_forward,
                input_grad_s=stage.input_grad_s + extra_backward,
                full_backward_s=None if full is None else full + extra_backward,
            )
    return dataclasses.replace(costs, stages=tuple(stages))


def with_whole_messages(costs: PipelineCosts, tensor: int) -> PipelineCosts:
    """Pipeline messages under tensor parallelism without sequence parallelism and without
    Megatron-LM's scatter/gather (DeepSpeed's pipeline engine, Megatron-Core,
    torch.distributed.pipelining): every one of the T ranks sends the whole tensor to its peer
    on the next stage, so each message is T times the 1/T share the stages' ``output_bytes``
    state, and nothing is gathered."""
    return dataclasses.replace(
        costs,
        stages=tuple(
            dataclasses.replace(stage, output_bytes=stage.output_bytes * tensor)
            for stage in costs.stages
        ),
    )


def _job_line(hardware: HardwareSpec, parallelism: Parallelism, devices: int) -> str:
    """``T=8 x K=4 x D=2 = 64 ranks: <how the hardware joins 64 devices>`` (with ``CP=2`` after
    T under context parallelism)."""
    ranks = parallelism.layout(devices).devices
    cp = f" x CP={parallelism.context}" if parallelism.context > 1 else ""
    return (
        f"T={parallelism.tensor}{cp} x K={devices} x D={parallelism.data} = {ranks} ranks: "
        f"{hardware.describe(ranks)}"
    )
