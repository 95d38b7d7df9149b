"""Building blocks shared by the generators: per-device forward and backward sequences, the
warm-up / steady / cool-down merge of the 1F1B family, and a counter for phase-built schedules.

Every schedule of the 1F1B family (GPipe and looped BFS as the degenerate case, 1F1B,
PipeDream, PipeDream-2BW, interleaved 1F1B, ZB-H1, ZB-H2) is one call of
:func:`merge_one_forward_one_backward`: a device runs ``warmup`` forwards, then alternates one
backward and one forward until the forwards run out, then the remaining backwards. With the
zero-bubble split each backward is an I, and its W follows ``weight_lag`` backwards later.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from pipesim.schedules.action import Action, Kind
from pipesim.schedules.encoded import B, F, I, W

IntArray = npt.NDArray[np.int64]


def chunk_sequence(
    stages: Sequence[int],
    microbatches: int,
    microbatches_per_round: int,
    *,
    reverse_chunks: bool = False,
    reverse_microbatches: bool = False,
) -> tuple[IntArray, IntArray]:
    """The order in which one device visits its ``stages`` (one per chunk) for one kind of
    pass, as (stage, micro-batch) arrays.

    Micro-batches go in rounds of ``microbatches_per_round``: within a round the device runs
    the round's micro-batches through its first chunk, then its second, and so on (Megatron's
    depth-first interleaving); a round as large as ``microbatches`` is breadth-first (looped
    BFS). ``reverse_chunks`` visits the chunks last to first, as backward passes do.
    """
    chunk_order = np.array(stages[::-1] if reverse_chunks else stages, dtype=np.int64)
    starts = range(0, microbatches, microbatches_per_round)
    rounds = [np.arange(a, min(a + microbatches_per_round, microbatches)) for a in starts]
    if reverse_microbatches:
        rounds = [r[::-1] for r in reversed(rounds)]
    chunks = len(chunk_order)
    stage_parts = [np.repeat(chunk_order, len(r)) for r in rounds]
    microbatch_parts = [np.tile(r, chunks) for r in rounds]
    return np.concatenate(stage_parts), np.concatenate(microbatch_parts).astype(np.int64)


def merge_one_forward_one_backward(
    forwards: tuple[IntArray, IntArray],
    backwards: tuple[IntArray, IntArray],
    warmup: int,
    weight_lag: int | None = None,
) -> tuple[IntArray, IntArray, IntArray]:
    """Merge a device's forward and backward sequences (stage, micro-batch arrays) 1F1B-style
    into its list: (stage, kind code, micro-batch) arrays.

    Runs ``min(warmup, len(forwards))`` forwards, then for each backward in order: the backward,
    then (with ``weight_lag`` set) the W of the backward ``weight_lag`` positions earlier, then
    the next forward if any remain. Leftover W passes close the list in order.

    The backwards are full backwards (B); with ``weight_lag`` not None each is an I whose W is
    deferred. ``warmup`` counts the forwards run before the first backward.
    """
    forward_stage, forward_mb = forwards
    backward_stage, backward_mb = backwards
    split = weight_lag is not None
    lag = weight_lag if weight_lag is not None else 0
    started = min(warmup, len(forward_stage))
    count = len(backward_stage)
    # Row j of the steady part: backward j, then W of backward j - lag, then forward started+j.
    index = np.arange(count)
    weight = index - lag
    later = started + index
    slots_stage = np.stack(
        [backward_stage, backward_stage[np.maximum(weight, 0)], _at(forward_stage, later)], axis=1
    )
    slots_mb = np.stack(
        [backward_mb, backward_mb[np.maximum(weight, 0)], _at(forward_mb, later)], axis=1
    )
    slots_kind = np.empty((count, 3), dtype=np.int64)
    slots_kind[:] = (I if split else B, W, F)
    present = np.stack(
        [np.ones(count, dtype=bool), split & (weight >= 0), later < len(forward_stage)], axis=1
    )
    leftover = np.arange(max(0, count - lag), count) if split else np.arange(0)
    stage = np.concatenate(
        [forward_stage[:started], slots_stage[present], backward_stage[leftover]]
    )
    kind = np.concatenate(
        [np.full(started, F), slots_kind[present], np.full(len(leftover), W)]
    ).astype(np.int64)
    microbatch = np.concatenate([forward_mb[:started], slots_mb[present], backward_mb[leftover]])
    return stage, kind, microbatch


def _at(values: IntArray, index: IntArray) -> IntArray:
    """``values[index]`` where the index is in range, 0 elsewhere (a slot left empty)."""
    if not len(values):
        return np.zeros(len(index), dtype=np.int64)
    return values[np.minimum(index, len(values) - 1)]


class PhaseBuilder:
    """Appends actions to one device's list while counting micro-batches per (stage, kind).

    Phase-built schedules (ZB-V, DualPipeV) describe a device as phases such as "F on chunk 0,
    then F on chunk 1"; the builder supplies the next micro-batch of each (stage, kind). A full
    backward ``B`` counts as both the I and the W of its micro-batch. ``I`` passes queue their
    W, which :meth:`weight` releases first-in, first-out (over all stages, or for one).
    """

    def __init__(self) -> None:
        self.actions: list[Action] = []
        self._next: dict[tuple[int, Kind], int] = {}
        self._pending_weights: list[Action] = []

    def count(self, stage: int, kind: Kind) -> int:
        """How many ``kind`` actions of ``stage`` were added (B counts as I)."""
        key = Kind.I if kind is Kind.B else kind
        return self._next.get((stage, key), 0)

    def add(self, stage: int, kind: Kind) -> None:
        """Add the next micro-batch of ``kind`` (F, B or I) on ``stage``."""
        microbatch = self.count(stage, kind)
        action = Action(stage, kind, microbatch)
        self.actions.append(action)
        if kind is Kind.F:
            self._next[(stage, Kind.F)] = microbatch + 1
            return
        self._next[(stage, Kind.I)] = microbatch + 1
        if kind is Kind.I:
            self._pending_weights.append(Action(stage, Kind.W, microbatch))

    def weight(self, stage: int | None = None) -> None:
        """Add the oldest pending W (of ``stage``, when given), if there is one."""
        for index, pending in enumerate(self._pending_weights):
            if stage is None or pending.stage == stage:
                self.actions.append(self._pending_weights.pop(index))
                return

    def pending_weights(self, stage: int | None = None) -> int:
        """W passes queued and not yet added (of ``stage``, when given)."""
        return sum(1 for w in self._pending_weights if stage is None or w.stage == stage)
