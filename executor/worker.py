"""The interpreter: runs one device's actions, moving tensors through a transport.

The same worker drives both backends: in one process (all devices, dependency-driven order)
and one process per device (torch.distributed). It times every action's compute and stamps
every message it sends and receives, for the measured timeline. With ``check_finite`` it
checks each action's outputs for NaN and Inf after the action (see :mod:`executor.nonfinite`), so
a non-finite value is reported where it first appeared, not steps later.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import torch

from executor.clock import Clock
from executor.messages import Message
from executor.nonfinite import check_outputs
from executor.stage import StageRunner
from pipesim.schedules import Action, Kind, Schedule


class TimedSpan(Protocol):
    """A timed piece of work (a live :class:`~executor.clock.Span`, or one already resolved)."""

    def seconds(self) -> tuple[float, float]:
        """(start_s, end_s)."""


class Transport(Protocol):
    """Moves tensors between devices."""

    def send(self, tensor: torch.Tensor, message: Message, destination: int) -> None:
        """Hand ``tensor`` over for ``message``; must not block on the receiver."""

    def receive(self, message: Message, source: int) -> torch.Tensor:
        """The tensor of ``message`` from ``source``, waiting for it if needed."""


@dataclass
class DeviceRecord:
    """What one device measured in a step."""

    device: int
    clock: Clock
    compute: list[tuple[int, Action | None, TimedSpan]] = field(default_factory=list)
    sent_s: dict[Message, float] = field(default_factory=dict)
    waited_s: dict[Message, float] = field(default_factory=dict)
    received_s: dict[Message, float] = field(default_factory=dict)
    sizes: dict[Message, int] = field(default_factory=dict)


class DeviceWorker:
    """Runs the actions of one device of ``schedule`` for one step."""

    def __init__(
        self,
        device: int,
        schedule: Schedule,
        runners: dict[int, StageRunner],
        transport: Transport,
        record: DeviceRecord,
        step: int,
        inputs: Sequence[torch.Tensor],
        targets: Sequence[torch.Tensor],
        *,
        check_finite: bool = False,
    ) -> None:
        self.device = device
        self.schedule = schedule
        self.runners = runners
        self.transport = transport
        self.record = record
        self.step = step
        self.inputs = inputs
        self.targets = targets
        self.split = schedule.uses_split_backward()
        self.check_finite = check_finite
        self.local: dict[Message, torch.Tensor] = {}

    def run_all(self) -> None:
        """Every action of this device, in list order."""
        for action in self.schedule.device_actions[self.device]:
            self.run(action)

    def run(self, action: Action) -> None:
        """One action: gather its input, compute, pass its result on."""
        runner = self.runners[action.stage]
        m = action.microbatch
        if action.kind is Kind.W:
            span = self.record.clock.span()
            runner.weight(m)
            self.record.compute.append((self.step, action, span.stop()))
            if self.check_finite:
                check_outputs(_gradients(runner), action, self.device, self.step)
            return
        incoming = self._incoming(action)
        span = self.record.clock.span()
        if action.kind is Kind.F:
            target = self.targets[m] if runner.last else None
            x = self.inputs[m] if runner.first else incoming
            if x is None:  # pragma: no cover - the schedule guarantees an input
                raise RuntimeError(f"{action} has no input")
            result = runner.forward(m, x, target, self.split)
        else:
            result = runner.backward(m, incoming, action.kind is Kind.I)
        self.record.compute.append((self.step, action, span.stop()))
        if self.check_finite:
            check_outputs(self._outputs(action, runner, result), action, self.device, self.step)
        if result is not None:
            self._outgoing(action, result)

    def _outputs(
        self, action: Action, runner: StageRunner, result: torch.Tensor | None
    ) -> list[torch.Tensor]:
        """What ``action`` hands on or leaves behind (see :mod:`executor.nonfinite`)."""
        outputs = [] if result is None else [result]
        if action.kind is Kind.F and runner.last:
            outputs.append(runner.losses[action.microbatch])
        if action.kind is Kind.B:
            outputs.extend(_gradients(runner))
        return outputs

    def _incoming(self, action: Action) -> torch.Tensor | None:
        """The tensor ``action`` consumes from another stage, if any."""
        for dependency in self.schedule.dependencies(action):
            if dependency.stage == action.stage:
                continue  # its own forward: kept by the stage runner
            message = Message(self.step, dependency, action)
            source = self.schedule.device_of(dependency.stage)
            if source == self.device:
                return self.local.pop(message)
            self.record.waited_s[message] = self.record.clock.now_s()
            tensor = self.transport.receive(message, source)
            self.record.received_s[message] = self.record.clock.now_s()
            return tensor
        return None

    def _outgoing(self, action: Action, result: torch.Tensor) -> None:
        for consumer in self.schedule.consumers(action):
            if consumer.stage == action.stage:
                continue
            message = Message(self.step, action, consumer)
            destination = self.schedule.device_of(consumer.stage)
            if destination == self.device:
                self.local[message] = result
                continue
            self.record.sent_s[message] = self.record.clock.now_s()
            self.record.sizes[message] = result.numel() * result.element_size()
            self.transport.send(result, message, destination)


def _gradients(runner: StageRunner) -> list[torch.Tensor]:
    """The weight gradients a stage has accumulated so far in the step."""
    return [p.grad for p in runner.params if p.grad is not None]
