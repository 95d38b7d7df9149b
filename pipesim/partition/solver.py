"""Exact partitioning: the least bottleneck, and the fastest partition that fits memory.

``balanced``: dynamic programming over (stage, last layer): ``best[s][j]`` is the least possible
slowest-stage time of layers [0, j) cut into stages 0..s, so ``best[s][j] = min over i of
max(best[s-1][i], time(s, i, j))`` (O(S·L²), vectorised over i and j). Stage times include
boundary transfers on the actual devices and each device's speed (see
:mod:`pipesim.partition.problem`). Among the partitions with that least bottleneck a second pass
picks the one with the least sum of squared stage times, so the slack is spread rather than
piled onto a few stages.

``memory_aware``: the same program with every stage that would overflow its device removed,
when each device holds one stage (v = 1): exact. With several stages per device (interleaved,
V-shaped) a device's peak couples stages far apart, so the search is a binary search over the
candidate bottlenecks with a depth-first feasibility search (stage times bounded, each device's
memory checked as soon as its stages are known, a lower bound checked before); exact unless
the node budget runs out, which the result says.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pipesim.common.checks import SpecError
from pipesim.common.limits import Limit, check
from pipesim.common.units import format_bytes
from pipesim.costs.pipeline_costs import StageCosts
from pipesim.memory.forms import MemoryForm
from pipesim.memory.rules import activation_level_bytes, static_memory_bytes
from pipesim.partition.problem import PartitionProblem, counts_to_cuts

_TOLERANCE = 1e-9
NODE_BUDGET = 200_000


class NoPartitionFits(SpecError):
    """No partition fits the devices' memory; the message names the device and the bytes."""


@dataclass(frozen=True)
class Partition:
    """Layers per stage and what they cost.

    Attributes:
        counts: layers per stage.
        stage_times_s: the balanced objective's time of each stage (per micro-batch).
        exact: False only when a search ran out of its node budget.
    """

    counts: tuple[int, ...]
    stage_times_s: tuple[float, ...]
    exact: bool = True

    @property
    def bottleneck_s(self) -> float:
        """The slowest stage's time."""
        return max(self.stage_times_s)

    @property
    def imbalance(self) -> float:
        """Slowest stage over the mean stage (1 is perfect balance)."""
        mean = sum(self.stage_times_s) / len(self.stage_times_s)
        return self.bottleneck_s / mean if mean > 0 else 1.0


def stage_times(problem: PartitionProblem, counts: Sequence[int]) -> tuple[float, ...]:
    """The balanced objective's time of each stage of ``counts``."""
    cuts = counts_to_cuts(counts)
    return tuple(problem.stage_time_s(s, cuts[s], cuts[s + 1]) for s in range(len(counts)))


def partition_stage_costs(problem: PartitionProblem, counts: Sequence[int]) -> list[StageCosts]:
    """Each stage's :class:`StageCosts` on its device."""
    cuts = counts_to_cuts(counts)
    return [
        problem.stage_costs(cuts[s], cuts[s + 1], problem.placement[s]) for s in range(len(counts))
    ]


def device_peaks(
    problem: PartitionProblem, forms: Sequence[MemoryForm], counts: Sequence[int]
) -> tuple[float, ...]:
    """Each device's peak memory for ``counts`` (the simulator's figure)."""
    costs = partition_stage_costs(problem, counts)
    return tuple(form.peak_bytes(costs) for form in forms)


def balanced(problem: PartitionProblem) -> Partition:
    """The partition with the least slowest-stage time (exact)."""
    if problem.stages == 1:  # one stage holds every layer: no table to fill
        return Partition((len(problem.layers),), stage_times(problem, (len(problem.layers),)))
    matrices = _time_matrices(problem)
    counts = _solve(matrices, len(problem.layers))
    if counts is None:  # pragma: no cover - every shape with S <= L has a partition
        raise SpecError("no partition: more stages than layers")
    return Partition(counts, stage_times(problem, counts))


def memory_aware(
    problem: PartitionProblem, forms: Sequence[MemoryForm], budget_nodes: int | None = None
) -> Partition:
    """The partition with the least slowest-stage time among those whose every device's peak
    fits its memory; :class:`NoPartitionFits` names the overflowing device when none does.
    ``budget_nodes`` caps the search with several stages per device (default
    :data:`NODE_BUDGET`)."""
    if len(forms) != problem.devices:
        raise SpecError(
            f"memory forms describe {len(forms)} device(s) but the placement uses {problem.devices}"
        )
    first = balanced(problem)
    if _fits(problem, forms, first.counts):
        return first
    if problem.stages == 1:
        raise _no_fit(problem, forms, first.counts)
    if all(len(form.stages) == 1 for form in forms):
        matrices = _time_matrices(problem)
        memory = [
            np.where(np.isfinite(t), mem, np.inf)
            for t, mem in zip(matrices, _memory_matrices(problem, forms), strict=True)
        ]
        masked = [np.where(mem <= 0.0, t, np.inf) for t, mem in zip(matrices, memory, strict=True)]
        counts = _solve(masked, len(problem.layers))
        if counts is None:
            least = _solve(memory, len(problem.layers))
            raise _no_fit(problem, forms, least if least is not None else first.counts)
        return Partition(counts, stage_times(problem, counts))
    return _search(problem, forms, first, budget_nodes)


