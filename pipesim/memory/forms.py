"""Per-device peak memory without a simulation: the simulator's memory model, in closed form.

The simulator (:mod:`pipesim.engine.memory_over_time`) changes a device's activation level when
an action starts or ends; a device runs its actions one after another, so (for actions that take
time) the sequence of levels depends only on each device's action order, never on the timing.
Each level is a sum over the device's stages of ``n_stash * stash + n_keep * keep + n_input *
input`` plus the running action's transient (one of its stage's F, B, I or W transients, or
the optimizer step's), with counts fixed by the order: a :class:`MemoryForm` records the
distinct count vectors once per schedule, and the peak for any partition is the largest of
those linear forms. Static memory is weights x versions, gradients, optimizer state and master
weights, as the simulator counts them.

A schedule whose stages hold copies of the model (DualPipe) has a form over its IR stages; its
stage costs may be given per IR stage or, as the partitioner and the planner have them, per
model stage (each copy's stage then costs its model stage's).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from pipesim.costs.pipeline_costs import StageCosts
from pipesim.memory import rules
from pipesim.schedules.encoded import KIND_CODES, KINDS
from pipesim.schedules.schedule import Schedule
from pipesim.schedules.unroll import unroll

PYTHON_LEVEL_CELLS = 16
"""A form with at most this many levels x stages has its peak summed on Python floats (one
stage of 1F1B has 3 or 4 levels): array operations cost more than they save below it (measured
on the planner's forms: about 2x on a stage's peak)."""

SLOT = 3 + len(KINDS) + 1
"""Counts per stage in a level: n_stash, n_keep, n_input, then a 0/1 for each kind's transient
running (in :data:`~pipesim.schedules.encoded.KINDS` order), then one for the optimizer step's."""
OPTIMIZER_SLOT = 3 + len(KINDS)

_Counts = tuple[int, ...]  # SLOT counts per stage on the device, flattened


def stage_sizes(stage: StageCosts, rematerialize: bool) -> tuple[float, ...]:
    """One stage's sizes in a level's order: stash, keep, input, each kind's transient, the
    optimizer step's transient."""
    return (
        stage.activation_bytes,
        stage.weight_grad_activation_bytes,
        stage.input_bytes,
        *(rules.transient_bytes(stage, kind, rematerialize) for kind in KINDS),
        stage.optimizer_transient_bytes,
    )


def level_bytes(counts: Sequence[int], sizes: Sequence[float]) -> float:
    """One stage's part of a level: the stash, keep and input terms by the memory model's rule
    (:func:`pipesim.memory.rules.activation_level_bytes`), then the running transients."""
    level = rules.activation_level_bytes(counts[:3], sizes[0], sizes[1], sizes[2])
    for flag, size in zip(counts[3:], sizes[3:], strict=True):
        if flag:
            level += flag * size
    return level


