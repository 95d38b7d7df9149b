"""The software recipe of a run: how the training framework of an era executes a step.

The same model on the same hardware with the same parallel layout runs at different speeds under
Megatron-LM of 2021, Megatron-Core of 2024, DeepSpeed's pipeline engine or torchtitan, because
the software makes different choices: whether a pipeline message blocks its sender, whether a
weight gradient is added to its buffer by the matmul or by a pass of its own, whether the
data-parallel reduction overlaps the last backward, how attention is computed, and what a
message costs besides its bytes. A :class:`Recipe` names those choices in one value, and every
choice says where it comes from (:attr:`Recipe.sources`: a commit, a document or a measurement).

The catalogue models are architectures only; what software trains them is the run's recipe
(:class:`pipesim.config.run_config.RunConfig`), :data:`DEFAULT_RECIPE` unless one is named.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from pipesim.common import checks
from pipesim.common.checks import SpecError
from pipesim.workload.architecture import Attention

# The fields a recipe sets, each of which its sources must cite.
CHOICES = (
    "blocking_p2p",
    "fused_gradient_accumulation",
    "overlap_grad_reduce",
    "attention",
    "message_overhead_s",
    "scatter_gather_p2p",
    "tp_comm_overlap",
)


@dataclass(frozen=True)
class Recipe:
    """How the software runs a step (see the module docstring).

    Attributes:
        name: the recipe's name (``megatron-lm-2021``).
        description: one line: the framework, its era, what sets it apart.
        blocking_p2p: every pipeline send and receive waits for completion on the compute
            stream (the sender does nothing else meanwhile); False: messages overlap compute.
        fused_gradient_accumulation: the weight-gradient matmuls add into the gradient buffer
            themselves; False: each weight gradient is written, then added by a pass of its own
            (memory-bound: it reads and writes the buffer).
        overlap_grad_reduce: the data-parallel gradient reduction of a stage overlaps its last
            backward (bucketed, as PyTorch's DDP); False: it starts after the backward ends.
        attention: how attention is computed (eager or flash); None: as the model's
            architecture says.
        message_overhead_s: what one pipeline message costs besides its bytes (the send and
            receive calls, their synchronisation); None: the hardware spec's figure.
        scatter_gather_p2p: under tensor parallelism without sequence parallelism, each of the
            T ranks sends 1/T of a pipeline message and the receivers all-gather it (Megatron-LM's
            scatter/gather, on by default until the pipeline code moved to megatron/core);
            False: every rank sends the whole tensor to its peer.
        tp_comm_overlap: the tensor-parallel all-gathers and reduce-scatters run while the
            matrix multiplies beside them do (Transformer Engine's userbuffers,
            ``--tp-comm-overlap``); False: each collective waits for its GEMM and delays the next.
        sources: for each of :data:`CHOICES`, where its value comes from.
    """

    name: str
    description: str
    blocking_p2p: bool = False
    fused_gradient_accumulation: bool = True
    overlap_grad_reduce: bool = False
    attention: Attention | None = None
    message_overhead_s: float | None = None
    scatter_gather_p2p: bool = True
    tp_comm_overlap: bool = False
    sources: Mapping[str, str] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        checks.name("recipe.name", self.name)
        if not isinstance(self.description, str):
            raise SpecError(f"recipe.description must be text, got {self.description!r}")
        if not isinstance(self.sources, Mapping) or not all(
            key in CHOICES and isinstance(text, str) for key, text in self.sources.items()
        ):
            raise SpecError(
                f"recipe.sources must map choices ({', '.join(CHOICES)}) to text, got "
                f"{self.sources!r}"
            )
        for flag in (
            "blocking_p2p",
            "fused_gradient_accumulation",
            "overlap_grad_reduce",
            "scatter_gather_p2p",
            "tp_comm_overlap",
        ):
            if not isinstance(getattr(self, flag), bool):
                raise SpecError(f"recipe.{flag} must be true or false, got {getattr(self, flag)!r}")
        if self.attention is not None and not isinstance(self.attention, Attention):
            raise SpecError(f"recipe.attention must be an Attention, got {self.attention!r}")
        if self.message_overhead_s is not None:
            checks.non_negative("recipe.message_overhead_s", self.message_overhead_s)
        object.__setattr__(self, "sources", MappingProxyType(dict(self.sources)))

    def with_choices(
        self, choices: Mapping[str, object], why: str = "asked for on this run"
    ) -> Recipe:
        """This recipe with some choices changed (a run's own settings: the command line's
        ``--overlap-grad-reduce``, ``--attention``, ``--blocking-p2p``); its name says what was
        changed, and each changed choice's source is ``why``."""
        if not isinstance(choices, Mapping):
            raise SpecError(f"a recipe's changed choices must map names to values, got {choices!r}")
        unknown = sorted(set(choices) - set(CHOICES))
        if unknown:
            raise SpecError(
                f"a recipe has no choice {unknown[0]!r}; its choices: {', '.join(CHOICES)}"
            )
        changed = {key: value for key, value in choices.items() if getattr(self, key) != value}
        if not changed:
            return self
        sources = dict(self.sources)
        for key in changed:
            sources[key] = why
        label = ", ".join(f"{key}={_shown(value)}" for key, value in sorted(changed.items()))
        return dataclasses.replace(
            self,
            name=f"{self.name}+{'+'.join(sorted(changed))}",
            description=f"{self.description} (changed: {label})",
            sources=sources,
            **changed,  # type: ignore[arg-type]  # each checked by __post_init__
        )

    def __reduce__(self) -> tuple[Any, tuple[dict[str, Any]]]:
        """Pickled as its fields, the sources a plain dict (a mapping proxy does not pickle):
        a worker process rebuilds the same recipe."""
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        fields["sources"] = dict(self.sources)
        return _rebuilt, (fields,)

    def to_json(self) -> dict[str, object]:
        """The recipe as a result's JSON states it: its name and every choice."""
        return {
            "name": self.name,
            "blocking_p2p": self.blocking_p2p,
            "fused_gradient_accumulation": self.fused_gradient_accumulation,
            "overlap_grad_reduce": self.overlap_grad_reduce,
            "attention": None if self.attention is None else self.attention.value,
            "message_overhead_s": self.message_overhead_s,
            "scatter_gather_p2p": self.scatter_gather_p2p,
            "tp_comm_overlap": self.tp_comm_overlap,
        }

    def describe(self) -> str:
        """One line: the name and the choices (``megatron-lm-2021: blocking P2P, unfused
        gradient accumulation, ...``)."""
        words = [
            "blocking P2P" if self.blocking_p2p else "overlapped P2P",
            "fused gradient accumulation"
            if self.fused_gradient_accumulation
            else "gradient accumulation a pass of its own",
            "gradient reduce overlapping the backward"
            if self.overlap_grad_reduce
            else "gradient reduce after the backward",
            "attention as the model's"
            if self.attention is None
            else f"{self.attention.value} attention",
            "message overhead as the hardware's"
            if self.message_overhead_s is None
            else f"{self.message_overhead_s * 1e3:g} ms per message",
            "messages scattered over the tensor-parallel ranks"
            if self.scatter_gather_p2p
            else "whole messages from every tensor-parallel rank",
            "tensor-parallel collectives overlapping the GEMMs"
            if self.tp_comm_overlap
            else "tensor-parallel collectives between the GEMMs",
        ]
        return f"{self.name}: {', '.join(words)}"


def _rebuilt(fields: dict[str, Any]) -> Recipe:
    return Recipe(**fields)


def _shown(value: object) -> str:
    if isinstance(value, Attention):
        return value.value
    return str(value).lower() if isinstance(value, bool) else f"{value}"
