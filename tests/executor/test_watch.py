"""The step watch on an in-process store: the first failure wins, a stopped heartbeat is
named, and without a store the watch stays silent."""

from __future__ import annotations

import torch.distributed as dist

from executor import NonFiniteError, PeerError, StageError
from executor.watch import Failure, FailureKind, StepWatch


def watches(world: int, window_s: float = 0.3) -> list[StepWatch]:
    store = dist.HashStore()  # type: ignore[attr-defined]
    return [
        StepWatch(store, rank, world, interval_s=0.02, window_s=window_s) for rank in range(world)
    ]


def test_the_first_published_failure_wins_and_names_its_device() -> None:
    zero, one, two = watches(3)
    assert zero.published() is None
    one.publish(NonFiniteError("device 1: NaN first appeared in the output of 1F2 (...)"))
    two.publish(StageError("stage 2 forward of micro-batch 0 failed"))
    first = zero.published()
    assert first == Failure(
        FailureKind.NON_FINITE, 1, "device 1: NaN first appeared in the output of 1F2 (...)"
    )
    error = first.error_on(0)
    assert isinstance(error, NonFiniteError)
    assert str(error) == (
        "device 0: the step stopped after a failure on device 1: "
        "device 1: NaN first appeared in the output of 1F2 (...)"
    )
    assert isinstance(Failure(FailureKind.OTHER, 2, "x").error_on(0), PeerError)


def test_failures_of_one_step_call_do_not_leak_into_the_next() -> None:
    store = dist.HashStore()  # type: ignore[attr-defined]
    StepWatch(store, 0, 2).publish(PeerError("device 0: first call failed"))
    assert StepWatch(store, 1, 2).published() is not None  # rank 1's first call: same step
    assert StepWatch(store, 0, 2).published() is None  # rank 0's second call: a fresh step


def test_a_rank_whose_heartbeat_stops_is_named_and_a_beating_one_is_not() -> None:
    zero, one, _ = watches(3)
    with one.beating():  # device 1 is alive (waiting on device 2, say); device 2 never beats
        assert zero.stopped_devices() == [2]
        error = zero.peer_failed(
            "waiting for 1B0->0B0 (step 0) from device 1",
            5.0,
            RuntimeError("[/gloo/pair.cc:553] Connection closed by peer [::1]:1. Check logs."),
        )
    assert isinstance(error, PeerError)
    assert str(error) == (
        "device 0: waiting for 1B0->0B0 (step 0) from device 1 failed after at most 5 s "
        "(Connection closed by peer [::1]:1); the peer may have died or stalled: device 2 "
        "stopped responding (no heartbeat for 0.3 s)"
    )
    # Published: device 1's own later failure ends with device 0's line.
    later = one.peer_failed("waiting for 2B0->1B0 (step 0) from device 2", 5.0, "timed out")
    assert str(later).startswith("device 1: the step stopped after a failure on device 0: ")


def test_without_a_store_the_watch_is_silent() -> None:
    watch = StepWatch(None, 0, 2, window_s=0.01)
    with watch.beating():
        watch.publish(PeerError("x"))
        assert watch.published() is None
        assert watch.stopped_devices() is None
    error = watch.peer_failed("waiting for 1F0->... from device 1", 2.0, "timed out")
    assert str(error) == (
        "device 0: waiting for 1F0->... from device 1 failed after at most 2 s (timed out); "
        "the peer may have died or stalled (no store to tell which device stopped)"
    )
