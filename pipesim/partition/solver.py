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

Under ``--recompute N`` (:class:`~pipesim.partition.problem.RecomputeFirst`) a stage's time and
memory are those of its layers with the twins of its first N blocks swapped in: for a stage
starting at layer i those are the blocks in [i, e_i), e_i the layer after the N-th block from i,
so every table above is its plain prefix sums plus the twins' differences summed over
[i, min(j, e_i)): the same programs, exact for it too.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from pipesim.common.checks import SpecError
from pipesim.common.limits import Limit, check
from pipesim.common.units import format_bytes
from pipesim.costs.pipeline_costs import StageCosts
from pipesim.memory.forms import SLOT, MemoryForm
from pipesim.memory.rules import (
    activation_level_bytes,
    peak_with_allowances,
    stage_static_bytes,
    static_memory_bytes,
    transient_bytes,
)
from pipesim.partition.blocks import UNKNOWN, BlockFeasibility
from pipesim.partition.prefixed_blocks import PrefixedFeasibility, shaped_feasibility
from pipesim.partition.problem import PartitionProblem, counts_to_cuts
from pipesim.schedules.encoded import KINDS

_TOLERANCE = 1e-9
NODE_BUDGET = 200_000


class NoPartitionFits(SpecError):
    """No partition fits the devices' memory; the message names the device and the bytes."""


class BeyondComputeLimit(Exception):
    """Every partition that fits memory gives some stage more compute per micro-batch than
    the limit asked for (proved, not searched out of budget): a caller that needs M times
    that compute to beat what it has can drop the configuration."""

    def __init__(self, limit_s: float) -> None:
        super().__init__(f"every partition that fits memory has a stage over {limit_s:.6g} s")
        self.limit_s = limit_s


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
    return stage_peaks(problem, forms, partition_stage_costs(problem, counts))


def stage_peaks(
    problem: PartitionProblem, forms: Sequence[MemoryForm], stages: Sequence[StageCosts]
) -> tuple[float, ...]:
    """Each device's peak memory for these stages' costs, with the problem's runtime reserve
    and fragmentation allowance (the simulator's figure)."""
    reserve, fragmentation = problem.runtime_reserve_bytes, problem.fragmentation_fraction
    return tuple(form.peak_bytes(stages, reserve, fragmentation) for form in forms)


def balanced(problem: PartitionProblem, matrices: list[np.ndarray] | None = None) -> Partition:
    """The partition with the least slowest-stage time (exact); ``matrices`` are the
    problem's stage-time tables when the caller has them already."""
    if problem.stages == 1:  # one stage holds every layer: no table to fill
        return Partition((len(problem.layers),), stage_times(problem, (len(problem.layers),)))
    if matrices is None:  # the program reads each stage's window alone: made so
        counts = _solve(_time_matrices(problem, windowed=True), len(problem.layers), True)
    else:
        counts = _solve(matrices, len(problem.layers))
    if counts is None:  # pragma: no cover - every shape with S <= L has a partition
        raise SpecError("no partition: more stages than layers")
    return Partition(counts, stage_times(problem, counts))


