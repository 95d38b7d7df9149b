"""A run's compute timeline as flat arrays, in the order the records completed.

Both engines summarize from this form (busy time, step ends, memory), so their metrics come from
one piece of code; the fast engine produces it directly, the SimPy engine from its records.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from pipesim.engine.records import ComputeRecord
from pipesim.schedules.action import Action
from pipesim.schedules.encoded import KIND_CODES, KINDS

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

OPTIMIZER = -1  # the kind code of a device's optimizer step


@dataclass(frozen=True, eq=False)
class RunArrays:
    """Per compute record (actions and optimizer steps), in completion order.

    ``stage`` and ``kind`` are -1 (:data:`OPTIMIZER`) for an optimizer step; kinds are coded as
    in :mod:`pipesim.schedules.encoded`. ``item``, where known, is each record's index among
    the items of the run's layout (:func:`pipesim.engine.run_layout.run_layout`), so what
    depends on the schedule alone can be looked up per record. The arrays are read-only once
    made.
    """

    device: IntArray
    step: IntArray
    stage: IntArray
    kind: IntArray
    microbatch: IntArray
    start_s: FloatArray
    end_s: FloatArray
    item: IntArray | None = None  # each record's item in the run's layout (the fast engine's)

    def __post_init__(self) -> None:
        # a finished run: read-only (what is summarised from it later, the memory curves
        # made when first read, must see the run as it ended)
        arrays: tuple[npt.NDArray[np.generic] | None, ...] = (
            *(self.device, self.step, self.stage, self.kind, self.microbatch),
            *(self.start_s, self.end_s, self.item),
        )
        for values in arrays:
            if values is not None:
                values.flags.writeable = False

    def __len__(self) -> int:
        return len(self.device)

    def records(self) -> tuple[ComputeRecord, ...]:
        """The records as objects (built on demand: a large run has hundreds of thousands)."""
        actions: dict[tuple[int, int, int], Action] = {}
        out = []
        for device, step, stage, kind, microbatch, start, end in zip(
            self.device.tolist(),
            self.step.tolist(),
            self.stage.tolist(),
            self.kind.tolist(),
            self.microbatch.tolist(),
            self.start_s.tolist(),
            self.end_s.tolist(),
            strict=True,
        ):
            action = None
            if kind != OPTIMIZER:
                key = (stage, kind, microbatch)
                action = actions.get(key)
                if action is None:
                    action = actions[key] = Action(stage, KINDS[kind], microbatch)
            out.append(ComputeRecord(device, step, action, start, end))
        return tuple(out)


def arrays_from_records(records: Sequence[ComputeRecord]) -> RunArrays:
    """The arrays of records made one by one (the SimPy engine's)."""
    columns: list[list[int]] = [[], [], [], [], []]
    starts, ends = [], []
    for r in records:
        columns[0].append(r.device)
        columns[1].append(r.step)
        if r.action is None:
            columns[2].append(OPTIMIZER)
            columns[3].append(OPTIMIZER)
            columns[4].append(0)
        else:
            columns[2].append(r.action.stage)
            columns[3].append(KIND_CODES[r.action.kind])
            columns[4].append(r.action.microbatch)
        starts.append(r.start_s)
        ends.append(r.end_s)
    device, step, stage, kind, microbatch = (np.array(c, dtype=np.int64) for c in columns)
    return RunArrays(
        device,
        step,
        stage,
        kind,
        microbatch,
        np.array(starts, dtype=np.float64),
        np.array(ends, dtype=np.float64),
    )


def running_totals(values: FloatArray, owner: IntArray, groups: int) -> FloatArray:
    """Per group, the running total of its values, added one by one in order.

    ``owner`` must be sorted (stably, so each group keeps its values' order). Row g of the
    result holds group g's running totals, then its final total repeated to the common width:
    so the row's last entry is the group's total and the row's maximum its largest running
    total. The additions run left to right along each row, in the order a loop makes them, so
    the totals are bit for bit a loop's.
    """
    counts = np.bincount(owner, minlength=groups)
    width = int(counts.max()) if len(owner) else 0
    starts = np.zeros(groups, dtype=np.int64)
    np.cumsum(counts[:-1], out=starts[1:])
    matrix = np.zeros((groups, max(width, 1)))
    matrix[owner, np.arange(len(owner)) - starts[owner]] = values
    return np.add.accumulate(matrix, axis=1)
