"""The integer encoding of a validated schedule: what engines and the validator's dry run read.

Actions are numbered device by device, each device's list in order (the *flat* index). Kinds
are small integers (:data:`KIND_CODES`). The encoding is computed once, when the schedule is
validated, and shared by every simulation of the schedule.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from pipesim.schedules.action import Kind

KINDS: tuple[Kind, ...] = (Kind.F, Kind.B, Kind.I, Kind.W)
KIND_CODES: dict[Kind, int] = {kind: code for code, kind in enumerate(KINDS)}
F, B, I, W = range(4)  # noqa: E741 - the IR's names

IntArray = npt.NDArray[np.int64]


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