def memory_aware(
    problem: PartitionProblem,
    forms: Sequence[MemoryForm],
    budget_nodes: int | None = None,
    first: Partition | None = None,
    compute_limit_s: float = math.inf,
) -> Partition:
    """The partition with the least slowest-stage time among those whose every device's peak
    fits its memory; :class:`NoPartitionFits` names the overflowing device when none does.
    ``budget_nodes`` caps the search with several stages per device (default
    :data:`NODE_BUDGET`); ``first`` is the problem's balanced partition when the caller has
    it already.

    ``compute_limit_s`` (a planner's: the time to beat over the micro-batches) lets the search
    stop early: where every partition that fits memory puts more than it on some stage's
    least compute (:func:`_least_compute_matrices`), :class:`BeyondComputeLimit` says so
    instead of searching on. The answer is otherwise the same: the partitions are first
    searched with every stage's time at most the limit (where the optimum lies, the same
    optimum and the same partition), then, when none is found, the limit is proved on the
    compute alone, and only when that fails does the search run without it."""
    if len(forms) != problem.devices:
        raise SpecError(
            f"memory forms describe {len(forms)} device(s) but the placement uses {problem.devices}"
        )
    matrices = _time_matrices(problem) if problem.stages > 1 and first is None else None
    if first is None:
        first = balanced(problem, matrices)
    if _fits(problem, forms, first.counts):
        return first
    if problem.stages == 1:
        raise _no_fit(problem, forms, first.counts)
    if matrices is None:
        matrices = _time_matrices(problem)
    capped = math.isfinite(compute_limit_s)
    if all(len(form.stages) == 1 for form in forms):
        memory = [
            np.where(np.isfinite(t), mem, np.inf)
            for t, mem in zip(matrices, _memory_matrices(problem, forms, matrices), strict=True)
        ]
        masked = [np.where(mem <= 0.0, t, np.inf) for t, mem in zip(matrices, memory, strict=True)]
        counts, solved = None, False
        if capped:
            limit = compute_limit_s * (1 + _TOLERANCE)
            within = [np.where(t <= limit, t, np.inf) for t in masked]
            counts = _solve(within, len(problem.layers))
            if counts is not None:  # the optimum is within: the same partition
                return Partition(counts, stage_times(problem, counts))
            fitting = [
                np.where((mem <= 0.0) & (c <= limit), c, np.inf)
                for c, mem in zip(_least_compute_matrices(problem), memory, strict=True)
            ]
            if _solve(fitting, len(problem.layers)) is None:
                counts, solved = _solve(masked, len(problem.layers)), True
                if counts is not None:  # proved only where some partition fits at all
                    raise BeyondComputeLimit(compute_limit_s)
        if not solved:
            counts = _solve(masked, len(problem.layers))
        if counts is None:
            least = _solve(memory, len(problem.layers))
            raise _no_fit(problem, forms, least if least is not None else first.counts)
        return Partition(counts, stage_times(problem, counts))
    if capped:
        within_limit = _search(
            problem, forms, first, budget_nodes, matrices, compute_limit_s, proving=True
        )
        if within_limit is not None:
            return within_limit
    result = _search(problem, forms, first, budget_nodes, matrices)
    assert result is not None  # without a limit the search answers or raises
    return result


def certainly_overflows(problem: PartitionProblem, forms: Sequence[MemoryForm]) -> bool:
    """True when no partition can fit, proved in a few array operations (a necessary condition
    only: False says nothing). Two proofs:

    * per device: at its peak, device d holds every layer it is given once statically and at
      least c_d times stashed, c_d the most micro-batches in flight its schedule gives every
      one of its stages at once (the memory form's levels); so it holds at most as many
      layers as the smallest of those weights fit in its memory. Fewer than the model's layers
      in all: no partition fits.
    * in total: a device's peak is at least the sum over its v stages of c_s times the
      stage's stash, c_s the most micro-batches in flight stage s ever has, over v (each
      term is at most the peak); every stage holds a layer of its own, and the others hold
      the rest, so the peaks add up to at least every layer's static memory, plus the
      smallest pairing of counts with single layers' stashes (largest count with smallest
      stash), plus the smallest count times the other layers' stashes. More than the devices
      hold together: no partition fits.

    Under ``--recompute N`` each layer's stash is the smaller of its own and its twin's, so
    both proofs hold whichever layers a partition's stages recompute.
    """
    capacities = problem.memory_capacity_bytes or ()
    layers = problem.layers
    if any(math.isinf(capacities[d]) for d in range(len(forms))):
        return False
    stash = np.array([x.activation_bytes for x in layers])
    if problem.recompute_first is not None:
        twins = np.array([x.activation_bytes for x in problem.recompute_first.recomputed])
        stash = np.where(problem.recompute_first.blocks, np.minimum(stash, twins), stash)
    reserve, fragmentation = problem.runtime_reserve_bytes, problem.fragmentation_fraction
    rooms = [(capacities[d] - reserve) / (1 + fragmentation) for d in range(len(forms))]
    weights = []
    statics: dict[int, np.ndarray] = {}  # per weight versions: every layer's static bytes
    for form in forms:
        if form.versions not in statics:
            statics[form.versions] = np.array(
                [stage_static_bytes(x, form.versions) for x in layers]
            )
        static = statics[form.versions]
        in_flight = max(
            (min(level[SLOT * i] for i in range(len(form.stages))) for level in form.levels),
            default=0,
        )
        weights.append(static + max(in_flight, 0) * stash)
    # The few lightest layers (an embedding) would count once on every device: the proof is
    # tried without the j lightest, which then need not be placed (j = 0 to 3).
    lightest = np.argsort(np.min(weights, axis=0))
    for skipped in range(min(4, len(layers))):
        rest = np.ones(len(layers), dtype=bool)
        rest[lightest[:skipped]] = False
        holdable = 0
        for device, weight in enumerate(weights):
            cumulative = np.cumsum(np.sort(weight[rest]))
            holdable += int(np.searchsorted(cumulative, rooms[device], side="right"))
            if holdable >= len(layers) - skipped:
                break
        if holdable < len(layers) - skipped:
            return True
    versions = min(form.versions for form in forms)
    static_total = sum(stage_static_bytes(x, versions) for x in layers)
    static_total -= sum(stage_static_bytes(x, versions) for x in layers if x.shared_parameter_bytes)
    counts: list[int] = []
    for form in forms:
        fullest = (
            max(
                form.levels, key=lambda level: sum(level[SLOT * i] for i in range(len(form.stages)))
            )
            if form.levels
            else (0,) * (SLOT * len(form.stages))
        )
        counts += [max(fullest[SLOT * i], 0) for i in range(len(form.stages))]
    smallest = float(stash.min())
    extra = max(len(layers) - len(counts), 0)
    least_total = static_total + smallest * (sum(counts) + extra * min(counts, default=0))
    return least_total > sum(rooms)


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


