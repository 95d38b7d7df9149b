"""Ctrl-C that is never lost while torch computes in this thread.

Python drops a ``KeyboardInterrupt`` raised while a finalizer runs: torch frees memory through
weakref finalizers (the executor's stash meter too), and the interrupt becomes "Exception
ignored in: <finalize object>" on stderr while the run goes on. :func:`interrupts_that_stick`
raises it again until it gets through. Used by ``python -m executor`` and by the validation
that computes in its own process (:mod:`validation.lane_session`).
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType

from application.lifetime import STOP_SIGNALS, StopSignal, signals_handled


@contextlib.contextmanager
def interrupts_that_stick() -> Iterator[None]:
    """Ctrl-C (and SIGTERM or SIGHUP, taken the same way) that is never lost. Python drops a
    KeyboardInterrupt raised while a finalizer runs (torch frees memory through weakref
    finalizers: "Exception ignored in: <finalize object>" and a traceback on stderr), and the
    run went on. After the first signal a timer raises it again every half second until it
    reaches :func:`_main`, and the dropped one prints nothing. An ignored signal (SIGINT in a
    background job, SIGHUP under nohup) stays ignored."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(
        signal, "setitimer"
    ):
        yield
        return

    def interrupted(signum: int, frame: FrameType | None) -> None:
        stop: KeyboardInterrupt = (
            KeyboardInterrupt()
            if signum == signal.SIGINT
            else StopSignal(signal.Signals(signum).name)
        )

        def again(signum: int, frame: FrameType | None) -> None:
            raise stop

        signal.signal(signal.SIGALRM, again)
        signal.setitimer(signal.ITIMER_REAL, 0.5, 0.5)
        raise stop

    previous_hook = sys.unraisablehook

    def quiet(unraisable: sys.UnraisableHookArgs) -> None:
        if unraisable.exc_type is None or not issubclass(unraisable.exc_type, KeyboardInterrupt):
            previous_hook(unraisable)  # a dropped interrupt is raised again: not reported

    with signals_handled(interrupted, (signal.SIGINT, *STOP_SIGNALS)):
        previous_alarm = signal.getsignal(signal.SIGALRM)
        sys.unraisablehook = quiet
        try:
            yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous_alarm)
            sys.unraisablehook = previous_hook
