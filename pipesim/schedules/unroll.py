"""Several training steps of one schedule, back to back, as each device runs them.

Flush schedules (GPipe, 1F1B, interleaved, zero-bubble, DualPipeV): device d runs step t's list,
then its optimizer step, then step t+1's list. Nothing else synchronizes the devices, so a
device may start the next step while others finish this one (the zero-bubble paper's
"parallelogram"; with synchronized optimizer steps it would not).

No-flush schedules (PipeDream-2BW, PipeDream) never drain: the next step's leading forwards are
interleaved with this step's trailing backwards, one forward then one backward, as the 1F1B
steady state does. For the 1F1B order this gives exactly 1F1B over all the steps' micro-batches.
Each device's optimizer step (the weight-version update) follows its last action of the step.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipesim import checks
from pipesim.errors import ScheduleError
from pipesim.schedules.action import Action, Kind
from pipesim.schedules.schedule import Schedule, UpdateRule


@dataclass(frozen=True, slots=True)
class Work:
    """One item of a device's multi-step list: an action of a step, or (``action`` None) the
    device's optimizer step that ends step ``step``."""

    step: int
    action: Action | None

    def __str__(self) -> str:
        return f"s{self.step}:{self.action if self.action is not None else 'opt'}"


def unroll(schedule: Schedule, steps: int) -> tuple[tuple[Work, ...], ...]:
    """Each device's list of work over ``steps`` consecutive training steps."""
    steps = checks.positive_int("steps", steps, error=ScheduleError)
    flush = schedule.update_rule is UpdateRule.FLUSH
    devices = []
    for row in schedule.device_actions:
        merged: list[Work] = []
        for step in range(steps):
            items = [Work(step, action) for action in row]
            merged = merged + items if flush or not merged else _overlap(merged, items)
        devices.append(tuple(_with_optimizer_steps(merged, steps)))
    return tuple(devices)


def _overlap(previous: list[Work], following: list[Work]) -> list[Work]:
    """Interleave ``previous``'s trailing backwards with ``following``'s leading forwards."""
    tail_start = len(previous)
    while tail_start > 0 and not _is_forward(previous[tail_start - 1]):
        tail_start -= 1
    head_end = 0
    while head_end < len(following) and _is_forward(following[head_end]):
        head_end += 1
    tail, head = previous[tail_start:], following[:head_end]
    woven: list[Work] = []
    for index in range(max(len(tail), len(head))):
        if index < len(head):
            woven.append(head[index])
        if index < len(tail):
            woven.append(tail[index])
    return previous[:tail_start] + woven + following[head_end:]


def _is_forward(work: Work) -> bool:
    """True for a forward. Only actions are woven: optimizer items are added afterwards."""
    return work.action is not None and work.action.kind is Kind.F


def _with_optimizer_steps(items: list[Work], steps: int) -> list[Work]:
    """Insert each step's optimizer item right after the device's last action of that step."""
    last = {item.step: index for index, item in enumerate(items)}
    out: list[Work] = []
    for index, item in enumerate(items):
        out.append(item)
        if last[item.step] == index:
            out.append(Work(item.step, None))
    return out
