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


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _launch(*args: str, stderr: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK")}
    command = [sys.executable, "-m", "executor.torchrun", "--nproc-per-node", "2"]
    with stderr.open("w") as sink:
        return subprocess.Popen(
            [*command, "--master-port", str(_free_port()), *args],
            stdout=subprocess.DEVNULL,
            stderr=sink,
            env={**env, "OMP_NUM_THREADS": "1"},
        )


def _ranks_running(agent: int, seconds: float) -> list[int]:
    """The agent's two ranks, once they have run for ``seconds`` (past the rendezvous)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        ranks = children(agent)
        if len(ranks) == 2:
            time.sleep(seconds)
            return ranks
        time.sleep(0.1)
    raise AssertionError("torchrun started no ranks in 120 s")


def test_bad_input_on_every_rank_ends_in_one_line_each_and_exit_2(tmp_path: Path) -> None:
    err = tmp_path / "err"
    agent = _launch(*LONG_RUN, "--model", "transformer", "--width", "30", stderr=err)
    assert agent.wait(timeout=120) == 2
    lines = err.read_text().splitlines()
    assert "Traceback" not in err.read_text()
    assert lines[-1].startswith("python -m executor.torchrun: failed: rank ")
    assert lines[-1].endswith(
        "exited with status 2 (its own line above says why; 2 of the ranks failed)"
    )
    assert all(line.startswith("python -m executor") for line in lines), lines


@pytest.mark.parametrize("how", ["SIGTERM to the agent", "kill -9 of the agent"])
def test_the_ranks_end_within_seconds_with_their_agent(how: str, tmp_path: Path) -> None:
    err = tmp_path / "err"
    agent = _launch(*LONG_RUN, stderr=err)
    try:
        ranks = _ranks_running(agent.pid, 4.0)
        stopped = time.monotonic()
        agent.send_signal(signal.SIGTERM if how.startswith("SIGTERM") else signal.SIGKILL)
        status = agent.wait(timeout=60)
        elapsed = seconds_until_gone(ranks, stopped, 20)
        assert not any(running(r) for r in ranks)
        assert elapsed < 5
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
