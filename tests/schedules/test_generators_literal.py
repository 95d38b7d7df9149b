"""Literal expected orders for small cases of every schedule, written out by hand.

The 1F1B-family rows follow the papers' rules (warm-up length, then one forward one backward);
the zero-bubble rows are the paper's Figure 3 (arXiv 2401.10241, p=4, m=8), transcribed in the
paper's own 1-indexed notation; the V-shaped rows were worked by hand from their phases.
"""

from __future__ import annotations

import pytest

from pipesim.schedules import Action, Kind, UpdateRule, build, parse_action, unit_slots


def rows(*texts: str) -> list[list[Action]]:
    return [[parse_action(cell) for cell in text.split()] for text in texts]


def paper_row(worker: int, text: str) -> list[Action]:
    """A row of the zero-bubble paper's Figure 3: 'F1 F2 B1 W1' with 1-indexed micro-batches
    and B meaning the input-gradient pass (our I)."""
    kinds = {"F": Kind.F, "B": Kind.I, "W": Kind.W}
    return [Action(worker, kinds[cell[0]], int(cell[1:]) - 1) for cell in text.split()]


def device_rows(
    name: str, devices: int, microbatches: int, chunks: int | None = None
) -> list[list[Action]]:
    return [list(row) for row in build(name, devices, microbatches, chunks).device_actions]


def test_gpipe_two_devices_three_microbatches() -> None:
    assert device_rows("gpipe", 2, 3) == rows(
        "0F0 0F1 0F2 0B2 0B1 0B0",
        "1F0 1F1 1F2 1B2 1B1 1B0",
    )


def test_gpipe_unit_slots_show_the_bubble() -> None:
    slots = unit_slots(build("gpipe", 2, 3))
    text = [" ".join("." if a is None else str(a) for a in row) for row in slots]
    assert text == [
        "0F0 0F1 0F2 . . 0B2 0B1 0B0",
        ". 1F0 1F1 1F2 1B2 1B1 1B0",
    ]


def test_1f1b_three_devices_four_microbatches() -> None:
    assert device_rows("1f1b", 3, 4) == rows(
        "0F0 0F1 0F2 0B0 0F3 0B1 0B2 0B3",
        "1F0 1F1 1B0 1F2 1B1 1F3 1B2 1B3",
        "2F0 2B0 2F1 2B1 2F2 2B2 2F3 2B3",
    )


def test_1f1b_with_fewer_microbatches_than_devices() -> None:
    assert device_rows("1f1b", 4, 2) == rows(
        "0F0 0F1 0B0 0B1",
        "1F0 1F1 1B0 1B1",
        "2F0 2F1 2B0 2B1",
        "3F0 3B0 3F1 3B1",
    )


@pytest.mark.parametrize(
    ("name", "rule"),
    [("pipedream", UpdateRule.ASYNC), ("pipedream-2bw", UpdateRule.TWO_BW)],
)
def test_pipedream_variants_use_the_1f1b_order(name: str, rule: UpdateRule) -> None:
    schedule = build(name, 2, 3)
    assert [list(r) for r in schedule.device_actions] == rows(
        "0F0 0F1 0B0 0F2 0B1 0B2",
        "1F0 1B0 1F1 1B1 1F2 1B2",
    )
    assert schedule.update_rule is rule


def test_interleaved_two_devices_two_chunks_four_microbatches() -> None:
    # Rounds of K=2 micro-batches; device 0 holds stages 0 and 2, device 1 stages 1 and 3.
    # Warm-up forwards: (v-1)*K + 2*(K-1-d) + 1 = 5 on device 0, 3 on device 1.
    assert device_rows("interleaved-1f1b", 2, 4, 2) == rows(
        "0F0 0F1 2F0 2F1 0F2 2B0 0F3 2B1 2F2 0B0 2F3 0B1 2B2 2B3 0B2 0B3",
        "1F0 1F1 3F0 3B0 3F1 3B1 1F2 1B0 1F3 1B1 3F2 3B2 3F3 3B3 1B2 1B3",
    )


def test_looped_bfs_two_devices_two_chunks() -> None:
    assert device_rows("looped-bfs", 2, 2, 2) == rows(
        "0F0 0F1 2F0 2F1 2B1 2B0 0B1 0B0",
        "1F0 1F1 3F0 3F1 3B1 3B0 1B1 1B0",
    )


def test_zb_h1_is_figure_3_top() -> None:
    assert device_rows("zb-h1", 4, 8) == [
        paper_row(0, "F1 F2 F3 F4 B1 W1 F5 B2 W2 F6 B3 W3 F7 B4 W4 F8 B5 W5 B6 W6 B7 W7 B8 W8"),
        paper_row(1, "F1 F2 F3 B1 F4 B2 W1 F5 B3 W2 F6 B4 W3 F7 B5 W4 F8 B6 W5 B7 W6 B8 W7 W8"),
        paper_row(2, "F1 F2 B1 F3 B2 F4 B3 W1 F5 B4 W2 F6 B5 W3 F7 B6 W4 F8 B7 W5 B8 W6 W7 W8"),
        paper_row(3, "F1 B1 F2 B2 F3 B3 F4 B4 W1 F5 B5 W2 F6 B6 W3 F7 B7 W4 F8 B8 W5 W6 W7 W8"),
    ]


def test_zb_h2_is_figure_3_bottom() -> None:
    assert device_rows("zb-h2", 4, 8) == [
        paper_row(0, "F1 F2 F3 F4 F5 F6 F7 B1 W1 F8 B2 W2 B3 W3 B4 W4 B5 W5 B6 W6 B7 W7 B8 W8"),
        paper_row(1, "F1 F2 F3 F4 F5 B1 F6 B2 F7 B3 W1 F8 B4 W2 B5 W3 B6 W4 B7 W5 B8 W6 W7 W8"),
        paper_row(2, "F1 F2 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 W1 F8 B6 W2 B7 W3 B8 W4 W5 W6 W7 W8"),
        paper_row(3, "F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7 W1 F8 B8 W2 W3 W4 W5 W6 W7 W8"),
    ]


def test_zbv_two_devices_three_microbatches() -> None:
    schedule = build("zbv", 2, 3)
    assert schedule.placement == (0, 1, 1, 0)
    assert [list(r) for r in schedule.device_actions] == rows(
        "0F0 0F1 0F2 3F0 3I0 3W0 3F1 3I1 3W1 0I0 0W0 3F2 3I2 3W2 0I1 0W1 0I2 0W2",
        "1F0 2F0 1F1 2F1 2I0 2W0 1F2 1I0 1W0 2F2 2I1 2W1 1I1 2I2 1I2 1W1 2W2 1W2",
    )


def test_dualpipev_two_devices_four_microbatches() -> None:
    schedule = build("dualpipev", 2, 4)
    assert schedule.placement == (0, 1, 1, 0)
    assert [list(r) for r in schedule.device_actions] == rows(
        "0F0 0F1 0F2 3F0 3I0 3W0 3F1 0F3 3B1 3F2 0B0 3B2 3F3 0B1 3B3 0I2 0W2 0I3 0W3",
        "1F0 2F0 1F1 2F1 1F2 2B0 2F2 1B0 1F3 2B1 2F3 1B1 2B2 1B2 2I3 1I3 2W3 1W3",
    )


def test_single_device_runs_forward_then_backward_per_microbatch() -> None:
    assert device_rows("1f1b", 1, 3) == rows("0F0 0B0 0F1 0B1 0F2 0B2")
    assert device_rows("gpipe", 1, 2) == rows("0F0 0F1 0B1 0B0")
