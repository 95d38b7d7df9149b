"""How pipesim's processes end: a ``kill`` like Ctrl-C, and no worker outliving its parent.

* :func:`terminate_as_interrupt` makes SIGTERM and SIGHUP (``kill``, a closed terminal, a
  batch system's stop) raise ``KeyboardInterrupt`` in the main thread, so they take the path
  Ctrl-C takes: what finished is saved, temporary directories are removed, worker processes are
  stopped, one line is printed and the exit status is 130.
* :func:`stop_signals_deferred` holds Ctrl-C and the stop signals back while something that must
  not be cut half-way runs (a Dask cluster's start-up), then says which arrived; Ctrl-C is
  blocked meanwhile, so the processes started inside never see a terminal's Ctrl-C.
* :func:`end_with_parent` makes a worker process (a sweep's pool worker, a validation rank, a
  rank under torchrun) exit within a second of its parent's death, even a ``kill -9`` that
  gave the parent no chance to stop it: a daemon thread watches the parent's process id, which
  changes when the parent is gone (the orphan is adopted by init or a subreaper).

Both are standard library only: every command and the executor share them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from types import FrameType

from application.command_line import EXIT_INTERRUPTED

# The signals that ask a process to stop, besides Ctrl-C's SIGINT.
STOP_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name)
)
PARENT_WATCH_INTERVAL_S = 0.2


class StopSignal(KeyboardInterrupt):
    """A stop signal taken as Ctrl-C; ``name`` says which (``SIGTERM``), for the last line."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


def interrupt_reason(interrupt: KeyboardInterrupt) -> str:
    """What stopped the process, for its last line: ``Ctrl-C`` or the stop signal's name."""
    return interrupt.name if isinstance(interrupt, StopSignal) else "Ctrl-C"


@contextlib.contextmanager
def signals_handled(
    handler: Callable[[int, FrameType | None], object], signals: Iterable[int]
) -> Iterator[None]:
    """Inside the block, ``handler`` takes each of ``signals`` that is not ignored (an ignored
    one, as under ``nohup``, stays ignored); the previous handlers come back afterwards.
    Outside the main thread this does nothing (Python delivers signals to the main thread
    only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {}
    for number in signals:
        if signal.getsignal(number) is not signal.SIG_IGN:
            previous[number] = signal.signal(number, handler)
    try:
        yield
    finally:
        for number, earlier in previous.items():
            signal.signal(number, earlier)


@contextlib.contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """Inside the block, SIGTERM and SIGHUP raise :class:`StopSignal` (a
    ``KeyboardInterrupt``) in the main thread (see :func:`signals_handled`)."""

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise StopSignal(signal.Signals(signum).name)

    with signals_handled(interrupt, STOP_SIGNALS):
        yield


def interrupts_in_one_line(run: Callable[[], int], prog: str) -> int:
    """``run()``'s exit status, with Ctrl-C, SIGTERM and SIGHUP ending it in one line,
    ``PROG: interrupted (Ctrl-C)``, exit 130: for a module run as a command of its own
    (``python -m validation.layer_timing``), as ``pipesim``'s main does for its commands."""
    try:
        with terminate_as_interrupt():
            return run()
    except KeyboardInterrupt as interrupt:
        sys.stderr.write(f"{prog}: interrupted ({interrupt_reason(interrupt)})\n")
        return EXIT_INTERRUPTED


class DeferredStops:
    """The stop signals that arrived while :func:`stop_signals_deferred` held them back."""

    def __init__(self) -> None:
        self.received: list[int] = []

    def record(self, signum: int, frame: FrameType | None) -> None:
        """A signal handler: note the signal, do nothing else."""
        self.received.append(signum)

    def __bool__(self) -> bool:
        return bool(self.received)

    def interrupt(self) -> KeyboardInterrupt:
        """The interrupt the first signal received would have raised (Ctrl-C's or a
        :class:`StopSignal`)."""
        first = self.received[0]
        if first == signal.SIGINT:
            return KeyboardInterrupt()
        return StopSignal(signal.Signals(first).name)


@contextlib.contextmanager
def stop_signals_deferred() -> Iterator[DeferredStops]:
    """Inside the block, SIGINT, SIGTERM and SIGHUP (those not ignored) are only recorded in
    the :class:`DeferredStops` yielded, for the caller to act on afterwards. SIGINT is also
    blocked in this thread meanwhile: the threads started inside inherit the block, and so do
    the processes they start, which never see a terminal's Ctrl-C (a Ctrl-C meant for the
    parent, which stops them). A SIGINT that came while blocked is recorded on leaving.
    Outside the main thread this records nothing."""
    stops = DeferredStops()
    if threading.current_thread() is not threading.main_thread():
        yield stops
        return
    block = signal.getsignal(signal.SIGINT) is not signal.SIG_IGN
    with signals_handled(stops.record, (signal.SIGINT, *STOP_SIGNALS)):
        if block:
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            yield stops
        finally:
            if block:
                if signal.SIGINT in signal.sigpending() and signal.SIGINT not in stops.received:
                    stops.received.append(signal.SIGINT)
                # a pending SIGINT is delivered now, to the recording handler
                signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def end_with_parent(
    line: str | None = None, status: int = 1, then: Callable[[], object] | None = None
) -> None:
    """Exit this process (status ``status``, after writing ``line`` to stderr if given) as soon
    as its parent is gone. ``os._exit``: no cleanup runs but ``then`` (say, removing the
    temporary directory the dead parent would have removed), since the parent that would
    collect this process's work is dead and a rank's teardown would wait for peers that are
    going too. Call it early in the worker; it returns at once."""
    parent = os.getppid()
    if parent <= 1:
        return  # already an orphan (or started by init): nothing to watch

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_WATCH_INTERVAL_S)
        if line:
            with contextlib.suppress(OSError, ValueError):
                sys.stderr.write(f"{line}\n")
                sys.stderr.flush()
        if then is not None:
            with contextlib.suppress(Exception):
                then()
        os._exit(status)

    threading.Thread(target=watch, name="pipesim-parent-watch", daemon=True).start()
