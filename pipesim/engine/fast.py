"""The fast engine: the SimPy engine's semantics on flat arrays, in one tight loop.

The schedule arrives already encoded as integers by its validator
(:class:`~pipesim.schedules.encoded.EncodedSchedule`); this module lays out the *items* of a
run (every action of every step, plus each device's optimizer step after its last action of a
step, device by device as :mod:`pipesim.schedules.unroll` orders them), their durations,
dependencies and transfers, and plays them with :mod:`pipesim.engine.kernels`. For one step the
execution order is the validator's dry run (with each optimizer step right after its device's
last action): the validator's walk serves the engine too; for several steps one more dry run
orders the unrolled lists.

Kernels run compiled by numba when ``compiled`` is true (the ``fast`` extra), in the
interpreter otherwise; the numbers are the same.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from pipesim.costs.pipeline_costs import PipelineCosts
from pipesim.engine.arrays import OPTIMIZER, FloatArray, IntArray, RunArrays
from pipesim.engine.kernels import play_by_events, play_in_order
from pipesim.engine.records import TransferRecord
from pipesim.errors import ScheduleError
from pipesim.schedules.action import Action
from pipesim.schedules.encoded import EncodedSchedule, F
from pipesim.schedules.schedule import Schedule, UpdateRule
from pipesim.schedules.validate import dry_run_kernel


@dataclass(frozen=True, eq=False)
class _Items:
    """The items of a run, device by device; ``flat`` is -1 for an optimizer step."""

    device: IntArray
    step: IntArray
    flat: IntArray
    device_starts: IntArray


def run_fast(
    schedule: Schedule,
    costs: PipelineCosts,
    steps: int,
    *,
    compiled: bool = False,
    force_events: bool = False,
) -> tuple[RunArrays, Callable[[], tuple[TransferRecord, ...]]]:
    """Play ``steps`` steps; the run as arrays in completion order, and a function that builds
    the transfer records (in the order their channels were reserved) when asked.

    ``compiled`` runs the numba-compiled kernels; ``force_events`` skips the in-order walk and
    plays with the event loop alone (for tests: both must agree).
    """
    encoded = schedule.encoded
    items = _lay_out(schedule, encoded, steps)
    count = len(items.device)
    is_action = items.flat >= 0
    flat = np.where(is_action, items.flat, 0)
    stage = np.where(is_action, encoded.stage[flat], OPTIMIZER)
    kind = np.where(is_action, encoded.kind[flat], OPTIMIZER)
    microbatch = np.where(is_action, encoded.microbatch[flat], 0)

    duration = _durations(schedule, costs, stage, kind, items.device)
    first, second = _dependencies(encoded, items, steps)
    route, occupancy, transfer, route_starts, route_channels, channel_names, routes = _transfers(
        schedule, costs, items, stage, first, second
    )
    order = _execution_order(schedule, encoded, items, steps, first, second)
    key = np.empty(count, dtype=np.int64)
    key[order] = np.arange(count, dtype=np.int64)

    arguments: dict[str, Any] = {
        "device": items.device,
        "duration": duration,
        "first": first,
        "second": second,
        "route": route,
        "occupancy": occupancy,
        "transfer": transfer,
        "route_starts": route_starts,
        "route_channels": route_channels,
    }
    start, end, sent, arrival = _play(
        arguments,
        order,
        key,
        items,
        len(channel_names),
        schedule.devices,
        costs,
        compiled,
        force_events,
    )

    done = np.lexsort((key, end))  # completion order: by end time, then execution order
    run = RunArrays(
        items.device[done],
        items.step[done],
        stage[done],
        kind[done],
        microbatch[done],
        start[done],
        end[done],
    )

    def transfer_records() -> tuple[TransferRecord, ...]:
        producers = done[route[done] >= 0]
        flat_actions = schedule.actions()
        consumer_of = _consumer_of(first, second, items.device)
        records = []
        for p in producers.tolist():
            c = int(consumer_of[p])
            producer: Action = flat_actions[int(items.flat[p])]
            consumer: Action = flat_actions[int(items.flat[c])]
            size = costs.stages[min(producer.stage, consumer.stage)].output_bytes
            records.append(
                TransferRecord(
                    int(items.device[p]),
                    int(items.device[c]),
                    int(items.step[p]),
                    producer,
                    consumer,
                    size,
                    routes[int(route[p])],
                    float(end[p]),
                    float(sent[p]),
                    float(arrival[p]),
                )
            )
        return tuple(records)

    return run, transfer_records


def _lay_out(schedule: Schedule, encoded: EncodedSchedule, steps: int) -> _Items:
    """Each device's list over ``steps`` steps, with its optimizer steps, as items."""
    row_starts = encoded.row_starts
    lengths = np.diff(row_starts)
    devices = len(lengths)
    if schedule.update_rule is UpdateRule.FLUSH or steps == 1:
        per_step = lengths + 1
        sizes = per_step * steps
        device_starts = np.zeros(devices + 1, dtype=np.int64)
        np.cumsum(sizes, out=device_starts[1:])
        device = np.repeat(np.arange(devices, dtype=np.int64), sizes)
        local = np.arange(int(device_starts[-1]), dtype=np.int64) - device_starts[device]
        step, position = np.divmod(local, per_step[device])
        flat = np.where(position < lengths[device], row_starts[device] + position, -1)
        return _Items(device, step, flat, device_starts)
    lists = [_unroll_no_flush(encoded, d, steps) for d in range(devices)]
    device_starts = np.zeros(devices + 1, dtype=np.int64)
    np.cumsum([len(items) for items in lists], out=device_starts[1:])
    pairs = np.array([pair for items in lists for pair in items], dtype=np.int64)
    device = np.repeat(np.arange(devices, dtype=np.int64), np.diff(device_starts))
    return _Items(device, pairs[:, 0], pairs[:, 1], device_starts)