def _least_compute_s(problem: PartitionProblem, layer: StageCosts) -> float:
    """The least per-micro-batch compute one layer puts on its device under any schedule: its
    forward (twice under re-materialization) and the shorter of its full backward and its
    input and weight gradients apart."""
    forward = layer.forward_s * (2 if problem.rematerialize else 1)
    return forward + min(layer.backward_s, layer.input_grad_s + layer.weight_grad_s)


def _least_compute_matrices(problem: PartitionProblem) -> list[np.ndarray]:
    """Per stage s, C[i, j] = the least compute per micro-batch of stage s holding layers
    [i, j) (:func:`_least_compute_s`, no transfers; inf where not allowed)."""
    return _time_matrices(problem, lambda layer: _least_compute_s(problem, layer), False)


ALL = slice(None)
"""Every row (or column) of a table."""


def _time_matrices(
    problem: PartitionProblem,
    per_layer: Callable[[StageCosts], float] | None = None,
    transfers: bool = True,
    windowed: bool = False,
) -> list[np.ndarray]:
    """Per stage s, T[i, j] = time of stage s holding layers [i, j) (inf where not allowed):
    each layer's ``per_layer`` time (default its compute), with the boundary transfers unless
    ``transfers`` is False. ``windowed``: each stage's window alone (:func:`_windows`), the
    same values, for the balanced program, which reads nothing else."""
    compute = problem.compute_s if per_layer is None else per_layer
    layers, stages = len(problem.layers), problem.stages
    cells = stages * (layers + 1) ** 2  # estimated before any table is allocated
    check(
        Limit.PARTITION_CELLS,
        cells,
        f"partition of {layers:,} layers into {stages:,} stages: {cells:,} table cells",
    )
    prefixes: dict[int, np.ndarray] = {}
    tables: dict[int, np.ndarray] = {}  # devices sharing one table share its prefix sums
    for device in set(problem.placement):
        table = problem.layers_on(device)
        if id(table) not in tables:
            times = [compute(x) for x in table]
            tables[id(table)] = np.concatenate(([0.0], np.cumsum(times)))
        prefixes[device] = tables[id(table)]
    index = np.arange(layers + 1)
    # --recompute N: a stage starting at i adds its twins' extra time over [i, min(j, e_i))
    recomputing: np.ndarray | float = 0.0
    first = problem.recompute_first
    if first is not None:
        pairs = zip(problem.layers, first.recomputed, first.blocks, strict=True)
        extra = [compute(twin) - compute(layer) if block else 0.0 for layer, twin, block in pairs]
        recomputing = _twin_spans(np.concatenate(([0.0], np.cumsum(extra))), first.ends())
    speeds = problem.device_speeds or ()
    sizes = np.array([0.0] + [x.output_bytes for x in problem.layers])  # crossing cut c
    boundary: dict[int, np.ndarray] = {}

    def cuts_between(stage: int) -> np.ndarray:
        """Boundary time at each cut 0..L between stage-1 and stage."""
        if stage not in boundary:
            boundary[stage] = _boundary_times(problem, stage, sizes)
        return boundary[stage]

    nonempty = index[:, None] < index[None, :]
    spans: dict[tuple[int, float], np.ndarray] = {}  # per device table and speed
    matrices = []
    for s, (low, high) in enumerate(_windows(stages, layers)):
        speed = speeds[problem.placement[s]]
        prefix = prefixes[problem.placement[s]]
        key = (id(prefix), speed)
        if key not in spans:
            span = (prefix[None, :] - prefix[:, None] + recomputing) / speed
            spans[key] = np.where(nonempty, span, np.inf).astype(float)
        # the window's cells only, or every cell (the same sums either way)
        rows, ends = (slice(low, high), slice(low + 1, high + 1)) if windowed else (ALL, ALL)
        matrix = spans[key][rows, ends]
        if s > 0 and transfers:
            matrix = matrix + cuts_between(s)[rows, None]
        if s + 1 < stages and transfers:
            matrix = matrix + cuts_between(s + 1)[None, ends]
        if not windowed:  # the cells outside the window are inf
            if np.shares_memory(matrix, spans[key]):
                matrix = matrix.copy()
            matrix[:s, :] = np.inf  # stage s starts at layer s or later
            matrix[:, layers - (stages - 1 - s) + 1 :] = np.inf  # and leaves a layer for each after
        matrices.append(matrix)
    return matrices


