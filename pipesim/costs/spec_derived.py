"""Spec-derived costs: a model's layers on a hardware spec, at a micro-batch size.

Each layer and pass is one kernel timed by the accelerator's roofline: the slower of
FLOPs / (peak x efficiency) and memory traffic / bandwidth, plus the per-kernel overhead. The
memory traffic of a pass is the layer's weights read (and, for W, its gradient written) plus the
activations it reads and writes. A stage's time is the sum over its layers. The optimizer step
is memory bound: it reads and writes weights, gradients and optimizer state once.
"""

from __future__ import annotations

from collections.abc import Sequence

from pipesim.common import checks
from pipesim.costs.pipeline_costs import PipelineCosts, StageCosts
from pipesim.hardware.accelerator import Accelerator
from pipesim.hardware.network import Cluster
from pipesim.workload.model import Layer, Model
from pipesim.workload.stage_layers import check_partition, even_partition


def costs_from_model(
    model: Model,
    cluster: Cluster,
    stages: int,
    microbatch_size: float,
    partition: Sequence[int] | None = None,
    *,
    optimizer: bool = True,
) -> PipelineCosts:
    """Per-stage costs of ``model`` cut into ``stages`` contiguous stages on ``cluster``.

    ``partition`` gives layers per stage; by default the split that evens training FLOPs.
    ``optimizer=False`` leaves the optimizer step out (as the papers' closed forms do).
    """
    b = checks.positive("microbatch_size", microbatch_size)
    ranges = (
        even_partition(model, stages)
        if partition is None
        else check_partition(model, list(partition), stages)
    )
    accelerator = cluster.accelerator
    stage_costs = []
    for index, layer_range in enumerate(ranges):
        layers = [model.layers[i] for i in layer_range]
        if index == 0:
            input_bytes = model.input_bytes * b
        else:
            input_bytes = model.layers[layer_range.start - 1].output_bytes * b
        parameters = sum(layer.parameters for layer in layers)
        weights = parameters * model.weight_bytes_per_parameter
        gradients = parameters * model.gradient_bytes_per_parameter
        state = parameters * model.optimizer_bytes_per_parameter
        optimizer_s = 2 * (weights + gradients + state) / accelerator.memory_bandwidth_bytes_per_s
        stage_costs.append(
            StageCosts(
                forward_s=sum(_forward_s(layer, model, accelerator, b) for layer in layers),
                input_grad_s=sum(_input_grad_s(layer, model, accelerator, b) for layer in layers),
                weight_grad_s=sum(_weight_grad_s(layer, model, accelerator, b) for layer in layers),
                activation_bytes=sum(layer.activation_bytes for layer in layers) * b,
                weight_grad_activation_bytes=sum(
                    layer.weight_grad_activation_bytes for layer in layers
                )
                * b,
                input_bytes=input_bytes,
                output_bytes=layers[-1].output_bytes * b,
                parameter_bytes=weights,
                gradient_bytes=gradients,
                optimizer_bytes=state,
                optimizer_step_s=optimizer_s if optimizer else 0.0,
            )
        )
    return PipelineCosts(
        tuple(stage_costs),
        cluster.network,
        memory_capacity_bytes=accelerator.memory_bytes,
        transfers_use_compute=accelerator.transfers_use_compute,
        samples_per_microbatch=b,
        description=(
            f"model {model.name} on {cluster.devices} x {accelerator.name}, micro-batch {b:g}, "
            f"layers per stage {','.join(str(len(r)) for r in ranges)}"
        ),
    )


def _forward_s(layer: Layer, model: Model, accelerator: Accelerator, b: float) -> float:
    traffic = layer.parameters * model.weight_bytes_per_parameter + b * (
        layer.activation_bytes + layer.output_bytes
    )
    return accelerator.compute_time_s(layer.forward_flops * b, traffic, model.dtype)


def _input_grad_s(layer: Layer, model: Model, accelerator: Accelerator, b: float) -> float:
    traffic = layer.parameters * model.weight_bytes_per_parameter + b * (
        layer.activation_bytes + layer.output_bytes
    )
    return accelerator.compute_time_s(layer.input_grad_flops * b, traffic, model.dtype)


def _weight_grad_s(layer: Layer, model: Model, accelerator: Accelerator, b: float) -> float:
    traffic = (
        layer.parameters * (model.weight_bytes_per_parameter + model.gradient_bytes_per_parameter)
        + b * layer.weight_grad_activation_bytes
    )
    return accelerator.compute_time_s(layer.weight_grad_flops * b, traffic, model.dtype)
