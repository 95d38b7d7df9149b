"""end_rank: the group is destroyed only when every rank reached the barrier in time."""

from __future__ import annotations

import os
from datetime import timedelta

import pytest

from executor import teardown


class _Work:
    def __init__(self, completed: bool | None, error: bool = False) -> None:
        self.completed = completed
        self.error = error
        self.timeouts: list[timedelta] = []

    def wait(self, timeout: timedelta) -> bool | None:
        self.timeouts.append(timeout)
        if self.error:
            raise RuntimeError("connection closed by peer")
        return self.completed


class _Dist:
    """The two calls end_rank makes, recorded."""

    def __init__(self, work: _Work) -> None:
        self.work = work
        self.destroyed = 0

    def barrier(self, async_op: bool = False) -> _Work:
        assert async_op
        return self.work

    def destroy_process_group(self) -> None:
        self.destroyed += 1


class _Exited(Exception):
    pass


def _end(monkeypatch: pytest.MonkeyPatch, work: _Work) -> tuple[_Dist, int]:
    fake = _Dist(work)
    statuses: list[int] = []

    def leave(status: int) -> None:
        statuses.append(status)
        raise _Exited

    monkeypatch.setattr(teardown, "dist", fake)
    monkeypatch.setattr(os, "_exit", leave)  # the module teardown calls it through
    with pytest.raises(_Exited):
        teardown.end_rank(3, timeout_s=5.0)
    assert work.timeouts == [timedelta(seconds=5.0)]
    return fake, statuses[0]


@pytest.mark.parametrize("completed", [True, None])
def test_every_rank_in_time_destroys_the_group(
    monkeypatch: pytest.MonkeyPatch, completed: bool | None
) -> None:
    fake, status = _end(monkeypatch, _Work(completed))
    assert (fake.destroyed, status) == (1, 3)


def test_a_timed_out_barrier_leaves_the_group_as_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    fake, status = _end(monkeypatch, _Work(False))
    assert (fake.destroyed, status) == (0, 3)


def test_a_failed_barrier_leaves_the_group_as_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    fake, status = _end(monkeypatch, _Work(None, error=True))
    assert (fake.destroyed, status) == (0, 3)
