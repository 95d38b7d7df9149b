"""How long each action computes, from the stage costs (one rule for both engines).

An action's duration is its pass's time (:func:`action_duration_s`), less what DualPipe's
computation-communication overlap hides (:func:`overlap_savings_s`): DeepSeek-V3 (arXiv
2412.19437 §3.2.1, Figure 4) runs the forward of one micro-batch beside the backward of another
("F&B"), so the exposed communication of each (expert parallelism's all-to-alls, the tensor-
and context-parallel collectives, :attr:`~pipesim.costs.pipeline_costs.StageCosts.
forward_comm_s` and ``input_grad_comm_s``) runs under the other's computation. Computation does
not get faster. The schedule keeps the pair as two actions, the forward then the backward
(:func:`pipesim.schedules.dualpipe.overlapped_pairs`); the backward of each overlapped pair is
shortened by ``min(F's comm, B's compute) + min(B's comm, F's compute)``, compute being the
duration less the comm. Both engines read the savings from here, so they stay equal.
"""

from __future__ import annotations

import numpy as np

from pipesim.costs.pipeline_costs import PipelineCosts, StageCosts
from pipesim.engine.arrays import FloatArray, IntArray
from pipesim.schedules.action import Action, Kind
from pipesim.schedules.dualpipe import overlapped_pairs
from pipesim.schedules.encoded import B as B_CODE
from pipesim.schedules.schedule import Schedule

OVERLAPPED_SCHEDULES: frozenset[str] = frozenset({"dualpipe", "dualpipev"})
"""The schedules, by :attr:`Schedule.name`, whose forward-backward pairs overlap computation
with communication: DualPipe and DualPipeV, as deepseek-ai/DualPipe runs them
(``overlapped_forward_backward``). The switch is this module-level rule, not a keyword of the
generators: the schedule IR carries no options (a schedule that is replaced, pickled to a
worker or loaded from a file keeps its fields and name only), and the recipe, where the choice
belongs, is outside this change. Set it to ``frozenset()`` (a test's ``monkeypatch``) to run
each pair's passes apart, as DualPipe does without ``overlapped_forward_backward``."""


def action_duration_s(schedule: Schedule, costs: PipelineCosts, action: Action) -> float:
    """How long ``action``'s pass computes: F, I, W as given; B = I + W, plus F under remat
    (before any overlap: :func:`overlap_savings_s`)."""
    stage = costs.stages[action.stage]
    if action.kind is Kind.F:
        return stage.forward_s
    if action.kind is Kind.I:
        return stage.input_grad_s
    if action.kind is Kind.W:
        return stage.weight_grad_s
    recompute = stage.forward_s if schedule.rematerialize else 0.0
    return recompute + stage.backward_s


def _split(duration: float, comm: float) -> tuple[float, float]:
    """(compute, comm) of a pass of ``duration`` whose exposed communication is ``comm``."""
    comm = min(comm, duration)
    return duration - comm, comm


def hideable_s(costs: StageCosts) -> float:
    """The most an overlapped pair can hide of one stage's forward and input gradient: their
    exposed communication (:func:`overlap_saving_s` hides no more: its re-materializing case
    does not arise, the overlapped schedules split the backward and refuse ``remat``), what
    the planner's bounds leave out of a pass under :data:`OVERLAPPED_SCHEDULES`."""
    return costs.forward_comm_s + costs.input_grad_comm_s


def overlap_saving_s(
    forward: StageCosts,
    backward: StageCosts,
    backward_s: float,
    full: bool,
    rematerialize: bool = False,
) -> float:
    """What an overlapped pair hides: ``min(F's comm, X's compute) + min(X's comm, F's
    compute)`` for the forward's stage costs and the backward X (a full B when ``full``, of
    ``backward_s`` seconds, its comm I's, and F's too when it recomputes the forward)."""
    f_compute, f_comm = _split(forward.forward_s, forward.forward_comm_s)
    comm = backward.input_grad_comm_s
    if full and rematerialize:
        comm += backward.forward_comm_s
    x_compute, x_comm = _split(backward_s, comm)
    return min(f_comm, x_compute) + min(x_comm, f_compute)


def overlap_savings_s(schedule: Schedule, costs: PipelineCosts) -> FloatArray:
    """Per action, in the schedule's flat order (device by device, :meth:`Schedule.actions`),
    the seconds the overlap takes off its duration: the backward of each overlapped pair of a
    schedule in :data:`OVERLAPPED_SCHEDULES` saves :func:`overlap_saving_s`; every other action
    0. Without communication in the costs every saving is 0."""
    arrays = schedule.action_arrays
    savings = np.zeros(len(arrays.kind))
    if schedule.name not in OVERLAPPED_SCHEDULES:
        return savings
    backwards, kinds, which = _pair_kinds(schedule)
    if not kinds:
        return savings
    stages = costs.stages
    remat = schedule.rematerialize
    values = []
    for f, x, full in kinds:  # each distinct (forward stage, backward stage, full B) once
        backward = stages[x]
        if full:
            recompute = backward.forward_s if remat else 0.0
            duration = recompute + backward.backward_s
        else:
            duration = backward.input_grad_s
        values.append(overlap_saving_s(stages[f], backward, duration, full, remat))
    savings[backwards] = np.array(values)[which]
    return savings


def _pair_kinds(schedule: Schedule) -> tuple[IntArray, list[tuple[int, int, bool]], IntArray]:
    """The overlapped pairs' backwards (flat positions), the distinct (forward stage, backward
    stage, full B) of the pairs, and each pair's index among them; kept on the schedule."""

    def make() -> tuple[IntArray, list[tuple[int, int, bool]], IntArray]:
        arrays = schedule.action_arrays
        forwards, backwards = overlapped_pairs(schedule)
        kinds: dict[tuple[int, int, bool], int] = {}
        which = [
            kinds.setdefault(
                (int(arrays.stage[f]), int(arrays.stage[x]), int(arrays.kind[x]) == B_CODE),
                len(kinds),
            )
            for f, x in zip(forwards.tolist(), backwards.tolist(), strict=True)
        ]
        return backwards, list(kinds), np.array(which, dtype=np.int64)

    return schedule.derived("overlapped pair kinds", make)


def overlap_savings_by_action(schedule: Schedule, costs: PipelineCosts) -> dict[Action, float]:
    """:func:`overlap_savings_s` by action, the non-zero ones only (for the event engine)."""
    savings = overlap_savings_s(schedule, costs)
    nonzero = np.flatnonzero(savings)
    if not len(nonzero):
        return {}
    actions = schedule.actions()
    return {actions[i]: float(savings[i]) for i in nonzero.tolist()}
