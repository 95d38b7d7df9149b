"""Fuzzing the schedule CSV loader: every file either loads to a schedule the validator accepts
or raises :class:`~pipesim.errors.ScheduleError` / :class:`~pipesim.errors.PipesimError` whose
first line is short and stands on its own; never another exception, never a huge message (a
cell ``9999999F0`` once made an 89 MB error line)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from pipesim.errors import PipesimError
from pipesim.schedules import build, from_csv, read_csv, schedule_names, to_csv
from pipesim.schedules.validator import validate

_ACTION = st.builds(
    lambda stage, kind, mb: f"{stage}{kind}{mb}",
    st.one_of(st.integers(0, 4), st.sampled_from([9999999, 10**12, 2**31])),
    st.sampled_from("FBIWfX"),
    st.one_of(st.integers(0, 4), st.sampled_from([9999999, 10**40])),
)
_CELL = st.one_of(_ACTION, _ACTION, st.just(""), st.text(max_size=8), st.just(" 0F0 "))
_HANDMADE = st.lists(st.lists(_CELL, max_size=8), max_size=5).map(
    lambda rows: "\n".join(",".join(row) for row in rows) + "\n"
)


@st.composite
def _generated_then_broken(draw: st.DrawFn) -> str:
    """A generated schedule's CSV with a few edits: cells swapped, dropped, duplicated or
    replaced, lines dropped, quotes and junk added."""
    name = draw(st.sampled_from(schedule_names()))
    try:
        text = to_csv(build(name, draw(st.integers(1, 4)), draw(st.integers(1, 8))))
    except PipesimError:
        text = to_csv(build("1f1b", 2, 4))
    rows = [line.split(",") for line in text.splitlines()]
    for _ in range(draw(st.integers(0, 3))):
        row = draw(st.integers(0, len(rows) - 1))
        edit = draw(st.sampled_from(["swap", "drop", "dup", "replace", "line", "junk"]))
        cells = rows[row]
        if edit == "line" and len(rows) > 1:
            del rows[row]
            continue
        if not cells:
            continue
        i, j = draw(st.integers(0, len(cells) - 1)), draw(st.integers(0, len(cells) - 1))
        if edit == "swap":
            cells[i], cells[j] = cells[j], cells[i]
        elif edit == "drop":
            del cells[i]
        elif edit == "dup":
            cells.insert(j, cells[i])
        elif edit == "replace":
            cells[i] = draw(_CELL)
        elif edit == "junk":
            cells[i] = draw(st.sampled_from(['"0F0', '0F0"', '"', "\x00", "0F0\r", "0F0;0B0"]))
    return "\n".join(",".join(row) for row in rows) + "\n"


FILES = st.one_of(
    _HANDMADE.map(str.encode),
    _generated_then_broken().map(str.encode),
    st.binary(max_size=100),
)


@given(FILES)
def test_schedule_files_load_or_raise_the_documented_error(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "s.csv"
        path.write_bytes(data)
        try:
            schedule = read_csv(path)
        except PipesimError as error:
            first = str(error).split("\n", 1)[0]
            assert first and len(first) < 500, first
            assert len(str(error)) < 5000  # the grid after it is cut to a window
            return
    validate(schedule)  # what loads is a valid schedule
    assert to_csv(from_csv(to_csv(schedule))) == to_csv(schedule)  # and round-trips
