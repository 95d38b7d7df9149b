"""The kinds of run the executor offers, as Enums (no torch import, so the launcher and
validation can name them before torch is loaded).

* :class:`Backend`: how the devices of one step are driven: ``local`` (every device in this
  process, one action at a time: the fast path for tests), ``concurrent`` (every device a lane
  of this machine, all running at once: threads on CPU, green-context streams on one GPU; see
  :mod:`executor.concurrent`) or ``distributed`` (one torch.distributed rank per device).
* :class:`DeviceKind`: what the stages run on: ``cpu`` (gloo between ranks) or ``cuda`` (NCCL).

Both are ``StrEnum``: their values are the strings the command lines and the JSON files use,
and ``Backend("local")`` parses one (see :func:`parse_backend` for a one-line error).
"""

from __future__ import annotations

from enum import StrEnum
from typing import TypeVar

from executor.errors import BackendError
from pipesim.errors import PipesimError


class Backend(StrEnum):
    """How one step's devices are driven."""

    LOCAL = "local"
    CONCURRENT = "concurrent"
    DISTRIBUTED = "distributed"


class DeviceKind(StrEnum):
    """What the stages compute on; over torch.distributed, CPU ranks talk gloo, CUDA ranks
    NCCL."""

    CPU = "cpu"
    CUDA = "cuda"

    @property
    def process_group_backend(self) -> str:
        """torch.distributed's backend name for ranks of this kind."""
        return "nccl" if self is DeviceKind.CUDA else "gloo"


Member = TypeVar("Member", bound=StrEnum)


def parse_member(
    kind: type[Member],
    value: Member | str,
    field: str,
    error: type[PipesimError] = BackendError,
) -> Member:
    """``value`` as a member of ``kind``; anything else is an ``error`` in one line naming
    ``field``, the choices and the value."""
    try:
        return kind(value)
    except ValueError:
        choices = ", ".join(member.value for member in kind)
        raise error(f"{field} must be one of {choices}, got {value!r}") from None


def parse_backend(value: Backend | str, field: str = "backend") -> Backend:
    """``value`` as a :class:`Backend`; anything else is a :class:`BackendError`."""
    return parse_member(Backend, value, field)


def parse_device_kind(value: DeviceKind | str, field: str = "device") -> DeviceKind:
    """``value`` as a :class:`DeviceKind`; anything else is a :class:`BackendError`."""
    try:
        return DeviceKind(value)
    except ValueError:
        choices = " or ".join(d.value for d in DeviceKind)
        raise BackendError(f"{field} must be {choices}, got {value!r}") from None
