"""The reference engine: plays a schedule on a cluster with SimPy, one process per device.

Execution semantics (shared with the executor and the fast engine):

1. Each device runs its actions strictly in list order. An action starts when the device's
   compute is free and all its inputs have arrived.
2. A transfer is requested when its producing action ends. Each direction of a link is a
   channel that carries one message's bytes at a time, first come first served; a message holds
   every channel of its route for ``bytes / bandwidth`` from the moment all are free and
   arrives ``latency`` after that plus the same ``bytes / bandwidth`` (the alpha-beta model of
   :mod:`pipesim.hardware.network`: latency is shared by messages in flight, only bytes occupy
   a channel). Requests made at the same instant are served in execution order
   (:mod:`pipesim.engine.run_layout`). Transfers overlap compute unless the accelerator's compute
   must issue them (``transfers_use_compute``), in which case the sender is busy until its
   transfer arrives.
3. Flush schedules end a step with each device's optimizer step after its last action; no-flush
   schedules update weights after each device's last action of a step and never drain
   (see :mod:`pipesim.schedules.unroll`).
4. With re-materialization a full backward re-runs the stage's forward first.

SimPy processes events of one instant in the order they were scheduled; to make ties follow
execution order instead, the end of every action is a :class:`_Finish` event whose priority is
its execution-order key, after every plain event of the same instant.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Generator
from typing import Any

import simpy
from simpy.events import EventPriority

from pipesim.costs.pipeline_costs import PipelineCosts
from pipesim.engine.durations import action_duration_s, overlap_savings_by_action
from pipesim.engine.kernels import reserve_route
from pipesim.engine.records import ComputeRecord, TransferRecord
from pipesim.engine.run_layout import run_layout
from pipesim.hardware.network import Route
from pipesim.schedules.action import Action, Kind
from pipesim.schedules.schedule import Schedule
from pipesim.schedules.unroll import Work, unroll

_Key = tuple[int, Action]  # (step, action)
_FIRST_KEYED_PRIORITY = 2  # after SimPy's URGENT (0) and NORMAL (1)


class _Finish(simpy.Event):
    """Fires ``delay`` from now; among events of one instant, after every plain event and in
    the order of ``key``. (SimPy's own ``Timeout`` is made the same way, with a fixed
    priority.)"""

    def __init__(self, env: simpy.Environment, delay: float, key: int) -> None:
        super().__init__(env)
        self._ok = True
        self._value = None
        env.schedule(self, EventPriority(_FIRST_KEYED_PRIORITY + key), delay)


def run_simpy(
    schedule: Schedule, costs: PipelineCosts, steps: int
) -> tuple[list[ComputeRecord], list[TransferRecord]]:
    """Play ``steps`` steps; the compute and transfer records in the order they completed."""
    run = _Run(schedule, costs, steps)
    run.execute()
    return run.compute, run.transfers


def _execution_keys(
    schedule: Schedule, steps: int, work_lists: tuple[tuple[Work, ...], ...]
) -> list[list[int]]:
    """Per device, each work item's position in execution order: the one order both engines
    read (:func:`pipesim.engine.run_layout.run_layout`, whose items are these work lists)."""
    layout = run_layout(schedule, steps)
    key, starts = layout.key.tolist(), layout.items.device_starts.tolist()
    keys = [key[starts[d] : starts[d + 1]] for d in range(schedule.devices)]
    if [len(k) for k in keys] != [len(w) for w in work_lists]:  # pragma: no cover - one layout
        raise AssertionError(f"schedule {schedule.name!r}: the engines lay out different items")
    return keys


class _Run:
    """One simulation: a SimPy process per device; transfers reserve their channels.

    A transfer is requested when its producing action ends, which SimPy does in time order (and
    in execution order at equal times), so reserving each channel from ``max(now, channel
    free)`` is first come, first served. The consumer waits for the producer's completion event
    and then for the arrival time. A dependency on the consumer's own device ran earlier in the
    device's list (the validator proves it), so only dependencies on other devices are waited
    for.
    """

    def __init__(self, schedule: Schedule, costs: PipelineCosts, steps: int) -> None:
        self.schedule = schedule
        self.costs = costs
        self.env = simpy.Environment(initial_time=0.0)
        self.work_lists = unroll(schedule, steps)
        self.keys = _execution_keys(schedule, steps, self.work_lists)
        self.compute: list[ComputeRecord] = []
        self.transfers: list[TransferRecord] = []
        self.channel_free: defaultdict[str, float] = defaultdict(float)  # free from 0
        self.done: dict[_Key, simpy.Event] = {}
        self.arrival: dict[tuple[int, Action, Action], float] = {}
        self.device_of = schedule.placement
        self.routes: dict[tuple[int, int], Route] = {}  # filled as device pairs exchange data
        self.optimizer_s = [
            sum(costs.stages[s].optimizer_step_s for s in schedule.stages_on(device))
            for device in range(schedule.devices)
        ]
        self.duration_of: dict[tuple[int, Kind], float] = {}  # by (stage, kind), on first use
        self.overlap_saving = overlap_savings_by_action(schedule, costs)  # DualPipe's F&B
        self.needs, self.feeds = schedule.dependency_map(), schedule.consumer_map()

    def _duration(self, action: Action) -> float:
        key = (action.stage, action.kind)
        duration = self.duration_of.get(key)
        if duration is None:
            duration = self.duration_of[key] = action_duration_s(self.schedule, self.costs, action)
        saving = self.overlap_saving.get(action)
        return duration if saving is None else duration - saving

    def execute(self) -> None:
        for device, work in enumerate(self.work_lists):
            self.env.process(self._device(device, work, self.keys[device]))
        self.env.run()

    def _done_event(self, key: _Key) -> simpy.Event:
        event = self.done.get(key)
        if event is None:
            event = self.done[key] = self.env.event()
        return event

    def _device(
        self, device: int, work: tuple[Work, ...], keys: list[int]
    ) -> Generator[Any, Any, None]:
        env, device_of = self.env, self.device_of
        free = 0.0  # when this device's compute is free: kept exactly, not read off the clock
        for item, key in zip(work, keys, strict=True):
            action, step = item.action, item.step
            if action is None:
                start, end = free, free + self.optimizer_s[device]
                yield _Finish(env, max(0.0, end - env.now), key)
                self.compute.append(ComputeRecord(device, step, None, start, end))
                free = end
                continue
            remote = [d for d in self.needs[action] if device_of[d.stage] != device]
            for dependency in remote:
                event = self._done_event((step, dependency))
                if not event.processed:
                    yield event
            # Start when the device is free and every input has arrived; end after the
            # action's duration. One event: nothing else happens on this device meanwhile.
            start = max([free, *(self.arrival.pop((step, d, action)) for d in remote)])
            end = free = start + self._duration(action)
            yield _Finish(env, max(0.0, end - env.now), key)  # fires at ``end``
            self.compute.append(ComputeRecord(device, step, action, start, end))
            sent = False
            for consumer in self.feeds[action]:
                target = device_of[consumer.stage]
                if target == device:
                    continue
                sent = True
                arrival = self._send(device, target, step, action, consumer, end)
                if self.costs.transfers_use_compute and arrival > free:
                    free = arrival
                    yield env.timeout(max(0.0, arrival - env.now))
            if sent:
                self._done_event((step, action)).succeed()

    def _send(
        self,
        source: int,
        target: int,
        step: int,
        producer: Action,
        consumer: Action,
        now: float,
    ) -> float:
        """Reserve the route's channels first come, first served from ``now`` (the producer's
        end), by the engines' one booking rule (:func:`~pipesim.engine.kernels.reserve_route`);
        return the arrival time."""
        route = self.routes.get((source, target))
        if route is None:
            route = self.routes[(source, target)] = self.costs.network.route(source, target)
        size = self.costs.stages[min(producer.stage, consumer.stage)].output_bytes
        channels = route.channels
        occupancy = route.occupancy_s(size)
        start: float = reserve_route(self.channel_free, channels, 0, len(channels), now, occupancy)
        end = start + route.transfer_time_s(size)
        self.transfers.append(
            TransferRecord(
                source, target, step, producer, consumer, size, route.channels, now, start, end
            )
        )
        self.arrival[(step, producer, consumer)] = end
        return end
