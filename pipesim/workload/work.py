"""What one pass of a layer does on one device, kernel by kernel: matrix multiplies, memory-bound
work, the collectives it waits for, and the memory it allocates on top of what it stashes.

A :class:`~pipesim.workload.model.Layer` carries one :class:`PassWork` per pass (forward F,
input gradient I, weight gradient W) in a :class:`LayerWork`; the time model
(:mod:`pipesim.costs.kernel_time`) turns them into seconds on an accelerator: each matmul at an
efficiency that depends on its size, the memory-bound bytes at the achievable HBM bandwidth,
the collectives on the links they cross. Every size is per sample (it scales with the
micro-batch size b) unless named ``fixed``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from pipesim.common import checks
from pipesim.common.checks import SpecError
from pipesim.hardware.collectives import Collective


class Scaled(Enum):
    """Which dimension of a matmul grows with the micro-batch size b."""

    M = "m"  # a linear layer's rows: M = b·s tokens
    K = "k"  # a weight gradient's contraction over the tokens: K = b·s
    BATCH = "batch"  # attention: b·heads independent s x s products


@dataclass(frozen=True)
class Matmul:
    """One matrix multiply (or a batch of equal ones): (M x K) times (K x N), given per sample:
    the dimension ``scaled`` is multiplied by the micro-batch size b. ``name`` labels it."""

    name: str
    m: float
    n: float
    k: float
    batch: float = 1.0
    scaled: Scaled = Scaled.M

    def __post_init__(self) -> None:
        for attribute in ("m", "n", "k", "batch"):
            checks.positive(f"matmul {self.name!r} {attribute}", getattr(self, attribute))
        if not isinstance(self.scaled, Scaled):
            raise SpecError(f"matmul {self.name!r} scaled must be a Scaled, got {self.scaled!r}")

    def shape(self, microbatch_size: float) -> tuple[float, float, float, float]:
        """(batch, M, N, K) at ``microbatch_size`` samples."""
        b = microbatch_size
        if self.scaled is Scaled.M:
            return (self.batch, self.m * b, self.n, self.k)
        if self.scaled is Scaled.K:
            return (self.batch, self.m, self.n, self.k * b)
        return (self.batch * b, self.m, self.n, self.k)

    @property
    def flops_per_sample(self) -> float:
        """2·M·N·K·batch per sample (every form scales linearly with b)."""
        return 2.0 * self.m * self.n * self.k * self.batch


class GroupKind(Enum):
    """Which ranks a collective runs over: the tensor-parallel group, the context-parallel
    group (a sample's sequence split over it), the expert-parallel group (a mixture-of-
    experts layer's experts divided over it) or the expert-tensor-parallel group (each expert
    split over it, where that differs from the tensor-parallel group: ETP != T)."""

    TENSOR = "tensor"
    CONTEXT = "context"
    EXPERT = "expert"
    EXPERT_TENSOR = "expert tensor"


@dataclass(frozen=True)
class CollectiveCall:
    """A collective over ``group``'s ranks (the tensor-parallel group unless said), on a
    buffer of ``bytes_per_sample`` x b, or ``fixed_bytes`` whatever b (the loss's statistics
    per token are per sample too). ``hidden_by`` names the pass's matmuls it runs beside (a
    ring of sends under the attention's blocks): only what exceeds their time is exposed;
    empty, the pass waits for all of it."""

    kind: Collective
    bytes_per_sample: float
    fixed_bytes: float = 0.0
    group: GroupKind = GroupKind.TENSOR
    hidden_by: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.kind, Collective):
            raise SpecError(f"collective kind must be a Collective, got {self.kind!r}")
        if not isinstance(self.group, GroupKind):
            raise SpecError(f"collective group must be a GroupKind, got {self.group!r}")
        object.__setattr__(self, "hidden_by", tuple(self.hidden_by))
        checks.non_negative("collective bytes_per_sample", self.bytes_per_sample)
        checks.non_negative("collective fixed_bytes", self.fixed_bytes)


@dataclass(frozen=True)
class PassWork:
    """One pass of one layer on one device.

    Attributes:
        matmuls: its matrix multiplies.
        memory_bytes: bytes the elementwise memory-bound kernels (activation functions and
            their gradients, residual adds, dropout's backward, bias gradients summed over the
            tokens, gradient accumulation, a fused attention kernel's reads and writes) read
            and write, per sample.
        fixed_memory_bytes: such bytes independent of b (a weight gradient added into the
            gradient buffer).
        reduction_bytes: bytes of the kernels that reduce along rows (softmax, layer and RMS
            norms and their backwards, the loss), per sample: they reach a smaller fraction of
            the memory bandwidth (``Accelerator.reduction_bandwidth_fraction``).
        random_bytes: bytes of the kernels that draw random numbers (dropout's forward, a fused
            bias-dropout-add), per sample (``Accelerator.random_bandwidth_fraction``).
        kernels: kernels launched besides the matmuls (each pays the launch overhead).
        collectives: tensor-parallel collectives it waits for (blocking, as Megatron runs
            them).
        transient_bytes: memory it allocates on top of the stash while it runs and frees by
            its end (per sample); ``fixed_transient_bytes`` the same independent of b.
        element_bytes: bytes of one element its matmuls read and write (2 for 16-bit).
    """

    matmuls: tuple[Matmul, ...] = ()
    memory_bytes: float = 0.0
    fixed_memory_bytes: float = 0.0
    kernels: int = 0
    collectives: tuple[CollectiveCall, ...] = ()
    transient_bytes: float = 0.0
    fixed_transient_bytes: float = 0.0
    element_bytes: float = 2.0
    reduction_bytes: float = 0.0
    random_bytes: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "matmuls", tuple(self.matmuls))
        checks.positive("pass element_bytes", self.element_bytes)
        object.__setattr__(self, "collectives", tuple(self.collectives))
        for attribute in (
            "memory_bytes",
            "fixed_memory_bytes",
            "transient_bytes",
            "fixed_transient_bytes",
            "reduction_bytes",
            "random_bytes",
        ):
            checks.non_negative(f"pass {attribute}", getattr(self, attribute))
        checks.non_negative_int("pass kernels", self.kernels)

    @property
    def flops_per_sample(self) -> float:
        """Matmul FLOPs per sample."""
        return sum(matmul.flops_per_sample for matmul in self.matmuls)

    def plus(self, other: PassWork) -> PassWork:
        """This pass followed by ``other`` in one action (a recomputed forward inside a
        backward): work and collectives add; the transient is the larger of the two."""
        return PassWork(
            self.matmuls + other.matmuls,
            self.memory_bytes + other.memory_bytes,
            self.fixed_memory_bytes + other.fixed_memory_bytes,
            self.kernels + other.kernels,
            self.collectives + other.collectives,
            max(self.transient_bytes, other.transient_bytes),
            max(self.fixed_transient_bytes, other.fixed_transient_bytes),
            self.element_bytes,
            self.reduction_bytes + other.reduction_bytes,
            self.random_bytes + other.random_bytes,
        )


@dataclass(frozen=True)
class LayerWork:
    """A layer's three passes; ``backward`` (I) includes any recomputed forward."""

    forward: PassWork = field(default_factory=PassWork)
    input_grad: PassWork = field(default_factory=PassWork)
    weight_grad: PassWork = field(default_factory=PassWork)

    def passes(self) -> tuple[PassWork, PassWork, PassWork]:
        """(F, I, W)."""
        return (self.forward, self.input_grad, self.weight_grad)
