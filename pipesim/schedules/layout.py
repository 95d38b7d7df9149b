"""Unit-time layout of a schedule, for display: every action takes one slot and starts as
soon as its device is free and its dependencies finished in earlier slots.

This is the picture of GPipe's Figure 2(c) and of PyTorch's schedule printouts: idle slots
show where the bubble is. It is a drawing aid, not a timing model; the simulator's engine
gives times.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from pipesim.schedules.action import Action, UpdateRule
from pipesim.schedules.render import render_grid


class ScheduleView(Protocol):
    """What the layout reads of a :class:`pipesim.schedules.schedule.Schedule` (which renders
    itself with it, so this module names no schedule class)."""

    @property
    def name(self) -> str: ...

    @property
    def microbatches(self) -> int: ...

    @property
    def update_rule(self) -> UpdateRule: ...

    @property
    def rematerialize(self) -> bool: ...

    @property
    def devices(self) -> int: ...

    @property
    def chunks(self) -> int: ...

    @property
    def copies(self) -> int: ...

    def device_of(self, stage: int) -> int: ...

    def dependencies(self, action: Action) -> Sequence[Action]: ...

    def execution_order(self) -> Sequence[Action]: ...


def unit_slots(schedule: ScheduleView) -> tuple[tuple[Action | None, ...], ...]:
    """Each device's row of slots: an action, or None where the device idles."""
    slot: dict[Action, int] = {}
    device_free = [0] * schedule.devices
    for action in schedule.execution_order():
        device = schedule.device_of(action.stage)
        ready = [slot[dep] + 1 for dep in schedule.dependencies(action)]
        start = max([device_free[device], *ready])
        slot[action] = start
        device_free[device] = start + 1
    rows: list[list[Action | None]] = [[None] * free for free in device_free]
    for action, start in slot.items():
        rows[schedule.device_of(action.stage)][start] = action
    return tuple(tuple(row) for row in rows)


def render_schedule(schedule: ScheduleView) -> str:
    """The unit-slot grid of ``schedule`` with a one-line heading."""
    heading = (
        f"{schedule.name}: K={schedule.devices} devices, M={schedule.microbatches} "
        f"micro-batches, v={schedule.chunks} chunk(s) per device"
        + (f" of each of {schedule.copies} model copies" if schedule.copies > 1 else "")
        + f", update={schedule.update_rule.value}"
        + (", re-materialization" if schedule.rematerialize else "")
    )
    return heading + "\n" + render_grid(unit_slots(schedule), column_title="slot")
