"""A plan's caveats: the ties inside pipesim's error and the assumptions that move a ranking."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from pipesim.plan import plan
from pipesim.plan.caveats import TIE_FRACTION, assumptions, tie
from pipesim.plan.planner import PlanReport
from pipesim.plan.report import report_json, report_table
from tests.plan.settings import plan_settings


@pytest.fixture(scope="module")
def report() -> PlanReport:
    return plan(plan_settings("megatron-1.7b", "a100", 32, 512, top=5), show_progress=False)


def _timed(report: PlanReport, times: list[float]) -> PlanReport:
    plans = [
        dataclasses.replace(e, iteration_time_s=t) for e, t in zip(report.plans, times, strict=True)
    ]
    return dataclasses.replace(report, plans=plans)


@pytest.mark.parametrize(
    ("times", "last"),
    [
        ([1.0, 1.01, 1.02, 1.5, 1.6], 3),
        ([1.0, 1.0 + TIE_FRACTION * 0.99, 1.2, 1.3, 1.4], 2),
        ([1.0, 1.0 + TIE_FRACTION, 1.2, 1.3, 1.4], None),  # at the error: told apart
        ([1.0, 1.001, 1.002, 1.003, 1.004], 5),
    ],
)
def test_plans_within_the_models_error_of_plan_1_are_a_tie(
    report: PlanReport, times: list[float], last: int | None
) -> None:
    found = tie(_timed(report, times))
    if last is None:
        assert found is None
        return
    assert found is not None and found.last == last
    assert found.spread == pytest.approx(times[last - 1] - 1.0)
    tied = [e.candidate.settings() for e in report.plans[:last]]
    assert set(found.differ) == {k for k in tied[0] if len({s[k] for s in tied}) > 1}
    assert found.sentence().startswith(f"plans 1-{last} are within ")


def test_the_table_and_the_json_say_the_tie_and_what_was_assumed(report: PlanReport) -> None:
    tied = _timed(report, [1.0, 1.001, 1.5, 1.6, 1.7])
    text = report_table(tied)
    assert "plans 1-2 are within 0.1% of plan 1: a tie inside pipesim's error" in text
    assert (
        "assumed:\n  held fixed, not searched: the recipe pipesim's overlap_grad_reduce=off" in text
    )
    shown = report_json(tied)
    assert shown["tie"]["plans"] == 2 and shown["assumptions"] == assumptions(tied)


def test_a_hardware_file_without_a_matmul_curve_is_said_to_favour_tensor_parallelism(
    tmp_path: Path,
) -> None:
    """The newcomer's case: an H100 file with one efficiency and no curve."""
    from pipesim.hardware import resolve_hardware
    from pipesim.hardware.toml_spec import hardware_toml

    text = hardware_toml(resolve_hardware("h100"))
    flat = "\n".join(line for line in text.splitlines() if not line.startswith("matmul_efficiency"))
    path = tmp_path / "h100-no-curve.toml"
    path.write_text(
        flat.replace("  # models given as layers only: matmul_efficiency times the rest", "")
    )
    found = plan(plan_settings("megatron-1.7b", str(path), 16, 64, top=2), show_progress=False)
    said = assumptions(found)
    assert any(
        "has no matmul_efficiency curve" in line and "T > 1 may rank too high" in line
        for line in said
    )
    with_curve = plan(plan_settings("megatron-1.7b", "h100", 16, 64, top=2), show_progress=False)
    assert not any("matmul_efficiency" in line for line in assumptions(with_curve))


def test_a_flat_fabric_is_said(report: PlanReport) -> None:
    flat = plan(plan_settings("uniform-8", "cpu", 4, 16, top=1), show_progress=False)
    assert any("is a flat fabric" in line for line in assumptions(flat))
    assert not any("flat fabric" in line for line in assumptions(report))


def test_a_tie_across_expert_parallel_sizes_names_ep(report: PlanReport) -> None:
    """Plan 1 with EP = 4 tied with plans at EP = 1 (which state no EP at all): EP is what
    separates them, in either order."""
    times = [1.0, 1.01, 1.02, 1.5, 1.6]
    plans = list(_timed(report, times).plans)
    plans[0] = dataclasses.replace(
        plans[0], candidate=dataclasses.replace(plans[0].candidate, expert=4)
    )
    found = tie(dataclasses.replace(report, plans=plans))
    assert found is not None and "EP" in found.differ
    plans[0], plans[1] = plans[1], plans[0]
    found = tie(dataclasses.replace(report, plans=plans))
    assert found is not None and "EP" in found.differ
