"""Several training steps of one schedule, back to back, as each device runs them.

Flush schedules (GPipe, 1F1B, interleaved, zero-bubble, DualPipeV): device d runs step t's list,
then its optimizer step, then step t+1's list. Nothing else synchronizes the devices, so a
device may start the next step while others finish this one (the zero-bubble paper's
"parallelogram"; with synchronized optimizer steps it would not).

No-flush schedules (PipeDream-2BW, PipeDream) never drain: each device runs its steps' actions
as one stream, one forward then one backward after a warm-up of K-d forwards, as the 1F1B steady
state does (:func:`no_flush_order`). For the 1F1B order this is exactly 1F1B over all the steps'
micro-batches. Each device's optimizer step (the weight-version update) follows its last action
of the step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pipesim.common import checks
from pipesim.errors import ScheduleError
from pipesim.schedules.action import Action, Kind
from pipesim.schedules.schedule import Schedule, UpdateRule

OPTIMIZER_STEP = -1  # the position that stands for a device's optimizer step in an order


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
    for device, row in enumerate(schedule.device_actions):
        if flush or steps == 1:
            order = [(step, position) for step in range(steps) for position in range(len(row))]
        else:
            forward = [action.kind is Kind.F for action in row]
            order = no_flush_order(forward, device, schedule.devices, steps)
        devices.append(
            tuple(
                Work(step, row[position] if position != OPTIMIZER_STEP else None)
                for step, position in with_optimizer_steps(order)
            )
        )
    return tuple(devices)


def no_flush_order(
    forward: Sequence[bool], device: int, devices: int, steps: int
) -> list[tuple[int, int]]:
    """One device's (step, position in its row) order over ``steps`` steps of a no-flush
    schedule, whose row marks ``forward`` at each position.

    The steps' actions form one stream, as a pipeline that never drains runs them: the
    forwards of every step in order, the other actions (backwards) likewise, merged one
    forward for one backward after a warm-up. The warm-up keeps at least K-d micro-batches in
    flight on device d (PipeDream's steady state, also when a step has fewer than K-d
    micro-batches), and at least as many as the row itself starts with. For the 1F1B order
    this is exactly 1F1B over all the steps' micro-batches. Both engines lay out no-flush runs
    with this one function.
    """
    forwards = [(step, i) for step in range(steps) for i, f in enumerate(forward) if f]
    others = [(step, i) for step in range(steps) for i, f in enumerate(forward) if not f]
    leading = next((i for i, f in enumerate(forward) if not f), len(forward))
    warm_up = min(len(forwards), max(leading, devices - device))
    order = forwards[:warm_up]
    remaining = iter(forwards[warm_up:])
    for item in others:
        order.append(item)
        following = next(remaining, None)
        if following is not None:
            order.append(following)
    order.extend(remaining)
    return order


def with_optimizer_steps(order: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """``order`` of (step, position) with each step's optimizer step, (step,
    :data:`OPTIMIZER_STEP`), inserted right after the device's last action of that step."""
    last = {step: index for index, (step, _) in enumerate(order)}
    out: list[tuple[int, int]] = []
    for index, item in enumerate(order):
        out.append(item)
        if last[item[0]] == index:
            out.append((item[0], OPTIMIZER_STEP))
    return out