def _unroll_no_flush(encoded: EncodedSchedule, device: int, steps: int) -> list[tuple[int, int]]:
    """Device ``device``'s (step, flat) items as :func:`pipesim.schedules.unroll.unroll` lays
    out a no-flush schedule: step t+1's leading forwards woven one for one with step t's
    trailing backwards, each step's optimizer (flat -1) after its last action."""
    row = range(int(encoded.row_starts[device]), int(encoded.row_starts[device + 1]))
    kinds = encoded.kind

    def is_forward(item: tuple[int, int]) -> bool:
        return item[1] < 0 or kinds[item[1]] == F

    merged: list[tuple[int, int]] = []
    for step in range(steps):
        following = [(step, flat) for flat in row]
        if not merged:
            merged = following
            continue
        tail_start = len(merged)
        while tail_start > 0 and not is_forward(merged[tail_start - 1]):
            tail_start -= 1
        head_end = 0
        while head_end < len(following) and is_forward(following[head_end]):
            head_end += 1
        tail, head = merged[tail_start:], following[:head_end]
        woven: list[tuple[int, int]] = []
        for index in range(max(len(tail), len(head))):
            if index < len(head):
                woven.append(head[index])
            if index < len(tail):
                woven.append(tail[index])
        merged = merged[:tail_start] + woven + following[head_end:]
    last = {step: index for index, (step, _) in enumerate(merged)}
    out: list[tuple[int, int]] = []
    for index, item in enumerate(merged):
        out.append(item)
        if last[item[0]] == index:
            out.append((item[0], -1))
    return out


def _durations(
    schedule: Schedule, costs: PipelineCosts, stage: IntArray, kind: IntArray, device: IntArray
) -> FloatArray:
    """Per item: F, I, W as given; B = I + W (plus F under remat); the optimizer step."""
    table = np.zeros((len(costs.stages) + 1, 4))
    for s, c in enumerate(costs.stages):
        recompute = c.forward_s if schedule.rematerialize else 0.0
        table[s] = (c.forward_s, recompute + c.backward_s, c.input_grad_s, c.weight_grad_s)
    optimizer = np.array(
        [
            sum(costs.stages[s].optimizer_step_s for s in schedule.stages_on(d))
            for d in range(schedule.devices)
        ]
    )
    return np.where(kind == OPTIMIZER, optimizer[device], table[stage, np.maximum(kind, 0)])


