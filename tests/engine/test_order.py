"""Execution order, the engines' tie-break: one definition (a dry run of the unrolled lists),
computed three ways that must agree."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from pipesim.engine.fast import _execution_order, _lay_out, _upstream
from pipesim.engine.order import work_order
from pipesim.engine.simpy_engine import _one_step_keys
from pipesim.schedules import Schedule, build
from pipesim.schedules.unroll import unroll

from .strategies import any_schedule


def ranks(keys: list[list[int]]) -> list[list[int]]:
    order = sorted(k for row in keys for k in row)
    rank = {k: r for r, k in enumerate(order)}
    return [[rank[k] for k in row] for row in keys]


@given(any_schedule())
def test_one_step_keys_are_the_dry_run_of_one_step(schedule: Schedule) -> None:
    assert ranks(_one_step_keys(schedule)) == work_order(schedule, unroll(schedule, 1))


@given(any_schedule(max_devices=4, max_microbatches=6), st.integers(1, 3))
@settings(max_examples=50)
def test_the_fast_engine_orders_items_as_the_dry_run_does(schedule: Schedule, steps: int) -> None:
    encoded = schedule.encoded
    items = _lay_out(schedule, encoded, steps)
    order = _execution_order(schedule, encoded, items, steps, _upstream(encoded, items, steps))
    key = np.empty(len(order), dtype=np.int64)
    key[order] = np.arange(len(order))
    expected = work_order(schedule, unroll(schedule, steps))
    starts = items.device_starts
    assert [key[starts[d] : starts[d + 1]].tolist() for d in range(schedule.devices)] == expected


def test_items_follow_unroll_for_no_flush_schedules() -> None:
    schedule = build("pipedream-2bw", 3, 4)
    items = _lay_out(schedule, schedule.encoded, 3)
    flat = schedule.actions()
    got = [
        [
            (int(items.step[i]), None if items.flat[i] < 0 else flat[int(items.flat[i])])
            for i in range(int(items.device_starts[d]), int(items.device_starts[d + 1]))
        ]
        for d in range(3)
    ]
    expected = [[(w.step, w.action) for w in row] for row in unroll(schedule, 3)]
    assert got == expected
