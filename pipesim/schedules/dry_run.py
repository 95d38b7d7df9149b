"""The dry run, in one place: every device runs its list in order, each action once the action
on another stage it consumes has run, until all have run or none can go on (a deadlock).

It serves the validator (a schedule is valid only if its dry run completes; a deadlock is
reported from where each device stopped) and both engines (the order in which it runs the
actions of one step, or of several steps unrolled, is the *execution order*, their tie-break:
:mod:`pipesim.engine.run_layout`). Devices wait in a queue, first come first woken, so the
order is deterministic. The loop is written once and runs in the interpreter or compiled by
numba (:mod:`pipesim.common.jit`), with the same result.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from pipesim.common.jit import kernel

IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True, eq=False)
class DryRun:
    """What a dry run found.

    Attributes:
        order: the flat indices of the actions in the order they ran.
        stopped_at: per device, the flat index where it stopped: its row's end when it ran
            everything, else the action it waits at.
        actions: how many actions there are.
    """

    order: IntArray
    stopped_at: IntArray
    actions: int

    @property
    def complete(self) -> bool:
        """True when every action ran (no deadlock)."""
        return len(self.order) == self.actions


def dry_run(row_starts: IntArray, needs: IntArray) -> DryRun:
    """Run the actions numbered device by device (device d holds ``row_starts[d]`` ..
    ``row_starts[d + 1]``), action i after ``needs[i]`` (-1: nothing on another device).

    Only one dependency per action is walked: its other one (a backward's own forward, a W's
    I) sits earlier on its own device, so the device's own order covers it (the validator
    checks that order before it walks). The compiled loop is used once numba has loaded it
    (:func:`pipesim.engine.warm_up`).
    """
    count = int(row_starts[-1])
    devices = len(row_starts) - 1
    if dry_run_kernel.is_compiled:
        order = np.empty(count, dtype=np.int64)
        stopped = np.empty(devices, dtype=np.int64)
        ran = dry_run_kernel.compiled()(
            np.ascontiguousarray(row_starts), np.ascontiguousarray(needs), order, stopped
        )
        return DryRun(order[:ran], stopped, count)
    walked, stopped_at = [0] * count, [0] * devices
    ran = dry_run_kernel.python(row_starts.tolist(), needs.tolist(), walked, stopped_at)
    return DryRun(
        np.array(walked[:ran], dtype=np.int64), np.array(stopped_at, dtype=np.int64), count
    )


@kernel
def dry_run_kernel(row_starts: Any, needs: Any, order: Any, pointer: Any) -> int:
    """The validator's dry run on integers: devices in a queue, each running its list until an
    action needs one not yet done (``needs[i]``, -1 for none). Fills ``order`` with the flat
    indices in the order run, and ``pointer[d]`` with the flat index where device d stopped
    (its row's end, or the action it waits at); returns how many ran (all of them, or fewer
    at a deadlock).

    One dependency per action is enough: an action's other dependency (a backward's own
    forward, a W's I) sits earlier on its own device, which the local-order check proved, so
    it is always done when the device reaches the action. Each blocked device waits on one
    action, so the waiting lists are linked through ``next_waiting``.
    """
    devices = len(row_starts) - 1
    count = row_starts[devices]
    done = [False] * count
    for d in range(devices):
        pointer[d] = row_starts[d]
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
