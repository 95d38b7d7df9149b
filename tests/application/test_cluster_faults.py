"""How a sweep on a cluster or a process pool fails and stops: one line, a bounded wait, the
finished rows kept. A stop signal during a local cluster's start-up, an address that is no
HOST:PORT, a listener that is no Dask scheduler, ``--jobs`` beyond the CPUs, a scheduler killed
mid-sweep, a cluster without workers, Dask's scratch files and a pool's running points after
SIGTERM."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import application.workers as workers_module
from application.lifetime import StopSignal, stop_signals_deferred
from application.workers import DaskWorkers, check_cluster_address
from pipesim.common.limits import cpu_count
from pipesim.errors import PipesimError, RunFailed
from tests.processes import running, sweep_under_way

from ..cli.test_schedule_cli import run

GRID = ["--schedules", "1f1b", "-K", "2", "-M", "4", "--costs", "1,2"]
ROOT = Path(__file__).resolve().parents[2]
POSIX = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="POSIX signals, /proc")


def _pipesim(*arguments: str, **popen: Any) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "cli", *arguments],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PIPESIM_PROGRESS": "0"},
        **popen,
    )


# --- 1, 2: a stop signal during a local cluster's start-up ---------------------------------


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_signal_is_recorded_while_deferred_and_raised_by_the_caller(
    stop: signal.Signals,
) -> None:
    before = signal.getsignal(stop)
    with stop_signals_deferred() as stops:
        os.kill(os.getpid(), stop)
        time.sleep(0.1)  # not raised here: recorded
    assert stops and signal.getsignal(stop) == before
    interrupt = stops.interrupt()
    if stop == signal.SIGINT:
        assert type(interrupt) is KeyboardInterrupt
    else:
        assert isinstance(interrupt, StopSignal) and interrupt.name == "SIGTERM"
    assert signal.pthread_sigmask(signal.SIG_BLOCK, set()) == set()  # Ctrl-C unblocked again


def _spawned(pid: int) -> bool:
    """Whether ``pid`` has started a cluster's process (a multiprocessing child from any of its
    threads, other than the resource tracker, which starts before the cluster's start-up)."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            kids = (task / "children").read_text().split()
        except OSError:
            continue
        for kid in kids:
            try:
                command = Path(f"/proc/{kid}/cmdline").read_bytes()
                if b"multiprocessing" in command and b"resource_tracker" not in command:
                    return True
            except OSError:
                continue
    return False


@POSIX
@pytest.mark.parametrize(
    ("stop", "reason"), [(signal.SIGINT, "Ctrl-C"), (signal.SIGTERM, "SIGTERM")]
)
def test_a_stop_signal_during_local_cluster_start_up_stops_it_in_one_line(
    stop: signal.Signals, reason: str
) -> None:
    """Ctrl-C (to the whole process group, as a terminal sends it) or SIGTERM once the
    cluster's first worker process is up: no sweep, exit 130, one line (no Dask traceback)."""
    process = _pipesim("sweep", *GRID, "--cluster", "local", start_new_session=True)
    deadline = time.monotonic() + 60
    while not _spawned(process.pid):
        assert process.poll() is None and time.monotonic() < deadline
        time.sleep(0.01)
    if stop == signal.SIGINT:
        os.killpg(process.pid, stop)
    else:
        process.send_signal(stop)
    out, err = process.communicate(timeout=60)
    assert (process.returncode, out, err) == (130, "", f"pipesim: interrupted ({reason})\n")


# --- 3: a scheduler address that is no HOST:PORT -------------------------------------------


@pytest.mark.parametrize(
    "address",
    [
        "dask://127.0.0.1:http",
        "dask://h:8786\nx",
        "dask://h 1:8786",
        "dask://h\x07:8786",
        "tcp://h:0",
        "tcp://h:65536",
        "dask://h",
        "dask://:8786",
    ],
)
def test_an_address_that_is_no_host_and_port_is_refused_in_one_line(address: str) -> None:
    with pytest.raises(PipesimError, match="--cluster must be 'local' or a Dask") as caught:
        check_cluster_address(address)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    "address", ["dask://h.example:1", "tls://10.0.0.1:65535", "tcp://[::1]:8786"]
)
def test_host_and_port_addresses_pass(address: str) -> None:
    assert check_cluster_address(address) == address


# --- 4: a listener that is no Dask scheduler -----------------------------------------------


