"""Local search over a schedule's orders, judged by the engine.

A move changes one device's order: a W moved a few places earlier or later (where it fills
idle time, and how long its micro-batch stays in flight, are what the greedy orders guess
worst), or two neighbouring actions of different stages or kinds swapped (a forward run ahead
of a backward, or after it). A move is kept only when the order is still a valid schedule (the
one validator: dependencies kept, no deadlock), keeps within the memory limit and the engine
finds it strictly better by the objective. Moves are drawn from a seeded generator, so a
search is reproducible; it stops after ``evaluations`` simulations.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pipesim.costs.pipeline_costs import PipelineCosts
from pipesim.errors import ScheduleError
from pipesim.schedules.action import Action, Kind
from pipesim.schedules.schedule import Schedule

if TYPE_CHECKING:
    from pipesim.engine.result import SimulationResult

# How far a W may move in one step, in places of its device's order.
WEIGHT_REACH = 4
SEED = 0


@dataclass(frozen=True)
class Searched:
    """The best order found, its simulation, and the moves tried and kept."""

    schedule: Schedule
    result: SimulationResult
    tried: int
    kept: int


def improve(
    schedule: Schedule,
    costs: PipelineCosts,
    objective: Callable[[SimulationResult], float],
    fits: Callable[[Schedule], bool],
    evaluations: int,
    *,
    start: SimulationResult | None = None,
    seed: int = SEED,
    on_evaluation: Callable[[], object] | None = None,
) -> Searched:
    """Hill-climb from ``schedule``: at most ``evaluations`` simulations of moved orders,
    keeping each that ``fits`` and lowers ``objective``. ``start`` is ``schedule``'s own
    simulation when the caller has it; ``on_evaluation`` is called after each simulation."""
    from pipesim.engine import simulate

    best = schedule
    result = start if start is not None else simulate(schedule, costs)
    value = objective(result)
    rng = random.Random(seed)
    rows = [list(row) for row in schedule.device_actions]
    tried = kept = 0
    attempts = 0
    # Invalid and over-limit moves cost no simulation; bound them too.
    while tried < evaluations and attempts < 20 * evaluations:
        attempts += 1
        moved = _move(rows, rng)
        if moved is None:
            continue
        try:
            candidate = Schedule(
                best.name, best.microbatches, best.placement, tuple(map(tuple, moved))
            )
        except ScheduleError:
            continue
        if not fits(candidate):
            continue
        tried += 1
        candidate_result = simulate(candidate, costs)
        if on_evaluation is not None:
            on_evaluation()
        candidate_value = objective(candidate_result)
        if candidate_value < value * (1 - 1e-12):
            best, result, value, rows = candidate, candidate_result, candidate_value, moved
            kept += 1
    return Searched(best, result, tried, kept)


def _move(rows: list[list[Action]], rng: random.Random) -> list[list[Action]] | None:
    """A copy of ``rows`` with one random move made, or None when the draw moves nothing."""
    device = rng.randrange(len(rows))
    row = rows[device]
    if len(row) < 2:
        return None
    if rng.random() < 0.5:
        weights = [i for i, action in enumerate(row) if action.kind is Kind.W]
        if not weights:
            return None
        at = rng.choice(weights)
        to = at + rng.choice([d for d in range(-WEIGHT_REACH, WEIGHT_REACH + 1) if d])
        if not 0 <= to < len(row):
            return None
        passed = row[min(at, to) : max(at, to) + 1]
        if any(a.kind is Kind.W and a.stage == row[at].stage for a in passed if a is not row[at]):
            return None  # W passes of a stage keep their micro-batches' order
        new_row = row[:at] + row[at + 1 :]
        new_row.insert(to, row[at])
    else:
        at = rng.randrange(len(row) - 1)
        first, second = row[at], row[at + 1]
        if (first.stage, first.kind) == (second.stage, second.kind):
            return None  # micro-batches keep their order within a stage and kind
        new_row = list(row)
        new_row[at], new_row[at + 1] = second, first
    moved = list(rows)
    moved[device] = new_row
    return moved
