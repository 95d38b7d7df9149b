"""Executor errors: each names the stage, the micro-batch and the device involved."""

from __future__ import annotations

from pipesim.errors import LimitError as LimitError
from pipesim.errors import PipesimError, RunFailed


class ExecutorError(RunFailed, RuntimeError):
    """A pipelined step failed while running (a stage raised, a peer vanished): a run that was
    asked for properly but failed, so the command lines report it in one line, exit status 1."""


class StageError(ExecutorError):
    """A stage's forward or backward raised; the original exception is the ``__cause__``."""


class PeerError(ExecutorError):
    """A peer process stopped answering: it died, or waited past the timeout."""


class NonFiniteError(ExecutorError):
    """An action produced NaN or Inf: the message names the device, the action (stage, kind,
    micro-batch) and the step where it first appeared. On the other ranks of a distributed
    step the same message arrives through the process group's store."""


class SplitError(PipesimError):
    """A model cannot be cut as asked (bad partition, too few layers, uneven micro-batches)."""


class BackendError(PipesimError):
    """An unknown backend or device kind, or one this machine cannot run (no CUDA device)."""


def first_line(error: BaseException) -> str:
    """The first line of ``error``'s message, or its class's name when it has none: what a
    one-line report quotes of an exception from torch (whose messages run to many lines)."""
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__
