"""The memory model's rules, in one place: what a device holds statically, and how each action
changes the activations it holds.

Both forms of the model read these rules: the engines' memory over time
(:mod:`pipesim.engine.memory_over_time`, sizes in bytes at each action's start and end) and the
closed form of the partitioner and the planner (:mod:`pipesim.memory.forms`, counts of each size
per activation level). A change to the model is made here and reaches both.

Static memory, per stage on a device: weights x versions (1 for flush schedules, 2 for 2BW,
K-d for PipeDream's weight stashing on device d), the gradient buffer, the optimizer state and
the fp32 master weights; a device that holds the first stage and a last stage whose output
layer copies the first stage's (tied) embeddings holds that copy once. A schedule whose stages
hold copies of the model (DualPipe) counts each copy's weights on the device that holds it,
and the tied copy once only where a device holds the first and last stage of one copy.

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

On top of what it stashes, every action holds its *transient* while it runs (+ at its start,
- at its end): the temporaries, tensors in flight and recomputed activations its kind
allocates (:func:`transient_bytes`); so does a device's optimizer step (the optimizer's
temporaries). A device's peak is its static memory plus the largest activation level with the
running action's transient; the runtime reserve and the allocator's fragmentation come on top
(:func:`peak_with_allowances`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, TypeVar

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
    freed), and when in the action; ``transient`` is +1 when the action's transient is
    allocated (its start) and -1 when it is freed (its end)."""

    at: At
    stash: int
    keep: int
    inputs: int
    transient: int = 0

    @property
    def counts(self) -> tuple[int, int, int]:
        """(stash, keep, inputs)."""
        return (self.stash, self.keep, self.inputs)

    def bytes(self, stash: float, keep: float, inputs: float, transient: float = 0.0) -> float:
        """The change in bytes for these sizes (terms with a zero count are left out, so the
        sum is exact whenever one term is)."""
        total = 0.0
        for count, size in (
            (self.stash, stash),
            (self.keep, keep),
            (self.inputs, inputs),
            (self.transient, transient),
        ):
            if count == 1:
                total += size
            elif count == -1:
                total -= size
            elif count:
                total += count * size
        return total


CHANGES: dict[tuple[Kind, bool], tuple[Change, ...]] = {
    (Kind.F, False): (Change(At.START, 1, 0, 0, 1), Change(At.END, 0, 0, 0, -1)),
    (Kind.F, True): (Change(At.START, 1, 0, 0, 1), Change(At.END, -1, 0, 1, -1)),
    (Kind.B, False): (Change(At.START, 0, 0, 0, 1), Change(At.END, -1, 0, 0, -1)),
    (Kind.B, True): (Change(At.START, 1, 0, 0, 1), Change(At.END, -1, 0, -1, -1)),
    (Kind.I, False): (Change(At.START, 0, 0, 0, 1), Change(At.END, -1, 1, 0, -1)),
    (Kind.W, False): (Change(At.START, 0, 0, 0, 1), Change(At.END, 0, -1, 0, -1)),
}
"""Each kind's changes, in order, with and without re-materialization (see the table above)."""


def transient_bytes(stage: StageCosts, kind: Kind, rematerialize: bool) -> float:
    """What an action of ``kind`` on ``stage`` holds while it runs: its pass's transient; a
    full backward B the larger of its input- and weight-gradient parts' (and of the forward it
    re-runs under re-materialization)."""
    if kind is Kind.F:
        return stage.forward_transient_bytes
    if kind is Kind.I:
        return stage.input_grad_transient_bytes
    if kind is Kind.W:
        return stage.weight_grad_transient_bytes
    largest = max(stage.input_grad_transient_bytes, stage.weight_grad_transient_bytes)
    if rematerialize:
        largest = max(largest, stage.forward_transient_bytes)
    return largest


def changes(kind: Kind, rematerialize: bool) -> tuple[Change, ...]:
    """The changes an action of ``kind`` makes, in order. Re-materialization changes F and B
    only (a schedule that re-materializes runs no I or W: the validator refuses it)."""
    return CHANGES[(kind, rematerialize and kind in (Kind.F, Kind.B))]


def weight_versions(schedule: Schedule, device: int) -> int:
    """Weight versions ``device`` keeps: 1 for flush schedules, 2 for 2BW, up to the
    in-flight count for PipeDream's weight stashing (one more than the staleness)."""
    return schedule.weight_staleness_steps(device) + 1


