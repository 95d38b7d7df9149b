"""The planner: the best pipeline configurations of a model on N devices (``pipesim plan``)."""

from pipesim.plan.planner import Evaluated, PlanReport, PlanSettings, plan
from pipesim.plan.space import DEFAULT_SCHEDULES, Candidate, candidates

__all__ = [
    "DEFAULT_SCHEDULES",
    "Candidate",
    "Evaluated",
    "PlanReport",
    "PlanSettings",
    "candidates",
    "plan",
]
