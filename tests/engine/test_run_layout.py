"""The run layout both engines read (pipesim.engine.run_layout): its items are the unrolled
work lists, and its execution order is the dry run of them, which respects every device's
list and every dependency."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pipesim.engine.run_layout import run_layout
from pipesim.schedules import Schedule, build
from pipesim.schedules.unroll import unroll

from .strategies import any_schedule


def _items(schedule: Schedule, steps: int) -> list[list[tuple[int, object]]]:
    items = run_layout(schedule, steps).items
    flat = schedule.actions()
    return [
        [
            (int(items.step[i]), None if items.flat[i] < 0 else flat[int(items.flat[i])])
            for i in range(int(items.device_starts[d]), int(items.device_starts[d + 1]))
        ]
        for d in range(schedule.devices)
    ]


@given(any_schedule(max_devices=4, max_microbatches=6), st.integers(1, 3))
@settings(max_examples=50)
def test_the_items_are_the_unrolled_work_lists(schedule: Schedule, steps: int) -> None:
    expected = [[(w.step, w.action) for w in row] for row in unroll(schedule, steps)]
    assert _items(schedule, steps) == expected


@given(any_schedule(max_devices=4, max_microbatches=6), st.integers(1, 3))
@settings(max_examples=50)
def test_execution_order_respects_lists_and_dependencies(schedule: Schedule, steps: int) -> None:
    layout = run_layout(schedule, steps)
    items = _items(schedule, steps)
    key = layout.key.tolist()
    starts = layout.items.device_starts.tolist()
    position = {}
    for d, row in enumerate(items):
        keys = key[starts[d] : starts[d + 1]]
        assert keys == sorted(keys)  # each device's list in order
        for (step, action), k in zip(row, keys, strict=True):
            if action is not None:
                position[(step, action)] = k
    for (step, action), k in position.items():
        for dependency in schedule.dependencies(action):  # type: ignore[arg-type]
            assert position[(step, dependency)] < k
    assert sorted(key) == list(range(len(key)))


def test_one_step_of_1f1b_is_ordered_as_its_dry_run_literally() -> None:
    """K=2, M=2: device 0 runs 0F0 0F1 then waits for 1B0; device 1 runs 1F0 1B0 then waits
    for 0F1 (already done) and goes on; each optimizer step right after its device's last
    action."""
    schedule = build("1f1b", 2, 2)
    layout = run_layout(schedule, 1)
    items = _items(schedule, 1)
    flat_items = [item for row in items for item in row]
    ordered = [flat_items[i] for i in layout.order.tolist()]
    labels = [str(action) if action is not None else "opt" for _, action in ordered]
    assert labels == ["0F0", "0F1", "1F0", "1B0", "1F1", "1B1", "opt", "0B0", "0B1", "opt"]
