"""The closed-form bubble of a simulated schedule, from its costs.

The forms themselves, and the conditions under which each holds, live with the schedules
(:mod:`pipesim.schedules.closed_forms`, attached to the registry's entries); this module turns
a schedule's costs into the terms they read. A form applies only to equal stages: with unequal
stage costs, or a schedule that is not provably the registered one, there is none. All forms
ignore communication, so with links the simulated figure is the closed form plus the
communication the schedule cannot hide.
"""

from __future__ import annotations

from pipesim.costs.pipeline_costs import PipelineCosts
from pipesim.schedules.closed_forms import BubbleTerms
from pipesim.schedules.registry import closed_form_bubble_s
from pipesim.schedules.schedule import Schedule


def _terms(schedule: Schedule, costs: PipelineCosts, steps: int) -> BubbleTerms | None:
    """What the closed forms read, or None for unequal stages (no form applies)."""
    if not costs.uniform():
        return None
    stage = costs.stages[0]
    forward = stage.forward_s
    return BubbleTerms(
        devices=schedule.devices,
        microbatches=schedule.microbatches,
        forward_s=forward,
        input_grad_s=stage.input_grad_s,
        weight_grad_s=stage.weight_grad_s,
        backward_s=stage.backward_s + (forward if schedule.rematerialize else 0.0),
        steps=steps,
    )


def analytic_bubble_time_s(schedule: Schedule, costs: PipelineCosts, steps: int) -> float | None:
    """Idle time per device per step by the closed form, or None where none applies."""
    terms = _terms(schedule, costs, steps)
    return None if terms is None else closed_form_bubble_s(schedule, terms)


def analytic_bubble_fraction(schedule: Schedule, costs: PipelineCosts, steps: int) -> float | None:
    """The closed-form bubble fraction, or None where no closed form applies."""
    terms = _terms(schedule, costs, steps)
    idle = None if terms is None else closed_form_bubble_s(schedule, terms)
    if terms is None or idle is None:
        return None
    busy = schedule.microbatches * schedule.chunks * (terms.forward_s + terms.backward_s)
    total = busy + idle
    return idle / total if total > 0 else 0.0
