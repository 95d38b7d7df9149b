"""``python -m executor.torchrun`` and ranks under torchrun: one line per ending, the executor's
exit statuses, and no rank outliving its agent."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.processes import children, running, seconds_until_gone

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc, signals")

# Minutes long, and within PIPESIM_MAX_ACTIONS (16 actions a step).
LONG_RUN = ["-m", "executor", "--schedule", "1f1b", "-M", "4", "--steps", "50000"]
# Starting the agent and its ranks (importing torch, the rendezvous) only measures the machine:
# bounded generously, each test's limit raised to hold it. What a test measures counts from
# when both ranks are in their first step: each then creates ready-<rank> in the folder named by
# PIPESIM_READY_DIR (executor.distributed.READY_DIR_VARIABLE; not imported here: no torch).
READY_WITHIN_S = 240.0


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _launch(*args: str, stderr: Path, ready: Path | None = None) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK")}
    if ready is not None:
        ready.mkdir()
        env["PIPESIM_READY_DIR"] = str(ready)
    command = [sys.executable, "-m", "executor.torchrun", "--nproc-per-node", "2"]
    with stderr.open("w") as sink:
        return subprocess.Popen(
            [*command, "--master-port", str(_free_port()), *args],
            stdout=subprocess.DEVNULL,
            stderr=sink,
            env={**env, "OMP_NUM_THREADS": "1"},
        )


def _ranks_ready(agent: subprocess.Popen[bytes], ready: Path) -> list[int]:
    """The agent's two ranks, once both are in their first step (past the rendezvous, with
    their signal handling and watch on the agent in place)."""
    deadline = time.monotonic() + READY_WITHIN_S
    while not all((ready / f"ready-{rank}").exists() for rank in range(2)):
        assert agent.poll() is None, f"the agent ended first, status {agent.returncode}"
        assert time.monotonic() < deadline, f"no step began within {READY_WITHIN_S:g} s"
        time.sleep(0.05)
    ranks = children(agent.pid)
    assert len(ranks) == 2, ranks
    return ranks


@pytest.mark.timeout(READY_WITHIN_S + 60)
def test_bad_input_on_every_rank_ends_in_one_line_each_and_exit_2(tmp_path: Path) -> None:
    err = tmp_path / "err"
    agent = _launch(*LONG_RUN, "--model", "transformer", "--width", "30", stderr=err)
    try:  # a hang guard: the ranks refuse the input while starting, before any step
        assert agent.wait(timeout=READY_WITHIN_S) == 2
    finally:
        agent.kill()
    lines = err.read_text().splitlines()
    assert "Traceback" not in err.read_text()
    assert lines[-1].startswith("python -m executor.torchrun: failed: rank ")
    assert lines[-1].endswith(
        "exited with status 2 (its own line above says why; 2 of the ranks failed)"
    )
    assert all(line.startswith("python -m executor") for line in lines), lines


@pytest.mark.parametrize("how", ["SIGTERM to the agent", "kill -9 of the agent"])
@pytest.mark.timeout(READY_WITHIN_S + 180)
def test_the_ranks_end_within_seconds_with_their_agent(how: str, tmp_path: Path) -> None:
    """Stopped once both ranks are in their steps, the agent's ranks are gone within 5 s of
    the signal (timed apart from the agent's own exit, which takes 10 to 15 s on 2 cores
    under a load of about 30; its bound is a hang guard)."""
    err = tmp_path / "err"
    agent = _launch(*LONG_RUN, stderr=err, ready=tmp_path / "ready")
    try:
        ranks = _ranks_ready(agent, tmp_path / "ready")
        stopped = time.monotonic()
        agent.send_signal(signal.SIGTERM if how.startswith("SIGTERM") else signal.SIGKILL)
        elapsed = seconds_until_gone(ranks, stopped, 20)
        assert not any(running(r) for r in ranks)
        assert elapsed < 5
        status = agent.wait(timeout=120)
    finally:
        agent.kill()
    time.sleep(0.2)  # the orphans' last lines
    lines = err.read_text().splitlines()
    assert "Traceback" not in err.read_text()
    if how.startswith("SIGTERM"):
        assert status == 130
        assert lines[-1] == (
            "python -m executor.torchrun: interrupted: stopped by SIGTERM; the ranks were stopped"
        )
        assert lines.count("python -m executor: interrupted: stopped by SIGTERM") == 2
    else:
        gone = [
            line
            for line in lines
            if line.endswith("the torchrun agent that started it is gone; stopping")
        ]
        assert sorted(gone) == [
            f"python -m executor: failed: rank {r}: the torchrun agent that started it is gone; "
            "stopping"
            for r in (0, 1)
        ]
