"""A model as the simulator sees it: a sequence of layers with per-sample costs and sizes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pipesim.common import checks
from pipesim.common.checks import SpecError
from pipesim.workload.work import LayerWork

if TYPE_CHECKING:
    from pipesim.workload.architecture import TransformerArchitecture


@dataclass(frozen=True)
class Layer:
    """One layer; every quantity is per sample and scales with the micro-batch size.

    Attributes:
        forward_flops: FLOPs of the forward pass.
        input_grad_flops: FLOPs of the backward pass for the input gradient (I).
        weight_grad_flops: FLOPs of the backward pass for the weight gradient (W).
        parameters: parameter count (bytes follow from the model's bytes per parameter).
        activation_bytes: bytes stashed by the forward until the backward.
        weight_grad_activation_bytes: the part of ``activation_bytes`` the weight gradient
            needs, kept until W when the backward is split into I and W.
        output_bytes: bytes this layer passes to the next (an activation forward, the same
            size of gradient backward).
        recompute_flops: FLOPs of the forward work its backward re-runs (recomputation),
            inside the input-gradient pass; hardware FLOPs, not model FLOPs.
        shared_parameters: the part of ``parameters`` that copies another layer's weights (a
            tied output layer's copy of the word embeddings): counted once in the model, held
            twice when the two layers sit on different devices.
        expert_parameters: the part of ``parameters`` that is a mixture-of-experts block's
            routed experts' weights (the E/EP experts this rank holds, split T ways):
            what expert parallelism divides among its ranks; 0 for any other layer.
        active_expert_parameters: the part of ``expert_parameters`` one token goes through
            (its top-k experts': k/E of them).
        work: the layer's passes kernel by kernel (:mod:`pipesim.workload.work`), for the
            kernel-level time model and the transient memory; None for a layer given by its
            totals alone (timed by one roofline per pass).
    """

    name: str
    forward_flops: float
    input_grad_flops: float
    weight_grad_flops: float
    parameters: float
    activation_bytes: float
    weight_grad_activation_bytes: float
    output_bytes: float
    recompute_flops: float = 0.0
    shared_parameters: float = 0.0
    expert_parameters: float = 0.0
    active_expert_parameters: float = 0.0
    work: LayerWork | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        where = f"layer {self.name!r}"
        checks.name("layer.name", self.name)
        for attribute in (
            "forward_flops",
            "input_grad_flops",
            "weight_grad_flops",
            "parameters",
            "activation_bytes",
            "weight_grad_activation_bytes",
            "output_bytes",
            "recompute_flops",
            "shared_parameters",
            "expert_parameters",
            "active_expert_parameters",
        ):
            checks.non_negative(f"{where} {attribute}", getattr(self, attribute))
        for part, whole in (
            ("shared_parameters", "parameters"),
            ("expert_parameters", "parameters"),
            ("active_expert_parameters", "expert_parameters"),
        ):
            if getattr(self, part) > getattr(self, whole):
                raise SpecError(
                    f"{where} {part} ({getattr(self, part):g}) must not exceed {whole} "
                    f"({getattr(self, whole):g})"
                )
        if self.work is not None and not isinstance(self.work, LayerWork):
            raise SpecError(f"{where} work must be a LayerWork, got {self.work!r}")
        if self.weight_grad_activation_bytes > self.activation_bytes:
            raise SpecError(
                f"{where} weight_grad_activation_bytes ({self.weight_grad_activation_bytes:g}) "
                f"must not exceed activation_bytes ({self.activation_bytes:g})"
            )

    @property
    def training_flops(self) -> float:
        """Forward plus both backward parts, per sample (model FLOPs: no recomputation)."""
        return self.forward_flops + self.input_grad_flops + self.weight_grad_flops

    @property
    def hardware_flops(self) -> float:
        """Training FLOPs with the recomputed forward work, per sample."""
        return self.training_flops + self.recompute_flops

    @property
    def active_parameters(self) -> float:
        """The parameters one token's forward pass goes through: all but the routed experts
        it is not sent to."""
        return self.parameters - self.expert_parameters + self.active_expert_parameters


@dataclass(frozen=True)
class Model:
    """A model: layers in order, the input size, the compute dtype and the memory per parameter.

    Attributes:
        input_bytes: bytes of one sample's input to the first layer.
        dtype: compute dtype, a key of the accelerator's ``peak_flops_per_s``.
        weight_bytes_per_parameter: bytes of one weight (4 fp32, 2 bf16).
        gradient_bytes_per_parameter: bytes of one gradient.
        optimizer_bytes_per_parameter: optimizer state per parameter (4 for RMSProp's mean
            square in fp32: GPipe counts 12 bytes in all; 8 for Adam's two moments in fp32).
        default_batch: the mini-batch size (samples per optimizer step) its paper used.
        master_weight_bytes_per_parameter: the fp32 master copy of the weights under mixed
            precision (4), or 0; divided by the data-parallel size with the optimizer state
            under ZeRO-1.
        architecture: the transformer the layers were built from, when they were (tensor and
            sequence parallelism and recomputation rebuild the layers from it); None for a
            model given as layers.
        optimizer_temporary_bytes_per_parameter: what the optimizer step allocates while it
            runs, per parameter it updates (PyTorch's multi-tensor Adam: the square root of
            the second moment, 4 bytes in fp32; 0 for a fused optimizer).
        fused_gradient_accumulation: how ``layers`` were built: the weight-gradient matmuls add
            into the gradient buffer themselves; False: each weight gradient is written, then
            added by a pass of its own. The catalogue and TOML files build every model fused;
            a run's recipe rebuilds the layers unfused where its software was
            (:attr:`pipesim.config.run_config.RunConfig.trained_model`).
    """

    name: str
    layers: tuple[Layer, ...]
    input_bytes: float
    dtype: str
    weight_bytes_per_parameter: float
    gradient_bytes_per_parameter: float
    optimizer_bytes_per_parameter: float
    default_batch: int
    description: str = field(default="", compare=False)
    master_weight_bytes_per_parameter: float = 0.0
    architecture: TransformerArchitecture | None = field(default=None, compare=False)
    optimizer_temporary_bytes_per_parameter: float = 0.0
    fused_gradient_accumulation: bool = True

    def __post_init__(self) -> None:
        checks.name("model.name", self.name)
        object.__setattr__(self, "layers", tuple(self.layers))
        if not self.layers:
            raise SpecError(f"model {self.name!r} has no layers")
        for layer in self.layers:
            if not isinstance(layer, Layer):
                raise SpecError(f"model {self.name!r}: {layer!r} is not a Layer")
        checks.non_negative("model.input_bytes", self.input_bytes)
        checks.name("model.dtype", self.dtype)
        checks.positive("model.weight_bytes_per_parameter", self.weight_bytes_per_parameter)
        checks.non_negative("model.gradient_bytes_per_parameter", self.gradient_bytes_per_parameter)
        checks.non_negative(
            "model.optimizer_bytes_per_parameter", self.optimizer_bytes_per_parameter
        )
        checks.non_negative(
            "model.master_weight_bytes_per_parameter", self.master_weight_bytes_per_parameter
        )
        checks.non_negative(
            "model.optimizer_temporary_bytes_per_parameter",
            self.optimizer_temporary_bytes_per_parameter,
        )
        checks.positive_int("model.default_batch", self.default_batch)

    @property
    def parameters(self) -> float:
        """Total parameter count (a tied output layer's copy counted once)."""
        return sum(layer.parameters - layer.shared_parameters for layer in self.layers)

    @property
    def expert_parameters(self) -> float:
        """The routed experts' parameters in all (0 for a dense model): the part of
        :attr:`parameters` expert parallelism divides."""
        return sum(layer.expert_parameters for layer in self.layers)

    @property
    def active_parameters(self) -> float:
        """The parameters one token's forward pass goes through (a tied output layer's copy
        counted once): :attr:`parameters` for a dense model."""
        return sum(layer.active_parameters - layer.shared_parameters for layer in self.layers)

    @property
    def bytes_per_parameter(self) -> float:
        """Weights, gradients, optimizer state and master weights per parameter (GPipe's
        Table 1 counts 12)."""
        return (
            self.weight_bytes_per_parameter
            + self.gradient_bytes_per_parameter
            + self.optimizer_bytes_per_parameter
            + self.master_weight_bytes_per_parameter
        )
