"""What travels between devices: one tensor per (step, producer, consumer), in a known order.

Activations go forward (F of stage s to F of stage s+1), gradients backward (the B or I of
stage s+1 to the B or I of stage s). Both ends derive every message from the schedule, so a
receiver knows, for each peer, the order in which that peer sends: it posts its receives in
that order, which keeps point-to-point backends without tags (NCCL) matched.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipesim.schedules import Action, Kind, Schedule


@dataclass(frozen=True, slots=True)
class Message:
    """The result of ``producer`` in ``step`` on its way to ``consumer``."""

    step: int
    producer: Action
    consumer: Action

    @property
    def boundary(self) -> int:
        """The lower stage of the two: the tensor has that stage's output shape."""
        return min(self.producer.stage, self.consumer.stage)

    @property
    def is_activation(self) -> bool:
        """True when the message feeds a forward."""
        return self.producer.kind is Kind.F

    def __str__(self) -> str:
        return f"{self.producer}->{self.consumer} (step {self.step})"


def outgoing(schedule: Schedule, device: int, step: int) -> list[tuple[Message, int]]:
    """Messages ``device`` sends in ``step``, in its sending order, with their destinations."""
    sent = []
    for action in schedule.device_actions[device]:
        for consumer in schedule.consumers(action):
            destination = schedule.device_of(consumer.stage)
            if destination != device:
                sent.append((Message(step, action, consumer), destination))
    return sent


def incoming_order(schedule: Schedule, device: int, step: int) -> dict[int, list[Message]]:
    """For each peer, the messages ``device`` receives from it, in the peer's sending order."""
    order: dict[int, list[Message]] = {}
    for peer in range(schedule.devices):
        if peer == device:
            continue
        for message, destination in outgoing(schedule, peer, step):
            if destination == device:
                order.setdefault(peer, []).append(message)
    return order