@pytest.fixture(params=["silent", "http"])
def listener(request: pytest.FixtureRequest) -> Iterator[int]:
    """A port on which something that is no Dask scheduler listens: it accepts and never says
    a word, or answers as an HTTP server does."""
    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def serve() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                connection, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            held.append(connection)
            if request.param == "http":
                connection.sendall(b"HTTP/1.0 400 Bad Request\r\n\r\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        thread.join(5)
        for connection in held:
            connection.close()
        server.close()


def test_a_listener_that_is_no_dask_scheduler_fails_in_one_line_in_bounded_time(
    listener: int, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("distributed")
    monkeypatch.setattr(workers_module, "HANDSHAKE_S", 1.0)
    address = f"dask://127.0.0.1:{listener}"
    started = time.monotonic()
    status, out, err = run(capsys, "sweep", *GRID, "--cluster", address)
    assert time.monotonic() - started < 20  # about 1 s; unbounded (for ever) before
    assert (status, out) == (1, "") and err.count("\n") == 1
    assert err.startswith(f"pipesim: failed: --cluster {address}: ")
    assert "not a Dask scheduler" in err or "no Dask scheduler answered within 1 s" in err


# --- 5, 8: a local cluster's size and its scratch files ------------------------------------


def test_a_local_cluster_is_capped_at_the_cpus_and_leaves_no_scratch_files(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    distributed = pytest.importorskip("distributed")
    import tempfile

    started: list[int] = []
    real = distributed.LocalCluster

    def local_cluster(*arguments: Any, **options: Any) -> Any:
        started.append(options["n_workers"])
        return real(*arguments, **options)

    monkeypatch.setattr(distributed, "LocalCluster", local_cluster)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the system's temporary folder
    grid = ["--schedules", "1f1b", "-K", "2,4", "-M", "4,8,16,32", "--costs", "1,2"]
    status, out, err = run(capsys, "sweep", *grid, "--cluster", "local", "--jobs", "10000")
    assert (status, err) == (0, "") and "1f1b" in out
    assert started == [max(2, min(cpu_count(), 8))]  # 8 points
    assert list(tmp_path.iterdir()) == []  # no dask-scratch-space, the private folder gone


# --- 6: the scheduler killed mid-sweep -----------------------------------------------------

SCHEDULER = textwrap.dedent(
    """
    import logging, sys, time
    from distributed import LocalCluster
    if __name__ == "__main__":
        cluster = LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                               protocol="tcp", dashboard_address=None,
                               silence_logs=logging.CRITICAL)
        print(cluster.scheduler_address, flush=True)
        time.sleep(600)
    """
)


@POSIX
def test_a_scheduler_killed_mid_sweep_fails_in_one_line_saying_what_was_saved(
    tmp_path: Path,
) -> None:
    pytest.importorskip("distributed")
    script = tmp_path / "scheduler.py"
    script.write_text(SCHEDULER)
    scheduler = subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    try:
        assert scheduler.stdout is not None
        address = "dask://" + scheduler.stdout.readline().strip().removeprefix("tcp://")
        out = tmp_path / "s.csv"
        grid = ["--schedules", "1f1b,zb-h1,zbv,gpipe,interleaved-1f1b,looped-bfs"]
        grid += ["-K", "8,16,32,64", "-M", "256,512,1024", "--costs", "1,2,1"]
        sweep = sweep_under_way(out, [*grid, "--cluster", address])
        scheduler.kill()
        _, err = sweep.communicate(timeout=60)
    finally:
        scheduler.kill()
        scheduler.wait()
    assert sweep.returncode == 1 and err.count("\n") == 1, err
    assert err.startswith(f"pipesim: failed: --cluster {address}: the scheduler went away (")
    assert f"points saved to {out}; run the same command with --resume" in err
    assert len(out.read_text().splitlines()) >= 3


# --- 7: a cluster left without workers -----------------------------------------------------


class _Pending:
    """A Dask future that never finishes (no worker runs it)."""

    status = "pending"

    def result(self, timeout: float | None = None) -> Any:
        time.sleep(min(timeout or 0.0, 0.01))
        raise TimeoutError

    def cancel(self) -> None:
        pass


class _Client:
    """A client of a scheduler that answers, with ``workers`` workers."""

    def __init__(self, workers: int | None) -> None:
        self.workers = workers
        self.scheduler = self

    def identity(self, n_workers: int = -1) -> None:  # the scheduler's remote call
        raise AssertionError("sent through sync")

    def sync(self, function: Any, *arguments: Any, **options: Any) -> dict[str, Any]:
        if self.workers is None:
            raise TimeoutError
        return {"type": "Scheduler", "workers": {f"w{i}": {} for i in range(self.workers)}}

    def submit(self, function: Any, *arguments: Any, pure: bool = True) -> _Pending:
        return _Pending()


@pytest.mark.parametrize(
    ("workers", "says"),
    [(0, "the cluster has had no worker for 0.2 s"), (None, "the scheduler went away")],
)
def test_a_cluster_without_workers_fails_a_wait_in_bounded_time(
    monkeypatch: pytest.MonkeyPatch, workers: int | None, says: str
) -> None:
    monkeypatch.setattr(workers_module, "NO_WORKERS_S", 0.2)
    monkeypatch.setattr(workers_module, "POLL_S", 0.01)
    cluster = DaskWorkers(_Client(workers), 1, "dask://h:1")
    future = cluster.submit(print)
    started = time.monotonic()
    with pytest.raises(RunFailed, match=f"^--cluster dask://h:1: {says}"):
        future.result()
    assert time.monotonic() - started < 5


def test_a_cluster_with_workers_keeps_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(workers_module, "NO_WORKERS_S", 0.05)
    monkeypatch.setattr(workers_module, "POLL_S", 0.01)

    class Later(_Pending):
        polls = 30  # about 0.3 s of polls, past NO_WORKERS_S

        def result(self, timeout: float | None = None) -> Any:
            self.polls -= 1
            return 42 if self.polls == 0 else super().result(timeout)

    client = _Client(1)
    monkeypatch.setattr(client, "submit", lambda *arguments, **options: Later())
    assert DaskWorkers(client, 1, "dask://h:1").submit(print).result() == 42


# --- 9: SIGTERM to a sweep on a local process pool -----------------------------------------


@POSIX
def test_sigterm_stops_a_pool_sweep_without_waiting_for_its_running_points(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Points of about 15 s each running when SIGTERM comes: exit 130 in about a second (a
    batch system gives 30 s before SIGKILL), the rows finished before kept."""
    monkeypatch.setenv("PIPESIM_MAX_ACTIONS", "20000000")
    out = tmp_path / "s.csv"
    grid = ["--schedules", "1f1b,gpipe,zb-h1", "-K", "2,64", "-M", "4,65536", "--costs", "1,2,1"]
    sweep = sweep_under_way(out, [*grid, "--jobs", "2"])
    pool = Path(f"/proc/{sweep.pid}/task/{sweep.pid}/children").read_text().split()
    started = time.monotonic()
    sweep.send_signal(signal.SIGTERM)
    _, err = sweep.communicate(timeout=120)
    took = time.monotonic() - started
    assert sweep.returncode == 130 and err.count("\n") == 1, err
    assert err.startswith("pipesim: interrupted: ") and "--resume" in err
    assert took < 15, took  # about 1 s; 40 to 60 s when it waited for the running points
    assert not any(running(int(pid)) for pid in pool)
    assert len(out.read_text().splitlines()) >= 3


class _StoppedWhileClosing:
    """A cluster whose close() receives a stop signal (Ctrl-C pressed as the run ends)."""

    def __init__(self, stop: signal.Signals) -> None:
        self.stop = stop
        self.closed = False

    def close(self) -> None:
        os.kill(os.getpid(), self.stop)
        time.sleep(0.1)
        self.closed = True


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_signal_while_the_cluster_closes_is_raised_once_it_is_closed(
    stop: signal.Signals,
) -> None:
    """Before, the signal was recorded and dropped: the run ended 0 with its table."""
    cluster = _StoppedWhileClosing(stop)
    with pytest.raises(KeyboardInterrupt) as caught:
        workers_module._close_then_stop(cluster)
    assert cluster.closed
    if stop == signal.SIGTERM:
        assert isinstance(caught.value, StopSignal) and caught.value.name == "SIGTERM"


def test_a_stop_signal_while_an_interrupted_run_closes_adds_no_second_interrupt() -> None:
    cluster = _StoppedWhileClosing(signal.SIGTERM)
    with pytest.raises(ValueError, match="the run's own"):
        try:
            raise ValueError("the run's own")
        finally:
            workers_module._close_then_stop(cluster)
    assert cluster.closed