def _twin_spans(prefix: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """For a per-layer difference's ``prefix`` sums and each start's ``ends`` (see
    :meth:`~pipesim.partition.problem.RecomputeFirst.ends`): X[i, j] = the difference summed
    over the twins a stage holding [i, j) swaps in, those in [i, min(j, ends[i]))."""
    index = np.arange(len(prefix))
    reach = np.minimum(index[None, :], ends[:, None])
    spans: np.ndarray = (prefix[reach] - prefix[:, None]) * (index[None, :] > index[:, None])
    return spans


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


class _SpanMemory:
    """Each stage's memory for every span of layers [i, j) it could hold: its static bytes
    S[i, j] and its share of each of its device's levels A[l, i, j] (activations and the
    running transient), so that a device's model peak is the sum of its stages' S plus the
    largest over l of the sum of their A[l]. The memory model's own rules
    (:mod:`pipesim.memory.rules`) over whole arrays of spans: a row (one start i, every end
    j) at a time, which is what the depth-first search reads, or the whole table."""

    def __init__(self, problem: PartitionProblem, forms: Sequence[MemoryForm]) -> None:
        layers = problem.layers
        self._problem = problem
        self._forms = forms
        names = (
            "parameter_bytes",
            "gradient_bytes",
            "optimizer_bytes",
            "master_weight_bytes",
            "shared_parameter_bytes",
            "activation_bytes",
            "weight_grad_activation_bytes",
            "optimizer_transient_bytes",
        )

        def prefix(values: Sequence[float]) -> np.ndarray:
            return np.concatenate(([0.0], np.cumsum(values, dtype=float)))

        self._prefixes = {name: prefix([getattr(x, name) for x in layers]) for name in names}
        self._inputs = np.array([problem.input_bytes] + [x.output_bytes for x in layers])
        remat = problem.rematerialize
        self._transients = [
            np.array([transient_bytes(x, kind, remat) for x in layers], dtype=float)
            for kind in KINDS
        ]
        # --recompute N: what the twins change, summed over the ones a stage swaps in
        first = problem.recompute_first
        self._ends: np.ndarray | None = None
        self._twin_prefixes: dict[str, np.ndarray] = {}
        self._twin_transients: list[np.ndarray] = []
        self._blocks = np.zeros(len(layers), dtype=bool)
        if first is not None:
            self._ends = first.ends()
            self._blocks = np.array(first.blocks, dtype=bool)
            twins = first.recomputed
            self._twin_prefixes = {
                name: prefix(
                    [
                        getattr(twin, name) - getattr(layer, name) if block else 0.0
                        for layer, twin, block in zip(layers, twins, first.blocks, strict=True)
                    ]
                )
                for name in names
            }
            self._twin_transients = [
                np.array([transient_bytes(x, kind, remat) for x in twins], dtype=float)
                for kind in KINDS
            ]
        self._rows: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
        # the running transients of every span, stage-independent: computed once
        self._row_maxima: dict[int, list[np.ndarray]] = {}
        self._table_maxima: list[np.ndarray] | None = None
        self._spans: dict[str, np.ndarray] | None = None

    def first_stage(self, device: int) -> int:
        """The first stage the device's memory form lists."""
        return self._forms[device].stages[0]

    def level_count(self, stage: int) -> int:
        """How many levels the stage's device has (at least one)."""
        return len(self._forms[self._problem.placement[stage]].levels) or 1

    def _transient_values(self, kind: int, start: int) -> np.ndarray:
        """Each layer's transient of action ``kind`` for a stage starting at ``start`` (the
        layers from ``start`` on are what it reads): the twins' for the blocks it swaps in."""
        values = self._transients[kind]
        if self._ends is None:
            return values
        index = np.arange(len(values))
        swapped = self._blocks & (index >= start) & (index < self._ends[start])
        return np.where(swapped, self._twin_transients[kind], values)

    def row(self, stage: int, start: int) -> tuple[np.ndarray, np.ndarray]:
        """S[start, :] and A[:, start, :] of ``stage`` (cached)."""
        key = (stage, start)
        if key not in self._rows:
            spans = {name: p - p[start] for name, p in self._prefixes.items()}
            if self._ends is not None:
                index = np.arange(len(self._inputs))
                reach = np.minimum(index, self._ends[start])
                after = index > start
                for name, twin in self._twin_prefixes.items():
                    spans[name] = spans[name] + (twin[reach] - twin[start]) * after
            self._rows[key] = self._stage(
                stage, spans, self._maxima_row(start), self._inputs[start]
            )
        return self._rows[key]

    def column(self, stage: int, end: int) -> tuple[np.ndarray, np.ndarray]:
        """S[:, end] and A[:, :, end] of ``stage`` (every start at once): each start's value
        in the same operations as its :meth:`row` (under ``--recompute N`` with the twins
        that start swaps in)."""
        spans = {name: p[end] - p for name, p in self._prefixes.items()}
        if self._ends is not None:
            index = np.arange(len(self._inputs))
            reach = np.minimum(end, self._ends)
            after = end > index
            for name, twin in self._twin_prefixes.items():
                spans[name] = spans[name] + (twin[reach] - twin) * after
        maxima = []
        for kind, values in enumerate(self._transients):
            column = np.zeros(len(values) + 1)
            if end > 0:
                column[:end] = (
                    np.maximum.accumulate(values[:end][::-1])[::-1]
                    if self._ends is None
                    else self._swapped_maxima(kind, end)
                )
            maxima.append(column)
        return self._stage(stage, spans, maxima, self._inputs)

    def _swapped_maxima(self, kind: int, end: int) -> np.ndarray:
        """Under ``--recompute N``: for each start i < ``end``, the largest transient of
        action ``kind`` over [i, end), the blocks in [i, ends[i]) as their twins (a maximum
        is the same in any order: :meth:`row`'s running one gives it too)."""
        assert self._ends is not None
        plain = self._transients[kind][:end]
        swapped = np.where(self._blocks[:end], self._twin_transients[kind][:end], plain)
        suffix = np.maximum.accumulate(plain[::-1])[::-1]  # the plain layers of [k, end)
        starts = np.arange(end)
        edge = np.minimum(self._ends[:end], end)  # the twins' [i, edge)
        out = np.where(edge < end, suffix[np.minimum(edge, end - 1)], -np.inf)
        for offset in range(int((edge - starts).max())):
            layer = starts + offset
            inside = layer < edge
            out = np.where(inside, np.maximum(out, swapped[np.minimum(layer, end - 1)]), out)
        return out

    def _maxima_row(self, start: int) -> list[np.ndarray]:
        """Per action kind, the largest transient of the layers [start, j) for every j (the
        same for every stage: cached)."""
        if start not in self._row_maxima:
            maxima = []
            for kind in range(len(self._transients)):
                values = self._transient_values(kind, start)
                row = np.zeros(len(values) + 1)
                row[start + 1 :] = np.maximum.accumulate(values[start:])
                maxima.append(row)
            self._row_maxima[start] = maxima
        return self._row_maxima[start]

    def _maxima_table(self) -> list[np.ndarray]:
        """Per action kind, the largest transient of every span [i, j) (cached)."""
        if self._table_maxima is None:
            self._table_maxima = []
            for kind in range(len(self._transients)):
                count = len(self._transients[kind])
                out = np.zeros((count + 1, count + 1))
                for i in range(count):
                    out[i, i + 1 :] = self._maxima_row(i)[kind][i + 1 :]
                self._table_maxima.append(out)
        return self._table_maxima

    def table(self, stage: int) -> tuple[np.ndarray, np.ndarray]:
        """S[i, j] and A[l, i, j] of ``stage`` for every span at once."""
        return self._stage(stage, self._table_spans(), self._maxima_table(), self._inputs[:, None])

    def _table_spans(self) -> dict[str, np.ndarray]:
        """Every span's sums of each size, the same for every stage (computed once)."""
        if self._spans is None:
            spans = {name: p[None, :] - p[:, None] for name, p in self._prefixes.items()}
            if self._ends is not None:
                for name, twin in self._twin_prefixes.items():
                    spans[name] = spans[name] + _twin_spans(twin, self._ends)
            self._spans = spans
        return self._spans

    def _stage(
        self,
        stage: int,
        spans: dict[str, np.ndarray],
        transient_maxima: list[np.ndarray],
        inputs: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray]:
        """The rules on span arrays of any shape (a row or the whole table)."""
        problem = self._problem
        form = self._forms[problem.placement[stage]]
        slot = SLOT * form.stages.index(stage)
        params = spans["parameter_bytes"]
        static = static_memory_bytes(
            params,
            spans["gradient_bytes"],
            spans["optimizer_bytes"],
            form.versions,
            spans["master_weight_bytes"],
        )
        last = problem.stages - 1
        if stage == last and problem.placement[last] == problem.placement[0]:
            # the device holds the tied output layer's copy of the first stage's embeddings
            shared = spans["shared_parameter_bytes"]
            share = np.divide(shared, params, out=np.zeros_like(shared), where=params > 0)
            static = static - share * static
        stash, keep = spans["activation_bytes"], spans["weight_grad_activation_bytes"]
        sizes = (*transient_maxima, spans["optimizer_transient_bytes"])
        # every level at once: each count as a column broadcast over the span arrays
        counts = np.array(form.levels or [(0,) * (SLOT * len(form.stages))], dtype=float)
        column = counts[:, slot : slot + SLOT].reshape(len(counts), SLOT, *([1] * stash.ndim))
        levels = activation_level_bytes(
            (column[:, 0], column[:, 1], column[:, 2]),
            stash,
            keep,
            np.broadcast_to(inputs, stash.shape),
        )
        for index, size in enumerate(sizes, start=3):
            flags = column[:, index]
            if flags.any():
                levels = levels + flags * size
        return static, np.asarray(levels, dtype=float)


def _memory_matrices(
    problem: PartitionProblem, forms: Sequence[MemoryForm], times: Sequence[np.ndarray]
) -> list[np.ndarray]:
    """For one stage per device: M[i, j] = peak - capacity of stage s holding [i, j). On a
    transformer's shape (:mod:`pipesim.partition.blocks`) a stage's peak depends on its count
    of blocks alone: each is computed once per count and laid out over the spans (the spans
    ``times`` allows; inf elsewhere), not once per span."""
    capacities = problem.memory_capacity_bytes or ()
    spans = _SpanMemory(problem, forms)
    shaped = BlockFeasibility.of(problem, spans, times)
    if shaped is not None:
        return [
            shaped.span_peaks(stage) - capacities[problem.placement[stage]]
            for stage in range(problem.stages)
        ]
    matrices = []
    for stage in range(problem.stages):
        static, levels = spans.table(stage)
        peak = peak_with_allowances(
            static + np.maximum(levels.max(axis=0), 0.0),
            problem.runtime_reserve_bytes,
            problem.fragmentation_fraction,
        )
        matrices.append(peak - capacities[problem.placement[stage]])
    return matrices


def _windows(stages: int, layers: int) -> list[tuple[int, int]]:
    """Per stage s, the starts [s, L - S + s] it can have, as (s, L - S + s + 1); its ends
    are the same shifted by one: every finite value of its time table lies there (it starts
    at layer s or later and leaves a layer for each stage after)."""
    return [(s, layers - stages + s + 1) for s in range(stages)]


def _solve(
    matrices: list[np.ndarray], layers: int, windowed: bool = False
) -> tuple[int, ...] | None:
    """Min-max over stages of matrices[s][i, j], ties broken by the least sum of squares.

    The matrices are :func:`_time_matrices`' (or masks of them): inf where stage s cannot
    hold [i, j), so each stage is read in its window (:func:`_windows`) alone, where every
    finite value lies: the same minima and the same first ones (a cell outside is inf), on a
    fraction of the table when S is a good part of L. ``windowed``: the matrices are those
    windows already."""
    stages = len(matrices)
    if not 0 < stages <= layers:
        return None  # a stage per layer at most
    windows = _windows(stages, layers)
    if not windowed:
        pairs = zip(matrices, windows, strict=True)
        matrices = [m[low:high, low + 1 : high + 1] for m, (low, high) in pairs]
    best = np.full(layers + 1, np.inf)
    best[0] = -np.inf
    for window, (low, high) in zip(matrices, windows, strict=True):
        reached = np.min(np.maximum(best[low:high, None], window), axis=0)
        best = np.full(layers + 1, np.inf)
        best[low + 1 : high + 1] = reached
    bottleneck = best[layers]
    if not math.isfinite(bottleneck):
        return None
    limit = bottleneck + _TOLERANCE * max(1.0, abs(bottleneck))
    # the tie-break squares each stage's value over the bottleneck's: within the limit they are
    # at most about 1, so costs beyond 1e154 (squared: inf) or below 1e-154 (squared: 0) still
    # compare, instead of every split tying at infinity or zero
    scale = bottleneck if bottleneck > 0 else 1.0
    squares = np.full(layers + 1, np.inf)
    squares[0] = 0.0
    choices = []
    for window, (low, high) in zip(matrices, windows, strict=True):
        within = np.where(window <= limit, np.square(np.maximum(window, 0.0) / scale), np.inf)
        total = squares[low:high, None] + within
        choice = np.argmin(total, axis=0)
        squares = np.full(layers + 1, np.inf)
        squares[low + 1 : high + 1] = total[choice, np.arange(high - low)]
        starts = np.zeros(layers + 1, dtype=np.int64)
        starts[low + 1 : high + 1] = choice + low
        choices.append(starts)
    end, counts = layers, []
    for s in range(stages - 1, -1, -1):
        start = int(choices[s][end])
        counts.append(end - start)
        end = start
    return tuple(reversed(counts))


# -- several stages per device: bisection with a depth-first search -------------------------


class _Feasible:
    """A feasibility test (:func:`_depth_first`): called with a limit, the first partition in
    depth-first order within it that fits, or None (True in its place where only existence
    was asked); :meth:`each` answers many limits at once where the transformer's shape lets
    it (:meth:`pipesim.partition.blocks.BlockFeasibility.feasible_limits`)."""

    def __init__(
        self,
        test: Callable[[float, bool], tuple[int, ...] | bool | None],
        blocks: BlockFeasibility | PrefixedFeasibility | None,
    ) -> None:
        self._test = test
        self._blocks = blocks

    def __call__(self, limit: float, build: bool = True) -> tuple[int, ...] | bool | None:
        return self._test(limit, build)

    def each(self, limits: np.ndarray) -> np.ndarray | None:
        """Whether a partition exists within each of ``limits`` (finite), or None where only
        one limit at a time can be asked."""
        return None if self._blocks is None else self._blocks.feasible_limits(limits)


def _depth_first(
    problem: PartitionProblem,
    parts: _SpanMemory,
    matrices: list[np.ndarray],
    budget: list[int],
) -> _Feasible:
    """A feasibility test over ``matrices`` (each stage's value for every span: its time, or
    its least compute): given a limit, the first partition in depth-first order (the
    smallest first stage, then the next) whose every stage's value is at most the limit and
    whose every device fits its memory, or None; each node spends one of ``budget[0]``. On a
    transformer's shape (:mod:`pipesim.partition.blocks`) the same answer is found without
    searching (and on one with a few leading layers of other kinds:
    :mod:`pipesim.partition.prefixed_blocks`), and with ``build`` False it may be True in
    place of the partition."""
    layers, stages = len(problem.layers), problem.stages
    capacities = problem.memory_capacity_bytes or ()
    firsts = [parts.first_stage(device) for device in range(problem.devices)]
    blocks = shaped_feasibility(problem, parts, matrices)
    # a span the matrices mark inf is not one a stage can hold (empty, or leaving a later stage
    # no layer): a limit of inf would admit them, so no limit is read above the largest value
    largest = max(
        (float(m[np.isfinite(m)].max(initial=-np.inf)) for m in matrices), default=-np.inf
    )

    def feasible(limit: float, build: bool = True) -> tuple[int, ...] | bool | None:
        limit = min(limit, largest)
        if blocks is not None:  # a transformer's shape: the same answer, exactly and at once
            answer = blocks.first_fit(limit, build)
            if answer != UNKNOWN:
                return answer  # type: ignore[return-value]
        # reach[s][i]: layers [i, L) split into stages s.. with every stage's value <= limit
        reach = np.zeros((stages + 1, layers + 1), dtype=bool)
        reach[stages, layers] = True
        for stage in range(stages - 1, -1, -1):
            allowed = (matrices[stage] <= limit) & reach[stage + 1][None, :]
            reach[stage] = allowed.any(axis=1)
        if not reach[0, 0]:
            return None
        static_acc = [0.0] * problem.devices
        level_acc = [np.zeros(parts.level_count(s)) for s in firsts]
        counts: list[int] = []

        def go(stage: int, start: int) -> bool:
            if stage == stages:
                return start == layers
            budget[0] -= 1
            if budget[0] < 0:
                return False
            device = problem.placement[stage]
            static, levels = parts.row(stage, start)
            # stages not placed yet count as empty: a lower bound on the device's peak
            statics = static_acc[device] + static
            level_rows = level_acc[device][:, None] + levels
            peaks = peak_with_allowances(
                statics + np.maximum(level_rows.max(axis=0), 0.0),
                problem.runtime_reserve_bytes,
                problem.fragmentation_fraction,
            )
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

    return _Feasible(feasible, blocks)


Found = tuple[tuple[int, ...] | bool, int]
"""A bisection's answer: what the feasibility test returned, at which candidate limit."""


def _bisect(
    feasible: _Feasible,
    candidates: np.ndarray,
    low: int,
    high: int,
    budget: list[int],
) -> Found | None:
    """The least of ``candidates[low..high]`` at which a partition is feasible (feasibility
    only grows with the limit), while the budget lasts; None where none is. On a
    transformer's shape every candidate is answered at once, exactly (no budget spent)."""
    if low <= high:
        answers = feasible.each(candidates[low : high + 1] * (1 + _TOLERANCE))
        if answers is not None:
            hits = np.flatnonzero(answers)
            return (True, low + int(hits[0])) if hits.size else None
    found = None
    while low <= high and budget[0] > 0:
        middle = (low + high) // 2
        counts = feasible(float(candidates[middle]) * (1 + _TOLERANCE), False)
        if counts is not None:
            found, high = (counts, middle), middle - 1
        elif budget[0] > 0:
            low = middle + 1
    return found


def _built(
    feasible: _Feasible,
    found: Found,
    candidates: np.ndarray,
) -> tuple[int, ...]:
    """The partition a bisection found: as the search returned it, or (True: found without
    being built) built at the limit it was found at."""
    counts, index = found
    if counts is True:
        built = feasible(float(candidates[index]) * (1 + _TOLERANCE), True)
        assert isinstance(built, tuple)  # it was found at this limit
        return built
    assert isinstance(counts, tuple)
    return counts


def _search(
    problem: PartitionProblem,
    forms: Sequence[MemoryForm],
    first: Partition,
    budget_nodes: int | None,
    matrices: list[np.ndarray],
    compute_limit_s: float = math.inf,
    proving: bool = False,
) -> Partition | None:
    """Bisection over the stage times a partition can have, each tested depth first.
    ``proving`` (with a finite ``compute_limit_s``): only the times up to the limit are tried,
    each search with its own budget; when none fits, a search over the stages' least compute
    proves :class:`BeyondComputeLimit`, or returns None where it cannot (a partition within
    the limit on compute but not on time, or the budget spent)."""
    layers, stages = len(problem.layers), problem.stages
    values = np.concatenate([m[np.isfinite(m)] for m in matrices])
    candidates = np.unique(values[values >= first.bottleneck_s * (1 - _TOLERANCE)])
    nodes = NODE_BUDGET if budget_nodes is None else budget_nodes
    parts = _SpanMemory(problem, forms)
    if proving:
        limit = compute_limit_s * (1 + _TOLERANCE)
        budget = [nodes]
        feasible = _depth_first(problem, parts, matrices, budget)
        if feasible(math.inf, False) is None and budget[0] > 0:
            # nothing fits at all, whatever the limit (one test, not a bisection first)
            raise _no_fit(problem, forms, first.counts)
        budget[0] = nodes  # a fresh budget in the list the search spends (not a new list)
        highest = int(np.searchsorted(candidates, limit, side="right")) - 1
        found = _bisect(feasible, candidates, 0, highest, budget)
        if budget[0] <= 0:
            return None  # not exact: the search without the limit decides
        if found is not None:
            counts = _built(feasible, found, candidates)
            return Partition(counts, stage_times(problem, counts))
        budget = [nodes]
        least = _depth_first(problem, parts, _least_compute_matrices(problem), budget)
        if least(limit, False) is None and budget[0] > 0:
            if least(math.inf, False) is None and budget[0] > 0:  # nothing fits at all
                raise _no_fit(problem, forms, first.counts)
            if budget[0] > 0:
                raise BeyondComputeLimit(compute_limit_s)
        return None
    budget = [nodes]
    feasible = _depth_first(problem, parts, matrices, budget)
    found = None
    high = len(candidates) - 1
    loosest = feasible(float(candidates[high]) * (1 + _TOLERANCE), False)  # any fit at all?
    if loosest is not None:
        found = _bisect(feasible, candidates, 0, high - 1, budget) or (loosest, high)
    exact = budget[0] > 0
    if found is None:
        if exact:
            raise _no_fit(problem, forms, first.counts)
        raise NoPartitionFits(
            f"no partition that fits memory found within the search budget of "
            f"{nodes} nodes for {stages} stages of {layers} layers (the balanced one overflows)"
        )
    best = _built(feasible, found, candidates)
    return Partition(best, stage_times(problem, best), exact=exact)
