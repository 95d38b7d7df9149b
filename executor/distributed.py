"""The torch.distributed backend: one process per device, tensors sent point to point.

Each rank runs its device's actions in list order. Sends are non-blocking; receives are posted
in the sending peer's order, so the two ends always agree on which message is which (NCCL
matches point-to-point operations by order, not by tag). With gloo every receive whose shape is
known is posted when the step starts, so data flows while the receiver computes (gloo moves a
message only once its receive is posted). With NCCL, whose operations on one communicator run
in order, a receive is posted only when it is needed, with the ones before it from that peer.

Shapes are exchanged, not declared (see :mod:`executor.shapes`).

Every wait is bounded by ``timeout_s``. A peer that died or stalled makes the others raise a
:class:`~executor.errors.PeerError` naming the device that stopped responding, and the first
failure of a step (a NaN, a stage that raised) ends every rank with that failure's line, not
with a hang (see :mod:`executor.watch`).
"""

from __future__ import annotations

import contextlib
import math
import os
import pickle
import queue
import socket
import threading
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from executor.clock import Clock
from executor.copies import gradients_before, step_loss, sum_across_ranks
from executor.errors import BackendError, ExecutorError
from executor.messages import Message, incoming_order
from executor.runtime import StepResult, make_runners, timeline_from
from executor.shapes import HEADER_LENGTH, ShapeBook, from_header, header
from executor.stage import LossFn
from executor.stash import StashMeter
from executor.watch import StepWatch
from executor.worker import DeviceRecord, DeviceWorker
from pipesim.schedules import Schedule

READY_DIR_VARIABLE = "PIPESIM_READY_DIR"


class _BackgroundSender:
    """Posts sends from a thread of its own, in order.

    gloo's ``isend`` can block its caller for milliseconds (it writes to the peer's connection
    under a lock that gloo's I/O thread also takes while it moves other messages), which would
    stall the computing thread; posting from here keeps the computation going while the send
    order, and so the receivers' matching, stays the one the schedule gives.
    """

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[tuple[torch.Tensor, int, str] | None] = queue.SimpleQueue()
        self.works: list[tuple[Any, str, torch.Tensor]] = []
        self.error: BaseException | None = None
        self._abandoned = False
        self._thread = threading.Thread(target=self._run, name="pipesim-sender", daemon=True)
        self._thread.start()

    def submit(self, tensor: torch.Tensor, destination: int, what: str) -> None:
        self._queue.put((tensor, destination, what))

    def abandon(self) -> None:
        """Drop the queued sends and let the thread end (after a failure; not joined, as it
        may be inside a send to a peer that stopped)."""
        self._abandoned = True
        self._queue.put(None)

    def close(self) -> list[tuple[Any, str, torch.Tensor]]:
        """Stop after the queued sends; their works (to wait on) in order."""
        self._queue.put(None)
        self._thread.join()
        if self.error is not None:
            raise ExecutorError(f"posting a send failed: {self.error}") from self.error
        return self.works

    def _run(self) -> None:
        while (item := self._queue.get()) is not None:
            tensor, destination, what = item
            if self.error is not None or self._abandoned:
                continue
            try:
                self.works.append((dist.isend(tensor, destination), what, tensor))
            except BaseException as error:  # handed to the computing thread in close()
                self.error = error


