"""What the engine needs to know about a pipeline: per-stage times and sizes, and the network."""

from __future__ import annotations

from dataclasses import dataclass, field

from pipesim.common import checks
from pipesim.common.checks import SpecError
from pipesim.hardware.network import Network


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

    def __post_init__(self) -> None:
        for attribute in self.__dataclass_fields__:
            value = getattr(self, attribute)
            if attribute != "full_backward_s" or value is not None:
                checks.non_negative(f"stage cost {attribute}", value)
        if self.weight_grad_activation_bytes > self.activation_bytes:
            raise SpecError(
                "stage cost weight_grad_activation_bytes must not exceed activation_bytes, got "
                f"{self.weight_grad_activation_bytes:g} > {self.activation_bytes:g}"
            )

    @property
    def backward_s(self) -> float:
        """A full backward B: as measured when given, else I + W."""
        if self.full_backward_s is not None:
            return self.full_backward_s
        return self.input_grad_s + self.weight_grad_s


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
    """

    stages: tuple[StageCosts, ...]
    network: Network
    memory_capacity_bytes: float = float("inf")
    transfers_use_compute: bool = False
    samples_per_microbatch: float | None = None
    description: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "stages", tuple(self.stages))
        if not self.stages:
            raise SpecError("pipeline costs need at least one stage")
        checks.positive_or_inf("memory_capacity_bytes", self.memory_capacity_bytes)
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
