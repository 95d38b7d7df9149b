"""What the engine needs to know about a pipeline: per-stage times and sizes, and the network."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from pipesim.common import checks
from pipesim.common.checks import SpecError
from pipesim.hardware.network import Network

_OPTIONAL = frozenset({"full_backward_s", "unsharded_parameter_bytes", "unsharded_gradient_bytes"})


@dataclass(frozen=True)
class StageCosts:
    """One stage and one micro-batch: compute times, stashed and transferred bytes, and the
    stage's share of weights, gradients and optimizer state.

    Attributes:
        forward_s: time of F.
        input_grad_s: time of I, the input-gradient part of the backward.
        weight_grad_s: time of W, the weight-gradient part; a full backward B takes I + W.
        activation_bytes: stashed from F until the backward.
        weight_grad_activation_bytes: the part of the stash that W needs (kept until W).
        input_bytes: the stage's input per micro-batch (all re-materialization stashes).
        output_bytes: sent to the next stage per micro-batch (and the same size of gradient
            back).
        parameter_bytes, gradient_bytes, optimizer_bytes: per weight version, gradient buffer
            and optimizer state of the stage.
        optimizer_step_s: time of the stage's optimizer update.
        full_backward_s: time of a full backward B when it is not simply I + W (a calibrated
            stage measures both; None means I + W).
        master_weight_bytes: the fp32 master copy of the stage's weights (mixed precision).
        shared_parameter_bytes: the part of ``parameter_bytes`` that copies the first stage's
            weights (a tied output layer): a device holding the first stage too keeps one copy
            (:func:`pipesim.memory.rules.static_breakdown`).
        forward_transient_bytes, input_grad_transient_bytes, weight_grad_transient_bytes:
            memory an F, an I (or the input-gradient part of a B) and a W allocate on top of
            the stash while they run (temporaries, the incoming and outgoing tensors, a
            recomputed layer's activations, the loss's logits).
        optimizer_transient_bytes: what the stage's optimizer step allocates while it runs.
        unsharded_parameter_bytes, unsharded_gradient_bytes: the stage's whole weights and
            gradients on one tensor rank, what its data-parallel collectives move, where a
            ZeRO stage holds less of them than that (None: ``parameter_bytes`` and
            ``gradient_bytes``).
        expert_gradient_bytes: the part of the stage's whole gradients on one tensor rank
            (:attr:`whole_gradient_bytes`) that is routed experts' under expert parallelism,
            reduced over the expert data group rather than the data group
            (:mod:`pipesim.costs.data_parallel`); 0 without expert parallelism.
        forward_comm_s, input_grad_comm_s: the exposed communication inside F and inside I
            (part of ``forward_s`` and ``input_grad_s``, not on top of them): the collectives'
            seconds of the pass (expert parallelism's dispatch and combine all-to-alls,
            tensor- and context-parallel collectives) that another pass's computation can
            hide, as DualPipe's overlapped forward-backward pairs do
            (:func:`pipesim.engine.durations.overlap_savings_s`); 0 when unknown.
    """

    forward_s: float
    input_grad_s: float
    weight_grad_s: float
    activation_bytes: float = 0.0
    weight_grad_activation_bytes: float = 0.0
    input_bytes: float = 0.0
    output_bytes: float = 0.0
    parameter_bytes: float = 0.0
    gradient_bytes: float = 0.0
    optimizer_bytes: float = 0.0
    optimizer_step_s: float = 0.0
    full_backward_s: float | None = None
    master_weight_bytes: float = 0.0
    shared_parameter_bytes: float = 0.0
    forward_transient_bytes: float = 0.0
    input_grad_transient_bytes: float = 0.0
    weight_grad_transient_bytes: float = 0.0
    optimizer_transient_bytes: float = 0.0
    unsharded_parameter_bytes: float | None = None
    unsharded_gradient_bytes: float | None = None
    expert_gradient_bytes: float = 0.0
    forward_comm_s: float = 0.0
    input_grad_comm_s: float = 0.0

    def __post_init__(self) -> None:
        for attribute in self.__dataclass_fields__:
            value = getattr(self, attribute)
            if value is not None or attribute not in _OPTIONAL:
                checks.non_negative(f"stage cost {attribute}", value)
        if self.weight_grad_activation_bytes > self.activation_bytes:
            raise SpecError(
                "stage cost weight_grad_activation_bytes must not exceed activation_bytes, got "
                f"{self.weight_grad_activation_bytes:g} > {self.activation_bytes:g}"
            )
        if self.shared_parameter_bytes > self.parameter_bytes:
            raise SpecError(
                "stage cost shared_parameter_bytes must not exceed parameter_bytes, got "
                f"{self.shared_parameter_bytes:g} > {self.parameter_bytes:g}"
            )
        if self.expert_gradient_bytes > self.whole_gradient_bytes:
            raise SpecError(
                "stage cost expert_gradient_bytes must not exceed the whole gradient bytes, got "
                f"{self.expert_gradient_bytes:g} > {self.whole_gradient_bytes:g}"
            )

    @classmethod
    def of_checked_parts(cls, **values: float | None) -> StageCosts:
        """A StageCosts from sums, maxima and shares of checked StageCosts (as
        :func:`merge_layers` builds a stage), which hold every check of ``__post_init__`` by
        construction: not checked again, since a planner merges tens of thousands of them.
        Fields not given take their defaults."""
        unknown = set(values) - set(cls.__dataclass_fields__)
        if unknown:
            raise TypeError(f"not fields of StageCosts: {sorted(unknown)}")
        costs = object.__new__(cls)
        for name, spec in cls.__dataclass_fields__.items():
            value = values.get(name, spec.default)
            object.__setattr__(costs, name, value)
        return costs

    def with_optimizer_step_s(self, seconds: float) -> StageCosts:
        """These costs with the optimizer step taking ``seconds`` (checked as
        ``__post_init__`` checks it; the other fields are this checked value's, so not checked
        again: a planner adds gradient communication to tens of thousands of stages)."""
        checks.non_negative("stage cost optimizer_step_s", seconds)
        costs = object.__new__(type(self))
        for name in self.__dataclass_fields__:
            object.__setattr__(costs, name, getattr(self, name))
        object.__setattr__(costs, "optimizer_step_s", seconds)
        return costs

    @property
    def whole_parameter_bytes(self) -> float:
        """The stage's weights on one tensor rank, sharded or not (what an all-gather of
        them moves)."""
        if self.unsharded_parameter_bytes is None:
            return self.parameter_bytes
        return self.unsharded_parameter_bytes

    @property
    def whole_gradient_bytes(self) -> float:
        """The stage's gradients on one tensor rank, sharded or not (what their reduction
        moves)."""
        if self.unsharded_gradient_bytes is None:
            return self.gradient_bytes
        return self.unsharded_gradient_bytes

    @property
    def backward_s(self) -> float:
        """A full backward B: as measured when given, else I + W."""
        if self.full_backward_s is not None:
            return self.full_backward_s
        return self.input_grad_s + self.weight_grad_s


def merge_layers(
    layers: Sequence[StageCosts], input_bytes: float, speed: float = 1.0
) -> StageCosts:
    """One stage from consecutive one-layer stages: sums, its own input, its last output; a
    pass's transient is its largest layer's (one layer runs at a time). The communication
    parts are divided by ``speed`` as the times they are part of are."""
    if not layers:
        raise SpecError("a stage needs at least one layer")
    full = [layer.full_backward_s for layer in layers]
    if speed <= 0 or not math.isfinite(speed):
        raise SpecError(f"a stage's device speed must be a finite number > 0, got {speed!r}")
    return StageCosts.of_checked_parts(
        forward_s=sum(layer.forward_s for layer in layers) / speed,
        input_grad_s=sum(layer.input_grad_s for layer in layers) / speed,
        weight_grad_s=sum(layer.weight_grad_s for layer in layers) / speed,
        activation_bytes=sum(layer.activation_bytes for layer in layers),
        weight_grad_activation_bytes=sum(layer.weight_grad_activation_bytes for layer in layers),
        input_bytes=input_bytes,
        output_bytes=layers[-1].output_bytes,
        parameter_bytes=sum(layer.parameter_bytes for layer in layers),
        gradient_bytes=sum(layer.gradient_bytes for layer in layers),
        optimizer_bytes=sum(layer.optimizer_bytes for layer in layers),
        optimizer_step_s=sum(layer.optimizer_step_s for layer in layers) / speed,
        full_backward_s=None
        if any(f is None for f in full)
        else sum(f or 0.0 for f in full) / speed,
        master_weight_bytes=sum(layer.master_weight_bytes for layer in layers),
        shared_parameter_bytes=sum(layer.shared_parameter_bytes for layer in layers),
        forward_transient_bytes=max(layer.forward_transient_bytes for layer in layers),
        input_grad_transient_bytes=max(layer.input_grad_transient_bytes for layer in layers),
        weight_grad_transient_bytes=max(layer.weight_grad_transient_bytes for layer in layers),
        optimizer_transient_bytes=sum(layer.optimizer_transient_bytes for layer in layers),
        unsharded_parameter_bytes=None
        if all(layer.unsharded_parameter_bytes is None for layer in layers)
        else sum(layer.whole_parameter_bytes for layer in layers),
        unsharded_gradient_bytes=None
        if all(layer.unsharded_gradient_bytes is None for layer in layers)
        else sum(layer.whole_gradient_bytes for layer in layers),
        expert_gradient_bytes=sum(layer.expert_gradient_bytes for layer in layers),
        forward_comm_s=sum(layer.forward_comm_s for layer in layers) / speed,
        input_grad_comm_s=sum(layer.input_grad_comm_s for layer in layers) / speed,
    )


@dataclass(frozen=True)
class FlopsAccount:
    """What utilisation is measured against.

    Attributes:
        model_flops_per_microbatch: the model's training FLOPs for one micro-batch of one
            replica, all stages and tensor-parallel ranks together, without recomputation
            (2104.04473's appendix: matmuls, backward twice the forward).
        hardware_flops_per_microbatch: the same with the recomputed forward work.
        devices: every device of the job (K x T x D).
        replicas: D, data-parallel replicas (each runs the M micro-batches of a step).
        peak_flops_per_s: one device's datasheet peak for the compute dtype.
    """

    model_flops_per_microbatch: float
    hardware_flops_per_microbatch: float
    devices: int
    replicas: int
    peak_flops_per_s: float

    def __post_init__(self) -> None:
        checks.non_negative("model_flops_per_microbatch", self.model_flops_per_microbatch)
        checks.non_negative("hardware_flops_per_microbatch", self.hardware_flops_per_microbatch)
        checks.positive_int("flops devices", self.devices)
        checks.positive_int("flops replicas", self.replicas)
        checks.positive("peak_flops_per_s", self.peak_flops_per_s)

    def utilization(self, flops_per_microbatch: float, microbatches: int, step_s: float) -> float:
        """Achieved FLOP/s over the job's peak: flops x M x D / (step x devices x peak)."""
        if step_s <= 0:
            return 0.0
        achieved = flops_per_microbatch * microbatches * self.replicas / step_s
        return achieved / (self.devices * self.peak_flops_per_s)


@dataclass(frozen=True)
class PipelineCosts:
    """Everything the engine needs besides the schedule.

    Attributes:
        stages: one :class:`StageCosts` per stage, in stage order.
        network: the links between devices.
        memory_capacity_bytes: each device's memory (infinite when unknown).
        transfers_use_compute: sends occupy the sending device (no overlap).
        samples_per_microbatch: for throughput in samples/s (None: micro-batches/s).
        description: where the costs came from, for reports.
        runtime_reserve_bytes: memory each device's runtime holds besides the model.
        fragmentation_fraction: the allocator's slack on top of the model's peak.
        flops: the FLOPs accounting that model and hardware FLOPs utilisation are computed
            from (None for synthetic costs).
        cluster: the job's devices and how they are joined, in a line (for reports).
        recipe: the software recipe the costs assume, its name and every choice
            (:meth:`pipesim.config.recipe.Recipe.to_json`); None for costs not built from a
            run's configuration (synthetic, calibrated).
        layout: the run's dimensions besides the pipeline's (``tensor_parallel``,
            ``sequence_parallel``, ``data_parallel``, ``microbatch_size``, ``recompute``,
            ``zero``), for reports and figure titles; None as for ``recipe``.
    """

    stages: tuple[StageCosts, ...]
    network: Network
    memory_capacity_bytes: float = float("inf")
    transfers_use_compute: bool = False
    samples_per_microbatch: float | None = None
    description: str = field(default="", compare=False)
    runtime_reserve_bytes: float = 0.0
    fragmentation_fraction: float = 0.0
    flops: FlopsAccount | None = None
    cluster: str = field(default="", compare=False)
    recipe: Mapping[str, object] | None = field(default=None, compare=False)
    layout: Mapping[str, object] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "stages", tuple(self.stages))
        if not self.stages:
            raise SpecError("pipeline costs need at least one stage")
        checks.positive_or_inf("memory_capacity_bytes", self.memory_capacity_bytes)
        checks.non_negative("runtime_reserve_bytes", self.runtime_reserve_bytes)
        checks.slack("fragmentation_fraction", self.fragmentation_fraction)
        if self.samples_per_microbatch is not None:
            checks.positive("samples_per_microbatch", self.samples_per_microbatch)

    def uniform(self) -> bool:
        """True when every stage has the same compute times (closed forms then apply)."""
        first = self.stages[0]
        return all(
            (s.forward_s, s.input_grad_s, s.weight_grad_s, s.full_backward_s)
            == (first.forward_s, first.input_grad_s, first.weight_grad_s, first.full_backward_s)
            for s in self.stages
        )
