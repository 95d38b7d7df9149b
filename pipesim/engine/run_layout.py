"""The items of a run and their execution order, laid out once per schedule for both engines.

A run's *items* are every action of every step and each device's optimizer step after its
last action of a step, device by device, as :mod:`pipesim.schedules.unroll` orders them. Both
engines break ties between transfers that ask for a channel at the same instant by *execution
order*: the order in which the dry run (:mod:`pipesim.schedules.dry_run`, the validator's walk)
runs the items. For one step it is the validator's own walk, each optimizer step right after
its device's last action; for several steps one more dry run orders the unrolled lists. That
order is a topological order of each device's list order and every dependency, so serving
equal-time requests in it never makes a request wait for one that itself depends on it.

Everything here depends on the schedule alone and is kept on it (:meth:`Schedule.derived`), so
a schedule simulated under many costs is laid out once.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from pipesim.engine.arrays import OPTIMIZER, IntArray
from pipesim.errors import ScheduleError
from pipesim.schedules.dry_run import dry_run
from pipesim.schedules.encoded import EncodedSchedule, F
from pipesim.schedules.schedule import Schedule, UpdateRule
from pipesim.schedules.unroll import OPTIMIZER_STEP, no_flush_order, with_optimizer_steps


@dataclass(frozen=True, eq=False)
class Items:
    """The items of a run, device by device; ``flat`` is -1 for an optimizer step."""

    device: IntArray
    step: IntArray
    flat: IntArray
    device_starts: IntArray


@dataclass(frozen=True, eq=False)
class RunLayout:
    """What a run of a schedule over ``steps`` steps is, whatever the costs: the items, what
    each is, which item on another device it waits for (``source``) and which waits for it
    (``consumer``), and the execution order (``order``; ``key`` is each item's position)."""

    items: Items
    stage: IntArray
    kind: IntArray
    microbatch: IntArray
    source: IntArray
    consumer: IntArray
    order: IntArray
    key: IntArray


def run_layout(schedule: Schedule, steps: int) -> RunLayout:
    """The layout of ``steps`` steps of ``schedule``, made once and kept on the schedule."""
    return schedule.derived(("run layout", steps), lambda: _make_layout(schedule, steps))


def _make_layout(schedule: Schedule, steps: int) -> RunLayout:
    encoded = schedule.encoded
    items = _lay_out(schedule, encoded, steps)
    count = len(items.device)
    is_action = items.flat >= 0
    flat = np.where(is_action, items.flat, 0)
    stage = np.where(is_action, encoded.stage[flat], OPTIMIZER)
    kind = np.where(is_action, encoded.kind[flat], OPTIMIZER)
    microbatch = np.where(is_action, encoded.microbatch[flat], 0)
    upstream = _upstream(encoded, items, steps)
    crosses = upstream >= 0
    crosses[crosses] = items.device[upstream[crosses]] != items.device[crosses]
    source = np.where(crosses, upstream, -1)
    consumer = np.full(count, -1, dtype=np.int64)
    consumer[source[crosses]] = np.flatnonzero(crosses)
    order = _execution_order(schedule, encoded, items, steps, upstream)
    key = np.empty(count, dtype=np.int64)
    key[order] = np.arange(count, dtype=np.int64)
    return RunLayout(items, stage, kind, microbatch, source, consumer, order, key)


def _lay_out(schedule: Schedule, encoded: EncodedSchedule, steps: int) -> Items:
    """Each device's list over ``steps`` steps, with its optimizer steps, as items."""
    row_starts = encoded.row_starts
    lengths = np.diff(row_starts)
    devices = len(lengths)
    if schedule.update_rule is UpdateRule.FLUSH or steps == 1:
        per_step = lengths + 1
        sizes = per_step * steps
        device_starts = np.zeros(devices + 1, dtype=np.int64)
        np.cumsum(sizes, out=device_starts[1:])
        device = np.repeat(np.arange(devices, dtype=np.int64), sizes)
        local = np.arange(int(device_starts[-1]), dtype=np.int64) - device_starts[device]
        step, position = np.divmod(local, per_step[device])
        flat = np.where(position < lengths[device], row_starts[device] + position, -1)
        return Items(device, step, flat, device_starts)
    lists = [_unroll_no_flush(encoded, d, steps) for d in range(devices)]
    device_starts = np.array([0, *itertools.accumulate(map(len, lists))], dtype=np.int64)
    pairs = np.array([pair for items in lists for pair in items], dtype=np.int64)
    device = np.repeat(np.arange(devices, dtype=np.int64), np.diff(device_starts))
    return Items(device, pairs[:, 0], pairs[:, 1], device_starts)


def _unroll_no_flush(encoded: EncodedSchedule, device: int, steps: int) -> list[tuple[int, int]]:
    """Device ``device``'s (step, flat) items as :func:`pipesim.schedules.unroll.unroll` lays
    out a no-flush schedule (the same two functions), each step's optimizer as flat -1."""
    first = int(encoded.row_starts[device])
    row = range(first, int(encoded.row_starts[device + 1]))
    forward = [bool(encoded.kind[flat] == F) for flat in row]
    devices = len(encoded.row_starts) - 1
    order = with_optimizer_steps(no_flush_order(forward, device, devices, steps))
    return [
        (step, -1 if position == OPTIMIZER_STEP else first + position) for step, position in order
    ]


def _upstream(encoded: EncodedSchedule, items: Items, steps: int) -> IntArray:
    """Per item, the item of the same step on another stage that it consumes (-1 none): F the
    previous stage's F, a backward the next stage's. Its other dependency (a backward's own F,
    a W's I) sits earlier on its own device, so the device's order covers it."""
    item_of = np.full((steps, encoded.actions), -1, dtype=np.int64)
    is_action = items.flat >= 0
    item_of[items.step[is_action], items.flat[is_action]] = np.flatnonzero(is_action)
    dependency = np.where(is_action, encoded.upstream[np.maximum(items.flat, 0)], -1)
    has = dependency >= 0
    out = np.full(len(items.device), -1, dtype=np.int64)
    out[has] = item_of[items.step[has], dependency[has]]
    return out


def _execution_order(
    schedule: Schedule,
    encoded: EncodedSchedule,
    items: Items,
    steps: int,
    upstream: IntArray,
) -> IntArray:
    """The items in execution order (see the module docstring)."""
    if steps == 1:
        # The validator's walk, with each optimizer step right after its device's last action.
        rank = np.empty(encoded.actions, dtype=np.int64)
        rank[encoded.order] = np.arange(encoded.actions, dtype=np.int64)
        is_action = items.flat >= 0
        last_flat = encoded.row_starts[1:] - 1
        item_rank = np.where(
            is_action, rank[np.maximum(items.flat, 0)], rank[last_flat][items.device]
        )
        return np.lexsort((~is_action, item_rank)).astype(np.int64)
    walk = dry_run(items.device_starts, upstream)
    if not walk.complete:
        stopped, ends = walk.stopped_at.tolist(), items.device_starts[1:].tolist()
        stuck = [d for d in range(schedule.devices) if stopped[d] < ends[d]]
        raise ScheduleError(
            f"the steps of schedule {schedule.name!r} deadlock when run back to back: "
            f"device(s) {', '.join(map(str, stuck))} never finish"
        )
    return walk.order
