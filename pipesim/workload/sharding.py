"""A model's layers as one tensor-parallel rank holds them, under a parallel configuration.

A model given by its architecture is rebuilt for the configuration
(:func:`pipesim.workload.transformer.transformer_layers`); a model given as layers has no
heads or widths to split, so only data parallelism and optimizer sharding apply to it. With the
plain configuration (T = 1, no sequence parallelism, no recomputation) every model's layers are
its own, unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipesim.common.checks import SpecError
from pipesim.errors import named
from pipesim.parallel.config import Parallelism, RecomputeMode
from pipesim.workload.architecture import Attention
from pipesim.workload.model import Layer, Model
from pipesim.workload.transformer import is_block, transformer_layers


@dataclass(frozen=True)
class ShardedLayers:
    """The layers of one rank, and for ``--recompute N`` their fully recomputed twins.

    Attributes:
        layers: one per model layer, as the configuration builds them (under ``--recompute
            N``: without recomputation; a stage swaps in the twins of its first N blocks).
        recomputed: None, or the same layers with every block fully recomputed.
        recompute_first: N of ``--recompute N`` (None otherwise).
    """

    layers: tuple[Layer, ...]
    recomputed: tuple[Layer, ...] | None = None
    recompute_first: int | None = None

    def for_stage(self, layer_range: range) -> list[Layer]:
        """The layers of a stage holding ``layer_range``: its first N blocks recomputed under
        ``--recompute N`` (Megatron's block method), the others as built."""
        layers = [self.layers[i] for i in layer_range]
        if self.recomputed is None or not self.recompute_first:
            return layers
        left = self.recompute_first
        for position, index in enumerate(layer_range):
            if left == 0:
                break
            if is_block(self.layers[index]):
                layers[position] = self.recomputed[index]
                left -= 1
        return layers

    def offloaded(self, count: int) -> tuple[bool, ...]:
        """Which of the layers keep their stash on the host under ``offload_activations``
        ``count``: the model's first ``count`` transformer blocks, wherever the pipeline puts
        them (Megatron-Core's ``--cpu-offloading-num-layers``, which it runs without a
        pipeline: its first N layers). Refused in one line unless fewer than the model's
        blocks: the last block's backward follows its forward at once, nothing would hide
        its reload (Megatron-Core refuses N >= its layers likewise)."""
        if not count:
            return (False,) * len(self.layers)
        blocks = sum(1 for layer in self.layers if is_block(layer))
        if count >= blocks:
            raise SpecError(
                f"{named('offload_activations')} {count} must be fewer than the model's "
                f"{blocks:,} transformer blocks (the last block's stash is used as soon as "
                "it is made; a model given as layers has no blocks to offload)"
            )
        flags, left = [], count
        for layer in self.layers:
            chosen = left > 0 and is_block(layer)
            flags.append(chosen)
            left -= chosen
        return tuple(flags)


def needs_rebuild(parallelism: Parallelism) -> bool:
    """True when the configuration changes what a layer computes or stashes."""
    return (
        parallelism.tensor > 1
        or parallelism.sequence_parallel
        or parallelism.recompute.mode is not RecomputeMode.NONE
        or parallelism.context > 1
        or parallelism.expert > 1
        or parallelism.folded
    )


def sharded_layers(model: Model, parallelism: Parallelism) -> ShardedLayers:
    """``model``'s layers on one tensor-parallel rank under ``parallelism``."""
    if not needs_rebuild(parallelism):
        return ShardedLayers(model.layers)
    arch = model.architecture
    if arch is None:
        raise SpecError(
            f"model {model.name!r} is given as layers, with no heads or widths to split: "
            f"{named('tensor_parallel')}, {named('sequence_parallel')} and "
            f"{named('recompute')}, {named('context_parallel')} and {named('expert_parallel')} "
            f"need a transformer model (got {parallelism.label()}); "
            f"{named('remat')} re-materializes any model's stages"
        )
    options = {
        "gradient_bytes": model.gradient_bytes_per_parameter,
        "fused_accumulation": model.fused_gradient_accumulation,
    }
    recompute = parallelism.recompute
    if recompute.layers_per_stage is None:
        return ShardedLayers(transformer_layers(arch, parallelism, **options))  # type: ignore[arg-type]
    plain = transformer_layers(arch, parallelism, recompute=RecomputeMode.NONE, **options)  # type: ignore[arg-type]
    full = transformer_layers(arch, parallelism, recompute=RecomputeMode.FULL, **options)  # type: ignore[arg-type]
    return ShardedLayers(plain, full, recompute.layers_per_stage)


def attention_kind(model: Model, attention: str) -> Attention:
    """The attention implementation ``attention`` names (``eager`` or ``flash``), for a model
    that has attention to choose: only a model given by its architecture does."""
    choices = ", ".join(kind.value for kind in Attention)
    try:
        kind = Attention(attention)
    except ValueError:
        raise SpecError(
            f"{named('attention')} must be one of {choices}, got {attention!r}"
        ) from None
    if model.architecture is None:
        raise SpecError(
            f"{named('attention')} {attention}: model {model.name!r} is given as layers, with no "
            "attention to choose; it needs a transformer model"
        )
    return kind
