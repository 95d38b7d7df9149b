"""The concurrent backend: K pipeline devices as K lanes of one machine, running at once.

Each pipeline device is a lane (:mod:`executor.lanes`) that runs its own action list in the
schedule's order. An action starts when what it depends on has finished on its lane: the
message it receives (a copy made on the receiving lane, as a device-to-device transfer would
be) and its own lane's earlier actions. Nothing imposes a global order:

* CPU lanes are threads. A lane waits for a message on a condition; every lane has its own
  intra-op team (:class:`~executor.lanes.CpuLanes`). Heavy tensor operations release the GIL,
  so two lanes compute at the same time on two cores.
* CUDA lanes are streams, each in its own green context. One host thread enqueues every
  lane's actions in a dependency-respecting order; a lane that consumes a message waits for
  the producer's CUDA event, then copies the tensor on its own stream. Nothing synchronizes
  the host during the step, so the lanes' kernels overlap on the GPU as far as their
  dependencies allow. Every action and every transfer is timed with CUDA events.

Either way the gradients are the unpipelined model's (the same stage runners and worker as the
other backends; tests hold it for every schedule).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from executor.clock import Clock
from executor.copies import gradients_before, step_loss, sum_in_process
from executor.errors import ExecutorError, PeerError
from executor.lanes import CpuLanes, CudaLanes, Lanes, lanes_for
from executor.messages import Message
from executor.runtime import StepResult, make_runners, timeline_from
from executor.stage import LossFn
from executor.stash import StashMeter
from executor.worker import DeviceRecord, DeviceWorker
from pipesim.schedules import Schedule


class LaneAborted(ExecutorError):
    """Another lane failed: this lane stops at its next wait (the first error is raised)."""


class ThreadTransport:
    """Messages between CPU lanes: the sender leaves the tensor, the receiver waits for it on
    a condition and copies it (the transfer, paid on the receiving lane)."""

    def __init__(self, timeout_s: float) -> None:
        self._mailbox: dict[Message, torch.Tensor] = {}
        self._ready = threading.Condition()
        self._timeout_s = timeout_s
        self.failed: BaseException | None = None

    def send(self, tensor: torch.Tensor, message: Message, destination: int) -> None:
        with self._ready:
            self._mailbox[message] = tensor
            self._ready.notify_all()

    def receive(self, message: Message, source: int) -> torch.Tensor:
        deadline = time.monotonic() + self._timeout_s
        with self._ready:
            while message not in self._mailbox:
                if self.failed is not None:
                    raise LaneAborted(f"lane waiting for {message}: another lane failed")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise PeerError(
                        f"waited {self._timeout_s:g} s for {message} from device {source}"
                    )
                self._ready.wait(min(left, 0.5))
            tensor = self._mailbox.pop(message)
        return tensor.clone()

    def fail(self, error: BaseException) -> None:
        """Record the first failure and wake every waiting lane."""
        with self._ready:
            if self.failed is None:
                self.failed = error
            self._ready.notify_all()


@dataclass
class _Sent:
    tensor: torch.Tensor
    produced: Any  # torch.cuda.Event on the sender's lane


class StreamTransport:
    """Messages between CUDA lanes: the sender records an event on its lane; the receiver's
    lane waits for it and copies the tensor on its own stream. Transfer times come from events
    (:meth:`resolve`), not from the host, which runs ahead of the GPU."""

    def __init__(self) -> None:
        self._mailbox: dict[Message, _Sent] = {}
        self.events: dict[Message, tuple[Any, Any, Any]] = {}  # produced, ready, arrived

    def send(self, tensor: torch.Tensor, message: Message, destination: int) -> None:
        produced = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        produced.record(torch.cuda.current_stream(tensor.device))
        self._mailbox[message] = _Sent(tensor, produced)

    def receive(self, message: Message, source: int) -> torch.Tensor:
        sent = self._mailbox.pop(message)
        stream = torch.cuda.current_stream(sent.tensor.device)
        ready = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        ready.record(stream)
        stream.wait_event(sent.produced)
        # The producer's memory is read on this lane: the allocator must not hand it back to
        # the producer's lane before the copy is done.
        sent.tensor.record_stream(stream)
        copy = sent.tensor.clone()
        arrived = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        arrived.record(stream)
        self.events[message] = (sent.produced, ready, arrived)
        return copy

    def resolve(self, records: Sequence[DeviceRecord], origin: Any) -> None:
        """Replace the host's stamps of every transfer with its events' times (call after
        the lanes have finished)."""
        for record in records:
            for message in list(record.sent_s):
                if message in self.events:
                    record.sent_s[message] = origin.elapsed_time(self.events[message][0]) / 1e3
            for message in list(record.received_s):
                if message in self.events:
                    _, ready, arrived = self.events[message]
                    record.waited_s[message] = origin.elapsed_time(ready) / 1e3
                    record.received_s[message] = origin.elapsed_time(arrived) / 1e3


def run_concurrent_step(
    schedule: Schedule,
    stages: Sequence[nn.Module],
    xs: Sequence[torch.Tensor],
    ys: Sequence[torch.Tensor],
    loss_fn: LossFn,
    *,
    lanes: Lanes | None = None,
    weights: Mapping[int, Mapping[str, torch.Tensor]] | None = None,
    step: int = 0,
    timeout_s: float = 60.0,
    check_finite: bool = False,
    reduce_copies: bool = True,
) -> StepResult:
    """One step with every pipeline device a lane of this machine, all running at once; then,
    with copies of the model and ``reduce_copies``, their gradients summed
    (:mod:`executor.copies`).

    ``lanes`` are made once and reused across steps (green contexts are costly to create); by
    default, lanes with an equal share of the machine the stages live on. Every stage must
    live on that one device (CPU, or the lanes' GPU)."""
    meters = {d: StashMeter() for d in range(schedule.devices)}
    runners = make_runners(schedule, stages, loss_fn, None, weights, meters)
    before = gradients_before(schedule, runners) if reduce_copies else {}
    device = next(iter(runners.values())).device
    for s, runner in runners.items():
        if runner.device != device:
            raise ExecutorError(
                f"the concurrent backend runs every stage on one device: stage 0 is on "
                f"{device}, stage {s} on {runner.device}"
            )
    if not (isinstance(timeout_s, int | float) and math.isfinite(timeout_s) and timeout_s > 0):
        raise ExecutorError(f"timeout_s must be seconds > 0, got {timeout_s!r}")
    if lanes is not None and not isinstance(lanes, CpuLanes | CudaLanes):
        raise ExecutorError(
            f"lanes must be made by executor.cpu_lanes or executor.cuda_lanes, got {lanes!r}"
        )
    chosen = lanes if lanes is not None else lanes_for(schedule.devices, device)
    if chosen.count < schedule.devices:
        raise ExecutorError(
            f"{chosen.describe()} for a schedule of K={schedule.devices} devices: one lane "
            "per device"
        )
    if isinstance(chosen, CudaLanes):
        if device.type != "cuda" or (device.index or 0) != (chosen.device.index or 0):
            raise ExecutorError(f"the CUDA lanes are on {chosen.device}, the stages on {device}")
        streams = StreamTransport()
        clock = Clock(device)  # its origin event is on the current (caller's) stream
        workers = _workers(schedule, runners, streams, clock, xs, ys, step, check_finite)
        peak: int | None = _run_on_streams(schedule, workers, streams, clock, chosen)
    else:
        if device.type != "cpu":
            raise ExecutorError(f"CPU lanes for stages on {device}: make CUDA lanes for a GPU")
        threads = ThreadTransport(timeout_s)
        clock = Clock(torch.device("cpu"))
        workers = _workers(schedule, runners, threads, clock, xs, ys, step, check_finite)
        _run_on_threads(schedule, workers, threads, chosen, timeout_s)
        peak = None  # no allocator to read on CPU
    if reduce_copies:
        sum_in_process(schedule, runners, before)
    loss = step_loss(schedule, runners) or 0.0
    return StepResult(
        loss,
        timeline_from([w.record for w in workers], schedule),
        tuple(meters[d].peak_bytes for d in range(schedule.devices)),
        # One allocator serves every lane: its peak is the whole device's, not a lane's.
        tuple(None for _ in range(schedule.devices)),
        peak,
    )


def _workers(
    schedule: Schedule,
    runners: Mapping[int, Any],
    transport: Any,
    clock: Clock,
    xs: Sequence[torch.Tensor],
    ys: Sequence[torch.Tensor],
    step: int,
    check_finite: bool,
) -> list[DeviceWorker]:
    workers = []
    for device in range(schedule.devices):
        own = {s: r for s, r in runners.items() if schedule.device_of(s) == device}
        record = DeviceRecord(device, clock)
        workers.append(
            DeviceWorker(
                device, schedule, own, transport, record, step, xs, ys, check_finite=check_finite
            )
        )
    return workers


def _run_on_threads(
    schedule: Schedule,
    workers: Sequence[DeviceWorker],
    transport: ThreadTransport,
    lanes: CpuLanes,
    timeout_s: float,
) -> None:
    """Every worker's actions on a thread of its own, all at once; the first failure raised."""
    finished = [threading.Event() for _ in workers]

    def lane(worker: DeviceWorker) -> None:
        try:
            for action in schedule.device_actions[worker.device]:
                if transport.failed is not None:
                    return  # another lane failed, or the step was interrupted: stop here
                worker.run(action)
        except BaseException as error:  # every failure ends every lane, the first is raised
            transport.fail(error)
        finally:
            finished[worker.device].set()

    threads = [
        # Not daemons: an interpreter that exits while a lane is inside a torch operation
        # aborts ("terminate called without an active exception"); it waits for them instead,
        # and a lane told to stop ends after its current action.
        threading.Thread(target=lane, args=(w,), name=f"pipesim-lane-{w.device}")
        for w in workers
    ]
    started: list[int] = []  # a Ctrl-C may come before every lane has started
    with lanes.budget():
        try:
            for index, thread in enumerate(threads):
                thread.start()
                started.append(index)
            # Each lane's own event, not Thread.join: a join interrupted by Ctrl-C can leave
            # its thread marked as stopped while it still runs (CPython issue 90882).
            for done in finished:
                while not done.wait(0.1):
                    pass
        except BaseException as error:  # Ctrl-C in this thread: stop the lanes, then re-raise
            transport.fail(error)
            _wait_despite_interrupts([finished[i] for i in started], timeout_s)
            raise
    for thread in threads:
        thread.join()  # each has set its event: ending now
    if transport.failed is not None:
        raise transport.failed


def _wait_despite_interrupts(finished: Sequence[threading.Event], timeout_s: float) -> None:
    """Wait (at most ``timeout_s``) for lanes told to stop: each ends after the action it is
    running. A second Ctrl-C meanwhile does not abandon them (a lane thread still inside a
    torch operation when the interpreter exits aborts it)."""
    deadline = time.monotonic() + timeout_s
    for done in finished:
        while not done.is_set() and time.monotonic() < deadline:
            try:
                done.wait(0.1)
            except KeyboardInterrupt:
                continue  # already stopping


def _run_on_streams(
    schedule: Schedule,
    workers: Sequence[DeviceWorker],
    transport: StreamTransport,
    clock: Clock,
    lanes: CudaLanes,
) -> int:
    """Every worker's actions enqueued on its lane's stream in one dependency-respecting
    order; returns the GPU's allocator peak over the step."""
    device = lanes.device
    caller = torch.cuda.current_stream(device)
    start = torch.cuda.Event()  # type: ignore[no-untyped-call]
    start.record(caller)
    used = [lanes.stream(d) for d in range(schedule.devices)]
    for stream in used:
        stream.wait_event(start)  # the inputs, made on the caller's stream, are ready
    torch.cuda.reset_peak_memory_stats(device)
    for action in schedule.execution_order():
        lane = schedule.device_of(action.stage)
        with torch.cuda.stream(used[lane]):
            workers[lane].run(action)
    for stream in used:
        done = torch.cuda.Event()  # type: ignore[no-untyped-call]
        done.record(stream)
        caller.wait_event(done)  # the caller's later work (the optimizer) sees every gradient
    torch.cuda.synchronize(device)
    if clock.origin_event is not None:
        transport.resolve([w.record for w in workers], clock.origin_event)
    return torch.cuda.max_memory_allocated(device)
