"""Lanes: one machine cut into K pipeline devices that run at the same time.

A lane is one pipeline device of the concurrent backend (:mod:`executor.concurrent`). Every
lane has an equal share of the machine, so that K lanes are K devices of one kind, and a
pipeline of K lanes is compared with one lane alone (the GPipe paper's speedup over K = 1):

* :class:`CpuLanes`: a lane is a thread with ``threads_per_lane`` intra-op threads. PyTorch's
  intra-op setting is one per process (``torch.set_num_threads``), and OpenMP gives each
  calling thread a team of that size, so every lane computes with its own team of
  ``threads_per_lane`` threads; K lanes want K x ``threads_per_lane`` cores.
* :class:`CudaLanes`: a lane is a CUDA stream created in its own green context
  (``torch.cuda.green_contexts``, PyTorch 2.10 and later, CUDA driver 12.8 and later) holding
  ``sms_per_lane`` of the GPU's streaming multiprocessors. Kernels issued on a lane's stream
  run on that lane's SMs only. The lanes share the GPU's memory and its HBM bandwidth: a lane
  is a 1/K share of the compute, not of the memory system.

Where green contexts are missing (an older PyTorch, a driver before 12.8, no GPU), asking for
CUDA lanes is refused with a :class:`LaneError` naming what is missing: the concurrent backend
never falls back to streams that share every SM, which would measure something else.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from executor.errors import BackendError, first_line
from pipesim.common.limits import cpu_count

# Hopper's green contexts take SMs in groups of 8 (CUDA driver API, cuDevSmResourceSplitByCount:
# the minimum and granularity on compute capability 9.x); a lane's share is rounded down to it.
SM_GRANULARITY = 8


class LaneError(BackendError):
    """Lanes this machine cannot make (no green contexts, too few SMs or cores)."""


@dataclass(frozen=True)
class CpuLanes:
    """``count`` lanes of ``threads_per_lane`` intra-op threads each, as threads of this
    process."""

    count: int
    threads_per_lane: int

    def __post_init__(self) -> None:
        for name, value in (("count", self.count), ("threads_per_lane", self.threads_per_lane)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise LaneError(f"lanes: {name} must be an integer >= 1, got {value!r}")

    @property
    def device(self) -> torch.device:
        """Where the lanes' stages live."""
        return torch.device("cpu")

    def describe(self) -> str:
        """The lanes in words (reports)."""
        return f"{self.count} CPU lane(s) of {self.threads_per_lane} thread(s)"

    @contextmanager
    def budget(self) -> Iterator[None]:
        """Every lane's intra-op team at ``threads_per_lane`` while the block runs (the
        process's setting is restored afterwards)."""
        saved = torch.get_num_threads()
        torch.set_num_threads(self.threads_per_lane)
        try:
            yield
        finally:
            torch.set_num_threads(saved)


@dataclass(frozen=True)
class CudaLanes:
    """``count`` lanes on one GPU, each a stream of its own green context holding
    ``sms_per_lane`` SMs (of the GPU's ``device_sms``)."""

    count: int
    device: torch.device
    sms_per_lane: int
    device_sms: int
    streams: tuple[Any, ...]  # torch.cuda.Stream, one per lane
    contexts: tuple[Any, ...]  # the green contexts, kept alive with their streams

    def describe(self) -> str:
        """The lanes in words (reports)."""
        return (
            f"{self.count} green-context lane(s) of {self.sms_per_lane} SMs (of "
            f"{self.device_sms}) on {torch.cuda.get_device_name(self.device)}"
        )

    def stream(self, lane: int) -> Any:
        """Lane ``lane``'s stream."""
        return self.streams[lane]


Lanes = CpuLanes | CudaLanes


