"""Error messages stay short: a few items then "and N more"; long values cut with their length."""

from __future__ import annotations

import pytest

from pipesim.errors import few, shown
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
