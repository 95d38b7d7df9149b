from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipesim.errors import ScheduleError
from pipesim.schedules import Action, Kind, parse_action

actions = st.builds(
    Action,
    st.integers(min_value=0, max_value=10_000),
    st.sampled_from(Kind),
    st.integers(min_value=0, max_value=10_000),
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2F0", Action(2, Kind.F, 0)),
        ("0I3", Action(0, Kind.I, 3)),
        ("1W3", Action(1, Kind.W, 3)),
        ("3B1", Action(3, Kind.B, 1)),
        (" 12F34 ", Action(12, Kind.F, 34)),
    ],
)
def test_parse_reads_pytorch_text_form(text: str, expected: Action) -> None:
    assert parse_action(text) == expected


def test_text_form_is_stage_kind_microbatch() -> None:
    assert str(Action(2, Kind.F, 0)) == "2F0"
    assert str(Action(10, Kind.W, 11)) == "10W11"
    assert repr(Action(1, Kind.I, 2)) == "Action(1I2)"


@given(actions)
def test_parse_inverts_str(action: Action) -> None:
    assert parse_action(str(action)) == action


def test_actions_are_values() -> None:
    assert Action(1, Kind.F, 2) == Action(1, Kind.F, 2)
    assert len({Action(1, Kind.F, 2), Action(1, Kind.F, 2), Action(1, Kind.B, 2)}) == 2
    with pytest.raises(AttributeError):
        Action(1, Kind.F, 2).stage = 3  # type: ignore[misc]


@pytest.mark.parametrize(
    "text", ["", "F0", "2F", "2X0", "2f0", "-1F0", "2F0x", "1SEND_F0", "\uff10F0", "0F\u0661"]
)  # the last two: full-width and Arabic-Indic digits, which int() would read
def test_parse_rejects_other_text(text: str) -> None:
    with pytest.raises(
        ScheduleError,
        match=rf"^action {text!r} is not of the form <stage><F\|B\|I\|W><microbatch>, e\.g\. 2F0$",
    ):
        parse_action(text)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"stage": -1, "kind": Kind.F, "microbatch": 0},
            "action stage must be an integer >= 0, got -1",
        ),
        (
            {"stage": 0, "kind": "F", "microbatch": 0},
            "action kind must be a Kind (F, B, I or W), got 'F'",
        ),
        (
            {"stage": 0, "kind": Kind.F, "microbatch": 1.5},
            "action microbatch must be an integer >= 0, got 1.5",
        ),
        (
            {"stage": True, "kind": Kind.F, "microbatch": 0},
            "action stage must be an integer >= 0, got True",
        ),
    ],
)
def test_action_checks_its_fields(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ScheduleError) as error:
        Action(**kwargs)  # type: ignore[arg-type]
    assert str(error.value) == message


def test_backward_kinds() -> None:
    assert [k.is_backward for k in Kind] == [False, True, True, True]