def _fits(problem: PartitionProblem, forms: Sequence[MemoryForm], counts: Sequence[int]) -> bool:
    capacities = problem.memory_capacity_bytes or ()
    peaks = device_peaks(problem, forms, counts)
    return all(peak <= capacities[d] for d, peak in enumerate(peaks))


def _no_fit(
    problem: PartitionProblem, forms: Sequence[MemoryForm], counts: Sequence[int]
) -> NoPartitionFits:
    capacities = problem.memory_capacity_bytes or ()
    peaks = device_peaks(problem, forms, counts)
    device = max(range(len(peaks)), key=lambda d: peaks[d] - capacities[d])
    over = peaks[device] - capacities[device]
    return NoPartitionFits(
        f"no partition fits memory: even the partition needing the least "
        f"({','.join(map(str, counts))}) overflows device {device} by {format_bytes(over)} "
        f"({over:.0f} bytes; needs {format_bytes(peaks[device])} of "
        f"{format_bytes(capacities[device])})"
    )


# -- the dynamic program -------------------------------------------------------------------


def _time_matrices(problem: PartitionProblem) -> list[np.ndarray]:
    """Per stage s, T[i, j] = time of stage s holding layers [i, j) (inf where not allowed)."""
    layers, stages = len(problem.layers), problem.stages
    cells = stages * (layers + 1) ** 2  # estimated before any table is allocated
    check(
        Limit.PARTITION_CELLS,
        cells,
        f"partition of {layers:,} layers into {stages:,} stages: {cells:,} table cells",
    )
    prefixes: dict[int, np.ndarray] = {}
    for device in set(problem.placement):
        times = [problem.compute_s(x) for x in problem.layers_on(device)]
        prefixes[device] = np.concatenate(([0.0], np.cumsum(times)))
    speeds = problem.device_speeds or ()
    sizes = np.array([0.0] + [x.output_bytes for x in problem.layers])  # crossing cut c
    boundary: dict[int, np.ndarray] = {}

    def cuts_between(stage: int) -> np.ndarray:
        """Boundary time at each cut 0..L between stage-1 and stage."""
        if stage not in boundary:
            boundary[stage] = _boundary_times(problem, stage, sizes)
        return boundary[stage]

    index = np.arange(layers + 1)
    matrices = []
    for s in range(stages):
        speed = speeds[problem.placement[s]]
        prefix = prefixes[problem.placement[s]]
        times = (prefix[None, :] - prefix[:, None]) / speed
        if s > 0:
            times = times + cuts_between(s)[:, None]
        if s + 1 < stages:
            times = times + cuts_between(s + 1)[None, :]
        allowed = (
            (index[:, None] < index[None, :])
            & (index[:, None] >= s)
            & (index[None, :] <= layers - (stages - 1 - s))
        )
        matrices.append(np.asarray(np.where(allowed, times, np.inf), dtype=float))
    return matrices


def _boundary_times(problem: PartitionProblem, stage: int, sizes: np.ndarray) -> np.ndarray:
    """:meth:`PartitionProblem.boundary_s` at every cut at once."""
    times = np.zeros(len(sizes))
    source, target = problem.placement[stage - 1], problem.placement[stage]
    if problem.network is None or source == target:
        return times
    for a, b in ((source, target), (target, source)):
        # The route's own formula, applied to the whole array (numpy divides elementwise).
        times += problem.network.route(a, b).transfer_time_s(sizes)
    times[0] = times[-1] = 0.0
    return times


