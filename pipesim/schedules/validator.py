"""The one validator for every schedule, generated or loaded from a file.

Checks, in order, each failing with a :class:`~pipesim.errors.ScheduleError` that renders the
device-by-step grid with the offending actions marked:

1. shape: at least one device and one micro-batch; every stage placed on an existing device;
   every device holding the same number of stages;
2. each action names an existing stage and micro-batch and sits on its stage's device, once;
3. completeness: each (stage, micro-batch) has one F and either one B, or one I and one W;
4. local order: on its device an action comes after the same micro-batch's earlier pieces
   (F before B or I, I before W);
5. a dependency-driven dry run runs every device's list to the end: no deadlock.

The checks run twice over only when they fail: a fast pass encodes the actions as integer
arrays (:mod:`pipesim.schedules.encoded`) and checks them all at once with numpy and one
integer dry run; when it finds any fault, the readable checks below run in order and raise
the error with its grid. A valid schedule is thus checked in milliseconds, and the encoding is
kept for the engines.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import TYPE_CHECKING, Any

import numpy as np

from pipesim.common.jit import kernel
from pipesim.errors import ScheduleError, few
from pipesim.schedules.action import Action, Kind, UpdateRule
from pipesim.schedules.dependencies import action_dependencies
from pipesim.schedules.encoded import KIND_CODES, B, EncodedSchedule, F, I, W
from pipesim.schedules.render import render_grid

if TYPE_CHECKING:
    from pipesim.schedules.schedule import Schedule

_MAX_ERROR_COLUMNS = 16


@dataclass(frozen=True)
class Checked:
    """What validation learns on the way: the schedule as integer arrays, with which backward
    each (stage, micro-batch) uses and an execution order that respects every device's list
    and every dependency."""

    encoded: EncodedSchedule


def validate(schedule: Schedule) -> Checked:
    """Check ``schedule``; return what was learned, or raise :class:`ScheduleError`."""
    _check_shape(schedule)
    encoded = _encode(schedule)
    if encoded is None:
        _validate_readably(schedule)  # raises the first fault, with its grid
        raise AssertionError(  # pragma: no cover - the two passes must agree
            f"schedule {schedule.name!r}: the fast checks found a fault the readable ones did not"
        )
    return Checked(encoded)


def _validate_readably(schedule: Schedule) -> None:
    """Every check in order, on the actions themselves; raise the first fault found."""
    rows = schedule.device_actions
    positions = _check_actions(schedule)
    backward_kinds = _check_complete(schedule, positions)
    _check_local_order(rows, positions)
    stages = len(schedule.placement)
    dependencies = {a: action_dependencies(a, stages, backward_kinds) for a in positions}
    _dry_run(rows, positions, dependencies)


def _encode(schedule: Schedule) -> EncodedSchedule | None:
    """The integer encoding of a valid schedule, or None when any check fails."""
    rows = schedule.device_actions
    devices, stages, microbatches = len(rows), len(schedule.placement), schedule.microbatches
    lengths = np.fromiter(map(len, rows), dtype=np.int64, count=devices)
    row_starts = np.zeros(devices + 1, dtype=np.int64)
    np.cumsum(lengths, out=row_starts[1:])
    count = int(row_starts[-1])
    flat = list(itertools.chain.from_iterable(rows))
    if not flat:
        return None
    stage = np.fromiter(map(itemgetter(0), flat), dtype=np.int64, count=count)
    kind = np.fromiter(
        map(KIND_CODES.__getitem__, map(itemgetter(1), flat)), dtype=np.int64, count=count
    )
    microbatch = np.fromiter(map(itemgetter(2), flat), dtype=np.int64, count=count)
    device = np.repeat(np.arange(devices, dtype=np.int64), lengths)
    if stage.max() >= stages or microbatch.max() >= microbatches:
        return None
    placement = np.array(schedule.placement, dtype=np.int64)
    if (placement[stage] != device).any():
        return None
    code = (stage * microbatches + microbatch) * 4 + kind
    if np.bincount(code, minlength=stages * microbatches * 4).max() > 1:
        return None  # an action appears twice
    index = np.arange(count, dtype=np.int64)
    by_code = np.full(stages * microbatches * 4, -1, dtype=np.int64)
    by_code[code] = index
    flat_index = by_code.reshape(stages, microbatches, 4)
    present = flat_index >= 0
    full = present[:, :, B] & ~present[:, :, I] & ~present[:, :, W]
    split = ~present[:, :, B] & present[:, :, I] & present[:, :, W]
    if not present[:, :, F].all() or not (full | split).all():
        return None
    if schedule.rematerialize and split.any():
        return None
    backward_kind = np.where(split, I, B).astype(np.int64)
    # Local order: F before B or I, I before W, on the same device (so in the same row).
    earlier = np.where(
        kind == W, flat_index[stage, microbatch, I], flat_index[stage, microbatch, F]
    )
    if (earlier[kind != F] > index[kind != F]).any():
        return None
    dependencies = np.full((count, 2), -1, dtype=np.int64)
    previous_stage = np.maximum(stage - 1, 0)
    next_stage = np.minimum(stage + 1, stages - 1)
    upstream_kind = backward_kind[next_stage, microbatch]
    next_backward = flat_index[next_stage, microbatch, upstream_kind]
    # F needs the previous stage's F; B and I their own F; W its I (``earlier`` holds both).
    previous_forward = np.where(stage > 0, flat_index[previous_stage, microbatch, F], -1)
    dependencies[:, 0] = np.where(kind == F, previous_forward, earlier)
    dependencies[:, 1] = np.where(
        (kind != F) & (kind != W) & (stage < stages - 1), next_backward, -1
    )
    upstream = np.where(kind == F, dependencies[:, 0], dependencies[:, 1])
    if dry_run_kernel.is_compiled:  # loaded by pipesim.engine.warm_up: use it
        order = np.empty(count, dtype=np.int64)
        done = dry_run_kernel.compiled()(row_starts, upstream, order)
    else:
        walked = [0] * count
        done = dry_run_kernel.python(row_starts.tolist(), upstream.tolist(), walked)
        order = np.array(walked, dtype=np.int64)
    if done < count:
        return None  # deadlock
    return EncodedSchedule(
        row_starts,
        stage,
        kind,
        microbatch,
        device,
        dependencies,
        upstream,
        order,
        backward_kind,
        flat_index,
    )


@kernel
def dry_run_kernel(row_starts: Any, needs: Any, order: Any) -> int:
    """The validator's dry run on integers: devices in a queue, each running its list until an
    action needs one not yet done (``needs[i]``, -1 for none). Fills ``order`` with the flat
    indices in the order run; returns how many ran (all of them, or fewer at a deadlock).

    One dependency per action is enough: an action's other dependency (a backward's own
    forward, a W's I) sits earlier on its own device, which the local-order check proved, so
    it is always done when the device reaches the action. Each blocked device waits on one
    action, so the waiting lists are linked through ``next_waiting``.
    """
    devices = len(row_starts) - 1
    count = row_starts[devices]
    done = [False] * count
    pointer = [row_starts[d] for d in range(devices)]
    waiting_head = [-1] * count
    next_waiting = [-1] * devices
    queue = [0] * (devices + count + 1)
    for d in range(devices):
        queue[d] = d
    head, tail, ran = 0, devices, 0
    while head < tail:
        device = queue[head]
        head += 1
        i, end = pointer[device], row_starts[device + 1]
        while i < end:
            missing = needs[i]
            if missing >= 0 and not done[missing]:
                next_waiting[device] = waiting_head[missing]
                waiting_head[missing] = device
                break
            done[i] = True
            order[ran] = i
            ran += 1
            woken = waiting_head[i]
            if woken >= 0:
                # the list is newest first; wake devices in the order they began to wait
                first_new = tail
                while woken >= 0:
                    queue[tail] = woken
                    tail += 1
                    woken = next_waiting[woken]
                left, right = first_new, tail - 1
                while left < right:
                    queue[left], queue[right] = queue[right], queue[left]
                    left += 1
                    right -= 1
            i += 1
        pointer[device] = i
    return ran


def fail(
    message: str,
    rows: Sequence[Sequence[Action | None]],
    marks: Sequence[tuple[int, int]] = (),
) -> ScheduleError:
    """A :class:`ScheduleError` whose message is ``message`` followed by the marked grid."""
    grid = render_grid(rows, marks, max_columns=_MAX_ERROR_COLUMNS)
    return ScheduleError(f"{message}\n{grid}")


def _check_shape(schedule: Schedule) -> None:
    if not isinstance(schedule.name, str) or not schedule.name:
        raise ScheduleError(f"schedule name must be a non-empty string, got {schedule.name!r}")
    m = schedule.microbatches
    if isinstance(m, bool) or not isinstance(m, int) or m < 1:
        raise ScheduleError(f"microbatches must be an integer >= 1, got {m!r}")
    devices = len(schedule.device_actions)
    if devices < 1:
        raise ScheduleError("a schedule needs at least one device, got 0 rows of actions")
    if not schedule.placement:
        raise ScheduleError("placement must place at least one stage, got an empty placement")
    for stage, device in enumerate(schedule.placement):
        if isinstance(device, bool) or not isinstance(device, int) or not 0 <= device < devices:
            raise ScheduleError(
                f"placement: stage {stage} is on device {device!r}, but the schedule has "
                f"{devices} device(s) (0..{devices - 1})"
            )
    counts = [0] * devices
    for device in schedule.placement:
        counts[device] += 1
    if len(set(counts)) != 1:
        detail = few(f"device {d}: {c}" for d, c in enumerate(counts))
        raise ScheduleError(
            f"placement: every device must hold the same number of stages, got {detail}"
        )
    kinds_of_item = set(map(type, itertools.chain.from_iterable(schedule.device_actions)))
    if not kinds_of_item <= {Action}:  # something else (or a subclass): look closer
        for device, row in enumerate(schedule.device_actions):
            for step, action in enumerate(row):
                if not isinstance(action, Action):
                    raise ScheduleError(f"device {device} step {step}: {action!r} is not an Action")

    if not isinstance(schedule.update_rule, UpdateRule):
        raise ScheduleError(
            f"update_rule must be an UpdateRule (flush, 2bw, async), got {schedule.update_rule!r}"
        )
    if not isinstance(schedule.rematerialize, bool):
        raise ScheduleError(f"rematerialize must be True or False, got {schedule.rematerialize!r}")


def _check_actions(schedule: Schedule) -> dict[Action, tuple[int, int]]:
    """Range, placement and uniqueness; returns each action's (device, step)."""
    rows = schedule.device_actions
    stages, microbatches = len(schedule.placement), schedule.microbatches
    positions: dict[Action, tuple[int, int]] = {}
    for device, row in enumerate(rows):
        for step, action in enumerate(row):
            where = (device, step)
            if action.stage >= stages:
                raise fail(
                    f"device {device} step {step}: {action} names stage {action.stage}, but the "
                    f"schedule has {stages} stage(s) (0..{stages - 1})",
                    rows,
                    [where],
                )
            if action.microbatch >= microbatches:
                raise fail(
                    f"device {device} step {step}: {action} names micro-batch "
                    f"{action.microbatch}, but the schedule has {microbatches} "
                    f"(0..{microbatches - 1})",
                    rows,
                    [where],
                )
            owner = schedule.placement[action.stage]
            if owner != device:
                raise fail(
                    f"device {device} step {step}: {action} belongs on device {owner}, which "
                    f"holds stage {action.stage}",
                    rows,
                    [where],
                )
            if action in positions:
                first = positions[action]
                raise fail(
                    f"{action} appears twice: device {device} steps {first[1]} and {step}",
                    rows,
                    [first, where],
                )
            positions[action] = where
    return positions


