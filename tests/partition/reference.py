"""Brute force: every composition of L layers into S stages, for the partitioner's tests."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence

from pipesim.partition import MemoryForm, PartitionProblem, device_peaks, stage_times


def compositions(layers: int, stages: int) -> Iterator[tuple[int, ...]]:
    """Every way to cut ``layers`` into ``stages`` non-empty contiguous stages."""
    for cuts in itertools.combinations(range(1, layers), stages - 1):
        bounds = (0, *cuts, layers)
        yield tuple(bounds[i + 1] - bounds[i] for i in range(stages))


def brute_bottleneck(problem: PartitionProblem) -> float:
    """The least slowest-stage time over every partition."""
    return min(
        max(stage_times(problem, counts))
        for counts in compositions(len(problem.layers), problem.stages)
    )


def brute_memory_aware(problem: PartitionProblem, forms: Sequence[MemoryForm]) -> float | None:
    """The least slowest-stage time over partitions that fit every device (None: none fits)."""
    capacities = problem.memory_capacity_bytes or ()
    best = None
    for counts in compositions(len(problem.layers), problem.stages):
        peaks = device_peaks(problem, forms, counts)
        if all(peak <= capacities[d] for d, peak in enumerate(peaks)):
            time = max(stage_times(problem, counts))
            best = time if best is None else min(best, time)
    return best
