"""Stages get contiguous layers: an even split by compute cost, or the user's layer counts."""

from __future__ import annotations

from collections.abc import Sequence

from pipesim.common.checks import SpecError
from pipesim.workload.model import Layer, Model


def check_partition(model: Model, counts: Sequence[int], stages: int) -> tuple[range, ...]:
    """Layer ranges from explicit per-stage layer counts, checked against the model."""
    return layer_ranges(counts, stages, len(model.layers), f"model {model.name!r}")


def layer_ranges(
    counts: Sequence[int], stages: int, layers: int, model: str = "the model"
) -> tuple[range, ...]:
    """Contiguous layer ranges from per-stage layer counts: one count per stage, each an
    integer >= 1, covering all ``layers``; ``model`` names the model in the errors. The
    simulator's ``--partition`` and the executor's ``split_model`` both cut by it.
    """
    shown = ",".join(map(str, counts))
    if len(counts) != stages:
        raise SpecError(
            f"partition has {len(counts)} stage(s) but the schedule has {stages}: {shown}"
        )
    if any(isinstance(c, bool) or not isinstance(c, int) or c < 1 for c in counts):
        raise SpecError(f"partition layer counts must be integers >= 1, got {shown}")
    if sum(counts) != layers:
        raise SpecError(f"partition covers {sum(counts)} layers but {model} has {layers}: {shown}")
    ranges, start = [], 0
    for count in counts:
        ranges.append(range(start, start + count))
        start += count
    return tuple(ranges)


def even_partition(model: Model, stages: int) -> tuple[range, ...]:
    """Split the layers into ``stages`` contiguous, non-empty ranges by training FLOPs
    (forward + input gradient + weight gradient).

    First the smallest achievable bottleneck (the largest stage's cost) is found; then each cut
    is placed as near as that bottleneck allows to the even split of the total (cut j near
    j/S of the cost). So the slowest stage is as fast as any split makes it, and the slack is
    spread evenly rather than piled onto the first stages.
    """
    layers = len(model.layers)
    if stages > layers:
        raise SpecError(
            f"stages: {stages} stages need at least {stages} layers, but model {model.name!r} "
            f"has {layers}"
        )
    costs = [layer.training_flops for layer in model.layers]
    if not any(costs):
        costs = [1.0] * layers
    limit = _smallest_bottleneck(costs, stages)
    prefix = [0.0]
    for cost in costs:
        prefix.append(prefix[-1] + cost)
    earliest = _earliest_cuts(costs, stages, limit)
    cuts, previous = [0], 0
    for j in range(1, stages):
        latest = previous + 1
        while latest < layers - (stages - j) and prefix[latest + 1] - prefix[previous] <= limit * (
            1 + 1e-12
        ):
            latest += 1
        target = j * prefix[-1] / stages
        nearest = min(range(previous + 1, latest + 1), key=lambda c: abs(prefix[c] - target))
        previous = max(earliest[j], nearest)
        cuts.append(previous)
    cuts.append(layers)
    return tuple(range(cuts[j], cuts[j + 1]) for j in range(stages))


def _smallest_bottleneck(costs: list[float], stages: int) -> float:
    """The least possible cost of the largest stage (binary search, greedy feasibility)."""
    low, high = max(costs), sum(costs)
    for _ in range(200):
        if high - low <= 1e-12 * high:
            break
        middle = (low + high) / 2
        if _fits(costs, stages, middle):
            high = middle
        else:
            low = middle
    return high


def _fits(costs: list[float], stages: int, limit: float) -> bool:
    """Can the layers go into ``stages`` contiguous stages of cost <= ``limit`` each?"""
    used, total = 1, 0.0
    for cost in costs:
        if cost > limit * (1 + 1e-12):
            return False
        if total + cost > limit * (1 + 1e-12):
            used, total = used + 1, 0.0
        total += cost
    return used <= stages


def _earliest_cuts(costs: list[float], stages: int, limit: float) -> list[int]:
    """``earliest[j]``: the first layer stage j may start at so that the layers from there on
    still fit into the stages j..S-1 (packing the last stages as full as the limit allows)."""
    layers = len(costs)
    earliest = [0] * (stages + 1)
    earliest[stages] = layers
    start = layers
    for j in range(stages - 1, 0, -1):
        total = 0.0
        while start > j and total + costs[start - 1] <= limit * (1 + 1e-12):
            total += costs[start - 1]
            start -= 1
        if total == 0.0 and start > j:  # a single layer always fits
            start -= 1
        earliest[j] = start
    return earliest


def stage_parameters(layers: Sequence[Layer], counts: Sequence[int]) -> list[float]:
    """The parameters each stage of ``counts`` consecutive ``layers`` holds. A tied output
    layer's copy of the word embeddings (its ``shared_parameters``) is held again only by a
    stage that does not also hold the embedding: one device holding both holds one copy."""
    held, start = [], 0
    for count in counts:
        span = layers[start : start + count]
        total = sum(layer.parameters for layer in span)
        if start == 0:  # the embedding's stage: a tied copy on it is no second copy
            total -= sum(layer.shared_parameters for layer in span)
        held.append(total)
        start += count
    return held
