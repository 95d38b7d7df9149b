"""pipesim.engine.kernels.reserve_route: the link model's booking, literal cases, the same on
channel numbers and on channel names (how the fast and the SimPy engines hold channels), and the
same compiled."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest

from pipesim.common.jit import numba_available
from pipesim.engine.kernels import reserve_route

# (channels free before, route, request time, occupancy) -> (start, channels free after)
CASES = [
    ([0.0, 0.0], [0], 1.0, 2.0, 1.0, [3.0, 0.0]),  # idle channel: starts at the request
    ([5.0, 0.0], [0], 1.0, 2.0, 5.0, [7.0, 0.0]),  # busy channel: waits until it is free
    ([5.0, 6.0], [0, 1], 1.0, 2.0, 6.0, [8.0, 8.0]),  # two hops: waits for the later, holds both
    ([5.0, 6.0], [1], 7.0, 0.0, 7.0, [5.0, 7.0]),  # zero bytes: holds nothing, never waits
]


@pytest.mark.parametrize(
    "form",
    [
        "numbers",
        "names",
        pytest.param(
            "compiled",
            marks=pytest.mark.skipif(not numba_available(), reason="numba is not installed"),
        ),
    ],
)
@pytest.mark.parametrize(("free", "route", "now", "occupancy", "start", "after"), CASES)
def test_a_message_starts_when_its_whole_route_is_free(
    form: str,
    free: list[float],
    route: list[int],
    now: float,
    occupancy: float,
    start: float,
    after: list[float],
) -> None:
    """The same booking on channel numbers (the fast engine, interpreted), on channel names
    (the SimPy engine) and compiled (the fast engine under numba)."""
    if form == "names":
        by_name: defaultdict[str, float] = defaultdict(float, {"a": free[0], "b": free[1]})
        names = tuple("ab"[c] for c in route)
        assert reserve_route(by_name, names, 0, len(names), now, occupancy) == start
        assert [by_name["a"], by_name["b"]] == after
    elif form == "compiled":
        channel_free = np.array(free)
        routes = np.array(route, dtype=np.int64)
        got = reserve_route.compiled()(channel_free, routes, 0, len(route), now, occupancy)
        assert got == start and channel_free.tolist() == after
    else:
        numbers = list(free)
        assert reserve_route(numbers, route, 0, len(route), now, occupancy) == start
        assert numbers == after


def test_only_the_route_slice_is_booked() -> None:
    channel_free = [0.0, 4.0, 9.0]
    routes = [2, 1, 0]  # CSR: this route is routes[1:3] = channels 1 and 0
    assert reserve_route(channel_free, routes, 1, 3, 2.0, 1.0) == 4.0
    assert channel_free == [5.0, 5.0, 9.0]
