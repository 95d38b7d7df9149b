"""A validation case end to end at tiny size (the error thresholds are a measurement, not
asserted here), the report files, and exit 1 on a threshold breach."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from cli.main import main
from executor.backends import DeviceKind
from pipesim.errors import Interrupted, PipesimError
from tests.validation.fakes import comparison
from validation.compare import aggregate, breaches
from validation.host import HostLoad
from validation.report import crosscheck_table
from validation.results import CaseResult, ValidationResult, Verdict
from validation.rounds import Stability
from validation.runner import run_validation
from validation.schema import Comparison, CrosscheckRecord
from validation.suites import Case, ModelKind, ModelSpec, quick_suite
from validation.uncertainty import Intervals

pytestmark = pytest.mark.distributed

REQUIRED = {
    "schedule",
    "devices",
    "microbatches",
    "predicted_time",
    "measured_time",
    "time_error",
    "predicted_speedup",
    "measured_speedup",
    "predicted_peak_memory_bytes",
    "measured_peak_memory_bytes",
}


def tiny_case() -> Case:
    return Case(
        "tiny-K2",
        ModelSpec(ModelKind.MLP, width=32, layers=4, microbatch_size=4),
        2,
        (2, 4),
        ("1f1b", "zb-h1", "zbv", "synth N=1"),
        DeviceKind.CPU,
        warmup=1,
        repeats=2,
    )


def test_a_tiny_case_runs_end_to_end_and_writes_a_complete_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Measured until stable: a target no run meets keeps measuring for the 2 s budget.
    stability = Stability(target_uncertainty=0.0, budget_s=2.0)
    result = run_validation(
        "quick", "cpu", tmp_path, 0.05, 0.15, cases=[tiny_case()], stability=stability
    )
    results = json.loads((tmp_path / "results.json").read_text())
    assert results == json.loads(json.dumps(result.to_json()))
    assert {r["schedule"] for r in results["records"]} == {"1f1b", "zb-h1", "zbv", "synth N=1"}
    # The synthesised order was made from the case's own calibration and recorded as it ran:
    # one micro-batch in flight on each device, so each runs F, I, W per micro-batch in turn.
    runs = json.loads((tmp_path / "measured-tiny-K2.json").read_text())["runs"]
    synthesised = [r for r in runs if r["schedule"] == "synth N=1"]
    assert [r["microbatches"] for r in synthesised] == [2, 4]
    assert synthesised[0]["order"] == [
        ["0F0", "0I0", "0W0", "0F1", "0I1", "0W1"],
        ["1F0", "1I0", "1W0", "1F1", "1I1", "1W1"],
    ]
    assert all(r["order"] == [] for r in runs if r["schedule"] != "synth N=1")
    for record in results["records"]:
        assert set(record) >= REQUIRED
        assert record["measured_time"] > 0 and record["predicted_time"] > 0
        assert len(record["measured_peak_memory_bytes"]) == 2
    assert set(results["summary"]) >= {
        "median_time_error",
        "max_time_error",
        "median_speedup_error",
        "max_memory_error",
    }
    assert results["machine"]["torch"] and results["machine"]["threads_per_process"] == 1
    case = results["cases"][0]
    assert case["rounds"] > tiny_case().repeats
    assert set(case["calibration"]) == {"1", "2"} and case["solo_calibration"]
    assert case["probes"]["1"] == ["1f1b M=6", "zb-h1 M=6"]
    crosscheck = {c["schedule"]: c for c in case["crosscheck"]}
    assert set(crosscheck) == {"1f1b", "zb-h1", "zbv"}
    assert all(c["gradient_max_relative_error"] < 1e-5 for c in crosscheck.values())
    report = (tmp_path / "report.md").read_text()
    for heading in (
        "## Summary",
        "## The statistic",
        "| low-quantile (used) |",
        "## Case `tiny-K2`",
        "torch.distributed.pipelining",
        "## Figures",
    ):
        assert heading in report
    for figure in ("predicted_vs_measured.png", "speedup.png", "timelines.png"):
        assert (tmp_path / figure).stat().st_size > 1000
        assert f"]({figure})" in report
    assert (tmp_path / "measured-tiny-K2.json").is_file()
    # Predicting again from the saved measurements gives the same records.
    again = run_validation("quick", "cpu", tmp_path, 0.05, 0.15, cases=[tiny_case()], reuse=True)
    assert again.records == result.records
    # Measured before the synthesised runs joined the case: --reuse predicts what it holds.
    saved = tmp_path / "measured-tiny-K2.json"
    kept = saved.read_text()
    older = json.loads(kept)
    older["case"]["schedules"].remove("synth N=1")
    older["runs"] = [r for r in older["runs"] if r["schedule"] != "synth N=1"]
    for run in older["runs"]:
        del run["order"]  # files from before the field
    saved.write_text(json.dumps(older))
    before = run_validation("quick", "cpu", tmp_path, 0.05, 0.15, cases=[tiny_case()], reuse=True)
    assert before.records == tuple(r for r in result.records if r.schedule != "synth N=1")
    saved.write_text(kept)
    # Memory is measured by the kernel on every rank, beside the executor's stash count.
    for record in result.records:
        assert all(m is not None for m in record.measured_peak_memory_bytes)
        assert all(s > 0 for s in record.stash_peak_memory_bytes)
    for check in case["crosscheck"]:
        assert check["torch_wall_time"] > 0 and check["predicted_time"] > 0
        assert check["error_vs_torch"] is not None
    assert set(results["by_statistic"]) == {"min", "low-quantile", "median", "mean"}
    assert results["by_statistic"]["low-quantile"] == results["summary"]
    assert case["host"]["cores"] >= 1 and results["verdict"] in (
        "within",
        "exceeded",
        "inconclusive",
    )
    # --resume keeps the measured case; Ctrl-C in the next one says what was kept.
    import validation.runner as module

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(module, "run_case", interrupted)
    other = dataclasses.replace(tiny_case(), name="other-K2")
    with pytest.raises(Interrupted, match=r"saved in .*: tiny-K2; run the same command with"):
        run_validation("quick", "cpu", tmp_path, 0.05, 0.15, [tiny_case(), other], resume=True)
    # A file written before a field existed is refused in one line naming the field.
    saved = tmp_path / "measured-tiny-K2.json"
    data = json.loads(saved.read_text())
    reuse_refuses_corrupt_measurements(tmp_path, saved, data)
    del data["latency_samples"]
    saved.write_text(json.dumps(data))
    with pytest.raises(PipesimError, match="field 'latency_samples' is missing"):
        run_validation("quick", "cpu", tmp_path, 0.05, 0.15, cases=[tiny_case()], reuse=True)
    # Samples pooled over rounds (as files before per-round calibration held them) cannot be
    # paired with the rounds' steps: refused in one line.
    data["latency_samples"] = {"1": [[0.001]] * data["rounds"]}
    data["in_situ_samples"] = {"1": {"0/F": [0.01, 0.011]}}
    saved.write_text(json.dumps(data))
    with pytest.raises(PipesimError, match="in_situ_samples is not a list per round"):
        run_validation("quick", "cpu", tmp_path, 0.05, 0.15, cases=[tiny_case()], reuse=True)
    data["in_situ_samples"] = {"1": [{"0/F": [0.01]}]}
    saved.write_text(json.dumps(data))
    with pytest.raises(PipesimError, match=r"in_situ_samples\[1\] has 1 rounds, the case"):
        run_validation("quick", "cpu", tmp_path, 0.05, 0.15, cases=[tiny_case()], reuse=True)


def reuse_refuses_corrupt_measurements(out: Path, saved: Path, data: dict[str, Any]) -> None:
    """Each corrupt measurement is refused in one line naming the value, and no report is
    written from it."""

    def changed(path: tuple[str | int, ...], value: object) -> dict[str, Any]:
        copy: dict[str, Any] = json.loads(json.dumps(data))
        target: Any = copy
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
        return copy

    synthesised = next(i for i, r in enumerate(data["runs"]) if r["schedule"] == "synth N=1")
    cases: list[tuple[dict[str, Any], str]] = [
        (
            changed(("runs", 0, "step_times_s", 0), math.nan),
            r"runs\[0\]\.step_times_s\[0\] must be a finite number > 0, got nan",
        ),
        (
            changed(("runs", 1, "wall_times_s", 1), -0.5),
            r"runs\[1\]\.wall_times_s\[1\] must be a finite number > 0, got -0\.5",
        ),
        (
            changed(("latency_samples", "1", 0, 0), math.inf),
            r"latency_samples\[1\]\[0\]\[0\] must be a finite number, got inf",
        ),
        (
            changed(("solo_samples", "forward_s", 0), "fast"),
            r"solo_samples\['forward_s'\]\[0\] must be a finite number >= 0, got 'fast'",
        ),
        (
            changed(("runs", 0, "devices"), True),
            r"runs\[0\]\.devices must be a whole number > 0, got True",
        ),
        (
            changed(("runs", 0, "schedule"), "gpipe"),
            r"runs\[0\]\.schedule 'gpipe' is not one of the case's \(1f1b, zb-h1, zbv, synth N=1\)",
        ),
        (
            changed(("runs", synthesised, "order", 0, 1), "0Q0"),
            rf"runs\[{synthesised}\]\.order is not a valid schedule: .*'0Q0'",
        ),
        (
            changed(("runs", synthesised, "order", 1), ["1F0"]),
            rf"runs\[{synthesised}\]\.order is not a valid schedule: ",
        ),
        (
            changed(("runs", synthesised, "order"), []),
            rf"runs\[{synthesised}\]\.order: 'synth N=1' holds none \(only a synthesised run",
        ),
        (
            changed(("runs", 0, "order"), [["0F0"]]),
            r"runs\[0\]\.order: '1f1b' holds one \(only a synthesised run records its order\)",
        ),
        (
            changed(("runs", 0, "timeline", 0, 4), 0.0),
            r"runs\[0\]\.timeline\[0\]: device 0 from .* s to 0 s is not an action",
        ),
        (
            changed(("case", "name"), "other-K2"),
            r"holds the measurements of case 'other-K2', not of 'tiny-K2'$",
        ),
        (
            changed(("case", "repeats"), 9),
            r"was measured with the case's repeats 9, and case 'tiny-K2' now has 2; measure it again$",
        ),
    ]
    results = out / "results.json"
    before = results.read_bytes()
    try:
        for corrupt, message in cases:
            saved.write_text(json.dumps(corrupt))
            with pytest.raises(PipesimError, match=message) as caught:
                run_validation("quick", "cpu", out, 0.05, 0.15, cases=[tiny_case()], reuse=True)
            assert "\n" not in str(caught.value) and str(caught.value).startswith("--reuse: ")
            assert results.read_bytes() == before
    finally:
        saved.write_text(json.dumps(data))


def test_breaches_name_the_errors() -> None:
    records = [comparison(time_error=e, speedup_error=-e / 2) for e in (0.01, -0.04, 0.2)]
    summary = aggregate(records)
    assert summary.median_time_error == 0.04 and summary.max_time_error == 0.2
    assert breaches(summary, 0.05, 0.15) == ["max time error 20.0% > 15.0%"]
    assert breaches(summary, 0.01, 0.5) == [
        "median time error 4.0% > 1.0%",
        "median speedup error 2.0% > 1.0%",
    ]


def _fake_validation(
    monkeypatch: pytest.MonkeyPatch, record: Comparison, intervals: Intervals | None = None
) -> None:
    """Make the CLI's run_validation judge one comparison record (with ``intervals``),
    measuring nothing."""
    import validation.runner as module

    def fake(suite, backend, out, max_median, max_error, **options):  # type: ignore[no-untyped-def]
        summary = aggregate([record], intervals)
        found = breaches(summary, max_median, max_error)
        verdict, reason = module.conclude(summary, found, [], max_median, max_error)
        return ValidationResult(
            suite,
            backend,
            "0",
            max_median,
            max_error,
            summary,
            tuple(found),
            verdict,
            reason,
            (),
            (),
        )

    monkeypatch.setattr(module, "run_validation", fake)


def test_the_cli_exits_1_past_a_threshold(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _fake_validation(monkeypatch, comparison(time_error=0.3))
    status = main(["validate", "--out", str(tmp_path)])
    captured = capsys.readouterr()
    assert status == 1
    assert captured.err == (
        "pipesim validate: median time error 30.0% > 5.0%; max time error 30.0% > 25.0%\n"
    )
    assert (
        main(
            ["validate", "--out", str(tmp_path), "--max-median-error", "0.5", "--max-error", "0.5"]
        )
        == 0
    )


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--max-error", "0"),
        ("--max-error", "1e308"),  # a gate no prediction can fail
        ("--max-median-error", "inf"),
        ("--max-median-error", "nan"),
    ],
)
def test_an_error_threshold_that_cannot_gate_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, flag: str, value: str
) -> None:
    assert main(["validate", flag, value, "--out", str(tmp_path / "v")]) == 2
    assert capsys.readouterr().err == (
        f"pipesim: error: {flag} must be a relative error > 0 and at most 10, got {float(value)}\n"
    )
    assert list(tmp_path.iterdir()) == []


def test_reuse_of_a_folder_that_does_not_exist_creates_nothing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    missing = tmp_path / "missing" / "a" / "b"
    assert main(["validate", "--reuse", "--out", str(missing)]) == 2
    assert capsys.readouterr().err == (
        f"pipesim: error: --reuse: no measurements folder at {str(missing)!r}; give the --out "
        "of a validation that ran\n"
    )
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "empty").mkdir()
    assert main(["validate", "--reuse", "--out", str(tmp_path / "empty")]) == 2
    assert "pipesim: error: --reuse: no measurements at" in capsys.readouterr().err


def test_quick_suite_is_k2_on_a_schedule_of_each_family() -> None:
    """A few minutes on a 2-core machine: six schedules, M = 2 and 8, two models; the full
    suite keeps every schedule."""
    from validation.suites import full_suite

    cases, skipped = quick_suite()
    assert [c.devices for c in cases] == [2, 2]
    assert [c.model.kind for c in cases] == [ModelKind.MLP, ModelKind.TRANSFORMER]
    assert all(
        c.schedules == ("gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "zbv", "synth N=3")
        and tuple(c.microbatches) == (2, 8)
        for c in cases
    )
    assert all("reason" in s for s in skipped)
    full, _ = full_suite(fit_machine=False)
    assert all(len(c.schedules) >= 10 for c in full)


def test_no_run_measured_is_never_a_pass() -> None:
    from validation.runner import conclude

    summary = aggregate([])
    found = breaches(summary, 0.05, 0.25)
    assert found == ["no run was measured"]
    verdict, reason = conclude(summary, found, [], 0.05, 0.25)
    assert verdict is Verdict.EXCEEDED and "no run was measured" in reason


def _intervals(median: tuple[float, float], largest: tuple[float, float]) -> Intervals:
    """The same intervals for time and speedup."""
    return Intervals(0.9, median, largest, median, largest)


def _on_host(load: float) -> CaseResult:
    """A case result that only says where it was measured (all the verdict reads of it)."""
    host = HostLoad(load, load + 0.5, 2, 0.001, 60.0)
    return cast(CaseResult, SimpleNamespace(name="mlp", measurement=SimpleNamespace(host=host)))


def test_the_verdict_reads_the_intervals() -> None:
    from validation.runner import conclude

    def judge(
        intervals: Intervals, cases: list[CaseResult], errors: tuple[float, ...] = (0.01, 0.02, 0.1)
    ) -> tuple[Verdict, str]:
        records = [comparison(time_error=e, speedup_error=e) for e in errors]
        summary = aggregate(records, intervals)
        return conclude(summary, breaches(summary, 0.05, 0.25), cases, 0.05, 0.25)

    quiet = [_on_host(2.1)]
    verdict, reason = judge(_intervals((0.015, 0.03), (0.08, 0.14)), quiet)
    assert verdict is Verdict.WITHIN
    assert reason.startswith(
        "within the thresholds (median time error 2.0% (90% interval 1.5%-3.0%) vs 5.0%; "
    )
    # A maximum is within by its figure (10%): the bootstrap's upper percentiles of a maximum
    # (here 30%) overstate it.
    verdict, _ = judge(_intervals((0.015, 0.03), (0.08, 0.30)), quiet)
    assert verdict is Verdict.WITHIN
    # Wholly above a threshold: exceeded, naming only what is above.
    verdict, reason = judge(_intervals((0.06, 0.09), (0.08, 0.14)), quiet, (0.07, 0.07, 0.1))
    assert verdict is Verdict.EXCEEDED
    assert reason == (
        "exceeded: median time error 7.0% (90% interval 6.0%-9.0%) vs 5.0%; median speedup "
        "error 7.0% (90% interval 6.0%-9.0%) vs 5.0%"
    )
    # Straddling a threshold: too noisy to tell, and how to narrow it.
    verdict, reason = judge(_intervals((0.03, 0.07), (0.08, 0.14)), quiet)
    assert verdict is Verdict.INCONCLUSIVE
    assert reason.startswith("inconclusive: the repeats were too noisy to tell (median time ")
    assert reason.endswith("measure longer with --repeat-until-stable")
    # A busy host: inconclusive whatever the errors, with the load.
    for intervals in (_intervals((0.015, 0.03), (0.08, 0.14)), _intervals((0.3, 0.4), (1, 2))):
        verdict, reason = judge(intervals, [_on_host(2.1), _on_host(4.2)])
        assert verdict is Verdict.INCONCLUSIVE
        assert reason.startswith(
            "inconclusive: the host was busy (mlp: load 4.20 (max 4.70) on 2 cores, steal 0.1%; "
        )


def test_the_cli_says_inconclusive_and_exits_1(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _fake_validation(monkeypatch, comparison(time_error=0.04), _intervals((0.02, 0.08), (0, 0.1)))
    assert main(["validate", "--out", str(tmp_path)]) == 1
    captured = capsys.readouterr()
    assert captured.err.startswith("pipesim validate: inconclusive: the repeats were too noisy")
    assert "verdict: inconclusive" in captured.out


def test_a_suite_with_nothing_to_run_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import validation.suites as suites

    monkeypatch.setattr(suites, "available_workers", lambda backend: 0)
    status = main(["validate", "--suite", "full", "--backend", "cuda", "--out", str(tmp_path)])
    assert status == 2
    assert capsys.readouterr().err == (
        "pipesim: error: --backend cuda: no case of the suite can run here "
        "(needs 2 GPU(s), this machine has 0)\n"
    )
    with pytest.raises(PipesimError, match="no case of the suite can run here"):
        quick_suite("cuda")
    assert not list(tmp_path.iterdir())


def test_bad_stability_options(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    for seconds in ("0", "1e18"):
        assert main(["validate", "--repeat-until-stable", seconds, "--out", str(tmp_path)]) == 2
        assert capsys.readouterr().err == (
            "pipesim: error: --repeat-until-stable must be seconds > 0 and at most 86,400 (a "
            f"day per case), got {float(seconds)}\n"
        )
    assert main(["validate", "--repeat-until-stable", "5", "--reuse", "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (
        "pipesim: error: --repeat-until-stable goes with measuring, not with --reuse (which "
        "measures nothing)\n"
    )
    assert main(["validate", "--reuse", "--resume", "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err == "pipesim: error: --reuse and --resume: choose one\n"


def test_records_round_trip_and_an_old_record_names_its_missing_field() -> None:
    record = comparison(memory_error=None, analytic_bubble_fraction=None)
    assert Comparison.from_json(json.loads(json.dumps(record.to_json()))) == record
    data = record.to_json()
    del data["stash_peak_memory_bytes"]
    with pytest.raises(PipesimError) as raised:
        Comparison.from_json(data)
    assert str(raised.value) == (
        "record: field 'stash_peak_memory_bytes' is missing (written by an older pipesim? "
        "measure again)"
    )


def test_a_crosscheck_without_a_time_prints_n_a() -> None:
    row = CrosscheckRecord("zbv", "ScheduleZBVZeroBubble", 2, 4, 2, 0.1, None, 0.11, 0.1, None, 0.0)
    line = crosscheck_table([row])[-1]
    assert line == (
        "| zbv | ScheduleZBVZeroBubble | 4 | 0.00e+00 | 100.00 | n/a | 110.00 | +10.0% | n/a |"
    )
