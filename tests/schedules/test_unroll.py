"""Several steps back to back: literal lists for tiny cases, and the step count's error."""

from __future__ import annotations

import pytest

from pipesim.checks import SpecError
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


def test_no_flush_schedules_weave_the_next_steps_forwards_into_the_trailing_backwards() -> None:
    # Device 0 of PipeDream at K=2, M=2: 0F0 0F1 0B0 0B1 per step; the next step's leading
    # forwards alternate with this step's trailing backwards (the 1F1B steady state).
    assert _texts("pipedream", 2, 2, 2)[0] == [
        "s0:0F0",
        "s0:0F1",
        "s1:0F0",
        "s0:0B0",
        "s1:0F1",
        "s0:0B1",
        "s0:opt",
        "s1:0B0",
        "s1:0B1",
        "s1:opt",
    ]


@pytest.mark.parametrize("steps", [0, -1, 1.5, True])
def test_a_bad_step_count_is_a_schedule_error_not_a_spec_error(steps: object) -> None:
    with pytest.raises(ScheduleError, match="steps must be an integer >= 1") as raised:
        unroll(build("1f1b", 2, 2), steps)  # type: ignore[arg-type]
    assert not isinstance(raised.value, SpecError)