class DistributedTransport:
    """Point-to-point sends and ordered receives between this rank and its peers."""

    def __init__(
        self,
        schedule: Schedule,
        device: int,
        step: int,
        book: ShapeBook,
        tensor_device: torch.device,
        timeout_s: float,
        watch: StepWatch,
    ) -> None:
        self.schedule = schedule
        self.device = device
        self.watch = watch
        self.timeout_s = timeout_s
        self.tensor_device = tensor_device
        self.order = incoming_order(schedule, device, step)
        self.posted: dict[int, int] = {peer: 0 for peer in self.order}
        self.pending: dict[Message, tuple[Any, torch.Tensor]] = {}
        self.book = book
        self.sends: list[tuple[Any, str, torch.Tensor]] = []
        self.sender = _BackgroundSender() if dist.get_backend() == "gloo" else None

    # -- sending ---------------------------------------------------------------------------

    def send(self, tensor: torch.Tensor, message: Message, destination: int) -> None:
        payload = tensor.contiguous()
        if message.is_activation:
            shape = (tuple(payload.shape), payload.dtype)
            known = self.book.known.setdefault(message.boundary, shape)
            if known != shape:
                raise ExecutorError(
                    f"stage {message.boundary}'s output changed from {known[0]} {known[1]} to "
                    f"{shape[0]} {shape[1]}; micro-batches must keep one shape"
                )
            if message.boundary not in self.book.announced:
                self.book.announced.add(message.boundary)
                self._post_send(header(payload).to(self.tensor_device), message, destination)
        self._post_send(payload, message, destination)

    def _post_send(self, tensor: torch.Tensor, message: Message, destination: int) -> None:
        what = f"sending {message} to device {destination}"
        if self.sender is not None:
            self.sender.submit(tensor, destination, what)
        else:
            try:
                self.sends.append((dist.isend(tensor, destination), what, tensor))
            except RuntimeError as error:  # the pair to a dead peer is closed
                raise self.watch.peer_failed(what, self.timeout_s, error) from error

    def abandon(self) -> None:
        """After a failure: stop the sending thread; the step's works are dropped."""
        if self.sender is not None:
            self.sender.abandon()
            self.sender = None

    def finish(self) -> None:
        """Wait until every send of the step completed."""
        if self.sender is not None:
            sender, self.sender = self.sender, None
            try:
                self.sends.extend(sender.close())
            except ExecutorError as error:
                raise self.watch.peer_failed(
                    "posting a send", self.timeout_s, error.__cause__ or error
                ) from error
        for work, what, _ in self.sends:
            self._wait(work, what)
        self.sends.clear()

    # -- receiving -------------------------------------------------------------------------

    def post_known(self) -> None:
        """Post, per peer and in its order, every receive whose shape is already known."""
        for source, incoming in self.order.items():
            while self.posted[source] < len(incoming):
                message = incoming[self.posted[source]]
                if message.boundary not in self.book.known:
                    break
                self._post(message, source)
                self.posted[source] += 1

    def receive(self, message: Message, source: int) -> torch.Tensor:
        if message not in self.pending:
            queue = self.order.get(source, [])
            if message not in queue:
                raise ExecutorError(f"device {self.device} expects no {message} from {source}")
            target = queue.index(message)
            while self.posted[source] <= target:
                self._post(queue[self.posted[source]], source)
                self.posted[source] += 1
        work, buffer = self.pending.pop(message)
        self._wait(work, f"waiting for {message} from device {source}")
        return buffer

    def _post(self, message: Message, source: int) -> None:
        known = self.book.known.get(message.boundary)
        if message.is_activation and known is None:
            announced = torch.empty(HEADER_LENGTH, dtype=torch.int64, device=self.tensor_device)
            self._wait(
                self._irecv(announced, source, message),
                f"waiting for the shape of {message} from device {source}",
            )
            known = from_header(announced)
            self.book.known[message.boundary] = known
        if known is None:
            raise ExecutorError(
                f"device {self.device} cannot size {message}: stage {message.boundary}'s "
                "output shape is unknown here"
            )
        shape, dtype = known
        buffer = torch.empty(shape, dtype=dtype, device=self.tensor_device)
        self.pending[message] = (self._irecv(buffer, source, message), buffer)

    def _irecv(self, buffer: torch.Tensor, source: int, message: Message) -> Any:
        try:
            return dist.irecv(buffer, source)
        except RuntimeError as error:  # the pair to a dead peer is closed
            raise self.watch.peer_failed(
                f"posting the receive of {message} from device {source}", self.timeout_s, error
            ) from error

    def _wait(self, work: Any, what: str) -> None:
        _bounded(work, self.watch, self.timeout_s, what)


