"""What a run leaves behind: the timeline of compute and transfers, in the format the simulator
and the executor share, so every trace and plot works on both."""

from __future__ import annotations

from dataclasses import dataclass

from pipesim.schedules.action import Action, Kind


@dataclass(frozen=True, slots=True)
class ComputeRecord:
    """``device`` ran ``action`` of ``step`` (or, with ``action`` None, its optimizer step)."""

    device: int
    step: int
    action: Action | None
    start_s: float
    end_s: float

    @property
    def label(self) -> str:
        """``2F0``, or ``opt`` for the optimizer step."""
        return "opt" if self.action is None else str(self.action)

    @property
    def duration_s(self) -> float:
        """end - start."""
        return self.end_s - self.start_s


@dataclass(frozen=True, slots=True)
class TransferRecord:
    """An activation (forward) or gradient (backward) sent from one device to another.

    ``queued_s`` is when the producing action ended; ``start_s`` when the channels were free;
    ``end_s`` when the data arrived. A measured transfer also has ``receiver_ready_s``, when the
    receiver began waiting for it: if that is before ``start_s``, ``end_s - start_s`` is the
    transfer's true latency (otherwise the data may have arrived before anyone looked).
    """

    source_device: int
    destination_device: int
    step: int
    producer: Action
    consumer: Action
    size_bytes: float
    channels: tuple[str, ...]
    queued_s: float
    start_s: float
    end_s: float
    receiver_ready_s: float | None = None

    @property
    def kind(self) -> str:
        """``activation`` when it feeds a forward, ``gradient`` when it feeds a backward."""
        return "activation" if self.producer.kind is Kind.F else "gradient"

    @property
    def label(self) -> str:
        """``1F0->2F0`` style: producer to consumer."""
        return f"{self.producer}->{self.consumer}"


@dataclass(frozen=True)
class Timeline:
    """A run's compute and transfer records: what the simulator predicts and what the executor
    measures, in one format."""

    compute: tuple[ComputeRecord, ...]
    transfers: tuple[TransferRecord, ...]

    @property
    def devices(self) -> int:
        """One more than the largest device index that appears."""
        return 1 + max((r.device for r in self.compute), default=-1)

    def step_time_s(self, step: int) -> float:
        """End of the last record of ``step`` minus the start of its first."""
        records = [r for r in self.compute if r.step == step]
        if not records:
            return 0.0
        return max(r.end_s for r in records) - min(r.start_s for r in records)
