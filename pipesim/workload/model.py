"""A model as the simulator sees it: a sequence of layers with per-sample costs and sizes."""

from __future__ import annotations

from dataclasses import dataclass, field

from pipesim.common import checks
from pipesim.common.checks import SpecError


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
    """

    name: str
    forward_flops: float
    input_grad_flops: float
    weight_grad_flops: float
    parameters: float
    activation_bytes: float
    weight_grad_activation_bytes: float
    output_bytes: float

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
        ):
            checks.non_negative(f"{where} {attribute}", getattr(self, attribute))
        if self.weight_grad_activation_bytes > self.activation_bytes:
            raise SpecError(
                f"{where} weight_grad_activation_bytes ({self.weight_grad_activation_bytes:g}) "
                f"must not exceed activation_bytes ({self.activation_bytes:g})"
            )

    @property
    def training_flops(self) -> float:
        """Forward plus both backward parts, per sample."""
        return self.forward_flops + self.input_grad_flops + self.weight_grad_flops


@dataclass(frozen=True)
class Model:
    """A model: layers in order, the input size, the compute dtype and the memory per parameter.

    Attributes:
        input_bytes: bytes of one sample's input to the first layer.
        dtype: compute dtype, a key of the accelerator's ``peak_flops_per_s``.
        weight_bytes_per_parameter: bytes of one weight (4 fp32, 2 bf16).
        gradient_bytes_per_parameter: bytes of one gradient.
        optimizer_bytes_per_parameter: optimizer state per parameter (4 for RMSProp's mean
            square in fp32: GPipe counts 12 bytes in all; 8 for Adam in fp32; 12 for Adam with fp32
            master weights under mixed precision).
        default_batch: the mini-batch size (samples per optimizer step) its paper used.
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
        checks.positive_int("model.default_batch", self.default_batch)

    @property
    def parameters(self) -> float:
        """Total parameter count."""
        return sum(layer.parameters for layer in self.layers)

    @property
    def bytes_per_parameter(self) -> float:
        """Weights, gradients and optimizer state per parameter (GPipe's Table 1 counts 12)."""
        return (
            self.weight_bytes_per_parameter
            + self.gradient_bytes_per_parameter
            + self.optimizer_bytes_per_parameter
        )
