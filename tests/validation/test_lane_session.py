"""Validation on lanes of one machine (``--backend cpu-partitioned``, and the refusal of
``cuda-partitioned`` without green contexts): a tiny case measured for real on CPU lanes."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from cli.main import main
from pipesim.common.limits import cpu_count
from validation.compare import compare_case
from validation.gpu import preflight, summary
from validation.lane_session import case_lanes, lane_link, run_lane_case
from validation.runner import run_validation
from validation.schema import CaseMeasurement
from validation.suites import (
    PARTITION_LANES,
    Case,
    ModelKind,
    ModelSpec,
    RunBackend,
    quick_suite,
)

TINY = ModelSpec(ModelKind.TRANSFORMER, width=32, layers=4, microbatch_size=2, sequence=8, heads=2)


def _case(devices: int = 2) -> Case:
    return Case(
        f"tiny-K{devices}-lanes",
        TINY,
        devices,
        (2, 4),
        ("1f1b", "zb-h1"),
        RunBackend.CPU_PARTITIONED,
        warmup=1,
        repeats=2,
        crosscheck=False,
    )


def test_the_partitioned_quick_suite_is_k_4_2_1_on_four_schedules() -> None:
    cases, skipped = quick_suite("cpu-partitioned", fit_machine=False)
    assert [c.devices for c in cases] == [4, 2, 1]
    assert {c.schedules for c in cases} == {("gpipe", "1f1b", "interleaved-1f1b", "zb-h1")}
    assert {c.microbatches for c in cases} == {(4, 8)}
    assert all(c.backend is RunBackend.CPU_PARTITIONED and not c.crosscheck for c in cases)
    assert skipped == []
    fitted, skipped = quick_suite("cpu-partitioned")
    assert [c.devices for c in fitted] == [k for k in (4, 2, 1) if k <= min(4, cpu_count())]
    if cpu_count() < PARTITION_LANES:
        assert skipped[0]["reason"] == (
            f"needs 4 lanes of 1 thread(s) = 4 cores, this machine has {cpu_count()}"
        )


def test_a_case_measured_on_cpu_lanes_is_a_measurement_the_comparison_reads() -> None:
    case = _case()
    measured = run_lane_case(case)
    again = CaseMeasurement.from_json(json.loads(json.dumps(measured.to_json())))
    assert again == measured
    assert measured.rounds == 2
    assert measured.machine.lanes == f"{PARTITION_LANES} CPU lane(s) of 1 thread(s)"
    assert measured.link.bandwidth_bytes_per_s > 0
    assert set(measured.baseline_samples) == {2, 4}
    assert all(len(v) == 2 for v in measured.baseline_samples.values())
    for run in measured.runs:
        assert len(run.step_times_s) == 2
        assert all(stash > 0 for stash in run.peak_stash_bytes)
        assert run.peak_allocated_bytes == (None, None)
        if sys.platform.startswith("linux"):
            assert run.device_peak_bytes is not None and run.device_peak_bytes > 0
        assert {r[0] for r in run.timeline} == {0, 1}  # both lanes ran
    records = compare_case(measured)
    assert len(records) == 4
    for record in records:
        assert record.predicted_device_peak_bytes is not None
        # Lanes share one memory: the prediction is at most the sum of the lanes' peaks.
        assert record.predicted_device_peak_bytes <= sum(record.predicted_peak_memory_bytes)
        assert record.predicted_device_peak_bytes >= max(record.predicted_peak_memory_bytes)


def test_the_link_between_two_cpu_lanes_is_a_copy_that_grows_with_size() -> None:
    link = lane_link(case_lanes(_case()), repeats=5)
    sizes = [size for size, _ in link.samples]
    assert sizes == [64, 65536, 1 << 20, 4 << 20]
    assert link.samples[-1][1] > link.samples[0][1]
    assert 0 < link.bandwidth_bytes_per_s < float("inf")


def test_validate_on_cpu_lanes_writes_its_report_and_reuses_it(tmp_path: Path) -> None:
    out = tmp_path / "v"
    result = run_validation(
        "quick", "cpu-partitioned", out, 0.05, 0.25, cases=[_case()], show_progress=False
    )
    assert result.summary.runs == 4
    assert (out / "report.md").is_file() and (out / "measured-tiny-K2-lanes.json").is_file()
    again = run_validation(
        "quick",
        "cpu-partitioned",
        out,
        0.05,
        0.25,
        cases=[_case()],
        reuse=True,
        show_progress=False,
    )
    assert [r.to_json() for r in again.cases[0].records] == [
        r.to_json() for r in result.cases[0].records
    ]
    # The GPU check's table reads the same files.
    (tmp_path / "g" / "partitioned").mkdir(parents=True)
    (tmp_path / "g" / "partitioned" / "measured-tiny-K2-lanes.json").write_bytes(
        (out / "measured-tiny-K2-lanes.json").read_bytes()
    )
    lines = summary.partitioned_lines(tmp_path / "g" / "partitioned")
    assert lines[0].endswith(f"{PARTITION_LANES} CPU lane(s) of 1 thread(s)")
    assert sum(line.startswith("| 2 | ") for line in lines) == 4
    assert lines[-1].startswith("4 runs: median |step error|")


@pytest.mark.skipif(
    __import__("torch").cuda.is_available(), reason="checks the refusal without a GPU"
)
def test_cuda_partitioned_is_refused_in_one_line_without_green_contexts(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert main(["validate", "--backend", "cuda-partitioned", "--out", str(tmp_path / "v")]) == 2
    err = capsys.readouterr().err
    assert err == (
        "pipesim: error: --backend cuda-partitioned: no case of the suite can run here (CUDA "
        "lanes need green contexts: no CUDA device (torch.cuda.is_available() is False))\n"
    )
    assert list(tmp_path.iterdir()) == []


def test_the_gpu_table_refuses_bad_records_in_one_line_naming_the_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    folder = tmp_path / "partitioned"
    folder.mkdir()
    (folder / "measured-a.json").write_text("[" * 100_000)
    assert summary.main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"summary: {str(folder / 'measured-a.json')!r} is not JSON")
    assert err.count("\n") == 1
    (folder / "measured-a.json").unlink()
    (tmp_path / "layers.json").write_text('{"cases": [], "bandwidth": {"triad_bytes_per_s": 0}}')
    assert summary.main([str(tmp_path)]) == 2
    assert "is not a layer record this pipesim reads" in capsys.readouterr().err
    (tmp_path / "layers.json").write_text("[1, 2]")
    assert summary.main([str(tmp_path)]) == 2
    assert "is not a layer record (no list of cases)" in capsys.readouterr().err


def test_the_gpu_check_names_missing_packages_and_refuses_a_bad_folder(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert preflight.missing_modules(("numpy", "pytest_timeout", "no_such_module_here")) == [
        "no_such_module_here"
    ]
    assert summary.main([str(tmp_path / "missing")]) == 2
    assert capsys.readouterr().err.startswith("usage: python -m validation.gpu.summary OUTDIR")
    assert summary.main([str(tmp_path)]) == 2
    assert "holds no records of run.sh" in capsys.readouterr().err
    (tmp_path / "partitioned").mkdir()
    assert summary.main([str(tmp_path)]) == 0
    assert "no partitioned measurements in" in capsys.readouterr().out
    assert preflight.main(["extra"]) == 2
    assert preflight.broken_modules(("numpy",)) == []


@pytest.mark.skipif(
    __import__("torch").cuda.is_available(), reason="with a GPU the command runs the check"
)
def test_the_gpu_command_refuses_before_making_anything(tmp_path: Path) -> None:
    """No CUDA here: one line, exit 2, and OUTDIR (relative to the caller) not made."""
    import subprocess

    script = Path(__file__).resolve().parents[2] / "validation" / "gpu" / "run.sh"
    for args in ([], ["a", "b"], ["new dir/out"]):
        done = subprocess.run(
            ["bash", str(script), *args], cwd=tmp_path, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 2
        assert done.stderr.count("\n") == 1, done.stderr
    assert list(tmp_path.iterdir()) == []