@dataclass(frozen=True)
class MemoryForm:
    """One device's memory as a function of its stages' sizes.

    Attributes:
        stages: the stages the device holds, in increasing order.
        versions: weight versions kept (1 flush, 2 for 2BW, more for PipeDream's stashing).
        levels: the distinct levels reached, each as :data:`SLOT` counts per stage in
            ``stages`` order, flattened.
        rematerialize: the schedule re-materializes (a B's transient covers its forward).
        copies: the copies of the model the schedule's stages hold (1 but for DualPipe).
        model_stages: the stages of one copy, S_model (None: one copy).
    """

    stages: tuple[int, ...]
    versions: int
    levels: tuple[_Counts, ...]
    rematerialize: bool = False
    copies: int = 1
    model_stages: int | None = None

    def _per_stage(self, stage_costs: Sequence[StageCosts]) -> Sequence[StageCosts]:
        """The costs of every IR stage: as given, or, given per model stage (S_model of them),
        each copy's stage with its model stage's."""
        per_copy = self.model_stages
        if self.copies == 1 or per_copy is None or len(stage_costs) != per_copy:
            return stage_costs
        return [stage_costs[s % per_copy] for s in range(per_copy * self.copies)]

    def static_bytes(self, stage_costs: Sequence[StageCosts]) -> float:
        """Weights x versions, gradients, optimizer state and master weights of the device's
        stages (:func:`pipesim.memory.rules.static_bytes`)."""
        return rules.static_bytes(
            self._per_stage(stage_costs), self.stages, self.versions, self.model_stages
        )

    @cached_property
    def _level_array(self) -> np.ndarray:
        """:attr:`levels` as one array, a row per level (computed once)."""
        return np.array(self.levels, dtype=float).reshape(len(self.levels), -1)

    def peak_level_bytes(self, stage_costs: Sequence[StageCosts]) -> float:
        """The largest level (activations with the running transient) for these stage sizes
        (0 if none is positive): every level at once, each summed in :func:`level_bytes`'s
        order (the same floating-point sums)."""
        if not self.levels:
            return 0.0
        per_stage = self._per_stage(stage_costs)
        if len(self.levels) * len(self.stages) <= PYTHON_LEVEL_CELLS:
            return self._peak_in_python(per_stage)
        counts = self._level_array
        total = np.zeros(len(counts))
        with np.errstate(invalid="ignore"):  # 0 x inf: NaN, passed over below
            total = self._levels_summed(per_stage, counts, total)
        # a level of 0 x inf bytes is NaN: the per-level loop's max passed over it, so here
        total = np.where(np.isnan(total), -np.inf, total)
        return max(0.0, float(total.max()))

    @cached_property
    def _flag_columns(self) -> tuple[tuple[tuple[int, bool], ...], ...]:
        """Per stage position, its running-transient columns that are ever set, each with
        whether it is set on every level (computed once): a column never set adds nothing,
        one always set its product on every level."""
        counts = self._level_array
        out = []
        for position in range(len(self.stages)):
            base = SLOT * position
            columns = []
            for offset in range(3, SLOT):
                set_on = counts[:, base + offset] != 0
                if set_on.any():
                    columns.append((base + offset, bool(set_on.all())))
            out.append(tuple(columns))
        return tuple(out)

    def _peak_in_python(self, per_stage: Sequence[StageCosts]) -> float:
        """:meth:`peak_level_bytes` of a form with few levels, level by level on Python
        floats: the same operations in the same order as the arrays' (so the same sums, bit
        for bit), without an array operation's fixed cost per column."""
        sized = [  # as floats, as the arrays hold them (a size given as an int is summed so)
            (
                SLOT * position,
                tuple(map(float, stage_sizes(per_stage[stage], self.rematerialize))),
                flags,
            )
            for position, (stage, flags) in enumerate(
                zip(self.stages, self._flag_columns, strict=True)
            )
        ]
        best = -math.inf
        for level in self.levels:
            total = 0.0
            for base, sizes, flags in sized:
                part = level[base] * sizes[0] + level[base + 1] * sizes[1]
                part = part + level[base + 2] * sizes[2]
                for column, _ in flags:
                    flag = level[column]
                    part = part + (flag * sizes[column - base] if flag != 0 else 0.0)
                total = total + part
            if total > best:  # a NaN level (0 x inf bytes) is passed over
                best = total
        return max(0.0, best)

    def _levels_summed(
        self, per_stage: Sequence[StageCosts], counts: np.ndarray, total: np.ndarray
    ) -> np.ndarray:
        """Every level's bytes, each summed in :func:`level_bytes`'s order (a transient
        flag of 0 adds nothing there, nor here: its column is skipped, or masked)."""
        for position, stage in enumerate(self.stages):
            sizes = stage_sizes(per_stage[stage], self.rematerialize)
            base = SLOT * position
            part = counts[:, base] * sizes[0] + counts[:, base + 1] * sizes[1]
            part = part + counts[:, base + 2] * sizes[2]
            for column, everywhere in self._flag_columns[position]:
                flags = counts[:, column]
                size = sizes[column - base]
                term = flags * size
                part = part + (term if everywhere else np.where(flags != 0, term, 0.0))
            total = total + part
        return total

    def peak_bytes(
        self,
        stage_costs: Sequence[StageCosts],
        reserve_bytes: float = 0.0,
        fragmentation: float = 0.0,
    ) -> float:
        """The simulator's ``peak_memory_bytes``: static plus the largest level, with the
        allocator's fragmentation and the runtime reserve."""
        model = self.static_bytes(stage_costs) + self.peak_level_bytes(stage_costs)
        return rules.peak_with_allowances(model, reserve_bytes, fragmentation)


def memory_forms(schedule: Schedule, steps: int = 1) -> tuple[MemoryForm, ...]:
    """One :class:`MemoryForm` per device of ``schedule`` run for ``steps`` steps."""
    plays: list[tuple[np.ndarray, np.ndarray, list[int]]] = []
    if steps == 1:  # each device's row, then its optimizer step: read from the arrays
        arrays = schedule.action_arrays
        bounds = arrays.row_starts.tolist()
        for device in range(schedule.devices):
            first, last = bounds[device], bounds[device + 1]
            after = [last - first] if last > first else []
            plays.append((arrays.kind[first:last], arrays.stage[first:last], after))
    else:
        for work in unroll(schedule, steps):
            order = [item.action for item in work]
            acting = [action for action in order if action is not None]
            kinds = np.fromiter((KIND_CODES[a.kind] for a in acting), np.int64, len(acting))
            stages = np.fromiter((a.stage for a in acting), np.int64, len(acting))
            done, after = 0, []
            for action in order:  # the actions before each optimizer step
                if action is None:
                    after.append(done)
                else:
                    done += 1
            plays.append((kinds, stages, after))
    return tuple(
        MemoryForm(
            schedule.stages_on(device),
            rules.weight_versions(schedule, device),
            _maximal(_levels(schedule, device, kinds, stages, after)),
            schedule.rematerialize,
            schedule.copies,
            schedule.model_stages if schedule.copies > 1 else None,
        )
        for device, (kinds, stages, after) in enumerate(plays)
    )


