"""``pipesim plot``: figures from saved files, several timelines stacked, and one-line refusals
(exit 2) of files that are not what they claim or that would draw nothing."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from ..cli.test_schedule_cli import run


def simulate(capsys: pytest.CaptureFixture[str], path: Path, schedule: str, *extra: str) -> None:
    status, _, err = run(
        capsys,
        "simulate",
        "--schedule",
        schedule,
        "-K",
        "3",
        "-M",
        "6",
        "--costs",
        "1,1,1" if schedule.startswith("zb") else "1,2",
        "--comm",
        "0.1",
        "--save",
        str(path),
        *extra,
    )
    assert status == 0, err


def test_plot_every_kind_from_saved_results(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    saved = tmp_path / "run.json"
    simulate(capsys, saved, "zb-h1", "--activation-bytes", "1000")
    for kind in ("timeline", "memory"):
        status, out, _ = run(
            capsys, "plot", kind, str(saved), "--out", str(tmp_path / f"{kind}.svg")
        )
        assert status == 0 and out.strip().endswith(f"{kind}.svg")
    sweep = tmp_path / "sweep.json"
    status, _, _ = run(
        capsys,
        *("sweep", "--schedules", "gpipe,zb-h1", "-K", "2,4", "-M", "2,4,8", "--costs", "1,1,1"),
        *("--activation-bytes", "1000", "--out", str(sweep)),
    )
    assert status == 0
    for kind, extra in [
        ("speedup", []),
        ("speedup", ["--against", "K"]),
        ("throughput", []),
        ("bubble", []),
        ("peak-memory", []),
    ]:
        status, _, err = run(
            capsys, "plot", kind, str(sweep), "--out", str(tmp_path / f"{kind}.png"), *extra
        )
        assert status == 0 and (tmp_path / f"{kind}.png").stat().st_size > 5000
        if kind == "throughput":
            assert "synthetic costs give each device the same work" in err
    status, _, err = run(capsys, "plot", "speedup", str(saved), "--out", str(tmp_path / "x.png"))
    assert status == 2 and err == (
        f"pipesim: error: FILE {str(saved)!r} has no 'results': expected the output of pipesim "
        "sweep --out FILE.json\n"
    )


def test_timelines_side_by_side_on_one_time_axis(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    first, second = tmp_path / "zbv.json", tmp_path / "1f1b.json"
    simulate(capsys, first, "zb-h1")
    simulate(capsys, second, "1f1b")
    figure_path = tmp_path / "both.png"
    status, _, err = run(
        capsys, "plot", "timeline", str(first), str(second), "--out", str(figure_path)
    )
    assert status == 0 and err == "" and figure_path.stat().st_size > 10000
    status, _, err = run(
        capsys, "plot", "memory", str(first), str(second), "--out", str(tmp_path / "m.png")
    )
    assert status == 2 and err == "pipesim: error: FILE: memory draws one file, got 2\n"


def test_plot_memory_of_a_run_without_memory_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    saved = tmp_path / "run.json"
    simulate(capsys, saved, "1f1b")  # synthetic costs, no --activation-bytes: no memory
    status, out, err = run(capsys, "plot", "memory", str(saved), "--out", str(tmp_path / "m.png"))
    assert status == 2 and out == "" and err.count("\n") == 1
    assert err.startswith("pipesim: error: memory is 0 bytes on every device throughout the run")
    assert not (tmp_path / "m.png").exists()


def valid_run() -> dict[str, Any]:
    return {
        "result": {
            "schedule": "1f1b",
            "devices": 2,
            "microbatches": 1,
            "chunks": 1,
            "iteration_time": 3.0,
            "bubble_fraction": 0.5,
            "oom": False,
            "per_device": [{"memory_capacity_bytes": None}, {}],
        },
        "compute": [[0, "0F0", 0.0, 1.0], [1, "1F0", 1.0, 2.0], [1, "1B0", 2.0, 3.0]],
        "transfers": [[0, 1, "act", 1.0, 1.0]],
        "memory": [[[0.0, 0.0], [1.0, 10.0]], [[0.0, 5.0]]],
    }


def with_(path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    data = valid_run()
    target: Any = data
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return data


def one_device_sweep(breakdown: dict[str, float]) -> dict[str, Any]:
    """A saved sweep of one run on one device whose memory breakdown is ``breakdown``."""
    device = {"static_memory_bytes": 1, "peak_activation_bytes": 1}
    run = {"schedule": "x", "devices": 1, "microbatches": 1}
    return {"results": [{**run, "per_device": [{**device, "memory_breakdown": breakdown}]}]}


BAD_FILES = {
    "no-result": ("timeline", {"compute": [], "transfers": []}, "has no 'result'"),
    "memory-no-result": ("memory", {"memory": []}, "has no 'result'"),
    "list": ("memory", [], "has no 'result'"),
    "no-devices": (
        "memory",
        {"memory": [], "result": {"per_device": []}},
        "result.per_device must be a non-empty list of objects, got []",
    ),
    "bad-label": (
        "timeline",
        with_(("compute", 0, 1), "F0"),
        "'F0' in 'compute' is no action such as 2F0",
    ),
    "label-a-list": (
        "timeline",
        with_(("compute", 0, 1), ["0F0"]),
        "['0F0'] in 'compute' is no action such as 2F0",
    ),
    "bad-row": (
        "timeline",
        with_(("compute",), [1, 2]),
        "'compute' (compute[0]) must be a list of [device, label, start, end], got 1",
    ),
    "nan-time": (
        "timeline",
        with_(("compute", 1, 3), math.nan),
        "compute[1] end must be a finite number, got nan",
    ),
    "string-time": (
        "timeline",
        with_(("compute", 1, 2), "1"),
        "compute[1] start must be a number, got '1'",
    ),
    "backwards": (
        "timeline",
        with_(("compute", 1, 3), 0.5),
        "compute[1] end must be at least its start 1",
    ),
    "device-out-of-range": (
        "timeline",
        with_(("compute", 1, 0), 7),
        "compute[1] device must be an integer from 0 to 1, got 7",
    ),
    "device-bool": (
        "timeline",
        with_(("compute", 1, 0), True),
        "compute[1] device must be an integer from 0 to 1, got True",
    ),
    "huge-time": (
        "timeline",
        with_(("compute", 2, 3), 1.7e308),
        "compute[2] end must be a number from -1e+15 to 1e+15, got 1.7e+308",
    ),
    "huge-memory": (
        "memory",
        with_(("memory", 0, 1), [1.0, 1e300]),
        "memory[0][1] bytes must be a number from -1e+15 to 1e+15, got 1e+300",
    ),
    "infinite-step": (
        "timeline",
        with_(("result", "iteration_time"), math.inf),
        "result.iteration_time must be a finite number, got inf",
    ),
    "missing-step": (
        "timeline",
        with_(("result", "schedule"), None),
        "result.schedule must be a non-empty string, got None",
    ),
    "negative-memory": (
        "memory",
        with_(("memory", 0, 1), [1.0, -3]),
        "memory[0][1] bytes must be a number >= 0, got -3",
    ),
    "memory-point": (
        "memory",
        with_(("memory", 1, 0), [1.0]),
        "memory[1][0] must be [time, bytes], got [1.0]",
    ),
    "results-not-rows": ("bubble", {"results": [1, 2]}, "must be a list of objects"),
    "results-string": ("bubble", {"results": "abc"}, "must be a list of objects"),
    "results-missing": (
        "peak-memory",
        {"results": [{"schedule": "x"}]},
        "results[0] has no 'devices'",
    ),
    "breakdown-unknown-term": (
        "peak-memory",
        one_device_sweep({"weights": 1, "snacks": 2}),
        "results[0].per_device[0].memory_breakdown must be an object of weights, gradients",
    ),
    "breakdown-negative": (
        "peak-memory",
        one_device_sweep({"weights": -1}),
        "results[0].per_device[0].memory_breakdown.weights must be a number >= 0, got -1",
    ),
    "speedup-fast": (
        "speedup",
        {"results": [{"schedule": "x", "devices": 2, "microbatches": 2, "speedup": "fast"}]},
        "results[0].speedup must be a number, got 'fast'",
    ),
    "speedup-nan": (
        "speedup",
        {"results": [{"schedule": "x", "devices": 2, "microbatches": 2, "speedup": math.nan}]},
        "results[0].speedup must be a finite number, got nan",
    ),
    "schedule-a-list": (
        "bubble",
        {"results": [{"schedule": ["x"], "devices": 2, "microbatches": 2, "bubble_fraction": 0}]},
        "results[0].schedule must be a non-empty string, got ['x']",
    ),
    "only-errors": ("bubble", {"results": [{"error": "x"}]}, "no successful runs to plot"),
    "records-missing": (
        "predicted-vs-measured",
        {"records": [{}]},
        "records[0] has no 'schedule'",
    ),
    "records-empty": ("validation-speedup", {"records": []}, "no records to plot"),
    "not-json": ("timeline", "{", "not JSON"),
}


@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_plot_cli_refuses_malformed_files_in_one_line(
    name: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    kind, payload, message = BAD_FILES[name]
    path = tmp_path / f"{name}.json"
    path.write_text(payload if isinstance(payload, str) else json.dumps(payload))
    status, out, err = run(capsys, "plot", kind, str(path), "--out", str(tmp_path / "x.png"))
    assert status == 2 and out == ""
    assert err.startswith("pipesim: error: ") and err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "x.png").exists()


def test_the_valid_sample_draws(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    path.write_text(json.dumps(valid_run()))
    for kind in ("timeline", "memory"):
        status, _, err = run(capsys, "plot", kind, str(path), "--out", str(tmp_path / "x.png"))
        assert status == 0, err


def test_bad_figure_paths_are_refused_before_any_work(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    saved = tmp_path / "run.json"
    (tmp_path / "d.png").mkdir()
    simulate_args = ["simulate", "--schedule", "1f1b", "-K", "2", "-M", "2", "--costs", "1,2"]
    for figure, message in [
        ("x.jpg", "--timeline 'x.jpg' must end in .png or .svg, got '.jpg'"),
        ("", "--timeline must name a file, got ''"),
        (str(tmp_path / "d.png"), f"--timeline: {str(tmp_path / 'd.png')!r} is a directory"),
    ]:
        status, _, err = run(capsys, *simulate_args, "--save", str(saved), "--timeline", figure)
        assert status == 2 and err == f"pipesim: error: {message}\n"
        assert not saved.exists()  # refused before simulating: nothing half-done was written
    status, _, err = run(
        capsys, "plot", "timeline", str(tmp_path / "nope.json"), "--out", str(tmp_path / "x.png")
    )
    assert status == 2 and "cannot read it (No such file or directory)" in err


def test_a_timeline_beyond_the_actions_limit_is_refused_before_it_is_read(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "run.json"
    simulate(capsys, path, "1f1b")  # 36 actions, 3 optimizer steps, 24 transfers
    monkeypatch.setenv("PIPESIM_MAX_DEVICES", "3")
    monkeypatch.setenv("PIPESIM_MAX_ACTIONS", "35")
    status, out, err = run(capsys, "plot", "timeline", str(path), "--out", str(tmp_path / "x.png"))
    assert (status, out) == (2, "")
    assert err == (
        f"pipesim: error: FILE {str(path)!r}: 39 bars in 'compute': beyond the limit of 35 "
        "actions; set PIPESIM_MAX_ACTIONS to raise it\n"
    )
    monkeypatch.setenv("PIPESIM_MAX_ACTIONS", "36")
    status, _, err = run(capsys, "plot", "timeline", str(path), "--out", str(tmp_path / "x.png"))
    assert status == 0, err
