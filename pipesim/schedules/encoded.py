"""The integer forms of a schedule: the per-device lists as arrays (:class:`ActionArrays`, what
generators produce and a :class:`~pipesim.schedules.schedule.Schedule` stores), and the
encoding of a validated schedule (:class:`EncodedSchedule`, what engines and the validator's
dry run read).

Actions are numbered device by device, each device's list in order (the *flat* index). Kinds
are small integers (:data:`KIND_CODES`). The encoding is computed once, when the schedule is
validated, and shared by every simulation of the schedule.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from operator import itemgetter

import numpy as np
import numpy.typing as npt

from pipesim.schedules.action import Action, Kind

KINDS: tuple[Kind, ...] = (Kind.F, Kind.B, Kind.I, Kind.W)
KIND_CODES: dict[Kind, int] = {kind: code for code, kind in enumerate(KINDS)}
F, B, I, W = range(4)  # noqa: E741 - the IR's names

IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True, eq=False)
class ActionArrays:
    """Every device's ordered list of actions as flat integer arrays (length N = all actions):
    device d runs ``row_starts[d]`` .. ``row_starts[d + 1]``; each action is (``stage``,
    ``kind`` code of :data:`KIND_CODES`, ``microbatch``).

    This is the form generators build and a schedule keeps: a schedule of 131,072 actions is
    four arrays, and :class:`~pipesim.schedules.action.Action` objects are made only when
    asked for (:meth:`rows`). The arrays are read-only once made.
    """

    row_starts: IntArray
    stage: IntArray
    kind: IntArray
    microbatch: IntArray

    def __post_init__(self) -> None:
        for array in (self.row_starts, self.stage, self.kind, self.microbatch):
            array.flags.writeable = False

    @property
    def devices(self) -> int:
        """K, the rows."""
        return len(self.row_starts) - 1

    @property
    def actions(self) -> int:
        """N, the actions of all rows."""
        return len(self.stage)

    @classmethod
    def from_rows(cls, rows: Sequence[Sequence[Action]]) -> ActionArrays:
        """The arrays of per-device lists of :class:`Action` (checked to be actions first)."""
        lengths = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
        row_starts = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(lengths, out=row_starts[1:])
        count = int(row_starts[-1])
        flat = list(itertools.chain.from_iterable(rows))
        stage = np.fromiter(map(itemgetter(0), flat), dtype=np.int64, count=count)
        codes = map(KIND_CODES.__getitem__, map(itemgetter(1), flat))
        kind = np.fromiter(codes, dtype=np.int64, count=count)
        microbatch = np.fromiter(map(itemgetter(2), flat), dtype=np.int64, count=count)
        return cls(row_starts, stage, kind, microbatch)

    @classmethod
    def from_device_lists(
        cls, lists: Sequence[tuple[IntArray, IntArray, IntArray]]
    ) -> ActionArrays:
        """Join per-device (stage, kind, micro-batch) arrays, device 0 first."""
        lengths = [len(stage) for stage, _, _ in lists]
        row_starts = np.zeros(len(lists) + 1, dtype=np.int64)
        np.cumsum(lengths, out=row_starts[1:])

        def joined(column: int) -> IntArray:
            parts = [np.asarray(row[column], dtype=np.int64) for row in lists]
            return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)

        return cls(row_starts, joined(0), joined(1), joined(2))

    def rows(self) -> tuple[tuple[Action, ...], ...]:
        """The lists as :class:`Action` objects (one object per distinct action)."""
        actions = [
            Action(stage, KINDS[kind], microbatch)
            for stage, kind, microbatch in zip(
                self.stage.tolist(), self.kind.tolist(), self.microbatch.tolist(), strict=True
            )
        ]
        starts = self.row_starts.tolist()
        return tuple(tuple(actions[a:b]) for a, b in itertools.pairwise(starts))

    def same_as(self, other: ActionArrays) -> bool:
        """True when both hold the same lists."""
        return all(
            np.array_equal(mine, theirs)
            for mine, theirs in (
                (self.row_starts, other.row_starts),
                (self.stage, other.stage),
                (self.kind, other.kind),
                (self.microbatch, other.microbatch),
            )
        )


@dataclass(frozen=True, eq=False)
class EncodedSchedule:
    """One step of a schedule as flat integer arrays (length N = all actions).

    Attributes:
        row_starts: ``row_starts[d]`` .. ``row_starts[d + 1]`` are device d's actions (K + 1).
        stage, kind, microbatch, device: per action.
        dependencies: ``(N, 2)``: the flat indices of the actions each one consumes, -1 padded
            (F: the previous stage's F; B/I: its own F and the next stage's backward; W: its I).
        upstream: the dependency on another stage (F: the previous stage's F; B/I: the next
            stage's backward), -1 for none; the other one always sits earlier on the device.
        order: the flat indices in the validator's dry-run order (execution order).
        backward_kind: ``(S, M)``: ``B`` or ``I``, which backward each (stage, micro-batch) runs.
        flat_index: ``(S, M, 4)``: the flat index of each (stage, micro-batch, kind), -1 absent.
    """

    row_starts: IntArray
    stage: IntArray
    kind: IntArray
    microbatch: IntArray
    device: IntArray
    dependencies: IntArray
    upstream: IntArray
    order: IntArray
    backward_kind: IntArray
    flat_index: IntArray

    @property
    def actions(self) -> int:
        """N, the actions of one step."""
        return len(self.stage)