def cpu_lanes(count: int, threads_per_lane: int | None = None) -> CpuLanes:
    """``count`` CPU lanes; by default each with an equal share of this machine's cores
    (at least one thread)."""
    _check_count(count)
    threads = threads_per_lane if threads_per_lane is not None else max(1, cpu_count() // count)
    return CpuLanes(count, threads)


def _check_count(count: object) -> None:
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise LaneError(f"lanes: count must be an integer >= 1, got {count!r}")


def green_context_support() -> str | None:
    """Why CUDA lanes cannot be made here (None when they can): what is missing, in words."""
    if not torch.cuda.is_available():
        return "no CUDA device (torch.cuda.is_available() is False)"
    try:
        from torch.cuda import green_contexts
    except ImportError:
        return (
            f"this PyTorch ({torch.__version__}) has no torch.cuda.green_contexts (PyTorch 2.10 "
            "or later has it)"
        )
    if getattr(green_contexts, "SUPPORTED", True) is False:
        return (
            f"this PyTorch ({torch.__version__}) was built without green-context support "
            "(a CUDA 12.8 or later build has it)"
        )
    creator = getattr(green_contexts, "GreenContext", None)
    if creator is None:
        return f"this PyTorch ({torch.__version__}) has no GreenContext"
    if not hasattr(creator, "Stream") and not hasattr(creator, "set_context"):
        return (
            f"this PyTorch ({torch.__version__}) can neither make a green context's stream "
            "(GreenContext.Stream) nor make the context current (set_context)"
        )
    return None


def _new_green_context(sms: int, device_index: int) -> Any:
    """A green context of ``sms`` SMs, through whichever constructor this PyTorch offers
    (``GreenContext.create(num_sms=, device_id=)`` up to 2.12, ``GreenContext(num_sms=,
    device_id=)`` after)."""
    from torch.cuda import green_contexts

    maker: Any = green_contexts.GreenContext
    create = getattr(maker, "create", None)
    if create is not None:
        return create(num_sms=sms, device_id=device_index)
    return maker(num_sms=sms, device_id=device_index)


def _stream_of(context: Any, device: torch.device) -> Any:
    """A stream whose kernels run on ``context``'s SMs: its own ``Stream()`` where this
    PyTorch has it; otherwise a stream created while the context is current (some builds
    bind ``set_context`` and ``pop_context`` only), which belongs to it just the same."""
    if hasattr(context, "Stream"):
        return context.Stream()
    context.set_context()
    try:
        return torch.cuda.Stream(device=device)  # type: ignore[no-untyped-call]
    finally:
        context.pop_context()


def cuda_lanes(count: int, sms_per_lane: int | None = None, device_index: int = 0) -> CudaLanes:
    """``count`` lanes on GPU ``device_index``, each a green context of ``sms_per_lane`` SMs
    (by default the GPU's SMs divided by ``count``, rounded down to the granularity of 8).

    Raises :class:`LaneError` in one line where green contexts are missing (see
    :func:`green_context_support`) or the GPU has too few SMs."""
    _check_count(count)
    missing = green_context_support()
    if missing is not None:
        raise LaneError(f"CUDA lanes need green contexts: {missing}")
    device = torch.device("cuda", device_index)
    device_sms = torch.cuda.get_device_properties(device).multi_processor_count
    share = sms_per_lane
    if share is None:
        share = (device_sms // count) // SM_GRANULARITY * SM_GRANULARITY
    if share < SM_GRANULARITY or share * count > device_sms:
        raise LaneError(
            f"lanes: {count} lane(s) of {share} SMs do not fit {torch.cuda.get_device_name(device)}"
            f"'s {device_sms} SMs (a lane takes at least {SM_GRANULARITY})"
        )
    torch.cuda.init()  # type: ignore[no-untyped-call]
    contexts, streams = [], []
    for _ in range(count):
        try:
            context = _new_green_context(share, device_index)
            stream = _stream_of(context, torch.device("cuda", device_index))
        except (RuntimeError, TypeError, ValueError, AttributeError) as error:
            raise LaneError(
                f"CUDA lanes: a green context of {share} SMs failed: {first_line(error)}"
            ) from None
        contexts.append(context)
        streams.append(stream)
    return CudaLanes(count, device, share, device_sms, tuple(streams), tuple(contexts))


def lanes_for(count: int, device: torch.device) -> Lanes:
    """Default lanes for stages living on ``device``: CPU threads or green contexts, an equal
    share of the machine each."""
    if device.type == "cuda":
        return cuda_lanes(count, device_index=device.index or 0)
    if device.type != "cpu":
        raise LaneError(f"lanes run on cpu or cuda, the stages live on {device.type}")
    return cpu_lanes(count)
