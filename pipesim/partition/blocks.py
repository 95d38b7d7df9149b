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
  smallest that leaves the rest feasible by the same test.

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

    def column(self, stage: int, end: int) -> tuple[np.ndarray, np.ndarray] | None: ...


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
    ) -> None:
        self._problem = problem
        self._parts = parts
        self._values = values
        self._memory = memory  # per stage but the last: static[n], levels[:, n]
        self._last: dict[int, tuple[float, np.ndarray]] = {}  # the last stage's, per n
        self._blocks = len(problem.layers) - 2
        self._device_stages: dict[int, list[int]] = {}
        for stage, device in enumerate(problem.placement):
            self._device_stages.setdefault(device, []).append(stage)
        self._least = [0 if s in (0, problem.stages - 1) else 1 for s in range(problem.stages)]

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
        """Static bytes and level shares of ``stage`` holding each of ``counts`` blocks (the
        last stage's computed as they are asked for: one start per count)."""
        if stage in self._memory:
            static, levels = self._memory[stage]
            return static[counts], levels[:, counts]
        last = len(self._problem.layers)
        if not self._last:  # every count at once where the spans allow it
            column = self._parts.column(stage, last)
            if column is not None:
                static, levels = column
                for n in range(self._blocks + 1):
                    self._last[n] = (float(static[last - 1 - n]), levels[:, last - 1 - n])
        for n in counts:
            if int(n) not in self._last:
                static, levels = self._parts.row(stage, last - 1 - int(n))
                self._last[int(n)] = (float(static[last]), np.asarray(levels[:, last], float))
        statics = np.array([self._last[int(n)][0] for n in counts])
        return statics, np.stack([self._last[int(n)][1] for n in counts], axis=-1)

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
            whole = self._grid(device, boxes, fixed)
            if isinstance(whole, str):
                return UNKNOWN
            totals = _totals(whole)
            if totals is None:
                return None
            ranges[device] = totals
        if not self._within(ranges.values()):
            return None
        if not build:
            return True
        for stage in range(stages):
            device = problem.placement[stage]
            probed = self._grid(device, boxes, fixed, probe=stage)
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
        blocks = [fixed[s] for s in range(stages)]
        return (blocks[0] + 1, *blocks[1:-1], blocks[-1] + 1)

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
        position = stages.index(probe) if probe is not None else 0
        probe_axis = axes[position] if probe is not None else np.array([0])
        if probe is None:
            return probe_axis, fits.reshape(1, -1), totals.reshape(1, -1)
        fits = np.moveaxis(fits, position, 0).reshape(len(probe_axis), -1)
        totals = np.moveaxis(totals, position, 0).reshape(len(probe_axis), -1)
        return probe_axis, fits, totals

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


def _totals(grid: tuple[np.ndarray, np.ndarray, np.ndarray]) -> tuple[int, int] | None:
    """The least and most total of a device's grid (no probe), None where its least
    combination overflows (then every combination does: memory only grows with a count)."""
    _, fits, totals = grid
    if not fits[0, 0]:
        return None
    return int(totals[0, 0]), int(np.max(np.where(fits[0], totals[0], -1)))
