"""How long each action computes, from the stage costs (one rule for both engines)."""

from __future__ import annotations

from pipesim.costs.pipeline_costs import PipelineCosts
from pipesim.schedules.action import Action, Kind
from pipesim.schedules.schedule import Schedule


def action_duration_s(schedule: Schedule, costs: PipelineCosts, action: Action) -> float:
    """How long ``action`` computes: F, I, W as given; B = I + W, plus F under remat."""
    stage = costs.stages[action.stage]
    if action.kind is Kind.F:
        return stage.forward_s
    if action.kind is Kind.I:
        return stage.input_grad_s
    if action.kind is Kind.W:
        return stage.weight_grad_s
    recompute = stage.forward_s if schedule.rematerialize else 0.0
    return recompute + stage.backward_s
