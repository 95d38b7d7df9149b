"""The fast engine's two loops, written once for the interpreter and numba
(:mod:`pipesim.common.jit`).

Both play *items* (every action of every step, and each device's optimizer steps) numbered
device by device. An item waits for at most one transfer (``source``: the item on another
device whose result it needs; its other dependencies sit earlier on its own device, so its
device being free covers them), and sends at most one (an action's result crosses to at most
one other device: F to the next stage's F, a backward to the previous stage's backward). Times
follow the engines' shared semantics exactly, in the same floating-point operations as the
SimPy engine:

* an item starts at max(its device free, its source's arrival); it ends ``duration`` later;
* at its end its transfer reserves every channel of its route from ``max(end, channels
  free)`` for ``occupancy``; it arrives ``transfer`` (latency + occupancy) after that start;
  with ``use_compute`` the device stays busy until then;
* channels serve requests in order of request time, and at equal times in execution order.

That booking rule is :func:`reserve_route`, written once: both loops here call it (the walk
does its one-channel case in line, in the same operations, for a route's lone channel: see
below), and so does the SimPy engine (:mod:`pipesim.engine.simpy_engine`), in the interpreter,
on its own channel names. It lives in this file because numba's on-disk cache is invalidated by
a change to the caller's source file only: a callee in another file could leave stale compiled
loops behind.

:func:`play_in_order` walks the items in execution order once: a longest-path walk. It is exact
as long as every channel receives its requests in time order, which holds for every channel
used by one sending device only (a device's actions end in list order); when a channel shared
by several senders gets a request earlier than one it already served, the walk stops and
:func:`play_by_events` replays the run with a heap of end events ordered by (time, execution
order): the discrete-event form of the same rule. A route's *lone channel* (its only channel,
used by no other route) cannot see a request out of order, as the walk visits each device's
items in list order and, with no negative duration, their ends never decrease: the walk
skips the check there, and books it without the loops.
"""

from __future__ import annotations

import heapq
from typing import Any

from pipesim.common.jit import kernel


@kernel
def reserve_route(
    channel_free: Any, route_channels: Any, first: int, last: int, now: float, occupancy: float
) -> float:
    """The link model's booking: a message requested at ``now`` starts once every channel of
    its route (``route_channels[first:last]``) is free, holds them all for ``occupancy``, and
    they are free again after that. Updates ``channel_free`` (indexed by channel: a list or
    array of channel numbers in the fast engine, a mapping of channel names in SimPy's) and
    returns the start."""
    begin = now
    for k in range(first, last):
        if channel_free[route_channels[k]] > begin:
            begin = channel_free[route_channels[k]]
    busy_until = begin + occupancy
    for k in range(first, last):
        channel_free[route_channels[k]] = busy_until
    return begin


@kernel
def play_in_order(
    order: Any,
    device: Any,
    duration: Any,
    source: Any,
    route: Any,
    occupancy: Any,
    transfer: Any,
    route_starts: Any,
    route_channels: Any,
    lone_channel: Any,
    use_compute: bool,
    device_free: Any,
    channel_free: Any,
    last_request: Any,
    start: Any,
    sent: Any,
    arrival: Any,
) -> int:
    """Play the items in ``order``; fill ``start``, and ``sent`` (transfer start) and
    ``arrival`` of the items that send (an item ends at start + duration). Returns -1, or the
    position in ``order`` where a channel saw a request earlier than one it had served (the
    caller then replays with :func:`play_by_events`).

    ``lone_channel[r]`` is route r's channel when it is r's only channel and no other route
    uses it, else -1 (-1 for every route unless every duration is >= 0): such a channel gets
    requests from r's sender alone, in its list order, at end times that never decrease, so the
    order check cannot fail there and is skipped, and :func:`reserve_route`'s one-channel case
    is done in line (the same comparisons and the one addition). ``device_free`` (per device),
    ``channel_free`` and ``last_request`` (per channel) are zeros given by the caller, in the
    form the loop runs on (lists in the interpreter, arrays compiled: numba indexes an array
    faster than a list)."""
    for position, item in enumerate(order):
        here = device[item]
        ready = device_free[here]
        producer = source[item]
        if producer >= 0:
            came = arrival[producer]
            if came > ready:
                ready = came
        finish = ready + duration[item]
        start[item] = ready
        path = route[item]
        if path < 0:
            device_free[here] = finish
            continue
        channel = lone_channel[path]
        if channel >= 0:
            begin = finish
            if channel_free[channel] > begin:
                begin = channel_free[channel]
            channel_free[channel] = begin + occupancy[item]
        else:
            first, last = route_starts[path], route_starts[path + 1]
            for k in range(first, last):
                if last_request[route_channels[k]] > finish:
                    return position
                last_request[route_channels[k]] = finish
            begin = reserve_route(
                channel_free, route_channels, first, last, finish, occupancy[item]
            )
        sent[item] = begin
        came = begin + transfer[item]
        arrival[item] = came
        device_free[here] = came if use_compute and came > finish else finish
    return -1


@kernel
def play_by_events(
    key: Any,
    device: Any,
    duration: Any,
    source: Any,
    following: Any,
    consumer: Any,
    route: Any,
    occupancy: Any,
    transfer: Any,
    route_starts: Any,
    route_channels: Any,
    channels: int,
    use_compute: bool,
    start: Any,
    sent: Any,
    arrival: Any,
) -> int:
    """The same run as a discrete-event loop: items end in (time, ``key``) order, and each
    end reserves its transfer's channels then and there. ``following[i]`` is the next item on
    i's device and ``consumer[i]`` the item on another device that waits for i's transfer
    (-1 none). Returns how many items ran."""
    items = len(device)
    waiting = [0] * items
    ready = [0.0] * items
    for item in range(items):
        if source[item] >= 0:
            waiting[item] += 1
        after = following[item]
        if after >= 0:
            waiting[after] += 1
    channel_free = [0.0] * channels
    heap = [(0.0, 0, 0)]
    heap.pop()
    for item in range(items):
        if waiting[item] == 0:
            start[item] = 0.0
            heapq.heappush(heap, (0.0 + duration[item], key[item], item))
    ran = 0
    while len(heap) > 0:
        finish, _, item = heapq.heappop(heap)
        ran += 1
        free = finish
        path = route[item]
        if path >= 0:
            first, last = route_starts[path], route_starts[path + 1]
            begin = reserve_route(
                channel_free, route_channels, first, last, finish, occupancy[item]
            )
            sent[item] = begin
            came = begin + transfer[item]
            arrival[item] = came
            if use_compute and came > free:
                free = came
        for which in range(2):
            if which == 0:
                nxt = following[item]
                came = free
            else:
                nxt = consumer[item]
                if nxt >= 0:
                    came = arrival[item]
            if nxt < 0:
                continue
            if came > ready[nxt]:
                ready[nxt] = came
            waiting[nxt] -= 1
            if waiting[nxt] == 0:
                start[nxt] = ready[nxt]
                heapq.heappush(heap, (ready[nxt] + duration[nxt], key[nxt], nxt))
    return ran
