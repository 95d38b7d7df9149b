"""Exact partition feasibility for a transformer's shape: one layer, identical blocks, one layer.

The memory-aware search with several stages per device (:func:`pipesim.partition.solver._search`)
asks, for a limit on each stage's time, for the first partition in depth-first order (the
smallest first stage, then the next) whose every stage is within the limit and whose every
device fits its memory. Searched depth first, a device's memory binds only when its last
stage is placed, so the search can spend its node budget without an answer. On a model whose
layers are an embedding, B identical blocks and an output layer (every transformer the
catalogue builds but the mixture-of-experts ones with leading dense blocks), the question has
structure that answers it exactly and at once:

* every stage is an embedding with n_0 >= 0 blocks, n_s >= 1 blocks, or n >= 0 blocks with
  the output layer, and what it costs (its time, its static memory, its share of each of its
  device's memory levels) depends on n alone, growing with it (under ``--recompute N`` too:
  its first N blocks are the recomputed twins wherever it starts);
* so the limit allows each stage an interval of n, and a device's memory is a function of its
  stages' counts that never falls when a count grows: the count vectors that fit a device are
  closed downwards, and the totals they reach are every integer from the least (each stage's
  smallest count) to the most (found by enumerating the device's few stages' counts);
* devices share nothing but the blocks: a partition exists exactly when each device fits its
  least counts and the B blocks lie between the sum of the least totals and the sum of the
  most, and the depth-first order's first partition is built stage by stage, each count the
  smallest that leaves the rest feasible by the same test;
* each device's grid of count combinations is made once, over every count from each stage's
  least up: a limit only bounds each stage's count from above, so the combinations it allows
  are a window of that grid, and the most blocks a device can hold under a limit is the grid's
  prefix maximum at the window's corner. A bisection's every limit is then answered at once
  (:meth:`BlockFeasibility.feasible_limits`).

The answer is the depth-first search's own whenever that search finishes within its budget
(the same first partition: the test in ``tests/partition/test_blocks.py`` holds them equal),
and exact where it would not, up to rounding: a middle stage's costs are read from one start
(the stage's index) where the search reads them from the stage's own start, and the prefix
sums' differences can differ in the last bit, which decides only a partition whose peak is
the capacity to the last bit. Where the shape does not hold, or a device's stages have too
many counts to enumerate, :meth:`BlockFeasibility.first_fit` answers ``UNKNOWN`` and the
depth-first search runs.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Protocol

import numpy as np

from pipesim.memory.rules import peak_with_allowances
from pipesim.partition.problem import PartitionProblem

UNKNOWN = "unknown"
"""What :meth:`BlockFeasibility.first_fit` answers where it cannot decide."""

MOST_CELLS = 2_000_000
"""The most count combinations x memory levels one device's enumeration may hold (16 MB of
floats): above it the depth-first search decides."""


class _Rows(Protocol):
    """What this module reads of :class:`pipesim.partition.solver._SpanMemory`."""

    def row(self, stage: int, start: int) -> tuple[np.ndarray, np.ndarray]: ...

    def column(self, stage: int, end: int) -> tuple[np.ndarray, np.ndarray]: ...


class BlockFeasibility:
    """The test above for one problem: each stage's value (its time, or least compute) and
    memory (static bytes, share of each of its device's levels) for every count of blocks it
    can hold, from :meth:`of`."""

    def __init__(
        self,
        problem: PartitionProblem,
        parts: _Rows,
        values: list[np.ndarray],
        memory: dict[int, tuple[np.ndarray, np.ndarray]],
        least: Sequence[int] | None = None,
        other_layers: Sequence[int] | None = None,
    ) -> None:
        """``values`` and ``memory`` per stage and count of blocks n = 0..B; ``least`` each
        stage's fewest blocks and ``other_layers`` the layers it holds besides its blocks
        (default: the embedding's and the output layer's stages 0 blocks or more and one layer
        besides, the others a block or more; a model with leading layers of other kinds gives
        its own: :mod:`pipesim.partition.prefixed_blocks`)."""
        self._problem = problem
        self._parts = parts
        self._values = values
        self._memory = memory  # per stage: static[n], levels[:, n]
        self._blocks = len(values[0]) - 1
        self._device_stages: dict[int, list[int]] = {}
        for stage, device in enumerate(problem.placement):
            self._device_stages.setdefault(device, []).append(stage)
        ends = (0, problem.stages - 1)
        self._least = (
            list(least)
            if least is not None
            else [0 if s in ends else 1 for s in range(problem.stages)]
        )
        self._other_layers = (
            list(other_layers)
            if other_layers is not None
            else [1 if s in ends else 0 for s in range(problem.stages)]
        )
        # per device: its grid over every count from each stage's least up (_device_totals)
        self._whole_grids: dict[int, tuple[list[np.ndarray], np.ndarray, np.ndarray] | str] = {}
        self._prefix_tables: dict[int, tuple[list[int], np.ndarray, int] | int | None] = {}

    @classmethod
    def of(
        cls, problem: PartitionProblem, parts: _Rows, matrices: Sequence[np.ndarray]
    ) -> BlockFeasibility | None:
        """The test for ``problem`` with stage values ``matrices``, or None where its layers
        are not an embedding, identical blocks and an output layer (under ``--recompute N``,
        identical twins too: a stage's first N blocks are twins wherever it starts, so a
        stage's costs still depend on its count alone), where devices have tables of their
        own, or where a middle stage could start past the blocks."""
        layers, stages = problem.layers, problem.stages
        if stages < 2 or len(layers) < 4 or problem.device_layers is not None:
            return None
        blocks = layers[1:-1]
        if any(block != blocks[0] for block in blocks[1:]):
            return None
        first = problem.recompute_first  # --recompute N: the twins alike too
        if first is not None:
            twins = first.recomputed[1:-1]
            if first.blocks[0] or first.blocks[-1] or not all(first.blocks[1:-1]):
                return None
            if any(twin != twins[0] for twin in twins[1:]):
                return None
        if layers[0].output_bytes != blocks[0].output_bytes:
            return None  # every block-boundary cut carries the same message
        count, last = len(blocks), len(layers)
        if stages - 2 > count:
            return None
        values: list[np.ndarray] = []
        memory: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        counts = np.arange(count + 1)  # n = 0..B blocks
        for stage in range(stages):
            if stage == stages - 1:  # n blocks and the output layer: [L - 1 - n, L)
                values.append(np.asarray(matrices[stage][last - 1 - counts, last], dtype=float))
                static, level = parts.column(stage, last)  # every start at once
                starts = last - 1 - counts
                memory[stage] = (
                    np.asarray(static[starts], float),
                    np.asarray(level[:, starts], float),
                )
                continue
            start = stage  # the embedding's stage from 0, a middle one from a block boundary
            ends = np.minimum(start + (1 if stage == 0 else 0) + counts, last - 1)
            value = np.array(matrices[stage][start, ends], dtype=float)
            if stage > 0:
                value[0] = math.inf  # a middle stage holds at least one block
                value[counts > last - 1 - start] = math.inf
            else:
                value[counts > count] = math.inf
            values.append(value)
            static, level = parts.row(stage, start)
            memory[stage] = (np.asarray(static[ends], float), np.asarray(level[:, ends], float))
        return cls(problem, parts, values, memory)

    def span_peaks(self, stage: int) -> np.ndarray:
        """P[i, j]: the peak of ``stage``'s device holding only this stage with layers [i, j)
        (one stage per device), from its peak per count of blocks; inf for a span the stage
        cannot hold (the embedding's stage starts at 0, the output layer's ends at L, the
        others hold blocks only)."""
        problem = self._problem
        last, count = len(problem.layers), self._blocks
        static, levels = self._stage_memory(stage, np.arange(count + 1))
        peaks = peak_with_allowances(
            static + np.maximum(levels.max(axis=0), 0.0),
            problem.runtime_reserve_bytes,
            problem.fragmentation_fraction,
        )
        index = np.arange(last + 1)
        out = np.full((last + 1, last + 1), np.inf)
        if stage == 0:
            out[0, 1:] = peaks[np.clip(index[1:] - 1, 0, count)]
        elif stage == problem.stages - 1:
            out[:last, last] = peaks[np.clip(last - 1 - index[:last], 0, count)]
        else:
            blocks = index[None, :] - index[:, None]
            inside = (blocks >= 1) & (index[:, None] >= 1) & (index[None, :] <= last - 1)
            out[inside] = peaks[blocks[inside]]
        return out

    def _stage_memory(self, stage: int, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Static bytes and level shares of ``stage`` holding each of ``counts`` blocks."""
        static, levels = self._memory[stage]
        return static[counts], levels[:, counts]

    def first_fit(self, limit: float, build: bool = True) -> tuple[int, ...] | bool | str | None:
        """The depth-first order's first partition (layers per stage) within ``limit`` that
        fits every device (True in its place when ``build`` is False: whether one exists is
        all the caller asks), None where none does, :data:`UNKNOWN` where this test cannot
        tell."""
        problem, stages = self._problem, self._problem.stages
        boxes: list[tuple[int, int]] = []
        for stage in range(stages):
            allowed = np.flatnonzero(self._values[stage] <= limit)
            if allowed.size == 0:
                return None
            low, high = int(allowed[0]), int(allowed[-1])
            if allowed.size != high - low + 1:
                return UNKNOWN  # not an interval: the shape is not what this test assumes
            boxes.append((max(low, self._least[stage]), high))
            if boxes[-1][0] > boxes[-1][1]:
                return None
        fixed: dict[int, int] = {}
        ranges: dict[int, tuple[int, int]] = {}
        for device in self._device_stages:
            totals = self._device_totals(device, boxes)
            if totals == UNKNOWN:
                return UNKNOWN
            if totals is None:
                return None
            ranges[device] = totals  # type: ignore[assignment]
        if not self._within(ranges.values()):
            return None
        if not build:
            return True
        for stage in range(stages):
            device = problem.placement[stage]
            probed = self._probe(device, boxes, fixed, stage)
            if isinstance(probed, str):
                return UNKNOWN
            axis, fits, sums = probed
            others = [r for d, r in ranges.items() if d != device]
            least_others = sum(r[0] for r in others)
            most_others = sum(r[1] for r in others)
            chosen = None
            for index, count in enumerate(axis):
                if not fits[index, 0]:  # the least of the rest overflows: so does more
                    break
                most = int(np.max(np.where(fits[index], sums[index], -1)))
                least = int(sums[index, 0])
                if least_others + least <= self._blocks <= most_others + most:
                    chosen = int(count), (least, most)
                    break
            if chosen is None:  # pragma: no cover - the totals said a partition exists
                return UNKNOWN
            fixed[stage], ranges[device] = chosen
        return tuple(fixed[s] + self._other_layers[s] for s in range(stages))

    def _device_totals(
        self, device: int, boxes: Sequence[tuple[int, int]]
    ) -> tuple[int, int] | str | None:
        """The least and most total blocks of ``device``'s count combinations within
        ``boxes`` that fit its memory (None where its least combination overflows, then every
        one does), read off the device's whole grid (every count from each stage's least up,
        made once: a bisection asks with many limits, each only a box of it);
        :data:`UNKNOWN` where the grids are too large. A combination's fit is the same
        computation whatever box it is read in, so the answer is :meth:`_grid`'s."""
        grid = self._whole_grid(device)
        if isinstance(grid, str):
            in_box = self._grid(device, boxes, {})  # the box alone may be small enough
            return UNKNOWN if isinstance(in_box, str) else _totals(in_box)
        axes, fits, totals = grid
        stages = self._device_stages[device]
        window = []
        for stage, axis in zip(stages, axes, strict=True):
            low, high = boxes[stage]  # the axis counts from the stage's least up
            if low > int(axis[-1]):
                return None  # this count overflows the device with the others' least
            window.append(slice(low - int(axis[0]), high - int(axis[0]) + 1))
        fits_here, totals_here = fits[tuple(window)], totals[tuple(window)]
        if not fits_here.flat[0]:
            return None
        return int(totals_here.flat[0]), int(np.max(np.where(fits_here, totals_here, -1)))

    def feasible_limits(self, limits: np.ndarray) -> np.ndarray | None:
        """For each of ``limits`` (finite), whether :meth:`first_fit` with ``build`` False
        finds a partition, all at once; None where this reading does not apply (a stage whose
        values are not finite and non-decreasing from its first finite count, a first finite
        count above the stage's least, a device's grid too large), and the caller asks
        :meth:`first_fit` limit by limit.

        Where it applies, each stage's box is [its least count, the most whose value is within
        the limit], starting where every device's whole grid starts; a device fits its least
        combination or none, and the most blocks it can hold within a box is a prefix maximum
        of its grid (the largest total of a fitting combination at or below each corner),
        read at the box's corner: the same answer as :meth:`first_fit`'s, limit by limit."""
        count = len(limits)
        highs: list[np.ndarray] = []
        ok = np.ones(count, dtype=bool)
        for stage in range(self._problem.stages):
            values = self._values[stage]
            finite = np.flatnonzero(np.isfinite(values))
            if finite.size == 0:
                return np.zeros(count, dtype=bool)
            first, last = int(finite[0]), int(finite[-1])
            run = values[first : last + 1]
            if first > self._least[stage] or not np.all(np.isfinite(run)):
                return None
            if run.size > 1 and np.any(np.diff(run) < 0):
                return None
            high = first + np.searchsorted(run, limits, side="right") - 1
            ok &= high >= self._least[stage]
            highs.append(high)
        most = np.zeros(count, dtype=np.int64)
        least = 0
        for device, stages in self._device_stages.items():
            table = self._prefix_most(device)
            if table is None:
                return None
            if isinstance(table, int):
                return np.zeros(count, dtype=bool)  # its least combination overflows
            origins, best, smallest = table
            index = tuple(
                np.clip(highs[stage] - origin, 0, size - 1)
                for stage, origin, size in zip(stages, origins, best.shape, strict=True)
            )
            most += best[index]
            least += smallest
        return ok & (least <= self._blocks) & (most >= self._blocks)

    def _prefix_most(self, device: int) -> tuple[list[int], np.ndarray, int] | int | None:
        """``device``'s whole grid as (each axis's first count, the largest total of a
        fitting combination at or below each corner: -1 where none, the least combination's
        total); -1 where its least combination overflows; None where the grid is too large
        (cached)."""
        if device not in self._prefix_tables:
            grid = self._whole_grid(device)
            if isinstance(grid, str):
                self._prefix_tables[device] = None
            elif not grid[1].flat[0]:
                self._prefix_tables[device] = -1
            else:
                axes, fits, totals = grid
                best = np.where(fits, totals, -1)
                for axis in range(best.ndim):
                    best = np.maximum.accumulate(best, axis=axis)
                origins = [int(a[0]) for a in axes]
                self._prefix_tables[device] = (origins, best, int(totals.flat[0]))
        return self._prefix_tables[device]

    def _whole_grid(self, device: int) -> tuple[list[np.ndarray], np.ndarray, np.ndarray] | str:
        """:meth:`_combinations` of ``device`` over every count from each stage's least up
        (cached): any box's combinations are a window of it, each combination's fit computed
        as in the box's own grid."""
        if device not in self._whole_grids:
            whole = [(self._least[s], self._blocks) for s in range(self._problem.stages)]
            self._whole_grids[device] = self._combinations(device, whole, {})
        return self._whole_grids[device]

    def _probe(
        self,
        device: int,
        boxes: Sequence[tuple[int, int]],
        fixed: dict[int, int],
        probe: int,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | str:
        """:meth:`_grid` with ``probe``, read as a window of the device's whole grid where
        there is one (the window may reach past the box's own cut where memory overflows:
        those combinations do not fit, and change neither the least nor the most total)."""
        grid = self._whole_grid(device)
        if isinstance(grid, str):
            return self._grid(device, boxes, fixed, probe=probe)
        axes, fits, totals = grid
        stages = self._device_stages[device]
        window = []
        for stage, axis in zip(stages, axes, strict=True):
            origin, end = int(axis[0]), int(axis[-1])
            low, high = (fixed[stage], fixed[stage]) if stage in fixed else boxes[stage]
            if stage == probe:
                low, high = boxes[stage]
            if low > end:
                return self._grid(device, boxes, fixed, probe=probe)
            window.append(slice(low - origin, high - origin + 1))
        position = stages.index(probe)
        here = tuple(window)
        return _by_probe(axes[position][window[position]], fits[here], totals[here], position)

    def _level_count(self, stage: int) -> int:
        """How many memory levels the stage's device has."""
        return int(self._stage_memory(stage, np.array([self._least[stage]]))[1].shape[0])

    def _within(self, ranges: Iterable[tuple[int, int]]) -> bool:
        """Whether the blocks can be shared out: B lies between the sums of the devices'
        least and most totals."""
        pairs = list(ranges)
        return sum(r[0] for r in pairs) <= self._blocks <= sum(r[1] for r in pairs)

    def _grid(
        self,
        device: int,
        boxes: Sequence[tuple[int, int]],
        fixed: dict[int, int],
        probe: int | None = None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | str:
        """Every combination of ``device``'s stages' counts (those in ``fixed`` fixed, the
        others within their boxes): (the ``probe`` stage's counts, whether each combination
        fits, its total blocks), both with the probe's counts first and the rest flattened
        in ascending order (the first the least); :data:`UNKNOWN` where they are too many."""
        combined = self._combinations(device, boxes, fixed, probe)
        if isinstance(combined, str):
            return combined
        axes, fits, totals = combined
        stages = self._device_stages[device]
        position = stages.index(probe) if probe is not None else 0
        probe_axis = axes[position] if probe is not None else np.array([0])
        if probe is None:
            return probe_axis, fits.reshape(1, -1), totals.reshape(1, -1)
        return _by_probe(probe_axis, fits, totals, position)

    def _combinations(
        self,
        device: int,
        boxes: Sequence[tuple[int, int]],
        fixed: dict[int, int],
        probe: int | None = None,
    ) -> tuple[list[np.ndarray], np.ndarray, np.ndarray] | str:
        """``device``'s stages' counts as :meth:`_grid` takes them (one axis per stage, in
        the device's order, cut where memory already overflows), whether each combination
        fits and its total blocks, as arrays of one dimension per stage; :data:`UNKNOWN`
        where they are too many."""
        problem = self._problem
        stages = self._device_stages[device]
        axes = []
        for stage in stages:
            if stage in fixed and stage != probe:
                axes.append(np.array([fixed[stage]]))
            else:
                low, high = boxes[stage]
                axes.append(np.arange(low, high + 1))
        level_count = self._level_count(stages[0])
        axes = self._shrunk(device, stages, axes, level_count)
        if math.prod(len(a) for a in axes) * level_count > MOST_CELLS:
            return UNKNOWN
        shape = tuple(len(a) for a in axes)
        static = np.zeros(shape)
        levels = np.zeros((level_count, *shape))
        totals = np.zeros(shape, dtype=int)
        for axis, (stage, values) in enumerate(zip(stages, axes, strict=True)):
            stage_static, stage_levels = self._stage_memory(stage, values)
            along = [1] * len(axes)
            along[axis] = len(values)
            static = static + stage_static.reshape(along)
            levels = levels + stage_levels.reshape(level_count, *along)
            totals = totals + values.reshape(along)
        peaks = peak_with_allowances(
            static + np.maximum(levels.max(axis=0), 0.0),
            problem.runtime_reserve_bytes,
            problem.fragmentation_fraction,
        )
        fits = peaks <= (problem.memory_capacity_bytes or ())[device]
        return axes, fits, totals

    def _shrunk(
        self, device: int, stages: list[int], axes: list[np.ndarray], level_count: int
    ) -> list[np.ndarray]:
        """``axes`` with each cut where the device overflows even with its other stages at
        their least counts (memory only grows with a count, so no combination fits beyond
        that); an axis none of whose counts fits keeps its least, which does not fit."""
        problem = self._problem
        capacity = (problem.memory_capacity_bytes or ())[device]
        least = [self._stage_memory(stage, a[:1]) for stage, a in zip(stages, axes, strict=True)]
        out = []
        for position, (stage, values) in enumerate(zip(stages, axes, strict=True)):
            if len(values) == 1:
                out.append(values)
                continue
            static, levels = self._stage_memory(stage, values)
            for other, (other_static, other_levels) in enumerate(least):
                if other != position:
                    static = static + other_static[0]
                    levels = levels + other_levels[:, :1]
            peaks = peak_with_allowances(
                static + np.maximum(levels.reshape(level_count, -1).max(axis=0), 0.0),
                problem.runtime_reserve_bytes,
                problem.fragmentation_fraction,
            )
            fitting = int(np.count_nonzero(peaks <= capacity))
            out.append(values[: max(fitting, 1)])
        return out


def _by_probe(
    probe_axis: np.ndarray, fits: np.ndarray, totals: np.ndarray, position: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A device's combinations with the probe stage's axis (at ``position``) first and the
    others flattened in ascending order (the first the least): one row per probe count."""
    rows = len(probe_axis)
    return (
        probe_axis,
        np.moveaxis(fits, position, 0).reshape(rows, -1),
        np.moveaxis(totals, position, 0).reshape(rows, -1),
    )


def _totals(grid: tuple[np.ndarray, np.ndarray, np.ndarray]) -> tuple[int, int] | None:
    """The least and most total of a device's grid (no probe), None where its least
    combination overflows (then every combination does: memory only grows with a count)."""
    _, fits, totals = grid
    if not fits[0, 0]:
        return None
    return int(totals[0, 0]), int(np.max(np.where(fits[0], totals[0], -1)))
