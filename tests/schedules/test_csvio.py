"""Compute-only CSV: PyTorch's format, round trip, and every refusal."""

from __future__ import annotations

from pathlib import Path

import pytest

from application.outputs import write_text_atomically
from pipesim.errors import ScheduleError
from pipesim.schedules import (
    Action,
    Kind,
    UpdateRule,
    build,
    from_csv,
    read_csv,
    to_csv,
)


def test_export_is_one_line_per_device() -> None:
    assert to_csv(build("1f1b", 2, 2)) == "0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n"


def test_import_ignores_empty_cells_as_pytorch_writes_idle_slots() -> None:
    text = "0F0,0F1,,,0B1,0B0\n,1F0,1F1,1B1,1B0\n\n"
    schedule = from_csv(text)
    assert schedule.devices == 2 and schedule.microbatches == 2 and schedule.chunks == 1
    assert schedule.device_actions[1] == (
        Action(1, Kind.F, 0),
        Action(1, Kind.F, 1),
        Action(1, Kind.B, 1),
        Action(1, Kind.B, 0),
    )


def test_import_infers_a_v_shaped_placement() -> None:
    zbv = build("zbv", 3, 6)
    again = from_csv(to_csv(zbv), name="zbv")
    assert again.placement == (0, 1, 2, 2, 1, 0)
    assert again == zbv


def test_semantics_come_from_the_caller() -> None:
    schedule = from_csv(to_csv(build("1f1b", 2, 2)), update_rule=UpdateRule.TWO_BW)
    assert schedule.update_rule is UpdateRule.TWO_BW
    assert from_csv("0F0,0B0\n", rematerialize=True).rematerialize


def test_file_round_trip(tmp_path: Path) -> None:
    schedule = build("interleaved-1f1b", 2, 4, 2)
    path = tmp_path / "interleaved.csv"
    write_text_atomically(path, to_csv(schedule), field="schedule file")
    loaded = read_csv(path)
    assert loaded.name == "interleaved.csv"
    assert loaded.device_actions == schedule.device_actions
    assert loaded.placement == schedule.placement


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "0F0,0X0\n",
            "sched.csv line 1 cell 2: action '0X0' is not of the form "
            "<stage><F|B|I|W><microbatch>, e.g. 2F0 (compute-only CSV holds F, B, I and W "
            "actions only)",
        ),
        (
            "0F0,0SEND_F0,0B0\n",
            "sched.csv line 1 cell 2: action '0SEND_F0' is not of the form "
            "<stage><F|B|I|W><microbatch>, e.g. 2F0 (compute-only CSV holds F, B, I and W "
            "actions only)",
        ),
        ("", "sched.csv: no actions found (expected one line of actions per device)"),
        (",,\n\n", "sched.csv: no actions found (expected one line of actions per device)"),
        (
            "0F0,1F0\n1B0,0B0\n",
            "sched.csv: stage 1 has actions on device 0 and on device 1 (1B0); a stage lives on "
            "one device",
        ),
        (
            "0F0,0B0\n2F0,2B0\n",
            "sched.csv: stage(s) 1 have no actions, but stage 2 does; stages must be numbered "
            "0..S-1",
        ),
    ],
)
def test_bad_csv_is_refused_with_its_place(text: str, message: str) -> None:
    with pytest.raises(ScheduleError) as error:
        from_csv(text, source="sched.csv")
    assert str(error.value) == message


def test_invalid_schedule_in_a_csv_renders_the_grid() -> None:
    with pytest.raises(ScheduleError) as error:
        from_csv("0F0,0F1,0B1,0B0\n1F0,1B0,1F1\n")
    assert str(error.value).splitlines()[0] == (
        "schedule CSV: stage 1 micro-batch 1 has no backward: 1B1 is missing (or 1I1 and 1W1)"
    )


def test_unreadable_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.csv"
    with pytest.raises(ScheduleError) as error:
        read_csv(missing)
    assert str(error.value) == (
        f"schedule file {str(missing)!r}: cannot read it (No such file or directory)"
    )
    binary = tmp_path / "binary.csv"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ScheduleError, match=r"binary\.csv'\: cannot read it \("):
        read_csv(binary)
