"""The fast engine: the SimPy engine's semantics on flat arrays, in one tight loop.

The run's items, what each waits for and sends, and their execution order come from
:mod:`pipesim.engine.run_layout` (the same layout the SimPy engine reads, made once per
schedule); this module gives the items their durations and transfers under the costs and plays
them with :mod:`pipesim.engine.kernels`.

Kernels run compiled by numba when ``compiled`` is true (the ``fast`` extra), in the
interpreter otherwise (:func:`should_compile` chooses by default); the numbers are the same.
"""

from __future__ import annotations

import functools
import itertools
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

import numpy as np
import numpy.typing as npt

from pipesim.common.jit import numba_available
from pipesim.costs.pipeline_costs import PipelineCosts
from pipesim.costs.synthetic import synthetic_costs
from pipesim.engine import durations as duration_rules
from pipesim.engine.arrays import OPTIMIZER, FloatArray, IntArray, RunArrays
from pipesim.engine.durations import overlap_savings_s
from pipesim.engine.kernels import play_by_events, play_in_order
from pipesim.engine.records import TransferRecord
from pipesim.engine.run_layout import Items, run_layout
from pipesim.hardware.network import Network, occupancy_s, transfer_time_s
from pipesim.schedules.action import Action
from pipesim.schedules.dry_run import dry_run_kernel
from pipesim.schedules.registry import build
from pipesim.schedules.schedule import Schedule

_T = TypeVar("_T")

# Above this many items a one-off run pays for importing numba and loading its cached kernels
# with the time the interpreted kernels would take. Measured (2-core x86_64, Python 3.11,
# numba 0.68, cache on disk; a fresh process's first run_fast of 1F1B K=64, costs 1,2, layout
# made before; median of 5): compiled 313 / 296 / 339 ms, interpreted 116 / 228 / 469 ms at
# 131k / 262k / 524k items, i.e. about 0.25 s fixed (import and cache load) against 0.73 us
# per item saved: even at about 350k items.
COMPILE_ABOVE_ITEMS = 350_000


def warm_up() -> bool:
    """Compile (or load from numba's cache) the fast engine's kernels in this process, so every
    later run uses them; a planner or sweep calls this once. False when numba is missing."""
    if not numba_available():
        return False
    dry_run_kernel.compiled()  # the dry run (validator and run layout), compiled from now on
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
    layout = run_layout(schedule, steps)
    items, stage, kind, microbatch = layout.items, layout.stage, layout.kind, layout.microbatch
    source, consumer, order, key = layout.source, layout.consumer, layout.order, layout.key
    count = len(items.device)
    if compiled is None:
        compiled = should_compile(count)
    duration = _durations(schedule, costs, stage, kind, items.device, items.flat)
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
        done,
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


def _durations(
    schedule: Schedule,
    costs: PipelineCosts,
    stage: IntArray,
    kind: IntArray,
    device: IntArray,
    flat: IntArray,
) -> FloatArray:
    """Per item: F, I, W as given; B = I + W (plus F under remat); the optimizer step; less
    what DualPipe's forward-backward overlap hides (:func:`overlap_savings_s`)."""
    remat = schedule.rematerialize
    stages = costs.stages
    seen: dict[int, tuple[float, float, float, float]] = {}
    flat_table: list[float] = []
    for c in stages:  # per stage: F, B (plus F under remat), I, W; each stage's costs read once
        row = seen.get(id(c))
        if row is None:
            recompute = c.forward_s if remat else 0.0
            row = seen[id(c)] = (
                c.forward_s,
                recompute + c.backward_s,
                c.input_grad_s,
                c.weight_grad_s,
            )
        flat_table.extend(row)
    flat_table.extend(
        sum(stages[s].optimizer_step_s for s in held) for held in _stages_on(schedule)
    )
    cells = _kept((stage, kind, device), lambda: _duration_cells(stage, kind, device, len(stages)))
    duration = np.array(flat_table)[cells]
    if schedule.name in duration_rules.OVERLAPPED_SCHEDULES:  # (read late: tests patch it)
        savings = overlap_savings_s(schedule, costs)
        if savings.any():
            duration = duration - np.where(flat >= 0, savings[np.maximum(flat, 0)], 0.0)
    return duration


def _duration_cells(stage: IntArray, kind: IntArray, device: IntArray, stages: int) -> IntArray:
    """Per item, its duration's place in :func:`_durations`'s flat table: stage x 4 + kind for
    an action, after the stages' rows the device's optimizer step."""
    cells: IntArray = np.where(
        kind == OPTIMIZER, 4 * stages + device, 4 * stage + np.maximum(kind, 0)
    )
    return cells