def _dependencies(encoded: EncodedSchedule, items: _Items, steps: int) -> tuple[IntArray, IntArray]:
    """Per item, the items it consumes (same step), -1 for none."""
    count = len(items.device)
    item_of = np.full((steps, encoded.actions), -1, dtype=np.int64)
    is_action = items.flat >= 0
    item_of[items.step[is_action], items.flat[is_action]] = np.flatnonzero(is_action)
    flat = np.where(is_action, items.flat, 0)
    result = []
    for column in range(2):
        dependency = np.where(is_action, encoded.dependencies[flat, column], -1)
        has = dependency >= 0
        out = np.full(count, -1, dtype=np.int64)
        out[has] = item_of[items.step[has], dependency[has]]
        result.append(out)
    return result[0], result[1]


def _transfers(
    schedule: Schedule,
    costs: PipelineCosts,
    items: _Items,
    stage: IntArray,
    first: IntArray,
    second: IntArray,
) -> tuple[IntArray, FloatArray, FloatArray, IntArray, IntArray, list[str], list[tuple[str, ...]]]:
    """Per producing item: its route's index (-1: no transfer), occupancy and transfer time;
    the routes' channels as CSR over channel numbers; the channel names; each route's
    channels by name."""
    devices = schedule.devices
    network = costs.network
    channel_number: dict[str, int] = {}
    routes: list[tuple[str, ...]] = []
    route_index = np.full((devices, devices), -1, dtype=np.int64)
    latency = np.zeros(devices * devices)
    bandwidth = np.full(devices * devices, math.inf)
    for source in range(devices):
        for target in range(devices):
            if source == target:
                continue
            r = network.route(source, target)
            route_index[source, target] = len(routes)
            latency[len(routes)] = r.latency_s
            bandwidth[len(routes)] = r.bandwidth_bytes_per_s
            routes.append(r.channels)
            for channel in r.channels:
                channel_number.setdefault(channel, len(channel_number))
    route_starts = np.zeros(len(routes) + 1, dtype=np.int64)
    np.cumsum([len(r) for r in routes], out=route_starts[1:])
    route_channels = np.array(
        [channel_number[c] for r in routes for c in r], dtype=np.int64
    ).reshape(-1)
    output = np.array([s.output_bytes for s in costs.stages])
    count = len(items.device)
    route = np.full(count, -1, dtype=np.int64)
    size = np.zeros(count)
    for dependency in (first, second):
        consumer = np.flatnonzero(dependency >= 0)
        producer = dependency[consumer]
        cross = items.device[producer] != items.device[consumer]
        consumer, producer = consumer[cross], producer[cross]
        if (route[producer] >= 0).any() or len(np.unique(producer)) < len(producer):
            raise ScheduleError(  # pragma: no cover - the IR gives each result one receiver
                f"schedule {schedule.name!r}: an action's result goes to two other devices"
            )
        route[producer] = route_index[items.device[producer], items.device[consumer]]
        size[producer] = output[np.minimum(stage[producer], stage[consumer])]
    has = route >= 0
    safe = np.where(has, route, 0)
    finite = np.isfinite(bandwidth[safe])
    # Route.occupancy_s and Route.transfer_time_s, elementwise: the same IEEE operations.
    occupancy = np.where(has & finite, size / np.where(finite, bandwidth[safe], 1.0), 0.0)
    transfer = np.where(has, latency[safe] + occupancy, 0.0)
    return route, occupancy, transfer, route_starts, route_channels, list(channel_number), routes


def _execution_order(
    schedule: Schedule,
    encoded: EncodedSchedule,
    items: _Items,
    steps: int,
    first: IntArray,
    second: IntArray,
) -> IntArray:
    """The items in execution order (:mod:`pipesim.engine.order`)."""
    count = len(items.device)
    if steps == 1:
        # The validator's walk, with each optimizer step right after its device's last action.
        rank = np.empty(encoded.actions, dtype=np.int64)
        rank[encoded.order] = np.arange(encoded.actions, dtype=np.int64)
        is_action = items.flat >= 0
        last_flat = encoded.row_starts[1:] - 1
        item_rank = np.where(
            is_action, rank[np.maximum(items.flat, 0)], rank[last_flat][items.device]
        )
        return np.lexsort((~is_action, item_rank)).astype(np.int64)
    walked = [0] * count
    ran = dry_run_kernel.python(
        items.device_starts.tolist(), first.tolist(), second.tolist(), walked
    )
    if ran < count:
        stuck = sorted(
            {int(d) for d in range(schedule.devices) if not _device_done(walked[:ran], items, d)}
        )
        raise ScheduleError(
            f"the steps of schedule {schedule.name!r} deadlock when run back to back: "
            f"device(s) {', '.join(map(str, stuck))} never finish"
        )
    return np.array(walked, dtype=np.int64)


