"""Where evaluations run (application.workers): addresses checked in one line, results in the
order of the inputs whatever runs them, and, against a real Dask cluster of two worker
processes started here, the same sweep rows, the same ``--resume`` result and the same plan as
in one process, also when a worker is killed mid-sweep."""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import application.workers as workers_module
from application.sweeps import run_sweep
from application.workers import check_cluster_address, open_workers
from pipesim.common.workers import InProcess, ordered_map
from pipesim.errors import PipesimError
from pipesim.request.cost_request import SyntheticRequest
from pipesim.sweep.grid import sweep_points
from tests.processes import sweep_under_way

from ..cli.test_schedule_cli import run

POINTS, _ = sweep_points(["gpipe", "1f1b", "zb-h1", "interleaved-1f1b"], [2, 4], [4, 8, 16])
REQUEST = SyntheticRequest(1.0, 2.0, 0.5, comm_s=0.05)


@pytest.mark.parametrize("address", ["", "locale", "ray://h:1", "dask://", "http://h:8786"])
def test_a_bad_cluster_address_is_refused_in_one_line(address: str) -> None:
    with pytest.raises(PipesimError, match="--cluster must be 'local' or a Dask scheduler"):
        check_cluster_address(address)


@pytest.mark.parametrize("address", ["local", "dask://h:8786", "tcp://10.0.0.1:8786"])
def test_good_cluster_addresses_pass(address: str) -> None:
    assert check_cluster_address(address) == address


def test_without_the_extra_a_cluster_is_refused_with_the_install_command(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(workers_module, "dask_available", lambda: False)
    grid = ["--schedules", "1f1b", "-K", "2", "-M", "4", "--costs", "1,2"]
    status, out, err = run(capsys, "sweep", *grid, "--cluster", "local")
    assert status == 2 and out == ""
    assert err == (
        "pipesim: error: --cluster local needs dask distributed, which is not installed: "
        "pip install 'pipesim[cluster]'\n"
    )


def test_ordered_map_in_process_runs_each_item_when_asked() -> None:
    ran: list[int] = []

    def square(x: int) -> int:
        ran.append(x)
        return x * x

    results = ordered_map(InProcess(), square, [1, 2, 3])
    assert next(results) == 1 and ran == [1]  # nothing computed ahead of the caller
    assert list(results) == [4, 9]


def test_a_local_pool_gives_the_rows_of_one_process() -> None:
    alone = list(run_sweep(POINTS, REQUEST))
    with open_workers(2, None, work_items=len(POINTS)) as pool:
        assert pool.width == min(2, os.cpu_count() or 1)
    assert list(run_sweep(POINTS, REQUEST, jobs=2)) == alone


dask = pytest.importorskip(
    "distributed", reason="the cluster extra is not installed: pip install 'pipesim[cluster]'"
)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    """A real Dask cluster of two worker processes, one thread each, on this machine."""
    import logging

    cluster = dask.LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        dashboard_address=None,
        silence_logs=logging.ERROR,
    )
    try:
        yield cluster
    finally:
        cluster.close()


def address(cluster: Any) -> str:
    scheduler: str = cluster.scheduler_address
    return "dask://" + scheduler.removeprefix("tcp://")


def test_a_cluster_sweep_gives_the_same_rows_in_the_same_order(cluster: Any) -> None:
    alone = list(run_sweep(POINTS, REQUEST))
    assert list(run_sweep(POINTS, REQUEST, cluster=address(cluster))) == alone


def test_a_worker_killed_mid_sweep_loses_no_row(cluster: Any) -> None:
    alone = list(run_sweep(POINTS, REQUEST))
    rows: list[dict[str, Any]] = []
    killed = False
    for row in run_sweep(POINTS * 3, REQUEST, cluster=address(cluster)):
        rows.append(row)
        if not killed:  # the first row is in: kill a worker while the rest are in flight
            pid = next(iter(cluster.workers.values())).process.process.pid
            os.kill(pid, signal.SIGKILL)
            killed = True
    assert killed and rows == alone * 3


def test_the_cli_resumes_a_cluster_sweep_to_the_file_of_one_process(
    cluster: Any, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    grid = ["--schedules", "gpipe,1f1b,zb-h1", "-K", "2,4", "-M", "4,8", "--costs", "1,2,1"]
    whole, part = tmp_path / "whole.csv", tmp_path / "part.csv"
    status, whole_out, _ = run(capsys, "sweep", *grid, "--out", str(whole))
    assert status == 0
    lines = whole.read_text().splitlines(keepends=True)
    part.write_text("".join(lines[:5]))  # what an interrupted run saved: header and 4 rows
    status, resumed_out, _ = run(
        capsys, "sweep", *grid, "--out", str(part), "--resume", "--cluster", address(cluster)
    )
    assert status == 0 and resumed_out == whole_out
    assert part.read_text() == whole.read_text()


def test_a_cluster_plan_is_the_plan_of_one_process(
    cluster: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    arguments = ["--model", "megatron-1.7b", "--hardware", "a100", "--devices", "16"]
    arguments += ["--batch", "64", "--json"]
    status, alone, _ = run(capsys, "plan", *arguments)
    assert status == 0
    status, clustered, _ = run(capsys, "plan", *arguments, "--cluster", address(cluster))
    assert status == 0
    timing = {"seconds", "configurations_per_second"}
    first, second = json.loads(alone), json.loads(clustered)
    assert {k: v for k, v in first.items() if k not in timing} == {
        k: v for k, v in second.items() if k not in timing
    }


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="POSIX signals")
def test_ctrl_c_on_a_local_cluster_sweep_is_one_line_exit_130_and_keeps_the_rows(
    tmp_path: Path,
) -> None:
    """Ctrl-C from a terminal reaches the whole process group, the cluster's processes too:
    they ignore it, the parent saves the finished rows and says so in one line."""
    out = tmp_path / "s.csv"
    grid = ["--schedules", "1f1b,zb-h1,zbv,gpipe,interleaved-1f1b,looped-bfs"]
    grid += ["-K", "8,16,32,64", "-M", "256,512,1024", "--costs", "1,2,1"]
    process = sweep_under_way(out, [*grid, "--cluster", "local"], start_new_session=True)
    os.killpg(process.pid, signal.SIGINT)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 130, (process.returncode, err)
    assert err.startswith("pipesim: interrupted: ") and err.count("\n") == 1, err
    assert len(out.read_text().splitlines()) >= 3


def test_a_plan_on_two_processes_is_the_plan_of_one(capsys: pytest.CaptureFixture[str]) -> None:
    """``--jobs 2``: workers build their own contexts and evaluate ahead; the same report."""
    arguments = ["--model", "megatron-1.7b", "--hardware", "a100", "--devices", "16"]
    arguments += ["--batch", "64", "--json"]
    status, alone, _ = run(capsys, "plan", *arguments)
    assert status == 0
    status, pooled, _ = run(capsys, "plan", *arguments, "--jobs", "2")
    assert status == 0
    timing = {"seconds", "configurations_per_second"}
    first, second = json.loads(alone), json.loads(pooled)
    assert {k: v for k, v in first.items() if k not in timing} == {
        k: v for k, v in second.items() if k not in timing
    }
    status, _, err = run(capsys, "plan", *arguments, "--jobs", "0")
    assert status == 2 and "--jobs must be an integer >= 1, got 0" in err
