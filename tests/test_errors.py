"""Error messages stay short: a few items then "and N more"; long values cut with their length."""

from __future__ import annotations

import pytest

from pipesim.errors import few, short_values, shown
from pipesim.schedules import ScheduleError, from_csv


def test_few_names_five_then_counts_the_rest() -> None:
    assert few([]) == ""
    assert few(range(5)) == "0, 1, 2, 3, 4"
    assert few(range(10_000_000)) == "0, 1, 2, 3, 4 and 9,999,995 more"
    assert few("abc", limit=1, separator="; ") == "a and 2 more"


def test_shown_cuts_long_values() -> None:
    assert shown("short") == "'short'"
    assert shown("x" * 1000) == "'" + "x" * 76 + "... (1,002 characters)"
    assert len(shown(list(range(10**5)))) < 120


def test_a_deadlock_on_many_devices_names_five() -> None:
    # Device 0 finishes micro-batch 0 first; every other device starts with micro-batch 1,
    # which waits for device 0's 0F1, itself behind 0B0: all eight devices stall.
    rows = ["0F0,0B0,0F1,0B1"] + [f"{d}F1,{d}B1,{d}F0,{d}B0" for d in range(1, 8)]
    with pytest.raises(ScheduleError) as caught:
        from_csv("\n".join(rows) + "\n", source="ring.csv")
    first = str(caught.value).splitlines()[0]
    assert first.startswith("ring.csv: deadlock: no device can go on; device 0 waits at step 1")
    assert first.endswith(" and 3 more") and first.count("waits at") == 5


def test_short_values_cuts_only_quoted_values_too_long_to_be_a_path() -> None:
    path = "/a/" + "b" * 190
    assert short_values(f"--out {path!r} does not exist") == f"--out {path!r} does not exist"
    typed = "9" * 5000
    assert short_values(f"invalid int value: {typed!r} (see --help)") == (
        f"invalid int value: '{'9' * 76}... (5,002 characters) (see --help)"
    )
    assert short_values("no quotes at all") == "no quotes at all"
    # Prose between two short values, or after an apostrophe, is no quoted value.
    prose = "a 'x' " + "y" * 250 + " 'z', the transformer's " + "q" * 300 + " it's"
    assert short_values(prose) == prose
    # repr quotes a value holding ' with "; it is cut too.
    holding = repr("x'" * 3000)
    assert short_values(f"invalid choice: {holding} (choose from a, b)") == (
        f"invalid choice: {holding[:77]}... (6,002 characters) (choose from a, b)"
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["simulate", "--schedule", "1f1b", "-K", "9" * 5000, "-M", "2", "--costs", "1,2"],
        ["simulate", "--schedule", "x" * 5000, "-K", "2", "-M", "2", "--costs", "1,2"],
        ["plan", "--model", "gpt-1.3b", "--hardware", "h" * 5000, "--devices", "8"],
    ],
    ids=["argparse", "pipesim-error", "hardware"],
)
def test_an_echoed_value_keeps_the_error_line_short(
    capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    from tests.cli.test_schedule_cli import run

    status, _, err = run(capsys, *argv)
    assert status == 2
    assert err.count("\n") == 1 and len(err) < 400, err[:500]
    assert "(5,002 characters)" in err
