"""The one place the planner simulates a finalist, so the engine it uses changes here only.

It builds the costs exactly as ``pipesim simulate`` does for the same settings (a
:class:`~pipesim.costs.request.ModelRequest` with the plan's partition, optimizer, dtype and
data parallelism) and runs the default engine, so a printed plan re-simulated on the command
line gives the same numbers.
"""

from __future__ import annotations

from pipesim.costs.request import ModelRequest
from pipesim.engine import SimulationResult, simulate
from pipesim.schedules import build
from pipesim.schedules.schedule import Schedule


def simulate_plan(
    request: ModelRequest,
    schedule_name: str,
    devices: int,
    microbatches: int,
    chunks: int,
    remat: bool,
    steps: int,
) -> tuple[Schedule, SimulationResult]:
    """Build the schedule and costs of one configuration and simulate it."""
    schedule = build(schedule_name, devices, microbatches, chunks, remat=remat)
    costs = request.build(devices, chunks, microbatches, schedule, steps)
    return schedule, simulate(schedule, costs, steps=steps)
