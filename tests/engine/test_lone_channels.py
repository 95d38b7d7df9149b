"""The in-order walk's lone channels (pipesim.engine.fast._lone_channels): which routes have
one, and that the walk's shortcut for them (no order check, the booking in line) gives the very
same numbers as its general path, bit for bit, interpreted and compiled."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipesim.common.jit import numba_available
from pipesim.costs import PipelineCosts
from pipesim.engine.fast import _durations, _lone_channels, _transfers
from pipesim.engine.kernels import play_in_order
from pipesim.engine.run_layout import run_layout
from pipesim.engine.simulate import costs_on_stages
from pipesim.errors import ScheduleError
from pipesim.schedules import Schedule

from .strategies import any_schedule, costs_for


def test_a_lone_channel_is_a_routes_only_channel_used_by_no_other_route() -> None:
    # routes: [0], [1, 2], [2], [3], [] over channels 0..3; channel 2 is shared
    starts = np.array([0, 1, 3, 4, 5, 5], dtype=np.int64)
    channels = np.array([0, 1, 2, 2, 3], dtype=np.int64)
    durations = np.array([0.0, 1.0, 2.5])
    assert _lone_channels(starts, channels, durations).tolist() == [0, -1, -1, 3, -1]


@pytest.mark.parametrize("bad", [-1.0, float("nan")])
def test_no_lone_channel_unless_every_duration_is_at_least_zero(bad: float) -> None:
    """A negative duration could make a device's next request earlier than its last."""
    starts = np.array([0, 1], dtype=np.int64)
    channels = np.array([0], dtype=np.int64)
    assert _lone_channels(starts, channels, np.array([1.0, bad])).tolist() == [-1]


def test_no_routes_no_lone_channels() -> None:
    empty = np.array([], dtype=np.int64)
    assert _lone_channels(np.array([0], dtype=np.int64), empty, np.array([1.0])).tolist() == []


def _walk_both_ways(
    schedule: Schedule, costs: PipelineCosts, steps: int, compiled: bool
) -> list[tuple[int, list[list[float]]]]:
    """The walk with the lone channels, and with none (every route on the general path)."""
    layout = run_layout(schedule, steps)
    items = layout.items
    duration = _durations(schedule, costs, layout.stage, layout.kind, items.device, items.flat)
    route, occupancy, transfer, starts, channels, names, _ = _transfers(
        costs, items, layout.stage, layout.source, layout.consumer
    )
    lone = _lone_channels(starts, channels, duration)
    arrays = [layout.order, items.device, duration, layout.source, route]
    arrays += [occupancy, transfer, starts, channels]
    count, devices, width = len(items.device), schedule.devices, len(names)
    use_compute = bool(costs.transfers_use_compute)
    out = []
    for shortcut in (lone, np.full_like(lone, -1)):
        if compiled:
            walk: Any = play_in_order.compiled()
            inputs: list[Any] = [*arrays, shortcut]
            scratch: list[Any] = [np.zeros(devices), np.zeros(width), np.zeros(width)]
            results: list[Any] = [np.zeros(count) for _ in range(3)]
        else:
            walk = play_in_order.python
            inputs = [a.tolist() for a in (*arrays, shortcut)]
            scratch = [[0.0] * devices, [0.0] * width, [0.0] * width]
            results = [[0.0] * count for _ in range(3)]
        stopped = walk(*inputs, use_compute, *scratch, *results)
        out.append((stopped, [np.asarray(r).tolist() for r in results]))
    return out


@st.composite
def runs(draw: st.DrawFn) -> tuple[Schedule, PipelineCosts, int]:
    schedule = draw(any_schedule())
    return schedule, costs_on_stages(schedule, draw(costs_for(schedule))), draw(st.integers(1, 3))


def _check(run: tuple[Schedule, PipelineCosts, int], compiled: bool) -> None:
    schedule, costs, steps = run
    try:
        run_layout(schedule, steps)
    except ScheduleError:  # steps that deadlock back to back: nothing to walk
        return
    with_lone, without = _walk_both_ways(schedule, costs, steps, compiled)
    assert with_lone == without  # the same stop (or none), and the same numbers up to it


@given(runs())
def test_the_lone_channel_shortcut_gives_the_same_numbers(
    run: tuple[Schedule, PipelineCosts, int],
) -> None:
    _check(run, compiled=False)


@pytest.mark.skipif(not numba_available(), reason="the fast extra (numba) is not installed")
@given(runs())
@settings(max_examples=25)
def test_the_compiled_lone_channel_shortcut_gives_the_same_numbers(
    run: tuple[Schedule, PipelineCosts, int],
) -> None:
    _check(run, compiled=True)
