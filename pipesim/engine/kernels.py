"""The fast engine's two loops, written once for the interpreter and numba (:mod:`pipesim.jit`).

Both play *items* (every action of every step, and each device's optimizer steps) numbered
device by device, with at most two dependencies each and at most one outgoing transfer (an
action's result crosses to at most one other device: F to the next stage's F, a backward to the
previous stage's backward). Times follow the engines' shared semantics exactly, in the same
floating-point operations as the SimPy engine:

* an item starts at max(its device free, each dependency's end (same device) or arrival
  (another device)); it ends ``duration`` later;
* at its end its transfer reserves every channel of its route from ``max(end, channels
  free)`` for ``occupancy``; it arrives ``transfer`` (latency + occupancy) after that start;
  with ``use_compute`` the device stays busy until then;
* channels serve requests in order of request time, and at equal times in execution order.

:func:`play_in_order` walks the items in execution order once: a longest-path walk. It is exact
as long as every channel receives its requests in time order, which holds for every channel
used by one sending device only (a device's actions end in list order); when a channel shared
by several senders gets a request earlier than one it already served, the walk stops and
:func:`play_by_events` replays the run with a heap of end events ordered by (time, execution
order): the discrete-event form of the same rule.
"""

from __future__ import annotations

import heapq
from typing import Any

from pipesim.jit import kernel


@kernel
def play_in_order(
    order: Any,
    device: Any,
    duration: Any,
    first: Any,
    second: Any,
    route: Any,
    occupancy: Any,
    transfer: Any,
    route_starts: Any,
    route_channels: Any,
    channels: int,
    devices: int,
    use_compute: bool,
    start: Any,
    end: Any,
    sent: Any,
    arrival: Any,
) -> int:
    """Play the items in ``order``; fill ``start``, ``end``, ``sent`` (transfer start) and
    ``arrival``. Returns -1, or the position in ``order`` where a channel saw a request earlier
    than one it had served (the caller then replays with :func:`play_by_events`)."""
    device_free = [0.0] * devices
    channel_free = [0.0] * channels
    last_request = [0.0] * channels
    for position in range(len(order)):
        item = order[position]
        here = device[item]
        ready = device_free[here]
        producer = first[item]
        if producer >= 0:
            came = arrival[producer] if device[producer] != here else end[producer]
            if came > ready:
                ready = came
            producer = second[item]
            if producer >= 0:
                came = arrival[producer] if device[producer] != here else end[producer]
                if came > ready:
                    ready = came
        finish = ready + duration[item]
        start[item] = ready
        end[item] = finish
        free = finish
        path = route[item]
        if path >= 0:
            begin = finish
            for k in range(route_starts[path], route_starts[path + 1]):
                channel = route_channels[k]
                if last_request[channel] > finish:
                    return position
                last_request[channel] = finish
                if channel_free[channel] > begin:
                    begin = channel_free[channel]
            busy_until = begin + occupancy[item]
            for k in range(route_starts[path], route_starts[path + 1]):
                channel_free[route_channels[k]] = busy_until
            sent[item] = begin
            came = begin + transfer[item]
            arrival[item] = came
            if use_compute and came > free:
                free = came
        device_free[here] = free
    return -1


@kernel
def play_by_events(
    key: Any,
    device: Any,
    duration: Any,
    first: Any,
    second: Any,
    following: Any,
    consumer_first: Any,
    consumer_second: Any,
    route: Any,
    occupancy: Any,
    transfer: Any,
    route_starts: Any,
    route_channels: Any,
    channels: int,
    use_compute: bool,
    start: Any,
    end: Any,
    sent: Any,
    arrival: Any,
) -> int:
    """The same run as a discrete-event loop: items end in (time, ``key``) order, and each
    end reserves its transfer's channels then and there. ``following[i]`` is the next item on
    i's device; ``consumer_first``/``consumer_second`` the items that consume i (-1 none).
    Returns how many items ran."""
    items = len(device)
    waiting = [0] * items
    ready = [0.0] * items
    for item in range(items):
        if first[item] >= 0:
            waiting[item] += 1
        if second[item] >= 0:
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
            end[item] = duration[item]
            heapq.heappush(heap, (end[item], key[item], item))
    ran = 0
    while len(heap) > 0:
        finish, _, item = heapq.heappop(heap)
        ran += 1
        here = device[item]
        free = finish
        path = route[item]
        if path >= 0:
            begin = finish
            for k in range(route_starts[path], route_starts[path + 1]):
                channel = route_channels[k]
                if channel_free[channel] > begin:
                    begin = channel_free[channel]
            busy_until = begin + occupancy[item]
            for k in range(route_starts[path], route_starts[path + 1]):
                channel_free[route_channels[k]] = busy_until
            sent[item] = begin
            came = begin + transfer[item]
            arrival[item] = came
            if use_compute and came > free:
                free = came
        for which in range(3):
            if which == 0:
                nxt = following[item]
                came = free
            elif which == 1:
                nxt = consumer_first[item]
            else:
                nxt = consumer_second[item]
            if nxt < 0:
                continue
            if which > 0:
                came = arrival[item] if device[nxt] != here else finish
            if came > ready[nxt]:
                ready[nxt] = came
            waiting[nxt] -= 1
            if waiting[nxt] == 0:
                start[nxt] = ready[nxt]
                end[nxt] = ready[nxt] + duration[nxt]
                heapq.heappush(heap, (end[nxt], key[nxt], nxt))
    return ran