def run_distributed_step(
    schedule: Schedule,
    stages: Sequence[nn.Module],
    xs: Sequence[torch.Tensor],
    ys: Sequence[torch.Tensor],
    loss_fn: LossFn,
    *,
    weights: Mapping[int, Mapping[str, torch.Tensor]] | None = None,
    step: int = 0,
    timeout_s: float = 60.0,
    book: ShapeBook | None = None,
    check_finite: bool = False,
    reduce_copies: bool = True,
) -> StepResult:
    """This rank's part of one step; every rank returns the same :class:`StepResult`. With
    copies of the model and ``reduce_copies``, every rank then joins the all-reduce that sums
    the copies' gradients (:mod:`executor.copies`).

    A failure on any rank (a stage that raised, a non-finite output, a peer that stopped
    responding) is published to the other ranks before it is raised here; see
    :mod:`executor.watch` for how they learn of it and whom they name.
    """
    if not dist.is_initialized():
        raise ExecutorError(
            "the distributed backend needs torch.distributed initialized (torchrun, or "
            "init_process_group) with one rank per device"
        )
    if dist.get_world_size() != schedule.devices:
        raise ExecutorError(
            f"world size {dist.get_world_size()} != the schedule's {schedule.devices} devices"
        )
    if not (math.isfinite(timeout_s) and timeout_s > 0):
        raise BackendError(f"timeout_s must be a finite number of seconds > 0, got {timeout_s!r}")
    device = dist.get_rank()
    meters = {device: StashMeter()}
    runners = make_runners(schedule, stages, loss_fn, device, weights, meters)
    before = gradients_before(schedule, runners) if reduce_copies else {}
    tensor_device = next(iter(runners.values())).device
    if dist.get_backend() == "nccl" and tensor_device.type != "cuda":
        raise ExecutorError("the NCCL backend needs the stages on CUDA devices")
    watch = StepWatch.of_default_group(device, schedule.devices)
    with watch.beating():
        transport = DistributedTransport(
            schedule,
            device,
            step,
            ShapeBook() if book is None else book,
            tensor_device,
            timeout_s,
            watch,
        )
        try:
            _barrier(watch, timeout_s, "waiting for every device to start the step")
            _say_ready(device)
            record = DeviceRecord(device, Clock(tensor_device))
            worker = DeviceWorker(
                device,
                schedule,
                runners,
                transport,
                record,
                step,
                xs,
                ys,
                check_finite=check_finite,
            )
            if dist.get_backend() == "gloo":
                transport.post_known()
            worker.run_all()
            transport.finish()
            if reduce_copies and schedule.copies > 1:

                def all_reduce(buffer: torch.Tensor) -> None:
                    work = dist.all_reduce(buffer, async_op=True)
                    _bounded(work, watch, timeout_s, "summing the model copies' gradients")

                sum_across_ranks(schedule, stages, runners, before, tensor_device, all_reduce)
        except BaseException as error:
            if isinstance(error, Exception):
                watch.publish(error)  # a no-op when another rank's failure came first
            transport.abandon()
            raise
        local_loss = step_loss(schedule, runners)
        peak_cuda = (
            torch.cuda.max_memory_allocated(tensor_device) if tensor_device.type == "cuda" else None
        )
        mine = {
            "record": _portable(record),
            "loss": local_loss,
            "stash": meters[device].peak_bytes,
            "cuda": peak_cuda,
        }
        gathered = _gather_objects(mine, watch, timeout_s)
    losses = [g["loss"] for g in gathered if g["loss"] is not None]
    loss = losses[0] if len(losses) == 1 else sum(losses)
    records = [
        _restore(g["record"], _offset_s(g["record"], gathered[0]["record"])) for g in gathered
    ]
    return StepResult(
        loss,
        timeline_from(records, schedule),
        tuple(g["stash"] for g in gathered),
        tuple(g["cuda"] for g in gathered),
    )


def _say_ready(device: int) -> None:
    """With ``PIPESIM_READY_DIR`` set, create ``ready-<rank>`` in that folder (once: the first
    step) when every rank has met at the step's start. A watcher, a test bounding how soon the
    ranks end after a failure, starts its clock there: past starting the process, importing
    torch and the rendezvous, which on a busy machine take what they take. Best effort."""
    folder = os.environ.get(READY_DIR_VARIABLE)
    if folder:
        with contextlib.suppress(OSError):  # already there (a later step), or no such folder
            path = os.path.join(folder, f"ready-{device}")
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL))


