"""Properties of every generator over name x K x M x v (hypothesis)."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipesim.errors import ScheduleError
from pipesim.schedules import (
    Action,
    Kind,
    Schedule,
    build,
    from_csv,
    schedule_names,
    to_csv,
    unsupported_reason,
)

from .strategies import in_flight_peaks, reference_runs_to_completion, schedules


@given(schedules())
def test_every_schedule_is_complete_placed_and_deadlock_free(schedule: Schedule) -> None:
    counts = Counter(schedule.actions())
    assert set(counts.values()) == {1}
    for stage in range(schedule.stages):
        for mb in range(schedule.microbatches):
            kinds = {a.kind for a in counts if a.stage == stage and a.microbatch == mb}
            if schedule.copy_of_stage(stage) == schedule.routes[mb]:
                assert kinds in ({Kind.F, Kind.B}, {Kind.F, Kind.I, Kind.W})
            else:  # a stage of another copy of the model than the micro-batch's
                assert not kinds
    held = schedule.chunks * schedule.copies
    assert schedule.stages == schedule.devices * held
    assert sorted(Counter(schedule.placement).values()) == [held] * schedule.devices
    assert reference_runs_to_completion(
        schedule.stages, schedule.placement, schedule.device_actions, schedule.model_stages
    )


@given(schedules())
def test_execution_order_respects_lists_and_dependencies(schedule: Schedule) -> None:
    order = schedule.execution_order()
    assert sorted(map(str, order)) == sorted(map(str, schedule.actions()))
    position = {a: i for i, a in enumerate(order)}
    for row in schedule.device_actions:
        assert [position[a] for a in row] == sorted(position[a] for a in row)
    for a in order:
        assert all(position[dep] < position[a] for dep in schedule.dependencies(a))
    inverse = {(dep, a) for a in order for dep in schedule.dependencies(a)}
    assert inverse == {(a, c) for a in order for c in schedule.consumers(a)}


@given(schedules(names=["gpipe", "looped-bfs"]))
def test_fill_drain_runs_all_forwards_then_all_backwards(schedule: Schedule) -> None:
    for row in schedule.device_actions:
        kinds = [a.kind for a in row]
        forwards = schedule.microbatches * schedule.chunks
        assert kinds == [Kind.F] * forwards + [Kind.B] * forwards


@given(schedules(names=["1f1b", "pipedream", "pipedream-2bw"]))
def test_1f1b_keeps_at_most_k_minus_d_in_flight(schedule: Schedule) -> None:
    k, m = schedule.devices, schedule.microbatches
    assert in_flight_peaks(schedule, Kind.B) == [min(k - d, m) for d in range(k)]


@given(schedules(names=["zb-h1"]))
def test_zb_h1_keeps_1f1b_activation_memory(schedule: Schedule) -> None:
    k, m = schedule.devices, schedule.microbatches
    assert in_flight_peaks(schedule, Kind.I) == [min(k - d, m) for d in range(k)]
    assert max(in_flight_peaks(schedule, Kind.W)) <= k


@given(schedules(names=["zb-h2"]))
def test_zb_h2_keeps_at_most_2k_minus_1_in_flight(schedule: Schedule) -> None:
    k, m = schedule.devices, schedule.microbatches
    assert in_flight_peaks(schedule, Kind.I) == [min(2 * (k - d) - 1, m) for d in range(k)]
    assert max(in_flight_peaks(schedule, Kind.W)) <= 2 * k - 1
    assert in_flight_peaks(schedule, Kind.W)[0] == min(2 * k - 1, m)


@given(schedules())
def test_csv_round_trip_is_the_identity(schedule: Schedule) -> None:
    text = to_csv(schedule)
    assert text.count("\n") == schedule.devices
    again = from_csv(text, name=schedule.name, update_rule=schedule.update_rule)
    assert again == schedule
    assert to_csv(again) == text


@given(schedules(max_devices=4, max_microbatches=8), st.randoms(use_true_random=False))
def test_a_shuffled_device_list_is_accepted_exactly_when_it_can_run(
    schedule: Schedule, rng: random.Random
) -> None:
    rows = [list(row) for row in schedule.device_actions]
    device = rng.randrange(len(rows))
    rng.shuffle(rows[device])
    runnable = reference_runs_to_completion(
        schedule.stages, schedule.placement, rows, schedule.model_stages
    )
    try:
        schedule.replace(device_actions=tuple(map(tuple, rows)))
    except ScheduleError:
        assert not runnable
    else:
        assert runnable


@given(schedules(max_devices=4, max_microbatches=8), st.data())
def test_a_truncated_schedule_is_rejected(schedule: Schedule, data: st.DataObject) -> None:
    device = data.draw(st.integers(0, schedule.devices - 1))
    row = schedule.device_actions[device]
    cut = data.draw(st.integers(1, len(row)))
    rows = list(schedule.device_actions)
    rows[device] = row[:-cut]
    with pytest.raises(ScheduleError, match=r"is missing|no backward|but no"):
        schedule.replace(device_actions=tuple(rows))


@given(schedules(max_devices=4, max_microbatches=8))
def test_a_reversed_device_list_is_rejected(schedule: Schedule) -> None:
    rows = list(schedule.device_actions)
    rows[0] = tuple(reversed(rows[0]))
    with pytest.raises(ScheduleError, match="before"):
        schedule.replace(device_actions=tuple(rows))


def test_every_schedule_builds_validates_and_exports_over_the_whole_grid() -> None:
    """The issue's acceptance grid: K in 1..8, M in 1..32, v in 1..4 wherever allowed."""
    built = Counter[str]()
    for name in schedule_names():
        for k in range(1, 9):
            for m in range(1, 33):
                for v in range(1, 5):
                    if unsupported_reason(name, k, m, v) is not None:
                        continue
                    schedule = build(name, k, m, v)
                    assert from_csv(to_csv(schedule), update_rule=schedule.update_rule) == (
                        schedule_with_name(schedule, "csv")
                    )
                    built[name] += 1
    # Each schedule builds on most of the grid: the constraints are narrow, not blanket.
    assert built["gpipe"] == built["1f1b"] == built["zb-h1"] == built["zb-h2"] == 8 * 32
    assert built["looped-bfs"] == 8 * 32 * 4
    assert built["zbv"] == 8 * 32
    assert built["dualpipev"] == sum(33 - 2 * k for k in range(1, 9))
    assert built["dualpipe"] == sum(len(range(2 * k, 33, 2)) for k in (2, 4, 6, 8))
    assert built["pipedream-2bw"] == sum(33 - k for k in range(1, 9))
    assert built["interleaved-1f1b"] == built["interleaved-zb"] > 8 * 8 * 3
    assert built["interleaved-1f1b-flexible"] == 8 * 32 * 3


def schedule_with_name(schedule: Schedule, name: str) -> Schedule:
    return schedule.replace(name=name)


def test_actions_for_a_stage_sit_on_its_device() -> None:
    schedule = build("interleaved-1f1b", 3, 6, 2)
    assert schedule.placement == (0, 1, 2, 0, 1, 2)
    assert schedule.stages_on(1) == (1, 4)
    for device, row in enumerate(schedule.device_actions):
        assert {schedule.device_of(a.stage) for a in row} == {device}
    assert Action(4, Kind.F, 0) in schedule.device_actions[1]
