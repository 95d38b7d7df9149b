"""Memory per device over time, from the compute timeline and the memory model's rules.

The rules (static memory, and each action's changes to the activations it holds) live in
:mod:`pipesim.memory.rules`; this module applies them to a run's records, in bytes, at each
change's time. At equal times frees come first (and otherwise the records' completion order
holds).
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from pipesim.costs.pipeline_costs import PipelineCosts, StageCosts
from pipesim.engine.arrays import OPTIMIZER, FloatArray, IntArray, RunArrays
from pipesim.engine.run_layout import run_layout
from pipesim.memory import rules
from pipesim.schedules.encoded import KINDS
from pipesim.schedules.schedule import Schedule

# The terms of a device's peak memory, in the order a stacked bar draws them (the static
# ones first): the keys of DeviceMemory.breakdown() and of ``memory_breakdown`` in results.
BREAKDOWN_TERMS = (
    "weights",
    "gradients",
    "optimizer_state",
    "master_weights",
    "activations",
    "transient",
    "fragmentation",
    "runtime_reserve",
)


@dataclass(frozen=True, eq=False)
class _Walk:
    """Every device's changes of one run, in the order they apply: device by device
    (``starts`` and ``widths`` give each device's run of them), their times and records, and
    the running totals of the activation and transient changes, one row per device (padded on
    the right with the device's final level)."""

    sorted_times: FloatArray
    records: IntArray
    starts: list[int]
    widths: list[int]
    activation_rows: FloatArray
    transient_rows: FloatArray


@dataclass(frozen=True, eq=False)
class _Curves:
    """Every device's memory curves of one run, from a :class:`_Walk` made when first read
    (``walk`` makes it; a run whose changes move no bytes has its peaks without it)."""

    walk: Callable[[], _Walk]

    @cached_property
    def made(self) -> _Walk:
        """The walk, made once."""
        return self.walk()

    def __reduce__(self) -> tuple[type[_Curves], tuple[_Given]]:
        """Pickled as the walk itself (made now): a result crosses to another process with
        its curves, not with the closure that would make them."""
        return _Curves, (_Given(self.made),)

    def times(self, device: int) -> FloatArray:
        """``device``'s change times."""
        made = self.made
        start = made.starts[device]
        return made.sorted_times[start : start + made.widths[device]]

    def activations(self, device: int) -> FloatArray:
        """``device``'s activation levels."""
        return self.made.activation_rows[device, : self.made.widths[device]]

    def transients(self, device: int) -> FloatArray:
        """``device``'s transient levels."""
        return self.made.transient_rows[device, : self.made.widths[device]]


@dataclass(frozen=True)
class _Given:
    """A walk already made, as the callable :class:`_Curves` asks for (picklable)."""

    made: _Walk

    def __call__(self) -> _Walk:
        return self.made


@dataclass(frozen=True, eq=False)
class DeviceMemory:
    """One device's memory: the static terms, the activation and transient curves, the peak
    and what made it.

    ``change_times_s``, ``activation_levels_bytes`` and ``transient_levels_bytes`` are the
    curves: after each change, the activation bytes held and the running actions' transients
    (the static part not included). The peak is the largest of their sum: at that moment
    ``activations_at_peak_bytes`` were stashed and ``transient_at_peak_bytes`` held by the
    running action (``peak_record``, an index into the run's records, or -1 when the device
    ran nothing). ``peak_activation_bytes`` is the largest stash at any time (transients left
    out), the figure the papers' activation-memory formulas give. The curves are read from
    ``curves``, which holds every device's (``device`` is this one's).
    """

    static: rules.StaticMemory
    peak_activation_bytes: float
    activations_at_peak_bytes: float
    transient_at_peak_bytes: float
    curves: _Curves = field(repr=False)
    device: int = 0
    runtime_reserve_bytes: float = 0.0
    fragmentation_fraction: float = 0.0
    peak_record: int = -1

    @property
    def change_times_s(self) -> FloatArray:
        """The time of each change of this device's memory, in the order they apply."""
        return self.curves.times(self.device)

    @property
    def activation_levels_bytes(self) -> FloatArray:
        """The activation bytes held after each change."""
        return self.curves.activations(self.device)

    @property
    def transient_levels_bytes(self) -> FloatArray:
        """The running actions' transients after each change."""
        return self.curves.transients(self.device)

    @property
    def static_bytes(self) -> float:
        """Weights, gradients, optimizer state and master weights."""
        return self.static.total

    @property
    def model_peak_bytes(self) -> float:
        """Static memory plus the largest activations-and-transient level."""
        return self.static_bytes + self.activations_at_peak_bytes + self.transient_at_peak_bytes

    @property
    def fragmentation_bytes(self) -> float:
        """The allocator's slack on top of the model's peak."""
        return self.model_peak_bytes * self.fragmentation_fraction

    @property
    def peak_bytes(self) -> float:
        """The reported peak: the model's, fragmentation and the runtime reserve."""
        return rules.peak_with_allowances(
            self.model_peak_bytes, self.runtime_reserve_bytes, self.fragmentation_fraction
        )

    def breakdown(self) -> dict[str, float]:
        """The peak term by term (bytes, keyed by :data:`BREAKDOWN_TERMS`); the terms add up
        to :attr:`peak_bytes`."""
        values = (
            self.static.weights,
            self.static.gradients,
            self.static.optimizer_state,
            self.static.master_weights,
            self.activations_at_peak_bytes,
            self.transient_at_peak_bytes,
            self.fragmentation_bytes,
            self.runtime_reserve_bytes,
        )
        return dict(zip(BREAKDOWN_TERMS, values, strict=True))

    @cached_property
    def timeline(self) -> tuple[tuple[float, float], ...]:
        """``(time_s, total bytes after the change)``, starting with ``(0, static)``: the
        model's memory (transients included; the allowances not)."""
        totals = (
            self.static_bytes + self.activation_levels_bytes + self.transient_levels_bytes
        ).tolist()
        return ((0.0, self.static_bytes), *zip(self.change_times_s.tolist(), totals, strict=True))


@functools.cache
def _change_table(remat: bool) -> tuple[tuple[FloatArray, ...], ...]:
    """Per change slot (first, second) and kind code: whether it happens, whether at the
    action's start, and its counts of (stash, keep, input, transient), from
    :data:`rules.CHANGES`; the last row (index -1) is the optimizer step: its transient at its
    start and its end. Made once per ``remat``."""
    table = []
    for slot in range(2):
        happens, at_start, counts = [], [], []
        for kind in KINDS:
            found = rules.changes(kind, remat)
            change = found[slot] if slot < len(found) else None
            happens.append(change is not None)
            at_start.append(change is not None and change.at is rules.At.START)
            counts.append((0, 0, 0, 0) if change is None else (*change.counts, change.transient))
        happens.append(True)
        at_start.append(slot == 0)
        counts.append((0, 0, 0, 1 if slot == 0 else -1))
        columns = np.array(counts, dtype=np.int64)
        table.append((np.array(happens), np.array(at_start), *columns.T))
    return tuple(table)


def _bytes(counts: tuple[FloatArray, ...], sizes: tuple[FloatArray, ...]) -> FloatArray:
    """:meth:`rules.Change.bytes`, elementwise (counts and sizes broadcast against each other):
    the same operations in the same order. Each term adds ``count * size`` to a total that
    starts at 0.0: for a count of 1 that is adding the size, for -1 subtracting it (IEEE
    subtraction is the addition of the negation, and multiplying by 1 or -1 is exact), for 0
    adding ``0 * size`` (what Change.bytes skips: the total is unchanged unless the size is
    infinite)."""
    total: FloatArray = np.zeros(())
    for count, size in zip(counts, sizes, strict=True):
        total = total + count * size
    return total


@dataclass(frozen=True, eq=False)
class _Tables:
    """Per (slot, row, column) of a change, for one schedule's stage count and devices: rows
    are the stages, then one per device for its optimizer step; columns the kind codes, then
    the optimizer (column -1). ``happens`` and the counts of (stash, keep, input, transient)
    come from :func:`_change_table`, ``moves`` is whether the change moves any activation:
    these of shape (2, 1, columns), to broadcast over the rows; ``at_start`` is flat, one
    entry per (slot, row, column)."""

    rows: int
    happens: npt.NDArray[Any]
    at_start: npt.NDArray[Any]
    moves: npt.NDArray[Any]
    counts: tuple[FloatArray, ...]
    stages_on: tuple[tuple[int, ...], ...]
    versions: tuple[int, ...]
    holds_a_copy: tuple[bool, ...]


def _tables(schedule: Schedule) -> _Tables:
    """The cost-independent part of :func:`device_memory` for ``schedule``, made once."""

    def make() -> _Tables:
        table = _change_table(schedule.rematerialize)
        happens = np.stack([t[0] for t in table])[:, None, :]
        at_start = np.stack([t[1] for t in table])[:, None, :]
        counts = tuple(np.stack([t[2 + i] for t in table])[:, None, :] for i in range(4))
        moves = (counts[0] != 0) | (counts[1] != 0) | (counts[2] != 0)
        devices = range(schedule.devices)
        held = tuple(schedule.stages_on(d) for d in devices)
        rows = schedule.stages + schedule.devices
        return _Tables(
            rows,
            happens,
            np.broadcast_to(at_start, (2, rows, at_start.shape[-1])).ravel(),
            moves,
            tuple(c.astype(np.float64) for c in counts),
            held,
            tuple(rules.weight_versions(schedule, d) for d in devices),
            tuple(_holds_first_and_last(schedule, stages) for stages in held),
        )

    return schedule.derived("device memory tables", make)


def static_breakdown(schedule: Schedule, costs: PipelineCosts, device: int) -> rules.StaticMemory:
    """Weights x versions, gradients, optimizer state and master weights of the stages on
    ``device``, term by term (:func:`pipesim.memory.rules.static_breakdown`)."""
    tables = _tables(schedule)
    return rules.static_breakdown(
        costs.stages,
        tables.stages_on[device],
        tables.versions[device],
        schedule.model_stages if schedule.copies > 1 else None,
    )


def _holds_first_and_last(schedule: Schedule, held: Sequence[int]) -> bool:
    """Whether a device holding ``held`` holds the first and the last stage of one copy of
    the model: only then may :func:`rules.shared_copy_share` find a tied copy to count once."""
    per_copy = schedule.model_stages if schedule.copies > 1 else schedule.stages
    return any(
        first in held and first + per_copy - 1 in held
        for first in range(0, schedule.stages, per_copy)
    )


def _static_memories(
    schedule: Schedule, tables: _Tables, stages: Sequence[StageCosts]
) -> list[rules.StaticMemory]:
    """Each device's :func:`rules.static_breakdown`. Without a tied copy to count once, a
    device's terms are a function of its stages' costs (in order) and its weight versions
    alone: devices that hold the same costs objects share one computation."""
    model_stages = schedule.model_stages if schedule.copies > 1 else None
    made: dict[tuple[int, tuple[int, ...]], rules.StaticMemory] = {}
    out = []
    for held, versions, tied in zip(
        tables.stages_on, tables.versions, tables.holds_a_copy, strict=True
    ):
        if tied:
            out.append(rules.static_breakdown(stages, held, versions, model_stages))
            continue
        key = (versions, tuple([id(stages[s]) for s in held]))
        found = made.get(key)
        if found is None:
            found = made[key] = rules.static_breakdown(stages, held, versions, model_stages)
        out.append(found)
    return out


def _stage_sizes(
    stages: Sequence[StageCosts], remat: bool
) -> tuple[list[float], list[float], list[float], list[tuple[float, ...]]]:
    """Per stage: stash, keep and input sizes, and the transient of each kind
    (:func:`rules.transient_bytes`), each stage's costs read once however often they repeat."""
    seen: dict[int, tuple[float, float, float, tuple[float, ...]]] = {}
    stash, keep, inputs, transient = [], [], [], []
    for stage in stages:
        found = seen.get(id(stage))
        if found is None:
            found = seen[id(stage)] = (
                stage.activation_bytes,
                stage.weight_grad_activation_bytes,
                stage.input_bytes,
                tuple(rules.transient_bytes(stage, kind, remat) for kind in KINDS),
            )
        stash.append(found[0])
        keep.append(found[1])
        inputs.append(found[2])
        transient.append(found[3])
    return stash, keep, inputs, transient


# What a stage's sizes are to the memory model: the fields :func:`_size_tables` reads.
_SIZE_FIELDS = operator.attrgetter(
    "activation_bytes",
    "weight_grad_activation_bytes",
    "input_bytes",
    "forward_transient_bytes",
    "input_grad_transient_bytes",
    "weight_grad_transient_bytes",
    "optimizer_transient_bytes",
    "parameter_bytes",
    "gradient_bytes",
    "optimizer_bytes",
    "master_weight_bytes",
    "shared_parameter_bytes",
)
_SizeTables = tuple[FloatArray, FloatArray, npt.NDArray[np.bool_], list[rules.StaticMemory], bool]
_KEPT_SIZES = 16  # size tables kept per schedule (a sweep varying times reuses one)


def _size_tables(schedule: Schedule, tables: _Tables, stages: Sequence[StageCosts]) -> _SizeTables:
    """The activation and transient bytes of each (slot, row, column) change, whether it
    happens, and each device's static memory: functions of the stages' sizes alone
    (:data:`_SIZE_FIELDS`), kept on the schedule for the last few sizes seen, so points that
    differ only in times (a sweep over compute and link speeds) work them out once.

    Equal sizes give equal tables bit for bit: the key holds each size with its type (an
    integer size is summed exactly where the float of the same value is rounded) and compares
    them by value, which identifies 0.0 with -0.0, and no table entry depends on a zero's sign
    (every entry is a sum that starts at +0.0, or Python's ``sum``, which starts at the
    integer 0)."""
    seen: dict[int, int] = {}
    rows: list[tuple[object, ...]] = []
    index = []
    for stage in stages:
        at = seen.get(id(stage))
        if at is None:
            at = seen[id(stage)] = len(rows)
            rows.append(tuple((type(size), size) for size in _SIZE_FIELDS(stage)))
        index.append(at)
    key = (tuple(rows), tuple(index))
    kept: dict[object, Any] = schedule.derived("memory size tables", dict)
    found = kept.get(key)
    if found is None:
        if len(kept) >= _KEPT_SIZES:
            kept.clear()
        found = kept[key] = _make_size_tables(schedule, tables, stages)
    return cast(_SizeTables, found)


def _make_size_tables(
    schedule: Schedule, tables: _Tables, stages: Sequence[StageCosts]
) -> _SizeTables:
    """:func:`_size_tables`, worked out."""
    devices, count_stages, rows = schedule.devices, len(stages), tables.rows
    stash, keep, inputs, per_kind = _stage_sizes(stages, schedule.rematerialize)
    padding = [0.0] * devices
    # sizes per row (the optimizer rows stash nothing), shaped to broadcast over the columns
    sizes = tuple(np.array(column + padding)[:, None] for column in (stash, keep, inputs))
    transient = np.zeros((rows, len(KINDS) + 1))
    if any(any(values) for values in per_kind):
        transient[:count_stages, : len(KINDS)] = per_kind
    optimizer = [
        rules.optimizer_transient_bytes(stages, tables.stages_on[d]) for d in range(devices)
    ]
    transient[count_stages:, -1] = optimizer
    act_table = _bytes(tables.counts[:3], sizes).ravel()  # (slot, row, column), flat
    trans_table = _bytes(tables.counts[3:], (transient,)).ravel()
    # a change that only moves a transient of 0 bytes is no change at all
    valid_table = (
        tables.happens & (tables.moves | (trans_table.reshape(2, rows, -1) != 0))
    ).ravel()
    moves_bytes = bool(act_table.any() or trans_table.any())
    statics = _static_memories(schedule, tables, stages)
    return act_table, trans_table, valid_table, statics, moves_bytes


def _cells(stage: IntArray, kind: IntArray, device: IntArray, stages: int) -> IntArray:
    """Per record, its two slots' entries in the (slot, row, column) tables: a row of two."""
    optimizer_step = kind == OPTIMIZER
    columns = len(KINDS) + 1
    cell = np.where(optimizer_step, stages + device, stage) * columns + kind
    cell += np.where(optimizer_step, columns, 0)  # the optimizer's column is the last (-1)
    return cell


def _slots(schedule: Schedule, run: RunArrays) -> IntArray:
    """Each record's two slots, interleaved (record 0 slot 0, record 0 slot 1, record 1 ...),
    as entries of the flat (slot, row, column) tables. From the run layout's items, kept on
    the schedule, when the run says which item each record is (the fast engine's)."""
    tables = _tables(schedule)
    offsets = np.array([0, tables.rows * (len(KINDS) + 1)])
    if run.item is not None:
        per_step = schedule.encoded.actions + schedule.devices
        steps = len(run) // per_step
        if steps * per_step == len(run):
            layout = run_layout(schedule, steps)
            if len(layout.kind) == len(run):

                def make() -> IntArray:
                    cell = _cells(layout.stage, layout.kind, layout.items.device, schedule.stages)
                    return cast(IntArray, cell[:, None] + offsets)

                kept = schedule.derived(("memory slots", steps), make)
                return cast(IntArray, kept[run.item].ravel())
    cell = _cells(run.stage, run.kind, run.device, schedule.stages)
    return cast(IntArray, (cell[:, None] + offsets).ravel())


def device_memory(
    schedule: Schedule, costs: PipelineCosts, run: RunArrays
) -> tuple[DeviceMemory, ...]:
    """Memory of every device over the whole run in ``run``.

    Each record makes the changes :mod:`pipesim.memory.rules` gives its kind (at most two),
    each at the record's start or end, in bytes of its stage's sizes; the activation and the
    transient curves are kept apart (the first is the papers' activation memory).

    The changes' bytes are worked out once per (slot, stage, kind) in a small table (the
    optimizer step: per device) and looked up per record; the changes are sorted by device,
    time, frees (and zero changes) before allocations, then as made, and each device's levels
    are running totals in that order. Where no change moves any bytes (every size 0, as in a
    sweep of synthetic costs without activation bytes), every level and so every peak is 0,
    and the curves are walked only if read.
    """
    tables = _tables(schedule)
    devices = schedule.devices
    act_table, trans_table, valid_table, statics, moves_bytes = _size_tables(
        schedule, tables, costs.stages
    )
    reserve, fragmentation = costs.runtime_reserve_bytes, costs.fragmentation_fraction

    def walk() -> _Walk:
        return _walk(schedule, tables, run, act_table, trans_table, valid_table)

    if not moves_bytes:
        # Every change is of +0.0 bytes: every level is 0.0, so is every peak (a level is a
        # peak only when above 0), and the curves wait until they are read.
        curves = _Curves(walk)
        return tuple(
            DeviceMemory(statics[d], 0.0, 0.0, 0.0, curves, d, reserve, fragmentation, -1)
            for d in range(devices)
        )
    made = walk()
    curves = _Curves(_Given(made))
    activations, transients = made.activation_rows, made.transient_rows
    totals = activations + transients
    at = totals.argmax(axis=1)
    every = np.arange(devices)
    peak_totals = totals[every, at].tolist()
    at_acts, at_transients = activations[every, at].tolist(), transients[every, at].tolist()
    largest = activations.max(axis=1).tolist()
    records = made.records
    changes = len(records)
    peak_records = (
        records[np.minimum(np.array(made.starts) + at, changes - 1)].tolist() if changes else []
    )
    out = []
    for d, held in enumerate(made.widths):
        if held and peak_totals[d] > 0:
            at_act, at_trans, peak_record = at_acts[d], at_transients[d], peak_records[d]
        else:
            at_act, at_trans, peak_record = 0.0, 0.0, -1
        out.append(
            DeviceMemory(
                statics[d],
                max(largest[d] if held else 0.0, 0.0),
                at_act,
                at_trans,
                curves,
                d,
                reserve,
                fragmentation,
                peak_record,
            )
        )
    return tuple(out)


def _walk(
    schedule: Schedule,
    tables: _Tables,
    run: RunArrays,
    act_table: FloatArray,
    trans_table: FloatArray,
    valid_table: npt.NDArray[np.bool_],
) -> _Walk:
    """The changes of ``run`` in the order they apply, and each device's running totals."""
    devices = schedule.devices
    # each record's two slots, interleaved: (record 0 slot 0, record 0 slot 1, record 1 ...)
    slots = _slots(schedule, run)
    made = np.flatnonzero(valid_table[slots])
    slots = slots[made]
    record = made >> 1
    times = np.where(tables.at_start[slots], run.start_s[record], run.end_s[record])
    act_deltas, trans_deltas = act_table[slots], trans_table[slots]
    owner = run.device[record]
    # Stable: by device, then time, frees (and zero changes) before allocations, then as made.
    order = np.lexsort((act_deltas + trans_deltas > 0, times, owner))
    owner, record = owner[order], record[order]
    changes = len(owner)
    widths = np.bincount(owner, minlength=devices)
    starts = widths.cumsum() - widths
    width = max(int(widths.max()), 1) if changes else 1
    # both curves at once: rows 0..D-1 activations, D..2D-1 transients (running_totals's way)
    levels = np.zeros((2 * devices, width))
    column = np.arange(changes) - starts[owner]
    levels[owner, column] = act_deltas[order]
    levels[owner + devices, column] = trans_deltas[order]
    np.add.accumulate(levels, axis=1, out=levels)
    return _Walk(
        times[order],
        record,
        starts.tolist(),
        widths.tolist(),
        levels[:devices],
        levels[devices:],
    )


def shared_peak_bytes(memories: Sequence[DeviceMemory], *, static: bool = True) -> float:
    """The most the devices hold at one moment when they share one memory (the lanes of one
    GPU, :mod:`executor.lanes`): every device's static terms (with ``static``) plus the largest
    sum over devices of their activation and transient levels at one time. At equal times,
    frees come first. Never more than the sum of the devices' own peaks, and less where their
    peaks fall at different times."""
    times, deltas = [], []
    for memory in memories:
        levels = memory.activation_levels_bytes + memory.transient_levels_bytes
        if len(levels):
            times.append(memory.change_times_s)
            deltas.append(np.diff(levels, prepend=0.0))
    fixed = sum(m.static_bytes for m in memories) if static else 0.0
    if not times:
        return float(fixed)
    at, change = np.concatenate(times), np.concatenate(deltas)
    order = np.lexsort((change > 0, at))
    return float(fixed + max(0.0, float(np.cumsum(change[order]).max())))