def _gather_objects(mine: dict[str, Any], watch: StepWatch, timeout_s: float) -> list[Any]:
    """Every rank's ``mine``, by rank. With gloo each of the two collectives (sizes, then the
    pickled records) waits at most ``timeout_s`` and a missing rank is named; NCCL uses
    ``all_gather_object``."""
    world = dist.get_world_size()
    what = "exchanging the step's records"
    if dist.get_backend() != "gloo":
        gathered: list[Any] = [None] * world
        try:
            dist.all_gather_object(gathered, mine)
        except RuntimeError as error:  # a peer failed after this rank's last action
            raise watch.peer_failed(what, timeout_s, error) from error
        return gathered
    data = torch.frombuffer(bytearray(pickle.dumps(mine)), dtype=torch.uint8)
    sizes = [torch.zeros(1, dtype=torch.int64) for _ in range(world)]
    size = torch.tensor([data.numel()], dtype=torch.int64)
    _bounded(dist.all_gather(sizes, size, async_op=True), watch, timeout_s, what)
    longest = max(int(s) for s in sizes)
    padded = torch.zeros(longest, dtype=torch.uint8)
    padded[: data.numel()] = data
    buffers = [torch.empty(longest, dtype=torch.uint8) for _ in range(world)]
    _bounded(dist.all_gather(buffers, padded, async_op=True), watch, timeout_s, what)
    return [
        pickle.loads(buffer[: int(n)].numpy().tobytes())  # our ranks' records, as all_gather_object
        for buffer, n in zip(buffers, sizes, strict=True)
    ]


def _bounded(work: Any, watch: StepWatch, timeout_s: float, what: str) -> None:
    """Wait for a collective at most ``timeout_s``; a failure is diagnosed (see
    :meth:`StepWatch.peer_failed`)."""
    try:
        completed = work.wait(timedelta(seconds=timeout_s))
    except RuntimeError as error:
        raise watch.peer_failed(what, timeout_s, error) from error
    if completed is False:
        raise watch.peer_failed(what, timeout_s, "timed out")


def _barrier(watch: StepWatch, timeout_s: float, what: str) -> None:
    """Every rank at this point, waiting at most ``timeout_s`` (gloo; the process group's own
    barrier waits for its much longer timeout, 30 minutes under torchrun, and cannot say who
    is missing). A rank that failed or stopped is named as for any other wait. NCCL keeps its
    plain barrier, bounded by its own watchdog."""
    if dist.get_backend() != "gloo":
        dist.barrier()
        return
    _bounded(dist.barrier(async_op=True), watch, timeout_s, what)


class _FixedSpan:
    """A span already resolved to seconds (after crossing process boundaries)."""

    def __init__(self, start: float, end: float) -> None:
        self._seconds = (start, end)

    def seconds(self) -> tuple[float, float]:
        return self._seconds


def _portable(record: DeviceRecord) -> dict[str, Any]:
    """A picklable copy of a device record, spans resolved to seconds."""
    return {
        "host": socket.gethostname(),
        "origin_ns": record.clock.origin_ns,
        "device": record.device,
        "compute": [(step, action, span.seconds()) for step, action, span in record.compute],
        "sent_s": record.sent_s,
        "waited_s": record.waited_s,
        "received_s": record.received_s,
        "sizes": record.sizes,
    }


def _offset_s(data: dict[str, Any], reference: dict[str, Any]) -> float:
    """Seconds to add to a rank's times to put them on the reference rank's clock.

    On one host ``perf_counter`` is one monotonic clock for every process, so the ranks'
    origins (taken after the same barrier) can be aligned exactly; across hosts the clocks are
    unrelated and each rank keeps its own origin (skew up to the barrier's release time).
    """
    if data["host"] != reference["host"]:
        return 0.0
    return float(data["origin_ns"] - reference["origin_ns"]) / 1e9


def _restore(data: dict[str, Any], offset: float = 0.0) -> DeviceRecord:
    record = DeviceRecord(data["device"], Clock(torch.device("cpu")))
    record.compute = [
        (s, a, _FixedSpan(t[0] + offset, t[1] + offset)) for s, a, t in data["compute"]
    ]
    record.sent_s = {m: t + offset for m, t in data["sent_s"].items()}
    record.waited_s = {m: t + offset for m, t in data["waited_s"].items()}
    record.received_s = {m: t + offset for m, t in data["received_s"].items()}
    record.sizes = data["sizes"]
    return record
