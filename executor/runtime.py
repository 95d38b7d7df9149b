"""What the backends share: a step's result and state across steps, the stage runners of a
device, the in-process transport, and the measured timeline.

:mod:`executor.step` dispatches to :mod:`executor.local` or :mod:`executor.distributed`; both
build on this module, which imports neither of them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import torch
from torch import nn

from executor.errors import SplitError
from executor.messages import Message
from executor.shapes import ShapeBook
from executor.stage import LossFn, StageRunner
from executor.stash import StashMeter
from executor.worker import DeviceRecord
from pipesim.engine.records import ComputeRecord, Timeline, TransferRecord
from pipesim.schedules import Schedule


@dataclass(frozen=True)
class StepResult:
    """What one pipelined step computed and measured.

    Attributes:
        loss: the step's loss, the mean over micro-batches of ``loss_fn``.
        timeline: compute and transfer records in the simulator's format (seconds since the
            step started).
        peak_stash_bytes: per device, the most activation bytes stashed at once.
        peak_allocated_bytes: per device, ``torch.cuda.max_memory_allocated`` on CUDA (None
            on CPU, and for the lanes of the concurrent backend, which share one allocator).
        device_peak_allocated_bytes: the concurrent backend on CUDA: the one GPU's
            ``torch.cuda.max_memory_allocated`` over the step, every lane together (None
            elsewhere).
    """

    loss: float
    timeline: Timeline
    peak_stash_bytes: tuple[int, ...]
    peak_allocated_bytes: tuple[int | None, ...] = field(default=())
    device_peak_allocated_bytes: int | None = None


@dataclass
class StepState:
    """What consecutive steps of one pipeline keep between ``run_step`` calls: the distributed
    transport's knowledge of tensor shapes, so shapes travel once and receives can be posted
    ahead. Pass the same object to every step (the trainer does)."""

    shapes: ShapeBook = field(default_factory=ShapeBook)


class LocalTransport:
    """Tensors handed over in one process (moved to the consumer's device when it runs)."""

    def __init__(self) -> None:
        self._mailbox: dict[Message, torch.Tensor] = {}

    def send(self, tensor: torch.Tensor, message: Message, destination: int) -> None:
        self._mailbox[message] = tensor

    def receive(self, message: Message, source: int) -> torch.Tensor:
        return self._mailbox.pop(message)


def check_stages(schedule: Schedule, stages: Sequence[nn.Module]) -> None:
    """One module per stage of the schedule."""
    if len(stages) != schedule.stages:
        raise SplitError(
            f"got {len(stages)} stage module(s) but schedule {schedule.name!r} has "
            f"{schedule.stages} stages (K={schedule.devices} x v={schedule.chunks}"
            + (f" x {schedule.copies} model copies" if schedule.copies > 1 else "")
            + "); use executor.split_model"
        )


def make_runners(
    schedule: Schedule,
    stages: Sequence[nn.Module],
    loss_fn: LossFn,
    device: int | None,
    weights: Mapping[int, Mapping[str, torch.Tensor]] | None,
    meters: Mapping[int, StashMeter],
) -> dict[int, StageRunner]:
    """Stage runners for the stages of ``device`` (all stages when ``device`` is None)."""
    return {
        s: StageRunner(
            s,
            stages[s],
            last=schedule.last_of_copy(s),
            first=schedule.first_of_copy(s),
            loss_fn=loss_fn,
            microbatches=schedule.microbatches,
            rematerialize=schedule.rematerialize,
            weights=None if weights is None else weights.get(s),
            meter=meters[schedule.device_of(s)],
        )
        for s in range(schedule.stages)
        if device is None or schedule.device_of(s) == device
    }


def timeline_from(records: Sequence[DeviceRecord], schedule: Schedule) -> Timeline:
    """Compute spans and message stamps of every device as one timeline."""
    compute = []
    for record in records:
        for step, action, span in record.compute:
            start, end = span.seconds()
            compute.append(ComputeRecord(record.device, step, action, start, end))
    received: dict[Message, float] = {}
    waited: dict[Message, float] = {}
    for record in records:
        received.update(record.received_s)
        waited.update(record.waited_s)
    transfers = []
    for record in records:
        for message, sent in record.sent_s.items():
            destination = schedule.device_of(message.consumer.stage)
            arrived = max(sent, received.get(message, sent))
            transfers.append(
                TransferRecord(
                    record.device,
                    destination,
                    message.step,
                    message.producer,
                    message.consumer,
                    float(record.sizes[message]),
                    (f"{record.device}->{destination}",),
                    sent,
                    sent,
                    arrived,
                    waited.get(message),
                )
            )
    compute.sort(key=lambda r: (r.start_s, r.device))
    transfers.sort(key=lambda t: (t.start_s, t.source_device))
    return Timeline(tuple(compute), tuple(transfers))
