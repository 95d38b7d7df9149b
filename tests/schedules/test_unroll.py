"""Several steps back to back: literal lists for tiny cases, and the step count's error."""

from __future__ import annotations

import pytest

from pipesim.common.checks import SpecError
from pipesim.errors import ScheduleError
from pipesim.schedules import build
from pipesim.schedules.unroll import unroll


def _texts(schedule_name: str, devices: int, microbatches: int, steps: int) -> list[list[str]]:
    rows = unroll(build(schedule_name, devices, microbatches), steps)
    return [[str(work) for work in row] for row in rows]


def test_flush_schedules_run_step_after_step_with_an_optimizer_step_between() -> None:
    device0 = ["0F0", "0F1", "0B0", "0B1", "opt"]
    device1 = ["1F0", "1B0", "1F1", "1B1", "opt"]
    assert _texts("1f1b", 2, 2, 2) == [
        [f"s{step}:{item}" for step in (0, 1) for item in device0],
        [f"s{step}:{item}" for step in (0, 1) for item in device1],
    ]


def test_no_flush_schedules_run_their_steps_as_one_1f1b_stream() -> None:
    # Device 0 of PipeDream at K=2, M=2: 0F0 0F1 0B0 0B1 per step. Over two steps it is 1F1B
    # over four micro-batches: K-d = 2 forwards in flight, then one backward one forward.
    assert _texts("pipedream", 2, 2, 2)[0] == [
        "s0:0F0",
        "s0:0F1",
        "s0:0B0",
        "s1:0F0",
        "s0:0B1",
        "s0:opt",
        "s1:0F1",
        "s1:0B0",
        "s1:0B1",
        "s1:opt",
    ]


def test_no_flush_keeps_k_minus_d_in_flight_when_a_step_has_fewer_micro_batches() -> None:
    # PipeDream at K=2 with one micro-batch per step: device 0 still keeps two in flight
    # (a step-by-step weave that let backwards pile up behind every forward was the old bug:
    # it reported steps faster than a device's own work).
    device0 = "s0:0F0 s1:0F0 s0:0B0 s0:opt s2:0F0 s1:0B0 s1:opt s2:0B0 s2:opt"
    device1 = "s0:1F0 s0:1B0 s0:opt s1:1F0 s1:1B0 s1:opt s2:1F0 s2:1B0 s2:opt"
    assert _texts("pipedream", 2, 1, 3) == [device0.split(), device1.split()]


def test_no_flush_steady_state_is_never_faster_than_a_devices_work() -> None:
    from pipesim.costs import synthetic_costs
    from pipesim.engine import simulate

    for name, k, m in [("pipedream", 2, 1), ("pipedream-2bw", 4, 4), ("pipedream", 4, 8)]:
        for steps in (2, 3, 6):
            for engine in ("simpy", "fast"):
                result = simulate(
                    build(name, k, m), synthetic_costs(k, 1, 1.0, 2.0), steps=steps, engine=engine
                )
                busiest = max(d.busy_time_s for d in result.per_device)
                # F=1, B=2 per micro-batch: M x 3 s of work per step, and no bubble once
                # the stream is steady (M >= K or not: the stream never drains).
                assert result.iteration_time_s == pytest.approx(3.0 * m, rel=1e-12)
                assert busiest == pytest.approx(3.0 * m, rel=1e-12)


@pytest.mark.parametrize("steps", [0, -1, 1.5, True])
def test_a_bad_step_count_is_a_schedule_error_not_a_spec_error(steps: object) -> None:
    with pytest.raises(ScheduleError, match="steps must be an integer >= 1") as raised:
        unroll(build("1f1b", 2, 2), steps)  # type: ignore[arg-type]
    assert not isinstance(raised.value, SpecError)
