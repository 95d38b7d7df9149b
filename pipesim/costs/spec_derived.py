"""Spec-derived costs: a model's layers on a hardware spec, at a micro-batch size, under a
hybrid-parallel configuration.

Each layer becomes a one-layer stage (:func:`layer_costs`); a stage is the merge of its layers
(:func:`~pipesim.costs.pipeline_costs.merge_layers`), so a partition chosen on per-layer costs
and the stages built here see the same numbers.

Time of a pass: kernel by kernel (:mod:`pipesim.costs.kernel_time`) when the layer is described
kernel by kernel and the accelerator has a matmul efficiency curve; otherwise one roofline per
layer and pass: the slower of FLOPs / (peak x efficiency) and the pass's memory traffic (the
layer's weights read, and for W its gradient written, plus the activations it reads and
writes) over the bandwidth, plus the per-kernel overhead. The optimizer step is memory bound: it
reads and writes weights, gradients, optimizer state and master weights once. With the
optimizer offloaded to the host (``Parallelism.offload_optimizer``, ZeRO-Offload arXiv
2101.06840 §4), the device holds no optimizer state or master weights, and the step is the
rank's gradient shard copied to the host, the host's step (gradients, master weights and
optimizer state read and written once at the host memory bandwidth one device gets) and the
updated weights shard copied back, one after another (ZeRO-Offload's one-step delayed
update, which hides the host's step under the next step's backward, is not modelled).

With a block's activations offloaded (``Parallelism.offload_activations``: the model's first N
blocks; Megatron-Core's ``--cpu-offloading``, Transformer Engine's double-buffered CPU offload
on a side stream) its stash leaves the device after its forward and comes back before its
backward: the device holds none of it between the two. The copy to the host runs under the
next block's forward and the copy back under the backward of the block after it, so each pass
takes the longer of its own time and one copy (stash / the host link's bandwidth per direction;
the neighbouring block is taken to be as long as this one, as a transformer's are); the forward
holds the stash in flight beside its temporaries, the input-gradient pass the reloaded stash
and the next one's prefetch (two). Schedules that split the backward into I and W, and
re-materialization, are refused with it
(:func:`pipesim.request.cost_request.check_schedule_pairing`): W's inputs would stay from I on
or be reloaded again, and re-materialization keeps no stash to copy. The host's memory is not
checked.

Memory of a stage: its layers' parameters on one tensor-parallel rank (weights, gradients,
optimizer state and master weights, as the ZeRO stage shards them:
:mod:`pipesim.parallel.sharding`), their stashes,
and each pass's transient: its largest layer's temporaries with the tensors it receives and
sends (:mod:`pipesim.workload.work`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from pipesim.common import checks
from pipesim.common.checks import SpecError
from pipesim.costs.kernel_time import pass_time_parts_s
from pipesim.costs.pipeline_costs import FlopsAccount, PipelineCosts, StageCosts, merge_layers
from pipesim.errors import named
from pipesim.hardware.accelerator import Accelerator
from pipesim.hardware.network import Cluster
from pipesim.parallel.config import IDENTITY, Parallelism
from pipesim.parallel.groups import TensorGroup
from pipesim.parallel.sharding import HeldState, LayerBytes, Sharding
from pipesim.workload.model import Layer, Model
from pipesim.workload.sharding import ShardedLayers, sharded_layers
from pipesim.workload.stage_layers import check_partition, even_partition
from pipesim.workload.transformer import is_block
from pipesim.workload.work import PassWork


def layer_costs(
    layer: Layer,
    model: Model,
    accelerator: Accelerator,
    microbatch_size: float,
    input_bytes: float,
    *,
    optimizer: bool = True,
    parallelism: Parallelism = IDENTITY,
    tensor_group: TensorGroup | None = None,
    pipelined: bool = True,
    offloaded: bool = False,
) -> StageCosts:
    """One layer as a one-layer stage: its passes' times, stash, sizes and transients.

    ``input_bytes`` is what the layer receives per micro-batch (the model's input for the
    first, the previous layer's output otherwise); ``pipelined``: the layer sits in a
    pipeline of more than one stage, which decides when ZeRO-2/3 gather and reduce
    (:mod:`pipesim.parallel.sharding`); ``offloaded``: its stash waits in host memory
    (the module's docstring)."""
    b = microbatch_size
    kernel_level = layer.work is not None and accelerator.kernel_level
    forward_comm_s = input_grad_comm_s = 0.0
    if kernel_level and layer.work is not None:
        (forward_s, forward_comm_s), (input_grad_s, input_grad_comm_s), (weight_grad_s, _) = (
            _pass_s(work, accelerator, b, model.dtype, tensor_group) for work in layer.work.passes()
        )
    else:
        forward_s = _forward_s(layer, model, accelerator, b)
        input_grad_s = _input_grad_s(layer, model, accelerator, b)
        weight_grad_s = _weight_grad_s(layer, model, accelerator, b)
    sharding = parallelism.sharding(pipelined)
    per = _bytes_per_parameter(model)
    # expert parallelism or a folded layout: the routed experts' state is sharded over the
    # expert data group (T x CP x D / (ETP x EP) ranks), the rest over the data group
    experts = layer.expert_parameters if parallelism.experts_apart else 0.0
    expert_sharding = Sharding.of(
        parallelism.zero,
        parallelism.expert_data,
        parallelism.reshard_after_forward,
        pipelined,
    )
    held = sharding.held(layer.parameters - experts, per)
    if experts:
        held = _plus(held, expert_sharding.held(experts, per))
    weights = layer.parameters * model.weight_bytes_per_parameter
    gradients = layer.parameters * model.gradient_bytes_per_parameter
    bandwidth = accelerator.memory_bandwidth_bytes_per_s
    if kernel_level:
        bandwidth *= accelerator.memory_bandwidth_efficiency
    # The optimizer reads and writes every byte it owns once; ZeRO-1 and up own 1/D of them.
    owned_state = held.optimizer_bytes + held.master_weight_bytes
    per_parameter = model.weight_bytes_per_parameter + model.gradient_bytes_per_parameter
    moved = (weights + gradients - per_parameter * experts) / sharding.shards + owned_state
    if experts:
        moved += per_parameter * experts / expert_sharding.shards
    optimizer_s = 2 * moved / bandwidth
    if parallelism.offload_optimizer:
        # the rank's shard of the dense part and of the experts (1/D under ZeRO >= 1)
        shard = (layer.parameters - experts) / sharding.shards
        if experts:
            shard += experts / expert_sharding.shards
        optimizer_s = _offloaded_step_s(shard, model, accelerator)
        held = dataclasses.replace(
            held, optimizer_bytes=0.0, master_weight_bytes=0.0, optimizer_transient_bytes=0.0
        )
    output = layer.output_bytes * b
    forward_transient = input_grad_transient = weight_grad_transient = 0.0
    if layer.work is not None:
        work = layer.work
        forward_transient = _transient(work.forward, b) + output
        input_grad_transient = _transient(work.input_grad, b) + output + input_bytes
        weight_grad_transient = _transient(work.weight_grad, b)
    forward_transient += held.forward_gather_bytes
    input_grad_transient += held.backward_gather_bytes
    weight_grad_transient += held.backward_gather_bytes
    stash = layer.activation_bytes * b
    weight_grad_stash = layer.weight_grad_activation_bytes * b
    if offloaded and stash:
        link = _host_figure(accelerator, "host_link_bandwidth_bytes_per_s", "offload_activations")
        copy_s = stash / link
        forward_s, input_grad_s = max(forward_s, copy_s), max(input_grad_s, copy_s)
        forward_transient += stash
        input_grad_transient += 2 * stash
        weight_grad_transient += weight_grad_stash  # a full backward's W, right after its I
        stash = weight_grad_stash = 0.0
    return StageCosts(
        forward_s=forward_s,
        input_grad_s=input_grad_s,
        weight_grad_s=weight_grad_s,
        activation_bytes=stash,
        weight_grad_activation_bytes=weight_grad_stash,
        input_bytes=input_bytes,
        output_bytes=output,
        parameter_bytes=held.parameter_bytes,
        gradient_bytes=held.gradient_bytes,
        optimizer_bytes=held.optimizer_bytes,
        optimizer_step_s=optimizer_s if optimizer else 0.0,
        master_weight_bytes=held.master_weight_bytes,
        shared_parameter_bytes=layer.shared_parameters
        * model.weight_bytes_per_parameter
        * (held.parameter_bytes / weights if weights else 0.0),
        forward_transient_bytes=forward_transient,
        input_grad_transient_bytes=input_grad_transient,
        weight_grad_transient_bytes=weight_grad_transient,
        optimizer_transient_bytes=held.optimizer_transient_bytes,
        unsharded_parameter_bytes=None if held.parameter_bytes == weights else weights,
        unsharded_gradient_bytes=None if held.gradient_bytes == gradients else gradients,
        expert_gradient_bytes=experts * model.gradient_bytes_per_parameter,
        forward_comm_s=forward_comm_s,
        input_grad_comm_s=input_grad_comm_s,
    )


def _offloaded_step_s(shard: float, model: Model, accelerator: Accelerator) -> float:
    """The optimizer step of ``shard`` parameters on the host (ZeRO-Offload): their gradients
    over the host link (device to host), the host's step reading and writing the gradients,
    master weights and optimizer state once, the updated weights back (host to device), one
    after another. Refused in one line where the accelerator lacks a host figure."""
    link = _host_figure(accelerator, "host_link_bandwidth_bytes_per_s")
    host_memory = _host_figure(accelerator, "host_memory_bandwidth_bytes_per_s")
    to_host = shard * model.gradient_bytes_per_parameter / link
    state = (
        model.gradient_bytes_per_parameter
        + model.master_weight_bytes_per_parameter
        + model.optimizer_bytes_per_parameter
    )
    host_step = 2 * shard * state / host_memory
    to_device = shard * model.weight_bytes_per_parameter / link
    return to_host + host_step + to_device


def _host_figure(accelerator: Accelerator, name: str, why: str = "offload_optimizer") -> float:
    """The accelerator's host figure ``name``, or one line naming the hardware, the field and
    what needs it (``why``: the offload asked for)."""
    value: float | None = getattr(accelerator, name)
    if value is None:
        raise SpecError(
            f"{named(why)}: accelerator {accelerator.name!r} gives no accelerator.{name} (the "
            "host's figures an offload to the host needs); give it in a hardware file"
        )
    return value


def _plus(a: HeldState, b: HeldState) -> HeldState:
    """What a rank holds of two parts of a layer sharded apart (dense and experts)."""
    return HeldState(
        *(getattr(a, f.name) + getattr(b, f.name) for f in dataclasses.fields(HeldState))
    )


def _bytes_per_parameter(model: Model) -> LayerBytes:
    return LayerBytes(
        weight=model.weight_bytes_per_parameter,
        gradient=model.gradient_bytes_per_parameter,
        optimizer=model.optimizer_bytes_per_parameter,
        master=model.master_weight_bytes_per_parameter,
        optimizer_temporary=model.optimizer_temporary_bytes_per_parameter,
    )


def _transient(work: PassWork, b: float) -> float:
    return work.transient_bytes * b + work.fixed_transient_bytes


def _pass_s(
    work: PassWork,
    accelerator: Accelerator,
    b: float,
    dtype: str,
    tensor_group: TensorGroup | None,
) -> tuple[float, float]:
    """The pass's time and the exposed communication inside it."""
    if tensor_group is None:
        return pass_time_parts_s(accelerator, work, b, dtype)
    return pass_time_parts_s(
        accelerator,
        work,
        b,
        dtype,
        tensor_group.network,
        tensor_group.ranks,
        overlap_collectives=tensor_group.overlap_collectives,
        context_group=tensor_group.context_ranks,
        expert_group=tensor_group.expert_ranks,
        expert_tensor_group=tensor_group.expert_tensor_ranks,
    )


def costs_from_model(
    model: Model,
    cluster: Cluster,
    stages: int,
    microbatch_size: float,
    partition: Sequence[int] | None = None,
    *,
    optimizer: bool = True,
    parallelism: Parallelism = IDENTITY,
    tensor_group: TensorGroup | None = None,
    sharded: ShardedLayers | None = None,
) -> PipelineCosts:
    """Per-stage costs of ``model`` cut into ``stages`` contiguous stages on ``cluster``.

    ``partition`` gives layers per stage; by default the split that evens training FLOPs.
    ``optimizer=False`` leaves the optimizer step out (as the papers' closed forms do).
    ``parallelism`` rebuilds the layers one tensor-parallel rank holds (``sharded``, when
    the caller has them already); their collectives run on ``tensor_group``.
    """
    b = checks.positive("microbatch_size", microbatch_size)
    if sharded is None:
        sharded = sharded_layers(model, parallelism)
    ranges = _stage_ranges(model, sharded, stages, partition)
    offloaded = sharded.offloaded(parallelism.offload_activations)
    per_stage = []
    for layer_range in ranges:
        layers = sharded.for_stage(layer_range)
        first_input = _stage_input_bytes(model, sharded, layer_range, b)
        per_stage.append(
            costs_of_layers(
                layers,
                first_input,
                model,
                cluster.accelerator,
                b,
                optimizer=optimizer,
                parallelism=parallelism,
                tensor_group=tensor_group,
                pipelined=stages > 1,
                offloaded=offloaded[layer_range.start : layer_range.stop],
            )
        )
    return _pipeline_costs(model, cluster, sharded, ranges, per_stage, b, parallelism)


def costs_of_layers(
    layers: Sequence[Layer],
    first_input_bytes: float,
    model: Model,
    accelerator: Accelerator,
    microbatch_size: float,
    *,
    optimizer: bool = True,
    parallelism: Parallelism = IDENTITY,
    tensor_group: TensorGroup | None = None,
    pipelined: bool = True,
    offloaded: Sequence[bool] = (),
) -> list[StageCosts]:
    """:func:`layer_costs` of each of ``layers`` in a row, the first receiving
    ``first_input_bytes`` per micro-batch and each later one its predecessor's output
    (``offloaded``: whether each keeps its stash on the host; empty: none does). A
    transformer's blocks are one layer repeated: each distinct (layer, input, offload) is
    costed once (layers that differ in their name only cost the same)."""
    b = microbatch_size
    inputs = [first_input_bytes] + [layer.output_bytes * b for layer in layers[:-1]]
    flags = tuple(offloaded) or (False,) * len(layers)
    costed: dict[tuple[int, float, bool], StageCosts] = {}
    out = []
    for layer, received, offload in zip(layers, inputs, flags, strict=True):
        key = (_identity(layer), received, offload)
        if key not in costed:
            costed[key] = layer_costs(
                layer,
                model,
                accelerator,
                b,
                received,
                optimizer=optimizer,
                parallelism=parallelism,
                tensor_group=tensor_group,
                pipelined=pipelined,
                offloaded=offload,
            )
        out.append(costed[key])
    return out


def _identity(layer: Layer) -> int:
    """What a layer computes: the kernel description a transformer's blocks share, or the
    layer itself."""
    return id(layer.work) if layer.work is not None else id(layer)


def costs_from_layer_costs(
    model: Model,
    cluster: Cluster,
    stages: int,
    microbatch_size: float,
    costed: Sequence[StageCosts],
    partition: Sequence[int] | None = None,
    *,
    parallelism: Parallelism = IDENTITY,
    sharded: ShardedLayers,
) -> PipelineCosts:
    """:func:`costs_from_model` from the costs the caller has of every layer one rank holds
    (``costed``: :func:`layer_costs` of each of ``sharded.layers`` at ``microbatch_size``, as
    :func:`pipesim.partition.from_model.layer_costs` gives them: a planner's cache), merged
    into the stages instead of costed again: the same numbers. Not with ``--recompute N``,
    whose stages swap in recomputed twins of their first blocks."""
    b = checks.positive("microbatch_size", microbatch_size)
    if sharded.recompute_first is not None or len(costed) != len(sharded.layers):
        raise ValueError("costed: one cost per layer of the rank, and no recompute N")
    ranges = _stage_ranges(model, sharded, stages, partition)
    per_stage = [[costed[i] for i in layer_range] for layer_range in ranges]
    return _pipeline_costs(model, cluster, sharded, ranges, per_stage, b, parallelism)


def _stage_ranges(
    model: Model, sharded: ShardedLayers, stages: int, partition: Sequence[int] | None
) -> Sequence[range]:
    """Each stage's layers: ``partition``'s counts checked, or the even split by FLOPs."""
    ranges = (
        even_partition(model, stages)
        if partition is None
        else check_partition(model, list(partition), stages)
    )
    if sharded.recompute_first is not None:
        check_recompute_layers(sharded, ranges)
    return ranges


def _stage_input_bytes(model: Model, sharded: ShardedLayers, layer_range: range, b: float) -> float:
    """What a stage receives per micro-batch: the model's input, or the previous layer's
    output."""
    if layer_range.start == 0:
        return model.input_bytes * b
    return sharded.layers[layer_range.start - 1].output_bytes * b


def _pipeline_costs(
    model: Model,
    cluster: Cluster,
    sharded: ShardedLayers,
    ranges: Sequence[range],
    per_stage: Sequence[Sequence[StageCosts]],
    b: float,
    parallelism: Parallelism,
) -> PipelineCosts:
    """The stages' layer costs merged, with what the pipeline as a whole carries: its network,
    memory allowances and FLOP accounts."""
    accelerator = cluster.accelerator
    stage_costs = tuple(
        merge_layers(list(costs), _stage_input_bytes(model, sharded, layer_range, b))
        for costs, layer_range in zip(per_stage, ranges, strict=True)
    )
    hardware_flops = 0.0
    for layer_range in ranges:  # stage by stage, as the sum has always run
        hardware_flops += sum(layer.hardware_flops for layer in sharded.for_stage(layer_range))
    return PipelineCosts(
        stage_costs,
        cluster.network,
        memory_capacity_bytes=accelerator.memory_bytes,
        transfers_use_compute=accelerator.transfers_use_compute,
        samples_per_microbatch=b,
        description=(
            f"model {model.name} on {cluster.devices} x {accelerator.name}, micro-batch {b:g}, "
            f"layers per stage {','.join(str(len(r)) for r in ranges)}"
            + ("" if parallelism == IDENTITY else f", {parallelism.label()}")
        ),
        runtime_reserve_bytes=accelerator.runtime_reserve_bytes,
        fragmentation_fraction=accelerator.fragmentation_fraction,
        flops=FlopsAccount(
            model_flops_per_microbatch=model_flops_per_sample(model) * b,
            hardware_flops_per_microbatch=hardware_flops * parallelism.ranks_per_device * b,
            devices=cluster.devices * parallelism.ranks_per_device * parallelism.data,
            replicas=parallelism.data,
            peak_flops_per_s=accelerator.peak(model.dtype),
        ),
    )


def model_flops_per_sample(model: Model) -> float:
    """The model's training FLOPs per sample without recomputation: the appendix formula of
    arXiv 2104.04473 for a transformer (matmuls only, backward twice the forward), its layers'
    forward and both backward parts otherwise."""
    if model.architecture is not None:
        return model.architecture.model_flops_per_sequence()
    return sum(layer.training_flops for layer in model.layers)


def _forward_s(layer: Layer, model: Model, accelerator: Accelerator, b: float) -> float:
    traffic = layer.parameters * model.weight_bytes_per_parameter + b * (
        layer.activation_bytes + layer.output_bytes
    )
    return accelerator.compute_time_s(layer.forward_flops * b, traffic, model.dtype)


def _input_grad_s(layer: Layer, model: Model, accelerator: Accelerator, b: float) -> float:
    traffic = layer.parameters * model.weight_bytes_per_parameter + b * (
        layer.activation_bytes + layer.output_bytes
    )
    flops = (layer.input_grad_flops + layer.recompute_flops) * b
    return accelerator.compute_time_s(flops, traffic, model.dtype)


def _weight_grad_s(layer: Layer, model: Model, accelerator: Accelerator, b: float) -> float:
    traffic = (
        layer.parameters * (model.weight_bytes_per_parameter + model.gradient_bytes_per_parameter)
        + b * layer.weight_grad_activation_bytes
    )
    return accelerator.compute_time_s(layer.weight_grad_flops * b, traffic, model.dtype)


def check_recompute_layers(sharded: ShardedLayers, ranges: Sequence[range]) -> None:
    """Refuse ``--recompute N`` beyond the blocks of every stage: N layers per stage are
    recomputed, so an N no stage holds asks for something else (``--recompute full``)."""
    wanted = sharded.recompute_first or 0
    most = max(sum(is_block(sharded.layers[i]) for i in r) for r in ranges)
    if wanted > most:
        raise SpecError(
            f"{named('recompute')} {wanted}: no stage holds more than {most} transformer "
            f"blocks here; give at most {most} (the first N blocks of each stage), or "
            f"{named('recompute')} full"
        )
