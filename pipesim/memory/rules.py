"""The memory model's rules, in one place: what a device holds statically, and how each action
changes the activations it holds.

Both forms of the model read these rules: the engines' memory over time
(:mod:`pipesim.engine.memory_over_time`, sizes in bytes at each action's start and end) and the
closed form of the partitioner and the planner (:mod:`pipesim.memory.forms`, counts of each size
per activation level). A change to the model is made here and reaches both.

Static memory, per stage on a device: weights x versions (1 for flush schedules, 2 for 2BW,
K-d for PipeDream's weight stashing on device d), the gradient buffer and the optimizer state.

Activations, per action (sizes per stage and micro-batch: ``stash`` = activation_bytes,
``keep`` = weight_grad_activation_bytes, the part W needs, ``input`` = input_bytes):

=====  ========================  ================================================
kind   without re-materialization  with re-materialization
=====  ========================  ================================================
F      +stash at its start        +stash at its start; stash -> input at its end
B      -stash at its end          +stash at its start; -stash - input at its end
I      stash -> keep at its end   (refused: re-materialization needs a full B)
W      -keep at its end           (refused)
=====  ========================  ================================================
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from pipesim.costs.pipeline_costs import StageCosts
from pipesim.schedules.action import Kind
from pipesim.schedules.schedule import Schedule

Size = TypeVar("Size", float, npt.NDArray[np.float64])
"""A size in bytes, or an array of them (the partitioner sizes every span of layers at once)."""


class At(Enum):
    """When in an action a change happens."""

    START = "start"
    END = "end"


@dataclass(frozen=True)
class Change:
    """One change of a stage's activations: how many of each size are added (or, negative,
    freed), and when in the action."""

    at: At
    stash: int
    keep: int
    inputs: int

    @property
    def counts(self) -> tuple[int, int, int]:
        """(stash, keep, inputs)."""
        return (self.stash, self.keep, self.inputs)

    def bytes(self, stash: float, keep: float, inputs: float) -> float:
        """The change in bytes for these sizes (terms with a zero count are left out, so the
        sum is exact whenever one term is)."""
        total = 0.0
        for count, size in ((self.stash, stash), (self.keep, keep), (self.inputs, inputs)):
            if count == 1:
                total += size
            elif count == -1:
                total -= size
            elif count:
                total += count * size
        return total


CHANGES: dict[tuple[Kind, bool], tuple[Change, ...]] = {
    (Kind.F, False): (Change(At.START, 1, 0, 0),),
    (Kind.F, True): (Change(At.START, 1, 0, 0), Change(At.END, -1, 0, 1)),
    (Kind.B, False): (Change(At.END, -1, 0, 0),),
    (Kind.B, True): (Change(At.START, 1, 0, 0), Change(At.END, -1, 0, -1)),
    (Kind.I, False): (Change(At.END, -1, 1, 0),),
    (Kind.W, False): (Change(At.END, 0, -1, 0),),
}
"""Each kind's changes, in order, with and without re-materialization (see the table above)."""


def changes(kind: Kind, rematerialize: bool) -> tuple[Change, ...]:
    """The changes an action of ``kind`` makes, in order. Re-materialization changes F and B
    only (a schedule that re-materializes runs no I or W: the validator refuses it)."""
    return CHANGES[(kind, rematerialize and kind in (Kind.F, Kind.B))]


def weight_versions(schedule: Schedule, device: int) -> int:
    """Weight versions ``device`` keeps: 1 for flush schedules, 2 for 2BW, up to the
    in-flight count for PipeDream's weight stashing (one more than the staleness)."""
    return schedule.weight_staleness_steps(device) + 1


def static_memory_bytes(
    parameter_bytes: Size, gradient_bytes: Size, optimizer_bytes: Size, versions: int
) -> Size:
    """The static rule: weights x ``versions``, the gradient buffer and the optimizer state,
    for one stage's sizes or elementwise for arrays of them."""
    return parameter_bytes * versions + gradient_bytes + optimizer_bytes


def activation_level_bytes(counts: Sequence[int], stash: Size, keep: Size, inputs: Size) -> Size:
    """One stage's part of an activation level: ``counts`` = (n_stash, n_keep, n_input) of
    each size held (the sums of :data:`CHANGES` up to that moment), for one stage's sizes or
    elementwise for arrays of them."""
    n_stash, n_keep, n_input = counts
    return n_stash * stash + n_keep * keep + n_input * inputs


def stage_static_bytes(stage: StageCosts, versions: int) -> float:
    """One stage's weights x ``versions``, gradient buffer and optimizer state."""
    return static_memory_bytes(
        stage.parameter_bytes, stage.gradient_bytes, stage.optimizer_bytes, versions
    )


def static_bytes(stage_costs: Sequence[StageCosts], stages: Iterable[int], versions: int) -> float:
    """The static memory of a device that holds ``stages``."""
    return sum(stage_static_bytes(stage_costs[s], versions) for s in stages)