def _stages_on(schedule: Schedule) -> tuple[tuple[int, ...], ...]:
    """Each device's stages (:meth:`Schedule.stages_on`), kept on the schedule."""
    return schedule.derived(
        "stages on", lambda: tuple(map(schedule.stages_on, range(schedule.devices)))
    )


@dataclass(frozen=True, eq=False)
class _TransferPlan:
    """The cost-independent part of :func:`_transfers` for one layout: the items that send
    (``has``), the stage whose output each sends, the device pairs that exchange data (sender
    * devices + receiver, sorted), each sender's pair (``on``) and each item's (``route``,
    -1 for none); and the transfer times worked out for the networks and sizes seen last."""

    stage: IntArray
    consumer: IntArray
    devices: int
    has: npt.NDArray[np.bool_]
    size_stage: IntArray
    pairs: tuple[int, ...]
    route: IntArray
    on: IntArray
    times: dict[tuple[Network, str, bytes], tuple[FloatArray, FloatArray]] = field(
        default_factory=dict
    )  # (occupancy, transfer) per item, kept for the last network and output sizes


# Networks and sizes whose transfer times a plan keeps: one (a sweep over compute speeds reuses
# it; more would hold two arrays per item for every memoized schedule: measured by a review,
# 16 made a sweep over 24 shapes x 16 link speeds grow to 625 MiB against 65 MiB)
_KEPT_TIMES = 1


_PLANS: weakref.WeakKeyDictionary[Items, _TransferPlan] = weakref.WeakKeyDictionary()


def _transfer_plan(
    items: Items, stage: IntArray, consumer: IntArray, devices: int
) -> _TransferPlan:
    """:class:`_TransferPlan` for these arrays, made once per layout (kept while ``items``
    lives, for the same ``stage`` and ``consumer`` arrays)."""
    plan = _PLANS.get(items)
    if (
        plan is not None
        and plan.stage is stage
        and plan.consumer is consumer
        and plan.devices == devices
    ):
        return plan
    has = consumer >= 0
    sender, receiver = items.device[has], items.device[consumer[has]]
    keys = sender * devices + receiver
    pairs = np.unique(keys)
    on = np.searchsorted(pairs, keys)
    route = np.full(len(items.device), -1, dtype=np.int64)
    route[has] = on
    size_stage = np.minimum(stage[has], stage[consumer[has]])
    plan = _TransferPlan(
        stage, consumer, devices, has, size_stage, tuple(pairs.tolist()), route, on
    )
    _PLANS[items] = plan
    return plan