def _device_done(walked: list[int], items: _Items, device: int) -> bool:
    last = int(items.device_starts[device + 1]) - 1
    return last < int(items.device_starts[device]) or last in set(walked)


def _consumer_of(first: IntArray, second: IntArray, device: IntArray) -> IntArray:
    """Per item, the item on another device that consumes it (-1 none)."""
    out = np.full(len(device), -1, dtype=np.int64)
    for dependency in (first, second):
        consumer = np.flatnonzero(dependency >= 0)
        producer = dependency[consumer]
        cross = device[producer] != device[consumer]
        out[producer[cross]] = consumer[cross]
    return out


def _play(
    arguments: dict[str, Any],
    order: IntArray,
    key: IntArray,
    items: _Items,
    channels: int,
    devices: int,
    costs: PipelineCosts,
    compiled: bool,
    force_events: bool,
) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """Run the in-order walk, and the event loop when a shared channel needs it."""
    count = len(order)
    use_compute = bool(costs.transfers_use_compute)
    if compiled:
        start, end, sent, arrival = (np.zeros(count) for _ in range(4))
        converted = {k: np.ascontiguousarray(v) for k, v in arguments.items()}
        walk = play_in_order.compiled()
        events = play_by_events.compiled()
    else:
        start, end, sent, arrival = ([0.0] * count for _ in range(4))  # type: ignore[assignment]
        converted = {k: v.tolist() for k, v in arguments.items()}
        walk, events = play_in_order.python, play_by_events.python
        order = order.tolist()
        key = key.tolist()
    stopped = (
        0
        if force_events
        else walk(
            order,
            converted["device"],
            converted["duration"],
            converted["first"],
            converted["second"],
            converted["route"],
            converted["occupancy"],
            converted["transfer"],
            converted["route_starts"],
            converted["route_channels"],
            channels,
            devices,
            use_compute,
            start,
            end,
            sent,
            arrival,
        )
    )
    if stopped >= 0:
        following = np.full(count, -1, dtype=np.int64)
        following[:-1] = np.arange(1, count, dtype=np.int64)
        following[items.device_starts[1:] - 1] = -1
        consumers = _consumers(arguments["first"], arguments["second"], count)
        extra = {
            "following": following,
            "consumer_first": consumers[0],
            "consumer_second": consumers[1],
        }
        extra_converted = (
            {k: np.ascontiguousarray(v) for k, v in extra.items()}
            if compiled
            else {k: v.tolist() for k, v in extra.items()}
        )
        events(
            key,
            converted["device"],
            converted["duration"],
            converted["first"],
            converted["second"],
            extra_converted["following"],
            extra_converted["consumer_first"],
            extra_converted["consumer_second"],
            converted["route"],
            converted["occupancy"],
            converted["transfer"],
            converted["route_starts"],
            converted["route_channels"],
            channels,
            use_compute,
            start,
            end,
            sent,
            arrival,
        )
    return (
        np.asarray(start, dtype=np.float64),
        np.asarray(end, dtype=np.float64),
        np.asarray(sent, dtype=np.float64),
        np.asarray(arrival, dtype=np.float64),
    )


def _consumers(first: IntArray, second: IntArray, count: int) -> tuple[IntArray, IntArray]:
    """Per item, up to two items that consume it (in increasing item order), -1 padded."""
    consumer = np.concatenate([np.arange(count), np.arange(count)])
    producer = np.concatenate([first, second])
    keep = producer >= 0
    consumer, producer = consumer[keep], producer[keep]
    order = np.lexsort((consumer, producer))
    consumer, producer = consumer[order], producer[order]
    out = np.full((2, count), -1, dtype=np.int64)
    starts = np.searchsorted(producer, np.arange(count + 1))
    for slot in range(2):
        has = starts[1:] - starts[:-1] > slot
        out[slot, has] = consumer[starts[:-1][has] + slot]
    if (starts[1:] - starts[:-1] > 2).any():  # pragma: no cover - the IR allows two at most
        raise ScheduleError("an action's result has more than two consumers")
    return out[0], out[1]
