"""The planner's benchmarks (:mod:`application.plan_bench`): a small plan run in a new process
reports its wall and search times, its space and its best plan as ``pipesim plan`` does."""

from __future__ import annotations

import json

import pytest

from application.plan_bench import NEWER_DIMENSIONS, PlanCase, plan_rate
from tests.cli.test_schedule_cli import run


def test_a_small_plan_is_timed_and_its_best_plan_is_the_commands(
    capsys: pytest.CaptureFixture[str],
) -> None:
    case = PlanCase("megatron-1.7b", "a100", 16, 64)
    rate = plan_rate(case, newer=False)
    status, out, _ = run(capsys, *case.arguments(False))
    assert status == 0
    best = json.loads(out)["plans"][0]
    assert rate.best_iteration_s == best["iteration_time"]
    assert rate.best.startswith(f"T={best['tensor_parallel']} K={best['devices']} ")
    assert rate.wall_s >= rate.search_s > 0
    assert rate.configurations >= rate.examined >= rate.simulated >= 1
    row = rate.to_json()
    assert row["space"] == "classic" and row["configurations_per_s"] > 0
    assert case.arguments(True)[-len(NEWER_DIMENSIONS) :] == NEWER_DIMENSIONS
