"""Figures of many runs, checked for what they draw: the y-values of each line, the common
baseline on the axis, hollow markers for out-of-memory runs, the number of legend entries, the
dashed closed forms the titles promise, and refusals of figures that would show nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cli.main import main
from plots import (
    EmptyPlotError,
    bubble_figure,
    memory_timeline_figure,
    paper_vs_simulated_figure,
    peak_memory_figure,
    speedup_figure,
    throughput_figure,
)
from plots.style import OOM_HATCH, OOM_MARKER_FACE


def sweep_rows(tmp_path: Path, *extra: str) -> list[dict[str, Any]]:
    out = tmp_path / "sweep.json"
    arguments = ["sweep", "--schedules", "gpipe,1f1b,zb-h1", "-K", "2,4", "-M", "2,4,8"]
    arguments += ["--costs", "1,1,1", "--activation-bytes", "1000", "--out", str(out), *extra]
    assert main(arguments) == 0
    return list(json.loads(out.read_text())["results"])


def legend_texts(axes: Any) -> list[str]:
    return [t.get_text() for t in axes.get_legend().get_texts()]


def lines_named(axes: Any) -> dict[str, Any]:
    return {line.get_label(): line for line in axes.lines if not line.get_label().startswith("_")}


def test_speedup_has_a_panel_per_k_a_line_per_schedule_and_the_closed_form(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = sweep_rows(tmp_path)
    figure = throughput_figure(rows, "speedup")
    panels = [a for a in figure.axes if a.get_visible()]
    assert [a.get_title() for a in panels] == ["K = 2", "K = 4"]
    k2 = lines_named(panels[0])
    # GPipe and 1F1B coincide with equal stages: one line named after both, not two that
    # hide each other; zb-h1 its own; the closed form dashed black.
    assert list(k2) == ["gpipe = 1f1b", "zb-h1", "closed form K·M/(M+K−1)"]
    assert legend_texts(panels[0]) == list(k2)
    assert list(k2["gpipe = 1f1b"].get_ydata()) == pytest.approx(
        [2 * m / (m + 1) for m in (2, 4, 8)]
    )
    closed = k2["closed form K·M/(M+K−1)"]
    assert closed.get_linestyle() == "--" and closed.get_color() == "black"
    assert list(closed.get_ydata()) == pytest.approx([4 / 3, 8 / 5, 16 / 9])
    assert panels[0].get_ylabel() == "speedup over one device (×)"
    assert panels[0].get_xlabel() == "micro-batches per step (M), log scale"
    assert "dashed: GPipe's closed form" in figure.get_suptitle()
    # Colours follow the schedule in every panel.
    k4 = lines_named(panels[1])
    assert k4["zb-h1"].get_color() == k2["zb-h1"].get_color()
    no_form = throughput_figure(rows, "speedup", closed_form=False)
    assert "dashed" not in no_form.get_suptitle()
    assert all(line.get_linestyle() != "--" for a in no_form.axes for line in a.lines)


def test_speedup_against_k_has_a_panel_per_m(tmp_path: Path) -> None:
    rows = sweep_rows(tmp_path)
    panels = [a for a in throughput_figure(rows, "speedup", against="K").axes if a.get_visible()]
    assert [a.get_title() for a in panels] == ["M = 2", "M = 4", "M = 8"]
    closed = lines_named(panels[0])["closed form K·M/(M+K−1)"]
    assert list(closed.get_xdata()) == [2, 4] and closed.get_ydata()[-1] == pytest.approx(8 / 5)
    assert panels[0].get_xlabel() == "devices (K), log scale"
    with pytest.raises(ValueError, match="quantity 'bubble'"):
        throughput_figure(rows, "bubble")


# A model on 8 devices (the A100 sweep, rounded): GPipe is the slowest and runs out of
# memory at M=8; each line normalized to itself would put it on top.
A100 = [
    {"schedule": s, "devices": 8, "microbatches": m, "throughput": t, "speedup": t / 9.3, "oom": o}
    for s, m, t, o in [
        ("gpipe", 8, 37.6, True),
        ("gpipe", 16, 47.8, True),
        ("gpipe", 32, 55.2, True),
        ("zbv", 8, 53.1, True),
        ("zbv", 16, 62.4, False),
        ("zbv", 32, 63.9, False),
    ]
]


def test_normalized_throughput_shares_one_baseline_and_marks_oom_hollow() -> None:
    axes = throughput_figure(A100, "normalized_throughput").axes[0]
    named = lines_named(axes)
    assert list(named["gpipe"].get_ydata()) == pytest.approx([1.0, 47.8 / 37.6, 55.2 / 37.6])
    assert list(named["zbv"].get_ydata()) == pytest.approx([53.1 / 37.6, 62.4 / 37.6, 63.9 / 37.6])
    assert all(
        z > g for z, g in zip(named["zbv"].get_ydata(), named["gpipe"].get_ydata(), strict=True)
    )
    assert axes.get_ylabel() == "throughput ÷ gpipe's at K=8, M=8\n(= 37.6 per s)"
    # Closed form: the one-device throughput (throughput / speedup = 9.3) times K·M/(M+K-1).
    closed = named["closed form K·M/(M+K−1)"]
    assert closed.get_ydata()[0] == pytest.approx(9.3 * 64 / 15 / 37.6)
    hollow = [line for line in axes.lines if line.get_gid() == "oom"]
    assert [list(line.get_xdata()) for line in hollow] == [[8, 16, 32], [8]]
    assert all(line.get_markerfacecolor() == OOM_MARKER_FACE for line in hollow)
    assert legend_texts(axes)[-1] == "hollow marker: out of memory"


def test_speedup_figure_takes_sweep_rows_and_validation_records(tmp_path: Path) -> None:
    rows = sweep_rows(tmp_path)
    assert [a.get_title() for a in speedup_figure(rows).axes if a.get_visible()] == [
        "K = 2",
        "K = 4",
    ]
    records = [
        {**r, "predicted_speedup": r["speedup"], "measured_speedup": r["speedup"]} for r in rows
    ]
    titles = [a.get_title() for a in speedup_figure(records).axes if a.get_visible()]
    assert titles == ["gpipe", "1f1b", "zb-h1"]  # validation: a panel per schedule
    with pytest.raises(ValueError, match="rows need 'speedup'"):
        speedup_figure([{"schedule": "x", "devices": 2, "microbatches": 2}])


def test_bubble_draws_the_closed_forms_it_promises(tmp_path: Path) -> None:
    rows = sweep_rows(tmp_path)
    figure = bubble_figure(rows)
    panels = [a for a in figure.axes if a.get_visible()]
    assert figure.get_suptitle() == (
        "Bubble fraction against M (dashed: each schedule's closed form, where one exists)"
    )
    for axes in panels:
        dashed = [line for line in axes.lines if line.get_gid() == "closed form"]
        assert dashed and all(line.get_linestyle() == "--" for line in dashed)
        assert legend_texts(axes)[-1] == "closed form"
    k2 = lines_named(panels[0])
    assert list(k2["gpipe = 1f1b"].get_ydata()) == pytest.approx([100 / 3, 20, 100 / 9])
    assert panels[0].get_ylabel() == "bubble (% of step time)"
    assert panels[0].get_ylim()[0] == 0 and panels[1].get_ylim() == panels[0].get_ylim()
    no_form = [{**r, "analytic_bubble_fraction": None} for r in rows]
    figure = bubble_figure(no_form)
    assert figure.get_suptitle() == "Bubble fraction against M"
    assert not [line for a in figure.axes for line in a.lines if line.get_gid() == "closed form"]


def test_peak_memory_bars_hatch_oom_devices_and_name_the_unit(tmp_path: Path) -> None:
    rows = sweep_rows(tmp_path)
    few = [r for r in rows if r["devices"] == 2 and r["microbatches"] == 8]
    axes = peak_memory_figure(few).axes[0]
    assert [t.get_text() for t in axes.get_xticklabels()] == ["gpipe", "1f1b", "zb-h1"]
    # runs x devices x terms: synthetic costs hold activations alone (the zero terms, weights
    # to the runtime reserve, are not drawn)
    assert len(axes.patches) == 3 * 2 * 1
    assert axes.get_ylabel() == "peak memory per device (KiB)"  # 8000 bytes, not 0.00001 GiB
    assert max(p.get_height() + p.get_y() for p in axes.patches) == pytest.approx(8000 / 1024)
    over = [
        {
            **r,
            "per_device": [
                {**d, "memory_capacity_bytes": 5000, "oom": d["peak_memory_bytes"] > 5000}
                for d in r["per_device"]
            ],
        }
        for r in few
    ]
    figure = peak_memory_figure(over)
    axes = figure.axes[0]
    hatched = [p for p in axes.patches if p.get_hatch() == OOM_HATCH]
    oom_devices = sum(d["oom"] for r in over for d in r["per_device"])
    assert oom_devices and len(hatched) == oom_devices
    legend = [t.get_text() for t in figure.legends[0].get_texts()]
    assert legend == ["activations", "capacity 4.88 KiB", "hatched: out of memory"]
    # a run saved before the breakdown: static memory and the rest of the peak
    older = [
        {**r, "per_device": [{**d, "static_memory_bytes": 500.0} for d in r["per_device"]]}
        for r in over
    ]
    for row in older:
        for device in row["per_device"]:
            del device["memory_breakdown"]
    figure = peak_memory_figure(older)
    assert len(figure.axes[0].patches) == 3 * 2 * 2
    assert [t.get_text() for t in figure.legends[0].get_texts()][:2] == [
        "activations",
        "weights, gradients, optimizer",
    ]


def test_peak_memory_bars_stack_every_term_of_the_breakdown(tmp_path: Path) -> None:
    """A hybrid run's bars: each term of ``memory_breakdown`` a segment, bottom to top in the
    breakdown's order, the segments adding up to the device's peak; the legend names the
    terms drawn, top first."""
    out = tmp_path / "sweep.json"
    arguments = ["sweep", "--schedules", "1f1b", "-K", "4", "-M", "8", "--model", "gpt3-175b"]
    arguments += ["--hardware", "a100", "--tensor-parallel", "8", "--microbatch-size", "1"]
    arguments += ["--data-parallel", "4", "--zero", "1", "--batch", "32", "--recompute", "full"]
    arguments += ["--memory-reserve", "2e9", "--fragmentation", "0.05", "--out", str(out)]
    assert main(arguments) == 0
    rows = json.loads(out.read_text())["results"]
    figure = peak_memory_figure(rows)
    axes = figure.axes[0]
    devices = rows[0]["per_device"]
    terms = list(devices[0]["memory_breakdown"])
    assert len(axes.patches) == len(terms) * len(devices) == 8 * 4
    scale = 2**30  # GiB
    for index, device in enumerate(devices):
        segments = sorted(axes.patches[index :: len(devices)], key=lambda p: p.get_y())
        heights = [p.get_height() * scale for p in segments]
        assert heights == pytest.approx(list(device["memory_breakdown"].values()), rel=1e-9)
        top = segments[-1].get_y() + segments[-1].get_height()
        assert top * scale == pytest.approx(device["peak_memory_bytes"], rel=1e-9)
    legend = [t.get_text() for t in figure.legends[0].get_texts()]
    assert legend[:8] == [
        "runtime reserve",
        "fragmentation",
        "transient (largest action)",
        "activations",
        "master weights",
        "optimizer state",
        "gradients",
        "weights",
    ]


def test_peak_memory_of_a_grid_is_a_line_per_schedule(tmp_path: Path) -> None:
    rows = sweep_rows(tmp_path)  # 18 runs: too many for bars
    figure = peak_memory_figure(rows)
    panels = [a for a in figure.axes if a.get_visible()]
    assert [a.get_title() for a in panels] == ["K = 2", "K = 4"]
    named = lines_named(panels[0])
    assert list(named["gpipe"].get_ydata()) == pytest.approx([m * 1000 / 1024 for m in (2, 4, 8)])
    assert panels[0].get_ylabel() == "largest device's peak memory (KiB)"


def test_a_grid_panel_legend_names_schedules_then_capacity_then_oom(tmp_path: Path) -> None:
    """Each series once, the capacity line once (not also picked up as a drawn line), the
    hollow-marker entry last where a run of the panel ran out of memory."""
    rows = [
        {
            **r,
            "oom": r["devices"] == 2 and r["schedule"] == "gpipe",
            "per_device": [{**d, "memory_capacity_bytes": 5000} for d in r["per_device"]],
        }
        for r in sweep_rows(tmp_path)
    ]
    panels = [a for a in peak_memory_figure(rows).axes if a.get_visible()]
    assert legend_texts(panels[0]) == [
        "gpipe",
        "1f1b = zb-h1",  # the same peaks: one line, both names
        "capacity 4.88 KiB",
        "hollow marker: out of memory",
    ]
    assert legend_texts(panels[1]) == ["gpipe", "1f1b = zb-h1", "capacity 4.88 KiB"]


def test_zero_memory_is_refused_not_drawn_flat(tmp_path: Path) -> None:
    out = tmp_path / "zero.json"
    assert (
        main(
            [
                "sweep",
                "--schedules",
                "gpipe",
                "-K",
                "2",
                "-M",
                "2,4",
                "--costs",
                "1,2",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    rows = json.loads(out.read_text())["results"]
    with pytest.raises(
        EmptyPlotError,
        match=r"^peak memory is 0 bytes on every device of every run; .*--activation-bytes",
    ):
        peak_memory_figure(rows)
    with pytest.raises(
        EmptyPlotError, match=r"^memory is 0 bytes on every device throughout the run"
    ):
        memory_timeline_figure([[(0.0, 0.0), (1.0, 0.0)], [(0.0, 0.0)]])


def test_memory_timeline_units_and_capacity() -> None:
    curves = [[(0.0, 0.0), (1.0, 5.0 * 2**30), (2.0, 0.0)], [(0.0, 1.0 * 2**30)]]
    figure = memory_timeline_figure(curves, 8 * 2**30)
    axes = figure.axes[0]
    assert axes.get_ylabel() == "memory (GiB)" and axes.get_xlabel() == "time (ms)"
    assert list(axes.lines[0].get_ydata()) == [0.0, 5.0, 0.0]
    # the legend beside the axes, not on the ramp-up it explains
    assert axes.get_legend() is None and len(figure.legends) == 1
    assert [t.get_text() for t in figure.legends[0].get_texts()] == [
        "device 0",
        "device 1",
        "capacity 8 GiB",
    ]
    small = memory_timeline_figure([[(0.0, 2048.0)]], 80 * 2**30)
    assert small.axes[0].get_ylabel() == "memory (KiB)"
    texts = [t.get_text() for t in small.legends[0].get_texts()]
    assert texts[-1] == "capacity 80 GiB (far above: not drawn)"


def test_paper_vs_simulated_names_its_baseline() -> None:
    rows = [
        {"devices": k, "microbatches": m, "paper": 1.0 + m, "simulated": 1.1 + m}
        for k in (2, 4)
        for m in (1, 4)
    ]
    axes = paper_vs_simulated_figure(rows, "normalized throughput", baseline="K=2, M=1").axes[0]
    assert [line.get_label() for line in axes.lines] == [
        "K=2, pipesim",
        "K=2, paper",
        "K=4, pipesim",
        "K=4, paper",
    ]
    assert axes.lines[1].get_linestyle() == "--"
    assert axes.get_ylabel() == "normalized throughput\n(relative to K=2, M=1)"
