"""One unit of pipeline work: a stage runs a forward or a backward piece for a micro-batch.

The text form is PyTorch's (``torch.distributed.pipelining``): ``2F0`` is stage 2, forward,
micro-batch 0; ``0I3``, ``1W3``, ``3B1``. ``parse_action(str(a)) == a`` always.
"""

from __future__ import annotations

import re
from enum import Enum
from typing import NamedTuple

from pipesim.errors import ScheduleError


class Kind(Enum):
    """What an action computes.

    ``B`` is the full backward. The zero-bubble schedules split it into ``I`` (the gradient
    with respect to the stage input, on the critical path) and ``W`` (the gradient with respect
    to the stage weights, which can wait): B = I + W.
    """

    F = "F"
    B = "B"
    I = "I"  # noqa: E741 - the paper's and PyTorch's name for the input-gradient pass
    W = "W"

    # Members are singletons: identity hashing is correct and much faster than Enum's
    # name-based hash, which every Action hash would otherwise pay.
    __hash__ = object.__hash__

    @property
    def is_backward(self) -> bool:
        """True for B, I and W."""
        return self is not Kind.F


class UpdateRule(Enum):
    """When weights change, and so which weights each micro-batch sees.

    * ``flush``: one weight version; the optimizer steps on each device after its last action
      of the step (GPipe, 1F1B, interleaved, zero-bubble, DualPipe).
    * ``2bw``: double-buffered weights and no flush: W(t+1) = W(t) - lr * grad f(W(t-1))
      (PipeDream-2BW).
    * ``async``: no flush, weight stashing: device d computes with weights K-1-d steps old
      (PipeDream).
    """

    FLUSH = "flush"
    TWO_BW = "2bw"
    ASYNC = "async"


_ACTION_TEXT = re.compile(r"([0-9]+)([FBIW])([0-9]+)")  # ASCII digits only: \d takes "１"


class _ActionFields(NamedTuple):
    stage: int
    kind: Kind
    microbatch: int


class Action(_ActionFields):
    """``stage`` runs ``kind`` for ``microbatch``; immutable and hashable.

    A checked named tuple rather than a dataclass: schedules of thousands of actions are built,
    validated and simulated in sweeps, and tuple construction and hashing are several times
    cheaper. The fields are checked on construction all the same.
    """

    __slots__ = ()

    def __new__(cls, stage: int, kind: Kind, microbatch: int) -> Action:
        if type(stage) is not int or stage < 0:
            raise ScheduleError(f"action stage must be an integer >= 0, got {stage!r}")
        if type(kind) is not Kind:
            raise ScheduleError(f"action kind must be a Kind (F, B, I or W), got {kind!r}")
        if type(microbatch) is not int or microbatch < 0:
            raise ScheduleError(f"action microbatch must be an integer >= 0, got {microbatch!r}")
        return tuple.__new__(cls, (stage, kind, microbatch))

    def __str__(self) -> str:
        return f"{self.stage}{self.kind.value}{self.microbatch}"

    def __repr__(self) -> str:
        return f"Action({self})"


def parse_action(text: str) -> Action:
    """Parse ``'2F0'`` into ``Action(2, Kind.F, 0)``; surrounding spaces are allowed.

    Raises :class:`ScheduleError` naming the text when it is not ``<stage><F|B|I|W><mb>``.
    """
    match = _ACTION_TEXT.fullmatch(text.strip())
    if match is None:
        raise ScheduleError(
            f"action {text!r} is not of the form <stage><F|B|I|W><microbatch>, e.g. 2F0"
        )
    stage, kind, microbatch = match.groups()
    return Action(int(stage), Kind(kind), int(microbatch))
