"""DualPipe (DeepSeek-V3 report, arXiv 2412.19437 §3.2.1, Figure 5): a bidirectional pipeline
over two copies of the model.

K devices (K even) and a model cut into K stages, held twice: device i holds model stage i of
copy 0 and model stage K-1-i of copy 1. The first half of the micro-batches enters copy 0 at
device 0 and flows down; the second half enters copy 1 at device K-1 and flows up. In the IR
(:class:`~pipesim.schedules.schedule.Schedule` with ``copies=2``) copy 0's stages are
0 .. K-1 on devices 0 .. K-1 and copy 1's stages K .. 2K-1 on devices K-1 .. 0, in the order
its micro-batches meet them: the V placement, each micro-batch through one arm of it.

Each device interleaves the two directions in the eight phases of deepseek-ai/DualPipe's
``dualpipe.py`` (``DualPipe.step``): forwards of the nearer direction, forwards of both, zero-
bubble I/W with forwards of the farther one, the main phase of overlapped forward-backward
pairs, backwards with forwards, backwards splitting into I and W from the middle on, and the W
passes filling the cool-down. Its phase 0 is the direction that enters nearer to it. A pair
that DualPipe overlaps (the forward of one direction with the backward of the other) is, in
the IR, the forward followed by the backward. The copies' gradients of each model stage are
summed across the two devices that hold them before the optimizer step, so the copies stay
identical.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from pipesim.parallel.placement import v_shape
from pipesim.schedules.action import Action, Kind
from pipesim.schedules.encoded import B as B_CODE
from pipesim.schedules.encoded import F as F_CODE
from pipesim.schedules.encoded import I as I_CODE
from pipesim.schedules.encoded import IntArray
from pipesim.schedules.schedule import Schedule

COPIES = 2


class _Device:
    """One device's list as DualPipe builds it: per direction, the next micro-batch to run
    forward and backward; an input-gradient pass queues its W, released first in, first out
    (DualPipe's ``WeightGradStore``)."""

    def __init__(self, devices: int, microbatches: int, device: int) -> None:
        half = microbatches // 2
        second_half = device >= devices // 2
        # local phase p is direction p ^ second_half; direction 0 is copy 0, entering at device 0
        directions = (int(second_half), int(not second_half))
        stage_of = (device, 2 * devices - 1 - device)  # copy 0's stage, copy 1's stage
        self._stage = tuple(stage_of[d] for d in directions)
        self._first = tuple(half * d for d in directions)  # copy 1 takes micro-batches M/2..
        self._forwards = [0, 0]
        self._backwards = [0, 0]
        self._weights: deque[Action] = deque()
        self.actions: list[Action] = []

    def forward(self, phase: int) -> None:
        self.actions.append(
            Action(self._stage[phase], Kind.F, self._first[phase] + self._forwards[phase])
        )
        self._forwards[phase] += 1

    def backward(self, phase: int, zero_bubble: bool = False) -> None:
        stage, microbatch = self._stage[phase], self._first[phase] + self._backwards[phase]
        self._backwards[phase] += 1
        self.actions.append(Action(stage, Kind.I if zero_bubble else Kind.B, microbatch))
        if zero_bubble:
            self._weights.append(Action(stage, Kind.W, microbatch))

    def weight(self) -> None:
        self.actions.append(self._weights.popleft())


def dualpipe(devices: int, microbatches: int, chunks: int) -> Schedule:
    """DualPipe for K = ``devices`` (even) and M = ``microbatches`` (even, >= 2K, as
    deepseek-ai/DualPipe asserts); ``chunks`` is 1 (one model stage of each copy per device)."""
    k, m = devices, microbatches
    half_ranks, half_chunks = k // 2, m // 2
    rows = []
    for rank in range(k):
        half_rank = min(rank, k - 1 - rank)
        d = _Device(k, m, rank)
        for _ in range((half_ranks - half_rank - 1) * 2):  # 1: nF0
            d.forward(0)
        for _ in range(half_rank + 1):  # 2: nF0F1
            d.forward(0)
            d.forward(1)
        for _ in range(half_ranks - half_rank - 1):  # 3: nB1W1F1, zero bubble
            d.backward(1, zero_bubble=True)
            d.weight()
            d.forward(1)
        for _ in range(half_chunks - k + half_rank + 1):  # 4, the main phase: nF0B1F1B0
            d.forward(0)  # the middle ranks' first pair is not overlapped: the same order
            d.backward(1)
            d.forward(1)
            d.backward(0)
        for _ in range(half_ranks - half_rank - 1):  # 5: nB1F1B0
            d.backward(1)
            d.forward(1)
            d.backward(0)
        zero_bubble = False
        for i in range(half_rank + 1):  # 6: nB1B0, the second half zero bubble
            if i == (half_rank + 1) // 2 and half_rank % 2 == 1:
                zero_bubble = True
            d.backward(1, zero_bubble)
            if i == (half_rank + 1) // 2 and half_rank % 2 == 0:
                zero_bubble = True
            d.backward(0, zero_bubble)
        for _ in range(half_ranks - half_rank - 1):  # 7: nWB0, zero bubble
            d.weight()
            d.backward(0, zero_bubble=True)
        for _ in range(half_rank + 1):  # 8: nW
            d.weight()
        rows.append(tuple(d.actions))
    routes = tuple(0 if j < half_chunks else 1 for j in range(m))  # halves, as DualPipe splits
    return Schedule("dualpipe", m, v_shape(k), tuple(rows), copies=COPIES, routes=routes)


def overlapped_pairs(schedule: Schedule) -> tuple[IntArray, IntArray]:
    """The forward-backward pairs DualPipe's runtime overlaps (``_forward_backward_chunk``:
    the forward of one direction computed beside the backward of the other), as two arrays
    of positions in the schedule's flat order (device by device, :meth:`Schedule.actions`):
    the forwards and, at the same index, the backwards they overlap.

    The rule, on each device's list: an F immediately followed by a B or I of another stage
    that the device holds (the other copy in DualPipe, the other chunk in DualPipeV), except
    where that backward is the device's first backward. On DualPipe's and DualPipeV's lists
    this is exactly the pairs deepseek-ai/DualPipe overlaps: phase 4's F0 B1 and F1 B0 and
    phase 5's F1 B0, less the first pair of phase 4 on the devices with no phase 3 (DualPipe's
    ``is_middle_rank``, DualPipeV's last rank), which it runs apart ("We don't overlap these
    two chunks to further reduce bubble size"). Any other schedule gets the pairs its lists
    have by the same rule. Kept on the schedule (:meth:`Schedule.derived`)."""

    def make() -> tuple[IntArray, IntArray]:
        arrays = schedule.action_arrays
        kind, stage, starts = arrays.kind, arrays.stage, arrays.row_starts
        backward = (kind == B_CODE) | (kind == I_CODE)
        pair = (kind[:-1] == F_CODE) & backward[1:] & (stage[:-1] != stage[1:])
        pair[starts[1:-1] - 1] = False  # a device's last action and the next device's first
        for device in range(schedule.devices):
            lo, hi = int(starts[device]), int(starts[device + 1])
            backwards = np.flatnonzero(backward[lo:hi])
            if len(backwards) and backwards[0] > 0:
                pair[lo + backwards[0] - 1] = False  # its first backward runs apart
        forwards = np.flatnonzero(pair).astype(np.int64)
        return forwards, forwards + 1

    return schedule.derived("dualpipe overlapped pairs", make)
