"""Who failed first, and who stopped responding: a distributed step's failures told to every
rank through the process group's key-value store.

A rank that waits on a peer past the timeout only knows that the peer did not answer; the peer
may itself be waiting on a third rank that stalled. So two facts travel through the default
store of torch.distributed (torchrun's agent store, the file of a ``file://`` init, or rank 0's
TCP store), under keys fresh for every step call:

* **A heartbeat per rank.** While a rank is inside a step, a thread of its own adds 1 to
  ``pipesim/heartbeat/<rank>`` every :data:`HEARTBEAT_INTERVAL_S`. The thread runs whatever the
  main thread does (a computation and a blocking wait both release the GIL), so a counter that
  stops moving means the process stopped: it died, or it is stalled (SIGSTOP, a debugger, a
  frozen machine). When a wait fails or times out, the waiting rank reads every counter twice,
  :data:`DIAGNOSIS_WINDOW_S` apart, and names the ranks whose counters did not move. A rank
  that merely waits on the stalled one keeps beating and is not blamed: in a chain where 0
  waits on 1 and 1 waits on a stalled 2, both 0 and 1 name device 2.
* **The first failure.** The first rank to fail (an action's NaN or Inf, a stage that raised,
  a peer it diagnosed) writes one line to ``<prefix>/failure``; ``compare_set`` makes the
  first writer win. A rank whose wait fails afterwards (its peer exited, or it timed out)
  reads that line and ends with it, so every rank reports the same first cause: a NaN found
  on device 1 ends every rank with a :class:`~executor.errors.NonFiniteError` naming device
  1's action, not with "device 1 stopped answering".

Nothing here runs while steps go well, beyond the heartbeat's one store update per interval:
the store is read only after a wait failed. The step's own barriers (at its start and end)
are bounded by the same timeout and diagnosed the same way (see
:mod:`executor.distributed`). Without a store (a process group set up some other way) the
watch stays silent and failures name only the peer waited on. With an ``env://`` group
outside torchrun rank 0 hosts the store; if rank 0 is the one that died, the diagnosis is
unavailable and the message says so.

The heartbeat has a store client to share: TCP store clients run one operation at a time, so
nothing here ever blocks on the store (no ``store.wait``), or the heartbeat would stall with
it and a waiting rank would look stopped.

After a failure the process group is unusable (receives may still be posted): end the
process, as the launcher does; that also releases the peers, whose waits then fail at once.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from enum import Enum
from typing import TypeVar

import torch.distributed as dist
from torch.distributed.distributed_c10d import Store

from executor.errors import ExecutorError, NonFiniteError, PeerError

HEARTBEAT_INTERVAL_S = 0.25
DIAGNOSIS_WINDOW_S = 2.0  # 8 heartbeats: a busy 2-core machine still lets one through

T = TypeVar("T")


class FailureKind(Enum):
    """What the first failing rank found; it decides the error the other ranks raise."""

    NON_FINITE = "non-finite"
    PEER = "peer"
    OTHER = "other"

    @staticmethod
    def of(error: BaseException) -> FailureKind:
        """The kind of ``error``."""
        if isinstance(error, NonFiniteError):
            return FailureKind.NON_FINITE
        if isinstance(error, PeerError):
            return FailureKind.PEER
        return FailureKind.OTHER


@dataclass(frozen=True)
class Failure:
    """The first failure of a step, as published by ``device``."""

    kind: FailureKind
    device: int
    message: str

    def encode(self) -> str:
        """The store value."""
        return f"{self.kind.value}|{self.device}|{self.message}"

    @staticmethod
    def decode(text: str) -> Failure:
        """The failure a store value holds."""
        kind, device, message = text.split("|", 2)
        return Failure(FailureKind(kind), int(device), message)

    def error_on(self, device: int) -> ExecutorError:
        """The error another device ends with: the same first cause, one line."""
        text = f"device {device}: the step stopped after a failure on device {self.device}: "
        text += self.message
        if self.kind is FailureKind.NON_FINITE:
            return NonFiniteError(text)
        return PeerError(text)


class StepWatch:
    """A rank's heartbeat and its view of the step's first failure (see the module).

    Use as a context manager around the step (the heartbeat beats inside it).
    """

    def __init__(
        self,
        store: Store | None,
        rank: int,
        world: int,
        *,
        interval_s: float = HEARTBEAT_INTERVAL_S,
        window_s: float = DIAGNOSIS_WINDOW_S,
    ) -> None:
        self.rank = rank
        self.world = world
        self.interval_s = interval_s
        self.window_s = window_s
        self._store = store
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        call = self._call(lambda s: s.add(f"pipesim/calls/{rank}", 1))
        # Every rank counts its own step calls; ranks call steps in lockstep, so the counts
        # agree without a message, and a step never reads an earlier step's failure.
        self._prefix = f"pipesim/call-{call}" if call is not None else None

    @classmethod
    def of_default_group(cls, rank: int, world: int) -> StepWatch:
        """A watch over the default process group's store (silent if there is none)."""
        try:
            store: Store | None = dist.distributed_c10d._get_default_store()
        except (AttributeError, RuntimeError, ValueError):
            store = None
        return cls(store, rank, world)

    @contextmanager
    def beating(self) -> Iterator[StepWatch]:
        """Run the heartbeat for the duration of the block."""
        if self._store is not None:
            self._stopping.clear()
            self._thread = threading.Thread(
                target=self._beat, name=f"pipesim-heartbeat-{self.rank}", daemon=True
            )
            self._thread.start()
        try:
            yield self
        finally:
            self._stopping.set()
            if self._thread is not None:
                self._thread.join()
                self._thread = None

    # -- the first failure -----------------------------------------------------------------

    def publish(self, error: BaseException) -> None:
        """Tell the other ranks this rank failed with ``error`` (unless one failed first)."""
        if self._prefix is None:
            return
        failure = Failure(FailureKind.of(error), self.rank, str(error).splitlines()[0])
        key = f"{self._prefix}/failure"
        self._call(lambda s: s.compare_set(key, "", failure.encode()))

    def published(self) -> Failure | None:
        """The step's first failure, if a rank published one."""
        if self._prefix is None:
            return None
        key = f"{self._prefix}/failure"
        value = self._call(lambda s: s.get(key) if s.check([key]) else None)
        if not value:
            return None
        try:
            return Failure.decode(value.decode("utf-8", "replace"))
        except ValueError:
            return None

    # -- who stopped -----------------------------------------------------------------------

    def stopped_devices(self) -> list[int] | None:
        """The other ranks whose heartbeat did not move over the diagnosis window (None when
        the store cannot tell)."""
        if self._store is None:
            return None
        before = self._beats()
        time.sleep(self.window_s)
        after = self._beats()
        if before is None or after is None:
            return None
        return [r for r in range(self.world) if r != self.rank and after[r] == before[r]]

    def peer_failed(self, what: str, timeout_s: float, cause: BaseException | str) -> ExecutorError:
        """The error to raise when ``what`` (a wait on a peer) failed with ``cause``: the
        step's first failure if another rank published one, else this rank's diagnosis of who
        stopped responding (published for the others)."""
        first = self.published()
        if first is not None and first.device != self.rank:
            return first.error_on(self.rank)
        stopped = self.stopped_devices()
        first = self.published()  # another rank may have published during the diagnosis
        if first is not None and first.device != self.rank:
            return first.error_on(self.rank)
        message = (
            f"device {self.rank}: {what} failed after at most {timeout_s:g} s "
            f"({_first_sentence(cause)}); {_verdict(stopped, self.window_s)}"
        )
        error = PeerError(message)
        self.publish(error)
        return error

    # -- helpers ---------------------------------------------------------------------------

    def _beat(self) -> None:
        key = f"pipesim/heartbeat/{self.rank}"
        while not self._stopping.is_set():
            if self._call(lambda s: s.add(key, 1)) is None:
                return
            self._stopping.wait(self.interval_s)

    def _beats(self) -> list[int] | None:
        values = []
        for rank in range(self.world):
            key = f"pipesim/heartbeat/{rank}"
            value = self._call(lambda s, key=key: s.add(key, 0))  # type: ignore[misc]
            if value is None:
                return None
            values.append(int(value))
        return values

    def _call(self, operation: Callable[[Store], T]) -> T | None:
        """``operation`` on the store, or None when there is none or it fails (a dead store
        host must not turn a clear error into a confusing one)."""
        if self._store is None:
            return None
        try:
            with self._lock:
                return operation(self._store)
        except (RuntimeError, ValueError, OSError):
            return None


def _verdict(stopped: list[int] | None, window_s: float) -> str:
    if stopped is None:
        return "the peer may have died or stalled (no store to tell which device stopped)"
    if not stopped:
        return (
            "the peer may have died or stalled, though every other device is still responding "
            "(a slow or deadlocked peer: raise the timeout if steps are slow)"
        )
    names = ", ".join(str(d) for d in stopped)
    noun = "device" if len(stopped) == 1 else "devices"
    return (
        f"the peer may have died or stalled: {noun} {names} stopped responding "
        f"(no heartbeat for {window_s:g} s)"
    )


def _first_sentence(cause: BaseException | str) -> str:
    """The gist of a backend's error: its first line, without gloo's source-file prefix and
    the advice after the first sentence."""
    lines = str(cause).strip().splitlines()
    text = re.sub(r"^\[[^\]]*\]\s*", "", lines[0] if lines else "")
    head, _, _ = text.partition(". ")
    return head.rstrip(".") or type(cause).__name__
