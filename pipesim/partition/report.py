"""What ``pipesim partition`` reports: each stage's layers, time and memory, as JSON.

A stage's memory is its device's peak under the schedule when there is one (the memory model
in closed form, :mod:`pipesim.memory.forms`, exactly the simulator's peak); without a
schedule, the stage's own weights, gradients, optimizer state and one micro-batch's
activations.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pipesim.memory.forms import memory_forms
from pipesim.memory.rules import stage_static_bytes
from pipesim.partition.problem import PartitionProblem
from pipesim.partition.solver import Partition, partition_stage_costs
from pipesim.schedules.action import UpdateRule
from pipesim.schedules.schedule import Schedule


def memory_steps(schedule: Schedule) -> int:
    """Steps whose peak a partition must fit: one for flush schedules; two for the no-flush
    ones, whose steps overlap."""
    return 1 if schedule.update_rule is UpdateRule.FLUSH else 2


def stage_memory_bytes(
    problem: PartitionProblem, partition: Partition, schedule: Schedule | None
) -> list[float]:
    """Per stage of ``partition``: its device's peak under ``schedule``, or (no schedule) the
    stage's static memory plus one micro-batch's activations."""
    stage_costs = partition_stage_costs(problem, partition.counts)
    if schedule is None:
        return [stage_static_bytes(c, versions=1) + c.activation_bytes for c in stage_costs]
    forms = memory_forms(schedule, memory_steps(schedule))
    peaks = [form.peak_bytes(stage_costs) for form in forms]
    return [peaks[device] for device in problem.placement]


def partition_report(
    problem: PartitionProblem,
    partition: Partition,
    schedule: Schedule | None,
    *,
    objective: str,
    devices: int,
    chunks: int,
) -> dict[str, Any]:
    """The JSON object of ``pipesim partition --json``."""
    memory = stage_memory_bytes(problem, partition, schedule)
    placement: Sequence[int] = problem.placement
    stages = []
    start = 0
    for s, count in enumerate(partition.counts):
        stages.append(
            {
                "stage": s,
                "device": placement[s],
                "layers": count,
                "first_layer": start,
                "last_layer": start + count - 1,
                "time": partition.stage_times_s[s],
                "memory_bytes": memory[s],
            }
        )
        start += count
    return {
        "objective": objective,
        "devices": devices,
        "chunks": chunks,
        "schedule": None if schedule is None else schedule.name,
        "partition": list(partition.counts),
        "stages": stages,
        "bottleneck_time": partition.bottleneck_s,
        "imbalance": partition.imbalance,
        "exact": partition.exact,
    }
