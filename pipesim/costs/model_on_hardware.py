"""The one composition of a resolved model and hardware spec into pipeline costs.

``pipesim simulate --model ... --hardware ...`` (through
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

from pipesim.common.checks import SpecError
from pipesim.costs.data_parallel import with_data_parallel
from pipesim.costs.pipeline_costs import PipelineCosts
from pipesim.costs.spec_derived import costs_from_model
from pipesim.errors import named
from pipesim.hardware.catalogue import HardwareSpec
from pipesim.hardware.collectives import Collective, collective_time_s
from pipesim.parallel.config import IDENTITY, Parallelism
from pipesim.parallel.groups import TensorGroup
from pipesim.parallel.placement import looped
from pipesim.workload.model import Model
from pipesim.workload.sharding import ShardedLayers


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
    placement: Sequence[int] | None = None,
    parallelism: Parallelism = IDENTITY,
    blocking_p2p: bool = False,
    sharded: ShardedLayers | None = None,
) -> PipelineCosts:
    """``model`` (in ``dtype`` when given) cut into K·v stages (``partition`` layers per stage,
    or the even split) on K = ``devices`` pipeline devices of ``hardware``, at
    ``microbatch_size`` samples per micro-batch, each device one rank of a tensor-parallel
    group of ``parallelism.tensor``; with ``parallelism.data`` replicas, each stage's gradient
    communication, and tied embeddings' all-reduce between the end stages
    (:mod:`pipesim.costs.data_parallel`), over the job's T x K x D ranks, stage s
    on pipeline device ``placement[s]`` (by default the looped placement). ``blocking_p2p``
    makes every send occupy its sender (Megatron's ``--no-overlap-p2p-communication``)."""
    if dtype is not None:
        model = dataclasses.replace(model, dtype=dtype)
    tensor, replicas = parallelism.tensor, parallelism.data
    check_tensor_placement(hardware, tensor)
    job = hardware.network(tensor * devices * replicas)
    group = TensorGroup.first(job, tensor)
    costs = costs_from_model(
        model,
        hardware.cluster(devices, rank_stride=tensor),
        devices * chunks,
        microbatch_size,
        partition,
        optimizer=optimizer,
        parallelism=parallelism,
        tensor_group=group,
        sharded=sharded,
    )
    costs = dataclasses.replace(
        costs,
        cluster=_job_line(hardware, tensor, devices, replicas),
        transfers_use_compute=costs.transfers_use_compute or blocking_p2p,
    )
    where = looped(devices, chunks) if placement is None else tuple(placement)
    if group is not None and not parallelism.sequence_parallel:
        costs = with_gathered_messages(costs, where, group)
    return with_data_parallel(costs, where, job, parallelism)


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


def _job_line(hardware: HardwareSpec, tensor: int, devices: int, replicas: int) -> str:
    """``T=8 x K=4 x D=2 = 64 ranks: <how the hardware joins 64 devices>``."""
    ranks = tensor * devices * replicas
    return f"T={tensor} x K={devices} x D={replicas} = {ranks} ranks: {hardware.describe(ranks)}"


def check_tensor_placement(
    hardware: HardwareSpec, tensor: int, *, across_nodes: bool = True
) -> None:
    """Refuse a tensor-parallel group that a node of ``hardware`` does not hold evenly: T must
    divide the node's devices (T ranks inside one node, on its fast links), or, when
    ``across_nodes`` allows it, be a multiple of them (whole nodes, every collective over the
    inter-node links: Megatron allows it, and it is slow)."""
    per_node = hardware.devices_per_node
    if tensor == 1 or per_node is None or per_node % tensor == 0:
        return
    if tensor % per_node:
        raise SpecError(
            f"{named('tensor_parallel')} {tensor} must divide the {per_node} devices of one "
            f"node of {hardware.name} (or be a multiple of them): a tensor-parallel group must "
            "sit in one node, or fill whole ones"
        )
    if not across_nodes:
        raise SpecError(
            f"{named('tensor_parallel')} {tensor} is larger than one node of {hardware.name} "
            f"({per_node} devices): its collectives would cross nodes on every layer; add "
            f"{named('tensor_across_nodes')} if that is what you want"
        )