def _check_complete(
    schedule: Schedule, positions: dict[Action, tuple[int, int]]
) -> dict[tuple[int, int], Kind]:
    """One F and either one B or one I and one W per (stage, micro-batch)."""
    rows = schedule.device_actions
    present: dict[tuple[int, int], dict[Kind, tuple[int, int]]] = {}
    for action, where in positions.items():
        present.setdefault((action.stage, action.microbatch), {})[action.kind] = where
    kinds: dict[tuple[int, int], Kind] = {}
    for stage in range(len(schedule.placement)):
        for mb in range(schedule.microbatches):
            found = present.get((stage, mb), {})
            marks = list(found.values())
            if Kind.F not in found:
                raise fail(
                    f"stage {stage} micro-batch {mb} has no forward: {stage}F{mb} is missing",
                    rows,
                    marks,
                )
            if Kind.B in found and (Kind.I in found or Kind.W in found):
                raise fail(
                    f"stage {stage} micro-batch {mb} has both a full backward {stage}B{mb} and "
                    f"a split one ({stage}I{mb}/{stage}W{mb}); it needs one or the other",
                    rows,
                    marks,
                )
            if Kind.B in found:
                kinds[(stage, mb)] = Kind.B
            elif Kind.I in found and Kind.W in found:
                kinds[(stage, mb)] = Kind.I
            elif Kind.I in found:
                raise fail(
                    f"stage {stage} micro-batch {mb} has {stage}I{mb} but no {stage}W{mb}: the "
                    f"weight gradient is never computed",
                    rows,
                    marks,
                )
            elif Kind.W in found:
                raise fail(
                    f"stage {stage} micro-batch {mb} has {stage}W{mb} but no {stage}I{mb}",
                    rows,
                    marks,
                )
            else:
                raise fail(
                    f"stage {stage} micro-batch {mb} has no backward: {stage}B{mb} is missing "
                    f"(or {stage}I{mb} and {stage}W{mb})",
                    rows,
                    marks,
                )
    if schedule.rematerialize:
        split = next((key for key, kind in kinds.items() if kind is Kind.I), None)
        if split is not None:
            stage, mb = split
            raise fail(
                f"rematerialize: re-materialization is modelled for full backwards (B), but "
                f"stage {stage} micro-batch {mb} splits its backward into {stage}I{mb} and "
                f"{stage}W{mb}",
                rows,
                [positions[Action(stage, Kind.I, mb)]],
            )
    return kinds


