"""The order in which both engines break ties: one deterministic dry run of the unrolled lists.

Two transfers that ask for the same link channel at the same instant are served in *execution
order*: the order in which a dependency-driven dry run of every device's multi-step work list
(the validator's walk: devices in a queue, each running its list until an action needs a result
not yet produced) reaches them. That order is a topological order of the graph whose edges are
each device's list order and every dependency, so serving equal-time requests in it never makes
a request wait for one that itself depends on it: the link model is well defined, whatever the
durations (zero ones included). For one step it is :meth:`Schedule.execution_order`, with each
device's optimizer step right after its last action.

This module is the readable definition the SimPy engine uses; the fast engine computes the same
order on integer arrays (a test holds them equal).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from pipesim.errors import ScheduleError
from pipesim.schedules.schedule import Schedule
from pipesim.schedules.unroll import Work


def work_order(schedule: Schedule, plan: Sequence[Sequence[Work]]) -> list[list[int]]:
    """``keys[device][index]``: the position of ``plan[device][index]`` in execution order.

    Raises :class:`ScheduleError` when the unrolled lists deadlock (steps run back to back that
    cannot go on).
    """
    needs = schedule.dependency_map()
    done: set[tuple[int, object]] = set()
    keys = [[-1] * len(work) for work in plan]
    pointer = [0] * len(plan)
    waiting: dict[tuple[int, object], list[int]] = {}
    ready = deque(range(len(plan)))
    position = 0
    while ready:
        device = ready.popleft()
        work, index = plan[device], pointer[device]
        while index < len(work):
            item = work[index]
            if item.action is not None:
                missing = next(
                    (
                        (item.step, dependency)
                        for dependency in needs[item.action]
                        if (item.step, dependency) not in done
                    ),
                    None,
                )
                if missing is not None:
                    waiting.setdefault(missing, []).append(device)
                    break
                done.add((item.step, item.action))
                woken = waiting.pop((item.step, item.action), None)
                if woken:
                    ready.extend(woken)
            keys[device][index] = position
            position += 1
            index += 1
        pointer[device] = index
    stuck = [d for d, work in enumerate(plan) if pointer[d] < len(work)]
    if stuck:
        raise ScheduleError(
            f"the steps of schedule {schedule.name!r} deadlock when run back to back: "
            f"device(s) {', '.join(map(str, stuck))} never finish"
        )
    return keys
