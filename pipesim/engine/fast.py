"""The fast engine: the SimPy engine's semantics on flat arrays, in one tight loop.

The schedule arrives already encoded as integers by its validator
(:class:`~pipesim.schedules.encoded.EncodedSchedule`); this module lays out the *items* of a
run (every action of every step, plus each device's optimizer step after its last action of a
step, device by device as :mod:`pipesim.schedules.unroll` orders them), their durations,
dependencies and transfers, and plays them with :mod:`pipesim.engine.kernels`. For one step the
execution order is the validator's dry run (with each optimizer step right after its device's
last action): the validator's walk serves the engine too; for several steps one more dry run
orders the unrolled lists. All of that depends on the schedule alone and is kept on it
(:meth:`Schedule.derived`), so a schedule simulated under many costs is laid out once.

Kernels run compiled by numba when ``compiled`` is true (the ``fast`` extra), in the
interpreter otherwise (:func:`should_compile` chooses by default); the numbers are the same.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from pipesim.common.jit import numba_available
from pipesim.costs.pipeline_costs import PipelineCosts
from pipesim.costs.synthetic import synthetic_costs
from pipesim.engine.arrays import OPTIMIZER, FloatArray, IntArray, RunArrays
from pipesim.engine.kernels import play_by_events, play_in_order
from pipesim.engine.records import TransferRecord
from pipesim.errors import ScheduleError
from pipesim.schedules.action import Action
from pipesim.schedules.encoded import EncodedSchedule, F
from pipesim.schedules.registry import build
from pipesim.schedules.schedule import Schedule, UpdateRule
from pipesim.schedules.unroll import OPTIMIZER_STEP, no_flush_order, with_optimizer_steps
from pipesim.schedules.validator import dry_run_kernel


@dataclass(frozen=True, eq=False)
class _Items:
    """The items of a run, device by device; ``flat`` is -1 for an optimizer step."""

    device: IntArray
    step: IntArray
    flat: IntArray
    device_starts: IntArray


# Above this many items a one-off run pays for importing numba and loading its cached kernels
# (about 1.5 s on a 2-core machine) with the time the interpreted walk would take.
COMPILE_ABOVE_ITEMS = 500_000


def warm_up() -> bool:
    """Compile (or load from numba's cache) the fast engine's kernels in this process, so every
    later run uses them; a planner or sweep calls this once. False when numba is missing."""
    if not numba_available():
        return False
    dry_run_kernel.compiled()  # the validator's walk, used from now on
    schedule = build("1f1b", 2, 2)
    costs = synthetic_costs(2, 1, 1.0, 1.0)
    run_fast(schedule, costs, 1, compiled=True)
    run_fast(schedule, costs, 1, compiled=True, force_events=True)
    return True


def should_compile(items: int) -> bool:
    """Compiled kernels when numba is installed and they are loaded already (see
    :func:`warm_up`) or the run is large enough to pay for loading them."""
    if play_in_order.is_compiled:
        return True
    return items > COMPILE_ABOVE_ITEMS and numba_available()


def run_fast(
    schedule: Schedule,
    costs: PipelineCosts,
    steps: int,
    *,
    compiled: bool | None = None,
    force_events: bool = False,
) -> tuple[RunArrays, Callable[[], tuple[TransferRecord, ...]]]:
    """Play ``steps`` steps; the run as arrays in completion order, and a function that builds
    the transfer records (in the order their channels were reserved) when asked.

    ``compiled`` runs the numba-compiled kernels (None: :func:`should_compile` decides);
    ``force_events`` skips the in-order walk and plays with the event loop alone (for tests:
    both must agree).
    """
    plan = schedule.derived(("fast engine plan", steps), lambda: _plan(schedule, steps))
    items, stage, kind, microbatch = plan.items, plan.stage, plan.kind, plan.microbatch
    source, consumer, order, key = plan.source, plan.consumer, plan.order, plan.key
    count = len(items.device)
    if compiled is None:
        compiled = should_compile(count)
    duration = _durations(schedule, costs, stage, kind, items.device)
    route, occupancy, transfer, route_starts, route_channels, channel_names, routes = _transfers(
        costs, items, stage, source, consumer
    )

    arguments: dict[str, Any] = {
        "device": items.device,
        "duration": duration,
        "source": source,
        "route": route,
        "occupancy": occupancy,
        "transfer": transfer,
        "route_starts": route_starts,
        "route_channels": route_channels,
    }
    start, sent, arrival = _play(
        arguments,
        order,
        key,
        items,
        consumer,
        len(channel_names),
        schedule.devices,
        costs,
        compiled,
        force_events,
    )

    end = start + duration  # as the kernels compute it
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
        records = []
        for p in producers.tolist():
            c = int(consumer[p])
            producer: Action = flat_actions[int(items.flat[p])]
            receiver: Action = flat_actions[int(items.flat[c])]
            size = costs.stages[min(producer.stage, receiver.stage)].output_bytes
            records.append(
                TransferRecord(
                    int(items.device[p]),
                    int(items.device[c]),
                    int(items.step[p]),
                    producer,
                    receiver,
                    size,
                    routes[int(route[p])],
                    float(end[p]),
                    float(sent[p]),
                    float(arrival[p]),
                )
            )
        return tuple(records)

    return run, transfer_records


@dataclass(frozen=True, eq=False)
class _Plan:
    """What a run of a schedule over ``steps`` steps is, whatever the costs: the items, what
    each is, which item on another device it waits for (``source``) and which waits for it
    (``consumer``), and the execution order (``order``; ``key`` is each item's position)."""

    items: _Items
    stage: IntArray
    kind: IntArray
    microbatch: IntArray
    source: IntArray
    consumer: IntArray
    order: IntArray
    key: IntArray


def _plan(schedule: Schedule, steps: int) -> _Plan:
    encoded = schedule.encoded
    items = _lay_out(schedule, encoded, steps)
    count = len(items.device)
    is_action = items.flat >= 0
    flat = np.where(is_action, items.flat, 0)
    stage = np.where(is_action, encoded.stage[flat], OPTIMIZER)
    kind = np.where(is_action, encoded.kind[flat], OPTIMIZER)
    microbatch = np.where(is_action, encoded.microbatch[flat], 0)
    upstream = _upstream(encoded, items, steps)
    crosses = upstream >= 0
    crosses[crosses] = items.device[upstream[crosses]] != items.device[crosses]
    source = np.where(crosses, upstream, -1)
    consumer = np.full(count, -1, dtype=np.int64)
    consumer[source[crosses]] = np.flatnonzero(crosses)
    order = _execution_order(schedule, encoded, items, steps, upstream)
    key = np.empty(count, dtype=np.int64)
    key[order] = np.arange(count, dtype=np.int64)
    return _Plan(items, stage, kind, microbatch, source, consumer, order, key)


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
    device_starts = np.array([0, *itertools.accumulate(map(len, lists))], dtype=np.int64)
    pairs = np.array([pair for items in lists for pair in items], dtype=np.int64)
    device = np.repeat(np.arange(devices, dtype=np.int64), np.diff(device_starts))
    return _Items(device, pairs[:, 0], pairs[:, 1], device_starts)


def _unroll_no_flush(encoded: EncodedSchedule, device: int, steps: int) -> list[tuple[int, int]]:
    """Device ``device``'s (step, flat) items as :func:`pipesim.schedules.unroll.unroll` lays
    out a no-flush schedule (the same two functions), each step's optimizer as flat -1."""
    first = int(encoded.row_starts[device])
    row = range(first, int(encoded.row_starts[device + 1]))
    forward = [bool(encoded.kind[flat] == F) for flat in row]
    devices = len(encoded.row_starts) - 1
    order = with_optimizer_steps(no_flush_order(forward, device, devices, steps))
    return [
        (step, -1 if position == OPTIMIZER_STEP else first + position) for step, position in order
    ]


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


def _upstream(encoded: EncodedSchedule, items: _Items, steps: int) -> IntArray:
    """Per item, the item of the same step on another stage that it consumes (-1 none): F the
    previous stage's F, a backward the next stage's. Its other dependency (a backward's own F,
    a W's I) sits earlier on its own device, so the device's order covers it."""
    item_of = np.full((steps, encoded.actions), -1, dtype=np.int64)
    is_action = items.flat >= 0
    item_of[items.step[is_action], items.flat[is_action]] = np.flatnonzero(is_action)
    dependency = np.where(is_action, encoded.upstream[np.maximum(items.flat, 0)], -1)
    has = dependency >= 0
    out = np.full(len(items.device), -1, dtype=np.int64)
    out[has] = item_of[items.step[has], dependency[has]]
    return out


def _transfers(
    costs: PipelineCosts,
    items: _Items,
    stage: IntArray,
    source: IntArray,
    consumer: IntArray,
) -> tuple[IntArray, FloatArray, FloatArray, IntArray, IntArray, list[str], list[tuple[str, ...]]]:
    """Per item: the index of the route its transfer takes (-1: no transfer), its occupancy
    and transfer time; the routes' channels as CSR over channel numbers; the channel names;
    each route's channels by name. Only the device pairs that exchange data get a route."""
    network = costs.network
    has = consumer >= 0
    sender, receiver = items.device[has], items.device[consumer[has]]
    devices = costs.network.devices
    pairs = np.unique(sender * devices + receiver)
    channel_number: dict[str, int] = {}
    routes: list[tuple[str, ...]] = []
    latency, bandwidth = np.zeros(len(pairs)), np.zeros(len(pairs))
    for index, pair in enumerate(pairs.tolist()):
        r = network.route(pair // devices, pair % devices)
        latency[index], bandwidth[index] = r.latency_s, r.bandwidth_bytes_per_s
        routes.append(r.channels)
        for channel in r.channels:
            channel_number.setdefault(channel, len(channel_number))
    route_starts = np.array([0, *itertools.accumulate(map(len, routes))], dtype=np.int64)
    route_channels = np.array([channel_number[c] for r in routes for c in r], dtype=np.int64)
    route = np.full(len(items.device), -1, dtype=np.int64)
    route[has] = np.searchsorted(pairs, sender * devices + receiver)
    output = np.array([s.output_bytes for s in costs.stages])
    size = np.zeros(len(items.device))
    size[has] = output[np.minimum(stage[has], stage[consumer[has]])]
    safe = np.maximum(route, 0)
    finite = np.isfinite(bandwidth[safe]) if len(pairs) else np.zeros(len(route), dtype=bool)
    # Route.occupancy_s and Route.transfer_time_s, elementwise: the same IEEE operations.
    if len(pairs):
        occupancy = np.where(has & finite, size / np.where(finite, bandwidth[safe], 1.0), 0.0)
        transfer = np.where(has, latency[safe] + occupancy, 0.0)
    else:
        occupancy = transfer = np.zeros(len(route))
    return route, occupancy, transfer, route_starts, route_channels, list(channel_number), routes


def _execution_order(
    schedule: Schedule,
    encoded: EncodedSchedule,
    items: _Items,
    steps: int,
    upstream: IntArray,
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
    ran = dry_run_kernel.python(items.device_starts.tolist(), upstream.tolist(), walked)
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


def _play(
    arguments: dict[str, Any],
    order: IntArray,
    key: IntArray,
    items: _Items,
    consumer: IntArray,
    channels: int,
    devices: int,
    costs: PipelineCosts,
    compiled: bool,
    force_events: bool,
) -> tuple[FloatArray, Any, Any]:
    """Run the in-order walk, and the event loop when a shared channel needs it: the start
    times, and the transfers' start and arrival times (per item)."""
    count = len(order)
    use_compute = bool(costs.transfers_use_compute)
    if compiled:
        start, sent, arrival = (np.zeros(count) for _ in range(3))
        converted = {k: np.ascontiguousarray(v) for k, v in arguments.items()}
        walk = play_in_order.compiled()
        events = play_by_events.compiled()
    else:
        start, sent, arrival = ([0.0] * count for _ in range(3))  # type: ignore[assignment]
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
            converted["source"],
            converted["route"],
            converted["occupancy"],
            converted["transfer"],
            converted["route_starts"],
            converted["route_channels"],
            channels,
            devices,
            use_compute,
            start,
            sent,
            arrival,
        )
    )
    if stopped >= 0:
        following = np.full(count, -1, dtype=np.int64)
        following[:-1] = np.arange(1, count, dtype=np.int64)
        following[items.device_starts[1:] - 1] = -1
        extra = {"following": following, "consumer": consumer}
        more = (
            {k: np.ascontiguousarray(v) for k, v in extra.items()}
            if compiled
            else {k: v.tolist() for k, v in extra.items()}
        )
        events(
            key,
            converted["device"],
            converted["duration"],
            converted["source"],
            more["following"],
            more["consumer"],
            converted["route"],
            converted["occupancy"],
            converted["transfer"],
            converted["route_starts"],
            converted["route_channels"],
            channels,
            use_compute,
            start,
            sent,
            arrival,
        )
    # Only the start times are needed now; the transfers' times are read when records are.
    if compiled:
        return np.asarray(start), sent, arrival
    return np.fromiter(start, dtype=np.float64, count=count), sent, arrival
