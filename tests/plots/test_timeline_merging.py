"""Bars narrower than a pixel are merged as trace viewers merge them: a literal table, the
property that a pixel is drawn exactly where some action is busy, and a long run drawn in a
bounded number of shapes."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from pipesim.costs import synthetic_costs
from pipesim.engine import simulate
from pipesim.schedules import build
from plots import bars_from_timeline, timeline_figure
from plots.timeline import MERGED_NOTE, _Bars, merged_by_pixel


def bars(*rows: tuple[int, float, float, int]) -> _Bars:
    row, start, end, fill = zip(*rows, strict=True)
    return _Bars(
        np.array(row, dtype=np.int64),
        np.array(start, dtype=np.float64),
        np.array(end, dtype=np.float64),
        np.array(fill, dtype=np.int64),
    )


def test_each_pixel_takes_the_fill_busiest_in_it() -> None:
    merged = merged_by_pixel(
        bars(
            (0, 0.0, 0.4, 0),  # pixel 0: fill 0 for 0.4 s ...
            (0, 0.4, 0.5, 1),  # ... fill 1 for 0.1 s ...
            (0, 0.5, 1.2, 1),  # ... and 0.5 s more (0.6 in all), then 0.2 s of pixel 1
            (0, 3.0, 3.0, 0),  # no duration: not drawn
            (0, 5.1, 5.3, 0),  # alone in pixel 5, after an idle gap
            (1, 0.2, 0.3, 0),
            (1, 1.5, 1.6, 1),  # the next pixel, another fill: a bar of its own
        ),
        pixel_s=1.0,
    )
    assert list(zip(*(column.tolist() for column in merged), strict=True)) == [
        (0, 0.0, 2.0, 1),
        (0, 5.0, 6.0, 0),
        (1, 0.0, 1.0, 0),
        (1, 1.0, 2.0, 1),
    ]


narrow_bars = st.lists(
    st.tuples(
        st.integers(0, 2),
        st.floats(0.0, 50.0, allow_nan=False),
        st.floats(0.0, 2.9),
        st.integers(0, 3),
    ),
    max_size=60,
)


@given(narrow_bars)
def test_a_pixel_is_drawn_where_and_only_where_something_is_busy(
    drawn: list[tuple[int, float, float, int]],
) -> None:
    pixel_s = 1.0
    merged = merged_by_pixel(
        bars(*[(r, s, s + w, f) for r, s, w, f in drawn]) if drawn else bars((0, 0.0, 0.0, 0)),
        pixel_s,
    )
    busy = {
        (row, pixel)
        for row, start, width, _ in drawn
        for pixel in range(int(start), int(start + width) + 1)
        if min(start + width, pixel + 1.0) - max(start, float(pixel)) > 0
    }
    covered = [
        (row, pixel)
        for row, start, end in zip(merged.row, merged.start_s, merged.end_s, strict=True)
        for pixel in range(int(start), int(end))
    ]
    assert sorted(covered) == sorted(busy)  # every busy pixel once, no idle pixel
    assert len(merged.row) <= len(busy)  # never more shapes than pixels


def test_a_long_run_draws_a_bounded_number_of_shapes_and_says_it_merged() -> None:
    result = simulate(build("1f1b", 4, 2000), synthetic_costs(4, 1, 1.0, 2.0, comm_s=0.2))
    compute, transfers = bars_from_timeline(result.timeline)
    axes = timeline_figure(compute, transfers).axes[0]
    shapes = sum(len(collection.get_paths()) for collection in axes.collections)
    assert len(compute) + len(transfers) > 27_000
    # 4 device rows and 6 link rows, each at most one shape per pixel of a 12-inch figure.
    assert shapes <= 10 * 12 * 150
    assert axes.get_title(loc="right") == MERGED_NOTE
    few = simulate(build("1f1b", 4, 8), synthetic_costs(4, 1, 1.0, 2.0, comm_s=0.2))
    axes = timeline_figure(*bars_from_timeline(few.timeline)).axes[0]
    assert axes.get_title(loc="right") == ""  # nothing merged, nothing said
