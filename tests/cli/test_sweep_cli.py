"""``pipesim sweep``: bad global input refused before any work, size limits, rows saved as they
complete, Ctrl-C (exit 130, one line) and ``--resume`` giving the uninterrupted file."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

import application.workers
import pipesim.sweep.grid
from pipesim.sweep.grid import run_point
from tests.processes import children, running, seconds_until_gone, sweep_under_way

from .test_schedule_cli import run

GRID = ["--schedules", "gpipe,1f1b,zb-h1", "-K", "2,4", "-M", "4,8", "--costs", "1,2,1"]


def _never(*args: object) -> None:
    raise AssertionError("a point ran although the input is bad for every row")


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--costs", "nan,nan"], "costs F must be a number >= 0, got nan"),
        (["--costs", "1,1", "--comm", "inf"], "comm must be a number >= 0, got inf"),
        (["--model", "nope", "--hardware", "a100"], "unknown model 'nope'"),
        (["--model", "uniform-4", "--hardware", "nope"], "unknown hardware 'nope'"),
        (["--model", "uniform-4", "--hardware", "BAD"], "cannot read it (not UTF-8 text"),
        (["--model", "uniform-4", "--hardware", "a100", "--dtype", "fp7"], "fp7"),
        (
            ["--model", "uniform-4", "--hardware", "a100", "--optimizer", "bogus"],
            "--optimizer must be one of sgd, momentum, rmsprop, adam or bytes per parameter",
        ),
    ],
)
def test_a_bad_global_input_is_exit_2_before_any_work(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    arguments: list[str],
    message: str,
) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_bytes(b"name = 'x'\n\xff\xfe\x00")
    arguments = [str(bad) if a == "BAD" else a for a in arguments]
    monkeypatch.setattr(pipesim.sweep.grid, "run_point", _never)
    status, out, err = run(capsys, "sweep", "--schedules", "1f1b", "-K", "2", "-M", "4", *arguments)
    assert status == 2 and out == ""
    assert err.startswith("pipesim: error: ") and message in err and err.count("\n") == 1


@pytest.mark.filterwarnings("error::RuntimeWarning")  # no warning lines above the error
def test_costs_that_overflow_are_an_error_row_and_exit_2_when_every_row_fails(
    capsys: pytest.CaptureFixture[str],
) -> None:
    status, out, err = run(
        capsys, "sweep", "--schedules", "1f1b", "-K", "2", "-M", "4", "--costs", "1e308,1e308"
    )
    assert status == 2
    assert "error: iteration_time is inf (the costs overflow a float)" in out
    assert err == (
        "pipesim: error: every point failed; the first: iteration_time is inf (the costs "
        "overflow a float): give smaller costs\n"
    )


@pytest.mark.parametrize("suffix", [".json", ".csv"])
def test_a_sweep_whose_every_point_fails_leaves_the_out_file_as_it_was(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, suffix: str
) -> None:
    """Every point failing is bad input (exit 2): a good file at --out is not replaced by
    rows of errors, and no file is made where there was none."""
    sweep = ["sweep", "--schedules", "1f1b", "-K", "2", "-M", "2,4"]
    out = tmp_path / f"sw{suffix}"
    status, _, _ = run(capsys, *sweep, "--costs", "1,2", "--out", str(out))
    assert status == 0
    good = out.read_bytes()
    status, _, err = run(capsys, *sweep, "--costs", "1e300,1e300", "--out", str(out))
    assert status == 2 and out.read_bytes() == good
    assert err.startswith(f"pipesim: error: every point failed; nothing written to {out}; the ")
    fresh = tmp_path / f"new{suffix}"
    status, _, _ = run(capsys, *sweep, "--costs", "1e300,1e300", "--out", str(fresh))
    assert status == 2 and sorted(p.name for p in tmp_path.iterdir()) == [out.name]


def test_a_grid_beyond_the_size_limits_is_refused_before_any_work(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pipesim.sweep.grid, "run_point", _never)
    status, _, err = run(
        capsys, "sweep", "--schedules", "1f1b,gpipe", "-K", "2,4", "-M", "4,1000000000",
        "--costs", "1,1",
    )  # fmt: skip
    assert status == 2
    assert err == (
        "pipesim: error: 1f1b K=2 M=1,000,000,000 v=1: 4,000,000,000 actions: beyond the limit "
        "of 1,048,576 actions; set PIPESIM_MAX_ACTIONS to raise it (and 3 more points)\n"
    )
    monkeypatch.setenv("PIPESIM_MAX_CONFIGS", "3")
    status, _, err = run(capsys, "sweep", *GRID)
    assert status == 2
    assert err == (
        "pipesim: error: the sweep's 12 points: beyond the limit of 3 configurations; set "
        "PIPESIM_MAX_CONFIGS to raise it\n"
    )
    monkeypatch.setenv("PIPESIM_MAX_CONFIGS", "100")
    monkeypatch.setenv("PIPESIM_MAX_ACTIONS", "50")
    status, _, err = run(capsys, "sweep", *GRID, "--steps", "3")
    assert status == 2
    assert err == (
        "pipesim: error: gpipe K=2 M=8 v=1: 96 actions over 3 steps: beyond the limit of 50 "
        "actions; set PIPESIM_MAX_ACTIONS to raise it (and 9 more points)\n"
    )


def test_jobs_are_capped_at_the_cpus_and_the_points(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[int] = []
    real = ProcessPoolExecutor

    def pool(max_workers: int, **kwargs: object) -> object:
        started.append(max_workers)
        return real(max_workers=max_workers, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(application.workers, "ProcessPoolExecutor", pool)
    monkeypatch.setattr(application.workers, "cap_jobs", lambda jobs, n: min(jobs, 2, n))
    status, _, _ = run(capsys, "sweep", *GRID, "--jobs", "100000")
    assert status == 0 and started == [2]
    status, _, _ = run(
        capsys, "sweep", "--schedules", "1f1b", "-K", "2", "-M", "4", "--costs", "1,1",
        "--jobs", "100000",
    )  # fmt: skip
    assert status == 0 and started == [2]  # one point: no pool at all


def test_cap_jobs() -> None:
    from pipesim.common.limits import cap_jobs, cpu_count

    assert cap_jobs(100_000, 10**6) == cpu_count()
    assert cap_jobs(100_000, 1) == 1
    assert cap_jobs(1, 50) == 1


class _Interrupt:
    """``run_point`` that raises KeyboardInterrupt (Ctrl-C) when the ``at``-th point starts."""

    def __init__(self, at: int) -> None:
        self.at = at
        self.calls = 0

    def __call__(self, *args: object) -> dict[str, object]:
        self.calls += 1
        if self.calls == self.at:
            raise KeyboardInterrupt
        return run_point(*args)  # type: ignore[arg-type]


@pytest.mark.parametrize("suffix", [".csv", ".json"])
def test_an_interrupted_sweep_resumed_equals_an_uninterrupted_one(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    suffix: str,
) -> None:
    whole, part = tmp_path / f"whole{suffix}", tmp_path / f"part{suffix}"
    status, whole_out, _ = run(capsys, "sweep", *GRID, "--out", str(whole))
    assert status == 0
    monkeypatch.setattr(pipesim.sweep.grid, "run_point", _Interrupt(at=5))
    status, _, err = run(capsys, "sweep", *GRID, "--out", str(part))
    assert status == 130
    assert err == (
        f"pipesim: interrupted: 4 of 12 points saved to {part}; run the same command with "
        "--resume to finish the sweep\n"
    )
    if suffix == ".csv":
        assert part.read_text() == "".join(whole.read_text().splitlines(keepends=True)[:5])
    else:
        assert (
            json.loads(part.read_text())["results"] == json.loads(whole.read_text())["results"][:4]
        )
    counter = _Interrupt(at=0)
    monkeypatch.setattr(pipesim.sweep.grid, "run_point", counter)
    status, resumed_out, _ = run(capsys, "sweep", *GRID, "--out", str(part), "--resume")
    # the 8 missing points run; of the 4 saved ones only the first and the last run again, to
    # check the file is this sweep's (SweepFile.check_same_sweep)
    assert status == 0 and counter.calls == 8 + 2
    assert part.read_text() == whole.read_text()
    assert resumed_out == whole_out
    status, _, _ = run(capsys, "sweep", *GRID, "--out", str(part), "--resume")
    assert status == 0 and counter.calls == 10 + 2 and part.read_text() == whole.read_text()


def test_resume_refuses_another_sweeps_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "s.csv"
    run(capsys, "sweep", *GRID, "--out", str(out))
    status, _, err = run(
        capsys, "sweep", "--schedules", "1f1b", "-K", "2", "-M", "4", "--costs", "1,2,1",
        "--out", str(out), "--resume",
    )  # fmt: skip
    assert status == 2
    assert err == (
        f"pipesim: error: --resume: {str(out)!r} holds rows of points not in this sweep (gpipe "
        "K=2 M=4 v=1, gpipe K=2 M=8 v=1, gpipe K=4 M=4 v=1, gpipe K=4 M=8 v=1, 1f1b K=2 M=8 "
        "v=1 and 6 more); resume with the arguments of the sweep that wrote it\n"
    )
    out.write_text("a,b\n1,2\n")
    status, _, err = run(capsys, "sweep", *GRID, "--out", str(out), "--resume")
    assert status == 2 and "is not a sweep CSV" in err
    status, _, err = run(capsys, "sweep", *GRID, "--resume")
    assert status == 2 and err == (
        "pipesim: error: --resume needs --out FILE: the file of the sweep to finish\n"
    )


def test_rows_are_saved_while_the_sweep_runs(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    out = tmp_path / "s.csv"
    seen: list[int] = []

    def spy(*args: object) -> dict[str, object]:
        seen.append(len(out.read_text().splitlines()) - 1 if out.exists() else 0)
        return run_point(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(pipesim.sweep.grid, "run_point", spy)
    monkeypatch.setattr("application.rows_file.SAVE_INTERVAL_S", 0.0)
    monkeypatch.setattr("application.rows_file.SAVE_COST_FACTOR", 0.0)
    status, _, _ = run(capsys, "sweep", *GRID, "--out", str(out))
    assert status == 0
    assert seen == list(range(12))  # before each point, every earlier one is in the file


def _parallel_sweep_under_way(out: Path) -> subprocess.Popen[str]:
    """A sweep on two workers that has saved a few rows (it would run for a minute more)."""
    grid = [
        "--schedules", "gpipe,1f1b,zb-h1,zbv,interleaved-1f1b,zb-h2,looped-bfs",
        "-K", "2,4,8,16", "-M", "8,16,32,64,128,256", "--costs", "1,2,1", "--steps", "4",
    ]  # fmt: skip
    return sweep_under_way(out, [*grid, "--jobs", "2"])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="POSIX signals, /proc")
@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_or_sigterm_on_a_parallel_sweep_is_one_line_exit_130_and_keeps_the_rows(
    stop: signal.Signals, tmp_path: Path
) -> None:
    """The real signal to the parent of two workers (a terminal sends SIGINT to all, a kill
    SIGTERM to the parent only): the workers are stopped and every finished row is kept."""
    out = tmp_path / "s.csv"
    process = _parallel_sweep_under_way(out)
    workers = children(process.pid)
    process.send_signal(stop)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 130
    assert err.startswith("pipesim: interrupted: ") and err.count("\n") == 1, err
    rows = list(csv.reader(out.open()))
    assert rows[0][:4] == ["schedule", "devices", "microbatches", "chunks"]
    assert len(rows) >= 3 and all(len(r) == 12 for r in rows)
    assert len(workers) == 2 and not any(running(w) for w in workers)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="POSIX signals, /proc")
def test_workers_end_within_seconds_when_the_sweep_is_killed(tmp_path: Path) -> None:
    out = tmp_path / "s.csv"
    process = _parallel_sweep_under_way(out)
    workers = children(process.pid)
    process.kill()
    process.communicate(timeout=60)
    elapsed = seconds_until_gone(workers, time.monotonic(), 10)
    assert len(workers) == 2 and not any(running(w) for w in workers)
    assert elapsed < 3
    rows = list(csv.reader(out.open()))  # the rows saved before the kill are whole
    assert len(rows) >= 3 and all(len(r) == 12 for r in rows)


def test_a_fifo_out_gets_the_file_once_at_the_end(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    regular, fifo = tmp_path / "s.csv", tmp_path / "pipe"
    run(capsys, "sweep", *GRID, "--out", str(regular))
    os.mkfifo(fifo)
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()), daemon=True)
    reader.start()
    monkeypatch.setattr("application.rows_file.SAVE_INTERVAL_S", 0.0)
    monkeypatch.setattr("application.rows_file.SAVE_COST_FACTOR", 0.0)
    status, _, _ = run(capsys, "sweep", *GRID, "--out", str(fifo))
    reader.join(timeout=30)
    assert status == 0 and received == [regular.read_bytes()]
    status, _, err = run(capsys, "sweep", *GRID, "--out", str(fifo), "--resume")
    assert status == 2 and "is not a regular file to read back" in err


@pytest.mark.parametrize("suffix", [".csv", ".json"])
def test_resuming_with_other_arguments_is_refused_and_the_file_kept(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, suffix: str
) -> None:
    """A file written with --costs 1,2 resumed with --costs 1,3, --steps 2 (which changes the
    no-flush schedule's rows) or a model on hardware is another sweep's: refused in one line,
    the file left as it was."""
    out = tmp_path / f"sweep{suffix}"
    grid = ["--schedules", "1f1b,pipedream-2bw", "-K", "2,4", "-M", "8"]
    status, _, _ = run(capsys, "sweep", *grid, "--costs", "1,2", "--out", str(out))
    assert status == 0
    before = out.read_text()
    for other in (
        ["--costs", "1,3"],
        ["--costs", "1,2", "--steps", "2"],
        ["--model", "uniform-8", "--hardware", "a100"],
    ):
        status, _, err = run(capsys, "sweep", *grid, *other, "--out", str(out), "--resume")
        assert status == 2, other
        assert err.count("\n") == 1 and "was written by another sweep: its row for " in err
        assert out.read_text() == before


@pytest.mark.parametrize(
    ("cell", "problem"),
    [
        ("abc", "iteration_time 'abc' is not a number"),
        ("nan", "iteration_time nan is not a finite number >= 0"),
        ("-1", "iteration_time -1 is not a finite number >= 0"),
    ],
)
def test_a_resumed_csv_row_with_a_bad_value_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, cell: str, problem: str
) -> None:
    out = tmp_path / "sweep.csv"
    grid = ["--schedules", "1f1b", "-K", "2,4", "-M", "8", "--costs", "1,2"]
    assert run(capsys, "sweep", *grid, "--out", str(out))[0] == 0
    lines = out.read_text().splitlines(keepends=True)
    cells = lines[1].split(",")
    cells[4] = cell  # iteration_time
    out.write_text(lines[0] + ",".join(cells) + "".join(lines[2:]))
    status, _, err = run(capsys, "sweep", *grid, "--out", str(out), "--resume")
    assert status == 2
    assert err == f"pipesim: error: --resume: {str(out)!r} line 2: {problem}\n"


def test_a_resumed_row_whose_count_is_true_or_a_nested_file_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    grid = ["--schedules", "1f1b", "-K", "2", "-M", "8", "--costs", "1,2"]
    out = tmp_path / "sweep.json"
    assert run(capsys, "sweep", *grid, "--out", str(out))[0] == 0
    payload = json.loads(out.read_text())
    payload["results"][0]["devices"] = True
    out.write_text(json.dumps(payload))
    status, _, err = run(capsys, "sweep", *grid, "--out", str(out), "--resume")
    assert status == 2
    assert err.endswith("results[0]: devices True is not a whole number >= 1\n")
    out.write_text("[" * 100_000 + "]" * 100_000)
    status, _, err = run(capsys, "sweep", *grid, "--out", str(out), "--resume")
    assert status == 2 and err.count("\n") == 1 and "is not a sweep's JSON" in err


def test_resume_refuses_a_file_of_another_layout_at_the_same_times(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """ZeRO-3 inside a pipeline costs what ZeRO-1 does: the rows' times agree, their layouts
    do not, and a JSON file written under one is refused under the other."""
    out = tmp_path / "s.json"
    grid = (
        *("--schedules", "1f1b", "-K", "2", "-M", "4", "--model", "megatron-1.7b"),
        *("--hardware", "a100", "--microbatch-size", "1", "--data-parallel", "2"),
    )
    status, _, err = run(capsys, "sweep", *grid, "--zero", "1", "--out", str(out))
    assert status == 0, err
    status, _, err = run(capsys, "sweep", *grid, "--zero", "3", "--out", str(out), "--resume")
    assert status == 2 and "was written by another sweep" in err and "layout" in err, err
    status, _, err = run(capsys, "sweep", *grid, "--zero", "1", "--out", str(out), "--resume")
    assert status == 0, err
