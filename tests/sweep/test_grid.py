"""Sweeps: the grid, skipped shapes with reasons, parallel workers giving the same results."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from application.sweeps import run_sweep
from pipesim.config import RunConfig
from pipesim.config.recipes import MEGATRON_LM_2021
from pipesim.errors import PipesimError, ScheduleError
from pipesim.hardware import hardware
from pipesim.request.cost_request import ModelRequest, SyntheticRequest
from pipesim.sweep.grid import run_point, sweep_points
from pipesim.workload import model
from tests.cli.test_schedule_cli import run


def test_grid_and_skipped_reasons() -> None:
    points, skipped = sweep_points(["1f1b", "dualpipev"], [2, 4], [4])
    assert [(p.schedule, p.devices) for p in points] == [("1f1b", 2), ("1f1b", 4), ("dualpipev", 2)]
    assert len(skipped) == 1 and skipped[0].point.devices == 4
    assert skipped[0].reason.startswith("microbatches must be >= 2 x devices = 8")
    with pytest.raises(ScheduleError, match="unknown schedule 'nope'"):
        sweep_points(["nope"], [2], [2])


def test_parallel_sweep_equals_serial() -> None:
    points, _ = sweep_points(["gpipe", "zb-h1", "interleaved-1f1b"], [2, 4], [4, 8])
    request = SyntheticRequest(1.0, 2.0, 0.5, comm_s=0.1)
    serial = list(run_sweep(points, request))
    parallel = list(run_sweep(points, request, jobs=2))
    assert serial == parallel and len(serial) == len(points)


def test_a_model_sweep_in_worker_processes_equals_the_serial_one() -> None:
    """A model request holds a run's configuration (a recipe, an accelerator's peaks): it
    travels to pool workers and gives them the same rows."""
    points, _ = sweep_points(["1f1b", "gpipe"], [2, 4], [4])
    run = RunConfig(model("gpt-355m"), hardware("a100"), recipe=MEGATRON_LM_2021)
    request = ModelRequest(run, batch=16)
    serial = list(run_sweep(points, request))
    assert list(run_sweep(points, request, jobs=2)) == serial
    assert all("error" not in row for row in serial)


def test_a_shape_the_model_cannot_take_is_an_error_row() -> None:
    points, _ = sweep_points(["1f1b"], [8], [8])
    row = run_point(points[0], ModelRequest(RunConfig(model("uniform-4"), hardware("a100"))))
    assert row["error"] == "stages: 8 stages need at least 8 layers, but model 'uniform-4' has 4"


def test_sweep_cli_writes_csv_and_lists_skips(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "s.csv"
    status, text, _ = run(
        capsys,
        "sweep",
        "--schedules",
        "1f1b,dualpipev",
        "-K",
        "2,4",
        "-M",
        "4",
        "--costs",
        "1,2",
        "--out",
        str(out),
    )
    assert status == 0
    assert text.splitlines()[0].split()[:4] == ["schedule", "K", "M", "v"]
    assert "skipped dualpipev K=4 M=4 v=2: microbatches must be >= 2 x devices" in text
    assert out.read_text().splitlines()[0].startswith("schedule,devices,microbatches,chunks")
    assert len(out.read_text().splitlines()) == 4
    status, text, _ = run(
        capsys, "sweep", "--schedules", "1f1b", "-K", "2", "-M", "2", "--costs", "1,2", "--json"
    )
    assert json.loads(text)["results"][0]["iteration_time"] == 9.0


def test_sweep_cli_bad_list(capsys: pytest.CaptureFixture[str]) -> None:
    status, _, err = run(
        capsys, "sweep", "--schedules", "1f1b", "-K", "2,x", "-M", "2", "--costs", "1,2"
    )
    assert status == 2
    assert err == (
        "pipesim: error: -K/--devices: expected a comma-separated list of integers >= 1, "
        "got '2,x'\n"
    )


def test_synth_is_a_series_per_memory_limit() -> None:
    """``synth`` with limits 1, 2 and 4 is three series, each point the synthesised schedule's
    simulation under the row's name, looped over v stages per device; a limit below v is
    skipped with the reason."""
    from pipesim.engine import simulate
    from pipesim.parallel.placement import looped
    from pipesim.synthesis.synthesis import synthesize

    points, skipped = sweep_points(
        ["1f1b", "synth"], [4], [8], chunks=[1, 2], memory_limits=[1, 2, 4]
    )
    names = sorted({p.schedule for p in points})
    assert names == ["1f1b", "synth N=1", "synth N=2", "synth N=4"]
    assert [(s.point.schedule, s.point.chunks) for s in skipped if "synth" in s.point.schedule] == [
        ("synth N=1", 2)
    ]
    assert "a limit of 1 is below the 2 stages per device" in skipped[-1].reason
    request = SyntheticRequest(1.0, 1.0, 1.0)
    for point in points:
        row = run_point(point, request)
        assert row["schedule"] == point.schedule
        if point.schedule == "synth N=2":
            costs = request.build(4, point.chunks, 8)
            placement = looped(4, point.chunks)
            found = synthesize(costs, 8, 2, placement=placement).schedule
            expected = simulate(found, costs).iteration_time_s
            assert row["iteration_time"] == expected
            assert row["chunks"] == point.chunks
            if point.chunks == 1:
                assert expected == 41.0


def test_synth_and_memory_limits_go_together() -> None:
    with pytest.raises(PipesimError, match=r"^schedules synth goes with memory_limits"):
        sweep_points(["synth"], [4], [8])
    with pytest.raises(PipesimError, match=r"^schedules synth goes with memory_limits"):
        sweep_points(["1f1b"], [4], [8], memory_limits=[2])
    for typed in ("synth N=0", "synth N=\u00b2", "synth N=3"):  # series are made, not typed
        with pytest.raises(PipesimError, match=r"^unknown schedule 'synth N="):
            sweep_points([typed], [4], [8])