@functools.lru_cache(maxsize=256)
def _routes(
    network: Network, pairs: tuple[int, ...]
) -> tuple[FloatArray, FloatArray, IntArray, IntArray, list[str], list[tuple[str, ...]]]:
    """Per device pair (sender * devices + receiver): its route's latency and bandwidth; the
    routes' channels as CSR over channel numbers; the channel names; each route's channels by
    name. Kept per network (a frozen value: equal networks route alike) and pairs."""
    devices = network.devices
    channel_number: dict[str, int] = {}
    routes: list[tuple[str, ...]] = []
    latency, bandwidth = np.zeros(len(pairs)), np.zeros(len(pairs))
    for index, pair in enumerate(pairs):
        r = network.route(pair // devices, pair % devices)
        latency[index], bandwidth[index] = r.latency_s, r.bandwidth_bytes_per_s
        routes.append(r.channels)
        for channel in r.channels:
            channel_number.setdefault(channel, len(channel_number))
    route_starts = np.array([0, *itertools.accumulate(map(len, routes))], dtype=np.int64)
    route_channels = np.array([channel_number[c] for r in routes for c in r], dtype=np.int64)
    return latency, bandwidth, route_starts, route_channels, list(channel_number), routes


def _transfers(
    costs: PipelineCosts,
    items: Items,
    stage: IntArray,
    source: IntArray,
    consumer: IntArray,
) -> tuple[IntArray, FloatArray, FloatArray, IntArray, IntArray, list[str], list[tuple[str, ...]]]:
    """Per item: the index of the route its transfer takes (-1: no transfer), its occupancy
    and transfer time; the routes' channels as CSR over channel numbers; the channel names;
    each route's channels by name. Only the device pairs that exchange data get a route.

    The arrays returned are shared with later calls (the layout's and the network's parts are
    made once): callers read them, never write them."""
    network = costs.network
    plan = _transfer_plan(items, stage, consumer, network.devices)
    try:
        hash(network)
    except TypeError:  # a network that is no value (not hashable): nothing is kept for it
        routed, kept = _routes.__wrapped__(network, plan.pairs), False
    else:
        routed, kept = _routes(network, plan.pairs), True
    latency, bandwidth, route_starts, route_channels, names, routes = routed
    output = np.array([s.output_bytes for s in costs.stages])
    # the sizes bit for bit with their type (a signed zero is kept apart, an integer array
    # from a float one with the same bytes); sizes held as Python objects are not kept
    kept = kept and output.dtype != object
    key = (network, output.dtype.str, output.tobytes())
    times = plan.times.get(key) if kept else None
    if times is None:
        has, on = plan.has, plan.on
        size = output[plan.size_stage]
        occupancy, transfer = np.zeros(len(has)), np.zeros(len(has))
        if len(plan.pairs):  # the link model's formulas, elementwise over the items that send
            occupancy[has] = occupancy_s(size, bandwidth[on])
            transfer[has] = transfer_time_s(size, latency[on], bandwidth[on])
        times = (occupancy, transfer)
        if kept:
            if len(plan.times) >= _KEPT_TIMES:
                plan.times.clear()
            plan.times[key] = times
    occupancy, transfer = times
    return plan.route, occupancy, transfer, route_starts, route_channels, names, routes


def _lone_channels(
    route_starts: IntArray, route_channels: IntArray, duration: FloatArray
) -> IntArray:
    """Per route, its *lone channel* for :func:`~pipesim.engine.kernels.play_in_order`: the
    route's only channel when no other route uses it, else -1; -1 for every route unless every
    duration is >= 0 (not NaN).

    Why the walk needs no order check on such a channel: a route is one (sender, receiver)
    pair, so only the sender's items request its lone channel; the walk visits a device's items
    in list order, and each starts no sooner than the previous one's end (its device is free no
    sooner), so with durations >= 0 their ends, the request times, never decrease."""
    lone = np.full(len(route_starts) - 1, -1, dtype=np.int64)
    if len(route_channels) == 0 or not bool(np.all(duration >= 0)):
        return lone
    single = np.flatnonzero(np.diff(route_starts) == 1)
    channel = route_channels[route_starts[single]]
    users = np.bincount(route_channels)
    lone[single] = np.where(users[channel] == 1, channel, -1)
    return lone


_KEPT: dict[tuple[int, ...], tuple[tuple[weakref.ref[Any], ...], Any]] = {}


def _kept(arrays: tuple[Any, ...], make: Callable[[], _T]) -> _T:
    """What ``make`` computes from ``arrays`` alone (arrays never written after they are
    made), made once while they live."""
    key = tuple(map(id, arrays))
    entry = _KEPT.get(key)
    if entry is not None and all(ref() is a for ref, a in zip(entry[0], arrays, strict=True)):
        return cast(_T, entry[1])
    value = make()

    def forget(_: object, key: tuple[int, ...] = key) -> None:
        _KEPT.pop(key, None)

    _KEPT[key] = (tuple(weakref.ref(a, forget) for a in arrays), value)
    return value


def _play(
    arguments: dict[str, Any],
    order: IntArray,
    key: IntArray,
    items: Items,
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
    route_starts, route_channels = arguments["route_starts"], arguments["route_channels"]
    if bool(np.all(arguments["duration"] >= 0)):  # the lone channels by the routes alone
        lone = _kept(
            (route_starts, route_channels),
            lambda: _lone_channels(route_starts, route_channels, np.zeros(0)),
        )
    else:
        lone = _lone_channels(route_starts, route_channels, arguments["duration"])
    converted: dict[str, Any]
    if compiled:
        start, sent, arrival = (np.zeros(count) for _ in range(3))
        converted = {k: np.ascontiguousarray(v) for k, v in arguments.items()}
        scratch: list[Any] = [np.zeros(devices), np.zeros(channels), np.zeros(channels)]
        walk = play_in_order.compiled()
        events = play_by_events.compiled()
    else:
        start, sent, arrival = ([0.0] * count for _ in range(3))  # type: ignore[assignment]
        # the interpreter reads lists; made afresh each time (kept, they would hold a
        # Python object per item for every memoized schedule)
        converted = {k: v.tolist() for k, v in arguments.items()}
        order, key = cast(Any, order.tolist()), cast(Any, key.tolist())
        lone = cast(Any, lone.tolist())
        scratch = [[0.0] * devices, [0.0] * channels, [0.0] * channels]
        walk, events = play_in_order.python, play_by_events.python
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
            lone,
            use_compute,
            *scratch,
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
