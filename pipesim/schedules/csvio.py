"""Compute-only CSV, the format of ``torch.distributed.pipelining``'s ``_dump_csv``/``_load_csv``.

One line per device; each cell an action string such as ``0F0``; an empty cell is an idle slot
and is ignored. The CSV holds only the per-device order: K is the number of lines, the
placement is where each stage's actions sit, M is one more than the largest micro-batch, and
the weight-update rule and re-materialization are given by the caller.

Copies of the model (DualPipe's two) need no cell of their own: they are implied by the
actions. When every micro-batch names every stage there is one copy. When each names one
contiguous block of S_model stages, the same size for all, starting at a multiple of it (the
IR's copy-major numbering), the file holds S / S_model copies and each micro-batch runs through
the copy of its block. Anything else is read as one copy, and the validator names what is
missing.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from pipesim.common.limits import Limit, check
from pipesim.errors import ScheduleError, few, shown
from pipesim.files.inputs import decode_text, read_input
from pipesim.schedules.action import Action, parse_action
from pipesim.schedules.schedule import Schedule, UpdateRule


def to_csv(schedule: Schedule) -> str:
    """The compute-only CSV text of ``schedule``: one line per device, no idle cells."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    for row in schedule.device_actions:
        writer.writerow([str(action) for action in row])
    return buffer.getvalue()


def from_csv(
    text: str,
    *,
    name: str = "csv",
    update_rule: UpdateRule = UpdateRule.FLUSH,
    rematerialize: bool = False,
    source: str = "schedule CSV",
) -> Schedule:
    """Parse compute-only CSV text into a validated :class:`Schedule`.

    ``source`` names the input in error messages (a file name, say). The size of what the
    file implies (actions, devices, stages x micro-batches) is checked against
    :mod:`pipesim.common.limits` before the schedule is built.
    """
    rows: list[list[Action]] = []
    actions = 0
    try:
        for line, cells in enumerate(csv.reader(io.StringIO(text)), start=1):
            row = []
            for column, cell in enumerate(cells, start=1):
                if not cell.strip():
                    continue
                row.append(_cell(cell, f"{source} line {line} cell {column}"))
            actions += len(row)
            check(Limit.ACTIONS, actions, f"{source}: {actions:,} actions by line {line}")
            rows.append(row)
    except csv.Error as error:
        raise ScheduleError(f"{source}: not CSV ({error})") from None
    while rows and not rows[-1]:  # blank lines at the end of a file are not devices
        rows.pop()
    if not rows or not any(rows):
        raise ScheduleError(f"{source}: no actions found (expected one line of actions per device)")
    check(Limit.DEVICES, len(rows), f"{source}: {len(rows):,} devices (lines)")
    _check_implied_size(rows, source)
    placement = _infer_placement(rows, source)
    microbatches = 1 + max(a.microbatch for row in rows for a in row)
    copies, routes = infer_copies(rows, len(placement), microbatches)
    try:
        return Schedule(
            name,
            microbatches,
            placement,
            tuple(tuple(row) for row in rows),
            update_rule,
            rematerialize,
            copies,
            routes,
        )
    except ScheduleError as error:  # the first line names the file; the grid stays after it
        raise ScheduleError(f"{source}: {error}") from None


# The longest cell that can be an action within the limits; longer ones are refused unparsed.
_MAX_CELL_CHARACTERS = 40


def _cell(cell: str, where: str) -> Action:
    """One non-empty cell as an action."""
    if len(cell.strip()) > _MAX_CELL_CHARACTERS:
        raise ScheduleError(
            f"{where}: {shown(cell)} is not of the form <stage><F|B|I|W><microbatch>, e.g. 2F0"
        )
    try:
        return parse_action(cell)
    except ScheduleError as error:
        raise ScheduleError(
            f"{where}: {error} (compute-only CSV holds F, B, I and W actions only)"
        ) from None


def _check_implied_size(rows: list[list[Action]], source: str) -> None:
    """A valid schedule of S stages and M micro-batches holds at least 2·S·M actions: refuse a
    file whose largest stage and micro-batch numbers imply more than the limit (a cell
    ``9999999F0`` alone implies ten million stages)."""
    stages = 1 + max(a.stage for row in rows for a in row)
    microbatches = 1 + max(a.microbatch for row in rows for a in row)
    check(
        Limit.ACTIONS,
        2 * stages * microbatches,
        f"{source}: {stages:,} stages x {microbatches:,} micro-batches (its largest numbers) "
        f"need {2 * stages * microbatches:,} actions",
    )


def _infer_placement(rows: list[list[Action]], source: str) -> tuple[int, ...]:
    """Each stage sits on the one device whose line holds its actions."""
    owner: dict[int, int] = {}
    for device, row in enumerate(rows):
        for action in row:
            seen = owner.setdefault(action.stage, device)
            if seen != device:
                raise ScheduleError(
                    f"{source}: stage {action.stage} has actions on device {seen} and on device "
                    f"{device} ({action}); a stage lives on one device"
                )
    stages = 1 + max(owner)
    missing = [s for s in range(stages) if s not in owner]
    if missing:
        raise ScheduleError(
            f"{source}: stage(s) {few(missing)} have no actions, but stage "
            f"{stages - 1} does; stages must be numbered 0..S-1"
        )
    return tuple(owner[s] for s in range(stages))


def infer_copies(
    rows: list[list[Action]], stages: int, microbatches: int
) -> tuple[int, tuple[int, ...] | None]:
    """The copies of the model the actions imply, and each micro-batch's copy (1 and None:
    one copy; see the module docstring)."""
    touched: list[set[int]] = [set() for _ in range(microbatches)]
    for row in rows:
        for action in row:
            touched[action.microbatch].add(action.stage)
    per_copy = len(touched[0])
    if per_copy in (0, stages) or stages % per_copy:
        return 1, None
    routes = []
    for named in touched:
        first = min(named, default=-1)
        if first % per_copy or named != set(range(first, first + per_copy)):
            return 1, None
        routes.append(first // per_copy)
    return stages // per_copy, tuple(routes)


def read_csv(
    path: str | Path,
    *,
    update_rule: UpdateRule = UpdateRule.FLUSH,
    rematerialize: bool = False,
) -> Schedule:
    """Load a compute-only CSV file; unreadable files raise :class:`ScheduleError` too."""
    path = Path(path)
    data = read_input(path, "schedule", ScheduleError)
    text = decode_text(data, f"schedule file {str(path)!r}", ScheduleError)
    return from_csv(
        text,
        name=path.name,
        update_rule=update_rule,
        rematerialize=rematerialize,
        source=str(path),
    )
