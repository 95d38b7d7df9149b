"""The controllable-memory V schedules V-Min and V-Half (Qi et al., "Pipeline Parallelism with
Controllable Memory", arXiv 2405.15362), built from their building blocks.

A building block places one micro-batch's four passes on each device i of a V (chunk 0 is
stage i, chunk 1 stage 2p-1-i) in slots of one chunk-pass: F of chunk 0, F of chunk 1, then
the input gradients I of chunk 1 and of chunk 0. Micro-batch j's block is shifted by 6j slots
(one F, I and W of both chunks), so the blocks tile without collisions; the W passes take the
empty slots, oldest first. The lifespan of a micro-batch on a device (F of chunk 0 to I of
chunk 0) sets the memory: about a third of 1F1B's for V-Min, a half for V-Half, at a bubble of
about 2/3 and 1/2 of 1F1B's (the paper's claims with T_F = T_I = T_W). The offsets are the
authors' (sail-sg/zero-bubble-pipeline-parallelism, ``zbv_greedy.py``); their refinements of
warm-up and cool-down are not applied: a device runs its passes in slot order, as early as
its inputs allow. V-ZB, the third member, is the V order at 1F1B's memory that the
synthesiser finds (ZB-V among its seeds).
"""

from __future__ import annotations

from collections import deque

from pipesim.errors import ScheduleError
from pipesim.parallel.placement import v_shape
from pipesim.schedules.action import Action, Kind
from pipesim.schedules.schedule import Schedule

SLOTS_PER_MICROBATCH = 6


def block_offsets(name: str, devices: int, device: int) -> tuple[int, int, int, int]:
    """Slots of (F chunk 0, F chunk 1, I chunk 1, I chunk 0) of micro-batch 0 on ``device``."""
    p, i = devices, device
    if name == "v-min":
        gap = 2 if p % 3 == 0 else 0
        return i, 2 * p - 1 - i, 2 * p + gap + i, 4 * p + gap - 1 - i
    if name == "v-half":
        gap = 3 if p % 2 == 0 else 0
        return 2 * i, 3 * p - 2 - i, 3 * p + gap + 2 * i - 1, 6 * p + gap - 2 - i
    raise ScheduleError(f"no building block named {name!r}: v-min or v-half")


def v_block_schedule(name: str, devices: int, microbatches: int) -> Schedule:
    """``v-min`` or ``v-half`` for K = ``devices`` and M = ``microbatches``."""
    if devices < 2:
        raise ScheduleError(f"{name} needs at least 2 devices, got {devices}")
    rows = []
    for device in range(devices):
        first, second = device, 2 * devices - 1 - device
        offsets = block_offsets(name, devices, device)
        slots: dict[int, Action] = {}
        passes = ((first, Kind.F), (second, Kind.F), (second, Kind.I), (first, Kind.I))
        for j in range(microbatches):
            for offset, (stage, kind) in zip(offsets, passes, strict=True):
                slot = offset + SLOTS_PER_MICROBATCH * j
                if slot in slots:  # pragma: no cover - the blocks tile by construction
                    raise ScheduleError(f"{name}: two passes in slot {slot} of device {device}")
                slots[slot] = Action(stage, kind, j)
        rows.append(tuple(_fill_weights(slots)))
    return Schedule(name, microbatches, v_shape(devices), tuple(rows))


def _fill_weights(slots: dict[int, Action]) -> list[Action]:
    """The passes in slot order, each empty slot taking the oldest W owed (an I's W is owed
    from the slot after it); the W still owed at the end close the order."""
    order: list[Action] = []
    owed: deque[Action] = deque()
    for slot in range(max(slots) + 1):
        action = slots.get(slot)
        if action is not None:
            order.append(action)
            if action.kind is Kind.I:
                owed.append(Action(action.stage, Kind.W, action.microbatch))
        elif owed:
            order.append(owed.popleft())
    order.extend(owed)
    return order
