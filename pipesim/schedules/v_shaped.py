"""V-shaped schedules: two stages per device, stage s on device s for s < K, else 2K-1-s.

Both are written as phases of one device's list with a
:class:`~pipesim.schedules.phases.PhaseBuilder`, which hands out the next micro-batch of each
(stage, kind).
"""

from __future__ import annotations

from pipesim.parallel.placement import v_shape
from pipesim.schedules.action import Kind
from pipesim.schedules.phases import PhaseBuilder
from pipesim.schedules.schedule import Schedule

F, B, I, W = Kind.F, Kind.B, Kind.I, Kind.W  # noqa: E741 - the papers' names


def zbv(devices: int, microbatches: int, chunks: int) -> Schedule:
    """ZB-V (Qi et al., arXiv 2401.10241 §6): the handcrafted V schedule, zero bubble at 1F1B's
    activation memory when T_F = T_I = T_W.

    Built for n = max(M, 2K-1) micro-batches, the fewest that fill the V; the micro-batches
    beyond M are then dropped, which keeps the order valid (dependencies never cross
    micro-batches).
    """
    k = devices
    n = max(microbatches, 2 * k - 1)
    rows = []
    for d in range(k):
        first, second = d, 2 * k - 1 - d
        p = PhaseBuilder()
        for _ in range(2 * (k - d) - 1):  # fill: chunk-0 forwards down the V
            p.add(first, F)
        for _ in range(d):
            p.add(second, F)
            p.add(first, F)
        for _ in range(k - d):  # the turn: chunk-1 forwards, each answered at once
            p.add(second, F)
            p.add(second, I)
            p.weight(second)
        while p.count(second, F) < p.count(first, F) or p.count(first, F) < n:
            if p.count(first, F) < n:
                p.add(first, F)
            p.add(first, I)
            p.weight(first)
            p.add(second, F)
            p.add(second, I)
            p.weight(second)
        for _ in range(d):  # drain: input gradients first, weight gradients fill the tail
            p.add(first, I)
            p.add(second, I)
        for _ in range(k - d):
            p.add(first, I)
            p.weight(first)
        while p.pending_weights(second):
            p.weight(second)
        while p.pending_weights(first):
            p.weight(first)
        rows.append(tuple(a for a in p.actions if a.microbatch < microbatches))
    return Schedule("zbv", microbatches, v_shape(k), tuple(rows))


def dualpipev(devices: int, microbatches: int, chunks: int) -> Schedule:
    """DualPipeV: DualPipe (DeepSeek-V3 report, arXiv 2412.19437) cut in half into a V.

    Device d's eight phases follow deepseek-ai/DualPipe's ``dualpipev.py``. The main phase pairs
    a forward of one chunk with a full backward of the other (DualPipe overlaps each pair's
    computation with the other's communication); in the IR a pair is the forward followed by
    the backward. The second half of the cool-down splits backwards into I and W so the W
    passes fill the tail. Needs M >= 2K, as the reference implementation does.
    """
    k = devices
    rows = []
    for d in range(k):
        first, second = d, 2 * k - 1 - d
        p = PhaseBuilder()
        for _ in range(2 * (k - d - 1)):  # 1: chunk-0 forwards
            p.add(first, F)
        for _ in range(d + 1):  # 2: forwards on both chunks
            p.add(first, F)
            p.add(second, F)
        for _ in range(k - d - 1):  # 3: zero-bubble I, W, then a chunk-1 forward
            p.add(second, I)
            p.weight()
            p.add(second, F)
        for _ in range(microbatches - 2 * k + d + 1):  # 4: F0 with B1, then F1 with B0
            p.add(first, F)
            p.add(second, B)
            p.add(second, F)
            p.add(first, B)
        for _ in range(k - d - 1):  # 5: B1, then F1 with B0
            p.add(second, B)
            p.add(second, F)
            p.add(first, B)
        split = False
        for i in range(d + 1):  # 6: B1 B0, splitting from the middle on
            if i == (d + 1) // 2 and d % 2 == 1:
                split = True
            p.add(second, I if split else B)
            if i == (d + 1) // 2 and d % 2 == 0:
                split = True
            p.add(first, I if split else B)
        for _ in range(k - d - 1):  # 7: a W, then a chunk-0 backward
            p.weight()
            p.add(first, I if split else B)
        for _ in range(d + 1):  # 8: the remaining W passes
            p.weight()
        rows.append(tuple(p.actions))
    return Schedule("dualpipev", microbatches, v_shape(k), tuple(rows))
