"""Figures are checked for what they show (titles, labels, series), not pixel by pixel."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from matplotlib.colors import to_rgba

from pipesim.costs import synthetic_costs
from pipesim.engine import simulate
from pipesim.errors import PipesimError
from pipesim.export.saved import ComputeBar, TransferBar
from pipesim.schedules import build
from plots import (
    bars_from_timeline,
    predicted_vs_measured_figure,
    save,
    side_by_side_figure,
    speedup_figure,
    timeline_figure,
)
from plots.style import KIND_COLOURS, lighter, text_colour
from plots.timeline import label_size


def drawn_bars(axes: Any) -> list[tuple[float, float, float, float, tuple[float, ...]]]:
    """Every rectangle drawn on ``axes``: left, width, row (its middle), height and fill."""
    bars = []
    for collection in axes.collections:
        faces = collection.get_facecolor()
        for index, path in enumerate(collection.get_paths()):
            (left, top), (right, bottom) = path.vertices.min(axis=0), path.vertices.max(axis=0)
            fill = tuple(float(c) for c in faces[index % len(faces)])
            bars.append((left, right - left, (top + bottom) / 2, bottom - top, fill))
    return bars


def sample_bars() -> tuple[list[ComputeBar], list[TransferBar]]:
    result = simulate(build("zb-h1", 3, 4), synthetic_costs(3, 1, 1.0, 1.0, 1.0, comm_s=0.1))
    return bars_from_timeline(result.timeline)


def test_timeline_has_a_row_per_device_and_link_and_a_bar_per_action(tmp_path: Path) -> None:
    compute, transfers = sample_bars()
    figure = timeline_figure(compute, transfers, title="zb-h1")
    axes = figure.axes[0]
    labels = [t.get_text() for t in axes.get_yticklabels()]
    assert labels[:3] == ["device 0", "device 1", "device 2"]
    assert {"link 0→1", "link 1→0", "link 1→2", "link 2→1"} <= set(labels)
    # A bar per action that takes time (the optimizer takes none under synthetic costs).
    busy = [bar for bar in compute if bar[3] > bar[2]]
    assert len(busy) == len(compute) - 3
    assert len(drawn_bars(axes)) == len(busy) + len(transfers)

    def rounded(left: float, width: float, row: float) -> tuple[float, float, float]:
        return round(left, 9), round(width, 9), round(row, 9)

    assert sorted(rounded(*bar[:3]) for bar in drawn_bars(axes)) == sorted(
        [rounded(s, e - s, d) for d, _, s, e in busy]
        + [rounded(s, e - s, labels.index(f"link {a}→{b}")) for a, b, _, s, e in transfers]
    )
    assert axes.get_xlabel() == "time (s)" and axes.get_title(loc="left") == "zb-h1"
    legend = [t.get_text() for t in figure.legends[0].get_texts()]
    assert legend == [
        "forward (F)",
        "input gradient (I)",
        "weight gradient (W)",
        "transfer",
    ]  # no optimizer: it takes no time under synthetic costs, so it is not in the legend
    for name in ("t.png", "t.svg"):
        path = save(figure if name.endswith("png") else timeline_figure(compute), tmp_path / name)
        assert path.stat().st_size > 1000
    assert (tmp_path / "t.svg").read_text().startswith("<?xml")


def test_later_chunks_are_drawn_lighter_and_named_in_the_legend() -> None:
    result = simulate(build("zbv", 2, 2), synthetic_costs(2, 2, 1.0, 1.0, 1.0, comm_s=0.0))
    compute, transfers = bars_from_timeline(result.timeline)
    figure = timeline_figure(compute, transfers)
    axes = figure.axes[0]
    colours = {bar[4] for bar in drawn_bars(axes)} - {to_rgba(KIND_COLOURS["opt"])}
    assert len(colours) == 6  # F, I, W in two shades: chunk 0 and chunk 1
    legend = [t.get_text() for t in figure.legends[0].get_texts()]
    assert legend[-1] == "lighter: later chunk"
    four = simulate(build("interleaved-1f1b", 2, 4, 4), synthetic_costs(2, 4, 1.0, 2.0))
    compute, _ = bars_from_timeline(four.timeline)
    axes = timeline_figure(compute).axes[0]
    shades = {bar[4] for bar in drawn_bars(axes)} - {to_rgba(KIND_COLOURS["opt"])}
    assert len(shades) == 8  # F and B, each in four shades: one per chunk


def test_side_by_side_shares_the_time_axis() -> None:
    compute, _ = sample_bars()
    later = [(d, label, s + 1.0, e + 1.0) for d, label, s, e in compute]
    figure = side_by_side_figure([("measured", later, []), ("simulated", compute, [])])
    assert [a.get_title(loc="left") for a in figure.axes] == ["measured", "simulated"]
    assert figure.axes[0].get_xlim() == figure.axes[1].get_xlim()
    assert figure.axes[0].get_xlim()[1] == pytest.approx(max(b[3] for b in later))
    assert len(figure.legends) == 1 and figure.axes[0].get_legend() is None  # one, below


RECORDS = [
    {
        "schedule": name,
        "devices": 2,
        "microbatches": m,
        "predicted_time": 0.1 * m,
        "measured_time": 0.1 * m * 1.02,
        "predicted_speedup": 1 + m / 10,
        "measured_speedup": 1 + m / 11,
    }
    for name in ("gpipe", "1f1b", "zbv")
    for m in (1, 2, 4)
]


def test_predicted_vs_measured_has_a_series_per_schedule() -> None:
    axes = predicted_vs_measured_figure(RECORDS).axes[0]
    assert axes.get_xlabel() == "measured step time (ms)"
    assert axes.get_ylabel() == "predicted step time (ms)"
    assert len(axes.collections) == 3 + 1  # a scatter per schedule, the ±5% band
    legend = [t.get_text() for t in axes.get_legend().get_texts()]
    assert legend[:3] == ["gpipe", "1f1b", "zbv"]


def test_speedup_draws_each_case_apart_in_a_schedule_s_panel() -> None:
    # Two cases (an MLP and a transformer) in one panel: a predicted line and a measured
    # scatter per case, never one line through both.
    records = [{**r, "case": "mlp"} for r in RECORDS] + [
        {**r, "case": "transformer", "predicted_speedup": float(r["predicted_speedup"]) + 0.2}
        for r in RECORDS
    ]
    figure = speedup_figure(records)
    first = figure.axes[0]
    assert len(first.lines) == 3 and len(first.collections) == 2
    assert [list(line.get_xdata()) for line in first.lines[1:]] == [[1, 2, 4], [1, 2, 4]]
    assert first.lines[1].get_linestyle() != first.lines[2].get_linestyle()
    legend = [t.get_text() for t in first.get_legend().get_texts()]
    assert "predicted (transformer)" in legend and "measured (mlp)" in legend


def test_speedup_has_a_panel_per_schedule_with_the_closed_form() -> None:
    figure = speedup_figure(RECORDS)
    visible = [a for a in figure.axes if a.get_visible()]
    assert [a.get_title() for a in visible] == ["gpipe", "1f1b", "zbv"]
    for axes in visible:
        assert len(axes.lines) == 2 and len(axes.collections) == 1  # closed form, predicted
        assert axes.lines[0].get_ydata()[-1] == pytest.approx(2 * 4 / 5)


def test_save_refuses_other_formats(tmp_path: Path) -> None:
    compute, _ = sample_bars()
    with pytest.raises(PipesimError, match=r"must end in \.png or \.svg, got '\.jpg'"):
        save(timeline_figure(compute), tmp_path / "x.jpg")
    with pytest.raises(PipesimError, match=r"^figure file: directory '.*missing' does not exist$"):
        save(timeline_figure(compute), tmp_path / "missing" / "x.png")
    (tmp_path / "dir.png").mkdir()
    with pytest.raises(PipesimError, match=r"^--out: '.*dir\.png' is a directory$"):
        save(timeline_figure(compute), tmp_path / "dir.png", field="--out")
    # The directory exists but takes no new file: found before drawing, one line.
    with pytest.raises(PipesimError, match=r"^--out: cannot write into '/proc' \("):
        save(timeline_figure(compute), "/proc/x.png", field="--out")


def test_every_wide_enough_bar_carries_its_microbatch_in_a_contrasting_colour() -> None:
    result = simulate(build("zbv", 4, 8), synthetic_costs(4, 2, 1.0, 1.0, 1.0, comm_s=0.05))
    compute, transfers = bars_from_timeline(result.timeline)
    axes = timeline_figure(compute, transfers).axes[0]
    texts = [t for t in axes.texts if t.get_gid() == "microbatch"]
    # Every one of ZB-V's 192 half-width actions is wide enough at 12 inches: all are labelled.
    actions = [bar for bar in compute if bar[1] != "opt"]
    assert len(actions) == 8 * 8 * 3 and len(texts) == len(actions)
    assert sorted(t.get_text() for t in texts) == sorted(
        re.split("[FBIW]", label)[1] for _, label, _, _ in actions
    )
    fills = {(row, left + width / 2): fill for left, width, row, _, fill in drawn_bars(axes)}
    for text in texts:
        x, y = text.get_position()
        fill = next(f for (row, middle), f in fills.items() if row == y and abs(middle - x) < 1e-9)
        assert text.get_color() == text_colour(fill)
    assert {t.get_color() for t in texts} == {"black", "white"}  # light chunks: black text
    assert text_colour("#4c72b0") == "white" and text_colour(lighter("#4c72b0", 1.0)) == "black"


def test_labels_shrink_then_vanish_on_narrow_bars() -> None:
    assert label_size("7", 20.0) == 7.0
    assert label_size("12", 9.0) == 5.0
    assert label_size("12", 6.0) is None and label_size("", 50.0) is None


def test_importing_and_saving_plots_leaves_pyplot_alone(tmp_path: Path) -> None:
    code = (
        "import sys, plots\n"
        "from plots import timeline_figure, save\n"
        f"save(timeline_figure([(0, '0F0', 0.0, 1.0)]), {str(tmp_path / 'x.png')!r})\n"
        "assert 'matplotlib.pyplot' not in sys.modules, 'pyplot imported'\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "x.png").stat().st_size > 1000


def test_the_memory_tradeoff_figure_draws_the_curve_and_every_fixed_point() -> None:
    from pipesim.synthesis.synthesis import MemoryPoint
    from plots.synthesis_figures import memory_tradeoff_figure

    fixed = [MemoryPoint("1f1b", 4, 33.0), MemoryPoint("gpipe", 8, 34.0)]
    curve = [MemoryPoint("greedy", 1, 72.0, 1), MemoryPoint("zb-h1", 4, 27.0, 4)]
    figure = memory_tradeoff_figure(fixed, curve)
    axes = figure.axes[0]
    (line,) = axes.get_lines()
    assert list(line.get_xdata()) == [1, 4] and list(line.get_ydata()) == [72.0, 27.0]
    offsets = sorted(tuple(c.get_offsets()[0]) for c in axes.collections)
    assert offsets == [(4.0, 33.0), (8.0, 34.0)]
    labels = axes.get_legend_handles_labels()[1]
    assert labels == ["synth (x = its memory limit)", "1f1b (fixed)", "gpipe (fixed)"]
    assert axes.get_ylabel() == "step time (s)"
