"""Watching processes from a test (Linux ``/proc``): a process's children, whether one still
runs, and how long a set of them took to end; a sweep started in a process of its own."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def children(pid: int) -> list[int]:
    """The process ids of ``pid``'s children now."""
    return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def running(pid: int) -> bool:
    """Alive and not a zombie (an orphan's zombie waits for init to reap it)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


def seconds_until_gone(pids: Sequence[int], since: float, limit_s: float) -> float:
    """Wait until none of ``pids`` runs, or ``limit_s`` after ``since`` (a ``time.monotonic()``
    reading); the seconds from ``since`` to then. The caller asserts on both."""
    while any(running(pid) for pid in pids) and time.monotonic() - since < limit_s:
        time.sleep(0.05)
    return time.monotonic() - since


def sweep_under_way(out: Path, arguments: Sequence[str], **popen: Any) -> subprocess.Popen[str]:
    """``python -m pipesim sweep ARGUMENTS --out OUT`` started (no progress bar, output piped),
    returned once it has saved a few rows; the test fails if it ends or takes 120 s first."""
    process = subprocess.Popen(
        [sys.executable, "-m", "pipesim", "sweep", *arguments, "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PIPESIM_PROGRESS": "0"},
        **popen,
    )
    deadline = time.monotonic() + 120
    while not (out.exists() and out.read_text().count("\n") >= 3):
        assert process.poll() is None and time.monotonic() < deadline
        time.sleep(0.02)
    return process
