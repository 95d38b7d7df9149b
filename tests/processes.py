"""Watching processes from a test (Linux ``/proc``): a process's children, whether one still
runs, and how long a set of them took to end."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path


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