def _check_local_order(
    rows: Sequence[Sequence[Action]], positions: dict[Action, tuple[int, int]]
) -> None:
    """F before B or I, and I before W, for the same (stage, micro-batch) on its device."""
    for action, (device, step) in positions.items():
        if action.kind is Kind.F:
            continue
        before = Kind.I if action.kind is Kind.W else Kind.F
        earlier = Action(action.stage, before, action.microbatch)
        earlier_step = positions[earlier][1]
        if earlier_step > step:
            raise fail(
                f"device {device} runs {action} at step {step} before {earlier} at step "
                f"{earlier_step}: {'a weight gradient' if before is Kind.I else 'a backward'} "
                f"needs its {'input gradient' if before is Kind.I else 'forward'} first",
                rows,
                [(device, step), (device, earlier_step)],
            )


def _dry_run(
    rows: Sequence[Sequence[Action]],
    positions: dict[Action, tuple[int, int]],
    dependencies: dict[Action, tuple[Action, ...]],
) -> tuple[Action, ...]:
    """Run every device's list, each action once its dependencies ran; report a deadlock."""
    done: set[Action] = set()
    order: list[Action] = []
    pointer = [0] * len(rows)
    waiting: dict[Action, list[int]] = {}
    blocked_on: dict[int, Action] = {}
    ready = deque(range(len(rows)))
    while ready:
        device = ready.popleft()
        row, step = rows[device], pointer[device]
        while step < len(row):
            action = row[step]
            missing = next((dep for dep in dependencies[action] if dep not in done), None)
            if missing is not None:
                waiting.setdefault(missing, []).append(device)
                blocked_on[device] = missing
                break
            done.add(action)
            order.append(action)
            step += 1
            woken = waiting.pop(action, None)
            if woken:
                ready.extend(woken)
        pointer[device] = step
    stuck = [d for d in range(len(rows)) if pointer[d] < len(rows[d])]
    if stuck:
        waits = []
        for device in stuck:
            head = rows[device][pointer[device]]
            need = blocked_on[device]
            need_device, need_step = positions[need]
            waits.append(
                f"device {device} waits at step {pointer[device]} ({head}) for {need} "
                f"(device {need_device} step {need_step})"
            )
        raise fail(
            "deadlock: no device can go on; " + few(waits, separator="; "),
            rows,
            [(d, pointer[d]) for d in stuck],
        )
    return tuple(order)
