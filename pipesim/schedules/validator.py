"""The one validator for every schedule, generated or loaded from a file.

Checks, in order, each failing with a :class:`~pipesim.errors.ScheduleError` that renders the
device-by-step grid with the offending actions marked:

1. shape: at least one device and one micro-batch; every stage placed on an existing device;
   every device holding the same number of stages; with copies of the model, C dividing each
   device's stages and every micro-batch routed through an existing copy, each copy taking at
   least one;
2. each action names an existing stage and micro-batch and sits on its stage's device, once;
   with copies, on a stage of the micro-batch's own copy;
3. completeness: each (stage, micro-batch) of the micro-batch's copy has one F and either one
   B, or one I and one W;
4. local order: on its device an action comes after the same micro-batch's earlier pieces
   (F before B or I, I before W);
5. a dependency-driven dry run runs every device's list to the end: no deadlock.

The checks run twice over only when they fail: a fast pass (:func:`encode`) encodes the
actions as integer arrays (:mod:`pipesim.schedules.encoded`) and checks them all at once with
numpy and one integer dry run; when it finds any fault, the readable checks
(:func:`check_readably`) run in order and raise the error with its grid, and a deadlock is
reported from where the dry run stopped (:func:`deadlock_error`). Tests hold the two passes to
the same verdict. A valid schedule is thus checked in milliseconds, and the encoding is
kept for the engines.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from pipesim.errors import ScheduleError, few
from pipesim.schedules.action import Action, Kind, UpdateRule
from pipesim.schedules.dependencies import dependency_arrays
from pipesim.schedules.dry_run import DryRun, dry_run
from pipesim.schedules.encoded import ActionArrays, B, EncodedSchedule, F, I, W
from pipesim.schedules.render import render_grid


class ScheduleFields(Protocol):
    """The fields the validator checks: those of :class:`pipesim.schedules.schedule.Schedule`
    (which validates itself on creation, so this module names no schedule class) or of any
    object that carries them, such as a schedule read from a file before it is built.

    An object that also has ``action_arrays`` (an :class:`ActionArrays`, as a schedule built
    by a generator has) is checked on those arrays, and its ``device_actions`` are read only
    to report a fault. One that has ``copies`` and ``routes`` (the copies of the model and
    each micro-batch's copy) is checked with them; without, it holds one copy."""

    @property
    def name(self) -> str: ...

    @property
    def microbatches(self) -> int: ...

    @property
    def placement(self) -> Sequence[int]: ...

    @property
    def device_actions(self) -> Sequence[Sequence[Action]]: ...

    @property
    def update_rule(self) -> UpdateRule: ...

    @property
    def rematerialize(self) -> bool: ...


_MAX_ERROR_COLUMNS = 16


@dataclass(frozen=True)
class Checked:
    """What validation learns on the way: the schedule as integer arrays, with which backward
    each (stage, micro-batch) uses and an execution order that respects every device's list
    and every dependency."""

    encoded: EncodedSchedule


def validate(schedule: ScheduleFields) -> Checked:
    """Check ``schedule``; return what was learned, or raise :class:`ScheduleError`."""
    arrays = _arrays_of(schedule)
    _check_shape(schedule, arrays.devices)
    copies, routes = _check_copies(schedule, arrays.devices)
    encoded = encode_arrays(
        arrays,
        schedule.placement,
        schedule.microbatches,
        schedule.rematerialize,
        copies=copies,
        routes=routes,
    )
    if isinstance(encoded, Deadlock):
        raise deadlock_error(schedule, encoded)
    if encoded is None:
        check_readably(schedule)  # raises the first fault, with its grid
        raise AssertionError(  # pragma: no cover - the two passes must agree
            f"schedule {schedule.name!r}: the fast checks found a fault the readable ones did not"
        )
    return Checked(encoded)


def check_readably(schedule: ScheduleFields) -> None:
    """Checks 2 to 4 in order, on the actions themselves; raise the first fault found (the
    dry run, check 5, is the integer one whichever way: :func:`deadlock_error`)."""
    positions = _check_actions(schedule)
    _check_complete(schedule, positions)
    _check_local_order(schedule.device_actions, positions)


@dataclass(frozen=True, eq=False)
class Deadlock:
    """A schedule that passes checks 2 to 4 and whose dry run stops short."""

    row_starts: np.ndarray
    upstream: np.ndarray
    walk: DryRun


def _arrays_of(schedule: ScheduleFields) -> ActionArrays:
    """The schedule's lists as arrays: its own, or made from its actions once they are
    proven to be actions."""
    arrays = getattr(schedule, "action_arrays", None)
    if isinstance(arrays, ActionArrays):
        return arrays
    rows = schedule.device_actions
    kinds_of_item = set(map(type, itertools.chain.from_iterable(rows)))
    if not kinds_of_item <= {Action}:  # something else (or a subclass): look closer
        for device, row in enumerate(rows):
            for step, action in enumerate(row):
                if not isinstance(action, Action):
                    raise ScheduleError(f"device {device} step {step}: {action!r} is not an Action")
    return ActionArrays.from_rows(rows)


def encode(schedule: ScheduleFields) -> EncodedSchedule | Deadlock | None:
    """The integer encoding of a valid schedule; None when one of checks 2 to 4 fails; the dry
    run's state when only the dry run fails."""
    copies, routes = copies_of(schedule)
    return encode_arrays(
        _arrays_of(schedule),
        schedule.placement,
        schedule.microbatches,
        schedule.rematerialize,
        copies=copies,
        routes=routes,
    )


def copies_of(schedule: ScheduleFields) -> tuple[int, tuple[int, ...] | None]:
    """The schedule's copies of the model and each micro-batch's copy (1 and None: one copy)."""
    copies = getattr(schedule, "copies", 1)
    routes = getattr(schedule, "routes", None)
    return copies, None if routes is None else tuple(routes)


def encode_arrays(
    arrays: ActionArrays,
    placement: Sequence[int],
    microbatches: int,
    rematerialize: bool,
    *,
    copies: int = 1,
    routes: Sequence[int] | None = None,
) -> EncodedSchedule | Deadlock | None:
    """:func:`encode` on a schedule's arrays and fields; ``copies`` of the model, micro-batch
    m through copy ``routes[m]`` (checked by :func:`validate` beforehand)."""
    devices, stages = arrays.devices, len(placement)
    row_starts, stage, kind, microbatch = (
        arrays.row_starts,
        arrays.stage,
        arrays.kind,
        arrays.microbatch,
    )
    count = arrays.actions
    if not count:
        return None
    if (
        stage.min() < 0
        or microbatch.min() < 0
        or kind.min() < 0
        or kind.max() > W
        or stage.max() >= stages
        or microbatch.max() >= microbatches
    ):
        return None
    device = np.repeat(np.arange(devices, dtype=np.int64), np.diff(row_starts))
    owner = np.array(placement, dtype=np.int64)
    if (owner[stage] != device).any():
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
    model_stages = None
    if copies > 1:
        if routes is None or len(routes) != microbatches:
            return None
        model_stages = stages // copies
        route = np.array(routes, dtype=np.int64)
        member = (np.arange(stages, dtype=np.int64) // model_stages)[:, None] == route[None, :]
        if not member[stage, microbatch].all():
            return None  # an action on a stage of another copy than its micro-batch's
        if not (present[:, :, F] | ~member).all() or not (full | split | ~member).all():
            return None
    elif not present[:, :, F].all() or not (full | split).all():
        return None
    if rematerialize and split.any():
        return None
    backward_kind = np.where(split, I, B).astype(np.int64)
    dependencies, upstream = dependency_arrays(
        stage, kind, microbatch, flat_index, backward_kind, model_stages
    )
    # Local order: F before B or I, I before W, on the same device (so in the same row): a
    # non-F action's first dependency is that earlier piece.
    later = kind != F
    if (dependencies[later, 0] > index[later]).any():
        return None
    walk = dry_run(row_starts, upstream)
    if not walk.complete:
        return Deadlock(row_starts, upstream, walk)
    order = walk.order
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


def fail(
    message: str,
    rows: Sequence[Sequence[Action | None]],
    marks: Sequence[tuple[int, int]] = (),
) -> ScheduleError:
    """A :class:`ScheduleError` whose message is ``message`` followed by the marked grid."""
    grid = render_grid(rows, marks, max_columns=_MAX_ERROR_COLUMNS)
    return ScheduleError(f"{message}\n{grid}")


def _check_shape(schedule: ScheduleFields, devices: int) -> None:
    if not isinstance(schedule.name, str) or not schedule.name:
        raise ScheduleError(f"schedule name must be a non-empty string, got {schedule.name!r}")
    m = schedule.microbatches
    if isinstance(m, bool) or not isinstance(m, int) or m < 1:
        raise ScheduleError(f"microbatches must be an integer >= 1, got {m!r}")
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
    if not isinstance(schedule.update_rule, UpdateRule):
        raise ScheduleError(
            f"update_rule must be an UpdateRule (flush, 2bw, async), got {schedule.update_rule!r}"
        )
    if not isinstance(schedule.rematerialize, bool):
        raise ScheduleError(f"rematerialize must be True or False, got {schedule.rematerialize!r}")


def _check_copies(schedule: ScheduleFields, devices: int) -> tuple[int, tuple[int, ...] | None]:
    """The copies of the model and each micro-batch's copy, checked: C >= 1 dividing the
    stages each device holds, one copy per micro-batch, every copy taking one at least."""
    copies, routes = copies_of(schedule)
    if isinstance(copies, bool) or not isinstance(copies, int) or copies < 1:
        raise ScheduleError(f"copies must be an integer >= 1, got {copies!r}")
    held = len(schedule.placement) // devices
    if held % copies:
        raise ScheduleError(
            f"copies: each device holds {held} stage(s), which {copies} copies of the model "
            "cannot share equally (each device must hold as many stages of every copy)"
        )
    if routes is None:
        if copies > 1:
            raise ScheduleError(
                f"routes: {copies} copies of the model need each micro-batch's copy"
            )
        return copies, None
    m = schedule.microbatches
    if len(routes) != m:
        raise ScheduleError(f"routes: one copy per micro-batch, {m}, got {len(routes)}")
    if copies == 1 and all(type(copy) is int for copy in routes) and not any(routes):
        return copies, routes  # every micro-batch through the one copy (the common case)
    for microbatch, copy in enumerate(routes):
        if isinstance(copy, bool) or not isinstance(copy, int) or not 0 <= copy < copies:
            raise ScheduleError(
                f"routes: micro-batch {microbatch} goes through copy {copy!r}, but the "
                f"schedule has {copies} (0..{copies - 1})"
            )
    unused = sorted(set(range(copies)) - set(routes))
    if unused:
        raise ScheduleError(
            f"routes: no micro-batch goes through copy {few(unused)}; every copy of the model "
            "must take one at least"
        )
    return copies, routes


def _check_actions(schedule: ScheduleFields) -> dict[Action, tuple[int, int]]:
    """Range, placement, copy and uniqueness; returns each action's (device, step)."""
    rows = schedule.device_actions
    stages, microbatches = len(schedule.placement), schedule.microbatches
    copies, routes = copies_of(schedule)
    model_stages = stages // copies
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
            if copies > 1 and routes is not None:
                own, theirs = routes[action.microbatch], action.stage // model_stages
                if own != theirs:
                    start = own * model_stages
                    raise fail(
                        f"device {device} step {step}: {action} runs micro-batch "
                        f"{action.microbatch} on stage {action.stage} of copy {theirs}, but "
                        f"the micro-batch goes through copy {own} (stages {start}.."
                        f"{start + model_stages - 1})",
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
    schedule: ScheduleFields, positions: dict[Action, tuple[int, int]]
) -> dict[tuple[int, int], Kind]:
    """One F and either one B or one I and one W per (stage, micro-batch)."""
    rows = schedule.device_actions
    present: dict[tuple[int, int], dict[Kind, tuple[int, int]]] = {}
    for action, where in positions.items():
        present.setdefault((action.stage, action.microbatch), {})[action.kind] = where
    kinds: dict[tuple[int, int], Kind] = {}
    copies, routes = copies_of(schedule)
    model_stages = len(schedule.placement) // copies
    for stage in range(len(schedule.placement)):
        for mb in range(schedule.microbatches):
            if routes is not None and routes[mb] != stage // model_stages:
                continue  # a stage of another copy than the micro-batch's
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


def deadlock_error(schedule: ScheduleFields, deadlock: Deadlock) -> ScheduleError:
    """The deadlock the dry run found: where each stuck device waits, and for what."""
    rows = schedule.device_actions
    flat = [action for row in rows for action in row]
    starts = deadlock.row_starts.tolist()
    stopped = deadlock.walk.stopped_at.tolist()

    def where(index: int) -> tuple[int, int]:
        device = int(np.searchsorted(deadlock.row_starts, index, side="right")) - 1
        return device, index - starts[device]

    stuck = [d for d in range(len(rows)) if stopped[d] < starts[d + 1]]
    waits = []
    for device in stuck:
        head = stopped[device]
        need = int(deadlock.upstream[head])
        need_device, need_step = where(need)
        waits.append(
            f"device {device} waits at step {head - starts[device]} ({flat[head]}) for "
            f"{flat[need]} (device {need_device} step {need_step})"
        )
    return fail(
        "deadlock: no device can go on; " + few(waits, separator="; "),
        rows,
        [(d, stopped[d] - starts[d]) for d in stuck],
    )
