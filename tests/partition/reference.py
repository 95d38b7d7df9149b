"""Brute force: every composition of L layers into S stages, for the partitioner's tests."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence

import numpy as np

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


def full_table_solve(matrices: Sequence[np.ndarray], layers: int) -> tuple[int, ...] | None:
    """The balanced dynamic program over every cell of every table (the solver reads each
    stage's window only): min-max over stages of matrices[s][i, j], ties broken by the least
    sum of squares of each value over the bottleneck, the first start at each step back."""
    best = np.full(layers + 1, np.inf)
    best[0] = -np.inf
    for matrix in matrices:
        best = np.min(np.maximum(best[:, None], matrix), axis=0)
    bottleneck = best[layers]
    if not math.isfinite(bottleneck):
        return None
    limit = bottleneck + 1e-9 * max(1.0, abs(bottleneck))
    scale = bottleneck if bottleneck > 0 else 1.0
    squares = np.full(layers + 1, np.inf)
    squares[0] = 0.0
    choices = []
    for matrix in matrices:
        within = np.where(matrix <= limit, np.square(np.maximum(matrix, 0.0) / scale), np.inf)
        total = squares[:, None] + within
        choice = np.argmin(total, axis=0)
        squares = total[choice, np.arange(layers + 1)]
        choices.append(choice)
    end, counts = layers, []
    for s in range(len(matrices) - 1, -1, -1):
        start = int(choices[s][end])
        counts.append(end - start)
        end = start
    return tuple(reversed(counts))