def _templates(rematerialize: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every kind's changes as rows of one stage's SLOT counts: (the rows of all kinds one
    after another, each kind's first row, whether each row raises the level)."""
    rows: list[list[int]] = []
    firsts: list[int] = []
    raises: list[bool] = []
    for code, kind in enumerate(KINDS):
        firsts.append(len(rows))
        for change in rules.changes(kind, rematerialize):
            row = [0] * SLOT
            row[0], row[1], row[2] = change.counts
            row[3 + code] = change.transient
            rows.append(row)
            raises.append(any(value > 0 for value in (*change.counts, change.transient)))
    firsts.append(len(rows))
    return np.array(rows, dtype=np.int64), np.array(firsts), np.array(raises, dtype=bool)


def _levels(
    schedule: Schedule,
    device: int,
    kinds: np.ndarray,
    stages: np.ndarray,
    optimizer_after: Sequence[int],
) -> np.ndarray:
    """The count vector after every increase of the device's level, running its actions (kind
    codes and stages, in order) with an optimizer step after each count of actions in
    ``optimizer_after``: one row per increase, duplicates kept. Every action's changes are
    laid out as rows of a matrix and summed cumulatively (the counts after each change), the
    optimizer step being every stage's optimizer transient on top of the counts at that
    moment."""
    held = np.array(schedule.stages_on(device), dtype=np.int64)  # in increasing order
    width = SLOT * len(held)
    templates, firsts, raises = _templates(schedule.rematerialize)
    kinds = np.asarray(kinds, dtype=np.int64)
    places = np.searchsorted(held, stages)
    if len(places) and not np.array_equal(held[np.minimum(places, len(held) - 1)], stages):
        raise ValueError(f"device {device} runs a stage it does not hold")
    sizes = firsts[kinds + 1] - firsts[kinds]  # changes per action
    owner = np.repeat(np.arange(len(kinds)), sizes)  # the action of each change
    starts = np.concatenate(([0], np.cumsum(sizes)))
    template = firsts[kinds[owner]] + np.arange(len(owner)) - starts[owner]
    deltas = np.zeros((len(owner), width), dtype=np.int64)
    columns = SLOT * places[owner][:, None] + np.arange(SLOT)
    deltas[np.arange(len(owner))[:, None], columns] = templates[template]
    counts = np.cumsum(deltas, axis=0)
    recorded = [counts[raises[template]]]
    optimizer = np.zeros(width, dtype=np.int64)
    optimizer[OPTIMIZER_SLOT::SLOT] = 1
    for done in optimizer_after:
        changes = int(starts[done])
        before = counts[changes - 1] if changes else np.zeros(width, dtype=np.int64)
        recorded.append((before + optimizer)[None, :])
    return np.concatenate(recorded) if recorded else np.zeros((0, width), dtype=np.int64)


def _maximal(levels: np.ndarray) -> tuple[_Counts, ...]:
    """Drop count vectors that another dominates (sizes are never negative). In decreasing
    lexicographic order a vector can only be dominated by one before it, so the first vector
    left is maximal: keep it, drop every later vector it dominates (all at once), repeat. The
    loop runs once per maximal vector (a handful for one chunk per device, a hundred or so
    for four chunks of a hundred micro-batches), not once per level."""
    if not len(levels):
        return ()
    # a vector its successor dominates goes first (a level rising step by step), in one pass
    dominated = np.zeros(len(levels), dtype=bool)
    dominated[:-1] = (levels[1:] >= levels[:-1]).all(axis=1)
    rows = levels[~dominated]
    rows = rows[np.lexsort(rows.T[::-1])[::-1]]  # decreasing lexicographic order
    distinct = np.ones(len(rows), dtype=bool)
    distinct[1:] = (rows[1:] != rows[:-1]).any(axis=1)
    rows = rows[distinct]
    kept = []
    while len(rows):
        top, rows = rows[0], rows[1:]
        kept.append(tuple(top.tolist()))
        rows = rows[~(rows <= top).all(axis=1)]
    return tuple(kept)