def _memory_parts(
    problem: PartitionProblem, forms: Sequence[MemoryForm]
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per stage s: its static bytes S[i, j] holding layers [i, j), and its share of each of
    its device's activation levels A[l, i, j] (so a device's peak is the sum of its stages'
    S plus the largest over l of the sum of their A[l])."""
    layers = problem.layers

    def prefix(values: list[float]) -> np.ndarray:
        return np.concatenate(([0.0], np.cumsum(values)))

    def span(p: np.ndarray) -> np.ndarray:
        return np.asarray(p[None, :] - p[:, None], dtype=float)

    params = span(prefix([x.parameter_bytes for x in layers]))
    gradients = span(prefix([x.gradient_bytes for x in layers]))
    optimizer = span(prefix([x.optimizer_bytes for x in layers]))
    stash = span(prefix([x.activation_bytes for x in layers]))
    keep = span(prefix([x.weight_grad_activation_bytes for x in layers]))
    inputs = np.broadcast_to(
        np.array([problem.input_bytes] + [x.output_bytes for x in layers])[:, None], stash.shape
    )
    parts = []
    for s in range(problem.stages):
        form = forms[problem.placement[s]]
        slot = 3 * form.stages.index(s)
        # the memory model's own rules (pipesim.memory.rules), over every span [i, j) at once
        static = static_memory_bytes(params, gradients, optimizer, form.versions)
        levels = np.array(
            [
                activation_level_bytes(counts[slot : slot + 3], stash, keep, inputs)
                for counts in form.levels
            ]
            or [np.zeros_like(static)]
        )
        parts.append((static, levels))
    return parts


def _memory_matrices(problem: PartitionProblem, forms: Sequence[MemoryForm]) -> list[np.ndarray]:
    """For one stage per device: M[i, j] = peak - capacity of stage s holding [i, j)."""
    capacities = problem.memory_capacity_bytes or ()
    return [
        static + np.maximum(levels.max(axis=0), 0.0) - capacities[problem.placement[s]]
        for s, (static, levels) in enumerate(_memory_parts(problem, forms))
    ]


def _solve(matrices: list[np.ndarray], layers: int) -> tuple[int, ...] | None:
    """Min-max over stages of matrices[s][i, j], ties broken by the least sum of squares."""
    stages = len(matrices)
    best = np.full(layers + 1, np.inf)
    best[0] = -np.inf
    for matrix in matrices:
        best = np.min(np.maximum(best[:, None], matrix), axis=0)
    bottleneck = best[layers]
    if not math.isfinite(bottleneck):
        return None
    limit = bottleneck + _TOLERANCE * max(1.0, abs(bottleneck))
    squares = np.full(layers + 1, np.inf)
    squares[0] = 0.0
    choices = []
    for matrix in matrices:
        within = np.where(matrix <= limit, np.square(np.maximum(matrix, 0.0)), np.inf)
        total = squares[:, None] + within
        choice = np.argmin(total, axis=0)
        squares = total[choice, np.arange(layers + 1)]
        choices.append(choice)
    end, counts = layers, []
    for s in range(stages - 1, -1, -1):
        start = int(choices[s][end])
        counts.append(end - start)
        end = start
    return tuple(reversed(counts))


# -- several stages per device: bisection with a depth-first search -------------------------


def _search(
    problem: PartitionProblem,
    forms: Sequence[MemoryForm],
    first: Partition,
    budget_nodes: int | None = None,
) -> Partition:
    matrices = _time_matrices(problem)
    layers, stages = len(problem.layers), problem.stages
    candidates = np.unique(np.concatenate([m[np.isfinite(m)] for m in matrices]))
    candidates = candidates[candidates >= first.bottleneck_s * (1 - _TOLERANCE)]
    capacities = problem.memory_capacity_bytes or ()
    budget = [NODE_BUDGET if budget_nodes is None else budget_nodes]
    parts = _memory_parts(problem, forms)
    firsts = [form.stages[0] for form in forms]

    def feasible(limit: float) -> tuple[int, ...] | None:
        # reach[s][i]: layers [i, L) split into stages s.. with every stage time <= limit
        reach = np.zeros((stages + 1, layers + 1), dtype=bool)
        reach[stages, layers] = True
        for stage in range(stages - 1, -1, -1):
            allowed = (matrices[stage] <= limit) & reach[stage + 1][None, :]
            reach[stage] = allowed.any(axis=1)
        if not reach[0, 0]:
            return None
        static_acc = [0.0] * problem.devices
        level_acc = [np.zeros(len(parts[s][1])) for s in firsts]
        counts: list[int] = []

        def go(stage: int, start: int) -> bool:
            if stage == stages:
                return start == layers
            budget[0] -= 1
            if budget[0] < 0:
                return False
            device = problem.placement[stage]
            static, levels = parts[stage]
            # stages not placed yet count as empty: a lower bound on the device's peak
            statics = static_acc[device] + static[start]
            level_rows = level_acc[device][:, None] + levels[:, start, :]
            peaks = statics + np.maximum(level_rows.max(axis=0), 0.0)
            ok = (
                (matrices[stage][start] <= limit) & reach[stage + 1] & (peaks <= capacities[device])
            )
            for end in np.flatnonzero(ok):
                saved = static_acc[device], level_acc[device]
                static_acc[device] = float(statics[end])
                level_acc[device] = level_rows[:, end]
                counts.append(int(end) - start)
                if go(stage + 1, int(end)):
                    return True
                counts.pop()
                static_acc[device], level_acc[device] = saved
                if budget[0] < 0:
                    break
            return False

        return tuple(counts) if go(0, 0) else None

    low, high, found = 0, len(candidates) - 1, None
    loosest = feasible(float(candidates[high]) * (1 + _TOLERANCE))  # any fit at all?
    if loosest is None:
        low = high + 1
    else:
        found, high = loosest, high - 1
    while low <= high and budget[0] > 0:
        middle = (low + high) // 2
        counts = feasible(float(candidates[middle]) * (1 + _TOLERANCE))
        if counts is not None:
            found, high = counts, middle - 1
        elif budget[0] > 0:
            low = middle + 1
    exact = budget[0] > 0
    if found is None:
        if exact:
            raise _no_fit(problem, forms, first.counts)
        raise NoPartitionFits(
            f"no partition that fits memory found within the search budget of "
            f"{NODE_BUDGET if budget_nodes is None else budget_nodes} nodes for {stages} "
            f"stages of {layers} layers (the balanced one overflows)"
        )
    return Partition(found, stage_times(problem, found), exact=exact)
