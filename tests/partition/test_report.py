"""The partition report (pipesim.partition.report): literal figures for a tiny problem."""

from __future__ import annotations

import pytest

from pipesim.costs.pipeline_costs import StageCosts
from pipesim.partition import PartitionProblem, balanced
from pipesim.partition.report import memory_steps, partition_report, stage_memory_bytes
from pipesim.schedules import build


def _problem(placement: tuple[int, ...]) -> PartitionProblem:
    layers = tuple(
        StageCosts(
            forward_s=t,
            input_grad_s=2 * t,
            weight_grad_s=0.0,
            output_bytes=0.0,
            parameter_bytes=100.0,
            activation_bytes=10.0,
        )
        for t in (1.0, 1.0, 1.0, 3.0)
    )
    return PartitionProblem(layers, 0.0, placement)


def test_without_a_schedule_a_stage_holds_its_own_static_memory_and_one_microbatch() -> None:
    problem = _problem((0, 1))
    found = balanced(problem)
    report = partition_report(problem, found, None, objective="balanced", devices=2, chunks=1)
    # F+B per layer is 3, 3, 3, 9 s: only 3 + 1 layers balance at 9 s per stage.
    assert report["partition"] == [3, 1]
    # 100 bytes of parameters and 10 of activations per layer; no gradients or optimizer here.
    assert [s["memory_bytes"] for s in report["stages"]] == [330.0, 110.0]
    assert [(s["first_layer"], s["last_layer"]) for s in report["stages"]] == [(0, 2), (3, 3)]
    assert [s["time"] for s in report["stages"]] == [9.0, 9.0]
    assert report["schedule"] is None
    assert report["bottleneck_time"] == max(s["time"] for s in report["stages"])


def test_with_a_schedule_each_stage_reports_its_devices_peak() -> None:
    """1F1B on K=2, M=4: device 0 holds 2 micro-batches in flight, device 1 one."""
    schedule = build("1f1b", 2, 4)
    problem = _problem(schedule.placement)
    found = balanced(problem)
    memory = stage_memory_bytes(problem, found, schedule)
    assert found.counts == (3, 1)
    assert memory == [300.0 + 2 * 30.0, 100.0 + 10.0]


@pytest.mark.parametrize(("name", "steps"), [("1f1b", 1), ("pipedream-2bw", 2), ("pipedream", 2)])
def test_no_flush_schedules_are_fitted_over_two_steps(name: str, steps: int) -> None:
    assert memory_steps(build(name, 2, 4)) == steps