def static_memory_bytes(
    parameter_bytes: Size,
    gradient_bytes: Size,
    optimizer_bytes: Size,
    versions: int,
    master_weight_bytes: Size | float = 0.0,
) -> Size:
    """The static rule: weights x ``versions``, the gradient buffer, the optimizer state and
    the master weights, for one stage's sizes or elementwise for arrays of them."""
    total = parameter_bytes * versions + gradient_bytes + optimizer_bytes
    if isinstance(master_weight_bytes, np.ndarray) or master_weight_bytes:
        total = total + master_weight_bytes
    return total


def activation_level_bytes(counts: Sequence[Any], stash: Size, keep: Size, inputs: Size) -> Size:
    """One stage's part of an activation level: ``counts`` = (n_stash, n_keep, n_input) of
    each size held (the sums of :data:`CHANGES` up to that moment), for one stage's sizes or
    elementwise for arrays of them (counts may be arrays too, broadcast against them)."""
    n_stash, n_keep, n_input = counts
    level: Size = n_stash * stash + n_keep * keep + n_input * inputs
    return level


def stage_static_bytes(stage: StageCosts, versions: int) -> float:
    """One stage's weights x ``versions``, gradient buffer, optimizer state and master
    weights."""
    return static_memory_bytes(
        stage.parameter_bytes,
        stage.gradient_bytes,
        stage.optimizer_bytes,
        versions,
        stage.master_weight_bytes,
    )


@dataclass(frozen=True)
class StaticMemory:
    """A device's static memory, term by term (bytes)."""

    weights: float
    gradients: float
    optimizer_state: float
    master_weights: float

    @property
    def total(self) -> float:
        """Their sum."""
        return self.weights + self.gradients + self.optimizer_state + self.master_weights


def shared_copy_share(
    stage_costs: Sequence[StageCosts], stages: Iterable[int], model_stages: int | None = None
) -> tuple[float, int]:
    """What a device holds twice of a last stage: when it holds the first stage and the last
    (or the one stage of a one-stage pipeline), whose tied output layer copies the first
    stage's embeddings, the copy's share of the last stage, and that last stage (0.0 and -1
    otherwise). ``model_stages``: with copies of the model, the stages of one copy (the first
    and the last stage of one copy count, not of two)."""
    held = set(stages)
    per_copy = len(stage_costs) if model_stages is None else model_stages
    for first in range(0, len(stage_costs), per_copy):
        last = first + per_copy - 1
        if first not in held or last not in held:
            continue
        stage = stage_costs[last]
        if stage.shared_parameter_bytes <= 0 or stage.parameter_bytes <= 0:
            return 0.0, -1
        return stage.shared_parameter_bytes / stage.parameter_bytes, last
    return 0.0, -1


def static_breakdown(
    stage_costs: Sequence[StageCosts],
    stages: Iterable[int],
    versions: int,
    model_stages: int | None = None,
) -> StaticMemory:
    """The static memory of a device that holds ``stages``, term by term; ``model_stages``
    as for :func:`shared_copy_share` (``stage_costs`` are one per stage held, copies
    included)."""
    held = tuple(stages)
    chosen = [stage_costs[s] for s in held]
    duplicate, index = shared_copy_share(stage_costs, held, model_stages)
    last = stage_costs[index]

    def term(name: str) -> float:
        total = float(sum(getattr(stage, name) for stage in chosen))
        return total - duplicate * float(getattr(last, name)) if duplicate else total

    return StaticMemory(
        term("parameter_bytes") * versions,
        term("gradient_bytes"),
        term("optimizer_bytes"),
        term("master_weight_bytes"),
    )


def static_bytes(
    stage_costs: Sequence[StageCosts],
    stages: Iterable[int],
    versions: int,
    model_stages: int | None = None,
) -> float:
    """The static memory of a device that holds ``stages`` (its :func:`static_breakdown`'s
    total, so the closed form and the engines add the same terms in the same order)."""
    return static_breakdown(stage_costs, stages, versions, model_stages).total


def optimizer_transient_bytes(stage_costs: Sequence[StageCosts], stages: Iterable[int]) -> float:
    """What a device's optimizer step holds while it runs: its stages' temporaries."""
    return sum(stage_costs[s].optimizer_transient_bytes for s in stages)


def peak_with_allowances(
    model_peak_bytes: Size, reserve_bytes: float, fragmentation: float
) -> Size:
    """A device's reported peak: the model's (static, activations, transients) with the
    allocator's fragmentation on top, and the runtime's reserve (elementwise for arrays)."""
    if not reserve_bytes and not fragmentation:
        return model_peak_bytes
    return model_peak_bytes * (1.0 + fragmentation) + reserve_bytes
