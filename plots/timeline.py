"""Timelines (Gantt charts) of simulated or measured runs: one row per device, F, B, I and W in
distinct colours with micro-batch numbers, transfers on rows of their own, bubbles visible as
gaps. The picture of GPipe's Figure 2(c) and of the zero-bubble paper's schedules.

Functions take plain data: compute bars ``(device, label, start_s, end_s)`` with labels such as
``2F0`` or ``opt``, and transfer bars ``(source, destination, label, start_s, end_s)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from matplotlib.patches import Patch

from pipesim.export.saved import ComputeBar, TransferBar
from plots.style import (
    KIND_COLOURS,
    KIND_NAMES,
    kind_of,
    lighter,
    new_figure,
    subplots,
    text_colour,
    time_unit,
)

# The tallest figure drawn: pixels per side are bounded, and a taller chart is unreadable anyway.
MAX_HEIGHT_IN = 60.0


def bars_from_timeline(timeline: Any) -> tuple[list[ComputeBar], list[TransferBar]]:
    """Bars from a :class:`pipesim.engine.Timeline` (simulated or measured)."""
    compute = [(r.device, r.label, r.start_s, r.end_s) for r in timeline.compute]
    transfers = [
        (t.source_device, t.destination_device, t.label, t.start_s, t.end_s)
        for t in timeline.transfers
    ]
    return compute, transfers


def draw_timeline(
    axes: Any,
    compute: Sequence[ComputeBar],
    transfers: Sequence[TransferBar] = (),
    *,
    title: str = "",
    show_transfers: bool = True,
    end_s: float | None = None,
) -> None:
    """Draw one timeline on ``axes`` (time axis up to ``end_s``, default its own end). Every
    compute bar wide enough for its micro-batch number carries it, in black or white,
    whichever contrasts more with the bar's fill."""
    devices = 1 + max((bar[0] for bar in compute), default=0)
    links = sorted({(s, d) for s, d, *_ in transfers}) if show_transfers else []
    rows = [f"device {d}" for d in range(devices)] + [f"link {s}→{d}" for s, d in links]
    end = end_s or max([bar[3] for bar in compute] + [bar[4] for bar in transfers] + [1e-12])
    scale, unit = time_unit(end)
    points_per_s = _axes_width_points(axes) / end
    chunk_of = {
        label: int(label[: label.index(kind_of(label))]) // devices
        for _, label, _, _ in compute
        if kind_of(label) != "opt"
    }
    chunks = 1 + max(chunk_of.values(), default=0)
    for device, label, start, finish in compute:
        kind = kind_of(label)
        fill = lighter(KIND_COLOURS[kind], chunk_of.get(label, 0) / max(1, chunks - 1))
        axes.barh(
            device,
            (finish - start) * scale,
            left=start * scale,
            height=0.8,
            color=fill,
            edgecolor="white",
            linewidth=0.5,
        )
        text = label[label.index(kind) + 1 :] if kind != "opt" else ""
        size = label_size(text, (finish - start) * points_per_s)
        if size:
            axes.text(
                (start + (finish - start) / 2) * scale,
                device,
                text,
                ha="center",
                va="center",
                fontsize=size,
                color=text_colour(fill),
                gid="microbatch",
            )
    for source, destination, _, start, finish in transfers if show_transfers else ():
        row = devices + links.index((source, destination))
        axes.barh(
            row,
            (finish - start) * scale,
            left=start * scale,
            height=0.5,
            color="#c44e52",
            alpha=0.7,
        )
    axes.set_yticks(range(len(rows)), rows)
    axes.set_ylim(len(rows) - 0.5, -0.5)
    axes.set_xlabel(f"time ({unit})")
    axes.set_xlim(0, end * scale)
    if title:
        axes.set_title(title, loc="left", fontsize=10)


# Label sizes tried, largest first; a digit is about 0.6 of the size wide, plus a margin.
LABEL_SIZES = (7.0, 6.0, 5.0)


def label_size(text: str, width_points: float) -> float | None:
    """The largest font size at which ``text`` fits a bar ``width_points`` wide, or None."""
    if not text:
        return None
    for size in LABEL_SIZES:
        if 0.62 * size * len(text) + 2.0 <= width_points:
            return size
    return None


def _axes_width_points(axes: Any) -> float:
    """The axes' width in points once laid out: the figure's width less room for the device
    names on the left and the margins (about 1.1 inch)."""
    figure = axes.get_figure()
    columns = axes.get_subplotspec().get_gridspec().ncols if axes.get_subplotspec() else 1
    return max(72.0, 72.0 * (float(figure.get_figwidth()) / columns - 1.1))


def timeline_figure(
    compute: Sequence[ComputeBar], transfers: Sequence[TransferBar] = (), *, title: str = ""
) -> Any:
    """One timeline as a figure."""
    devices = 1 + max((bar[0] for bar in compute), default=0)
    links = len({(s, d) for s, d, *_ in transfers})
    figure, axes = new_figure(12, min(MAX_HEIGHT_IN, 1.4 + 0.45 * (devices + links)))
    draw_timeline(axes, compute, transfers, title=title)
    _legend(figure, [compute], bool(transfers))
    return figure


def _legend(figure: Any, computes: Sequence[Sequence[ComputeBar]], transfers: bool) -> None:
    """One legend below the time axis: the kinds drawn, transfers, and the lighter shades of
    later chunks where there are any."""
    kinds: set[str] = set()
    chunked = False
    for compute in computes:
        kinds |= {kind_of(label) for _, label, start, finish in compute if finish > start}
        devices = 1 + max((bar[0] for bar in compute), default=0)
        chunked = chunked or any(
            kind_of(label) != "opt" and int(label[: label.index(kind_of(label))]) >= devices
            for _, label, _, _ in compute
        )
    handles = [
        Patch(color=KIND_COLOURS[k], label=KIND_NAMES[k])
        for k in sorted(kinds, key=list(KIND_COLOURS).index)
    ]
    if transfers:
        handles.append(Patch(color="#c44e52", alpha=0.7, label="transfer"))
    if chunked:
        handles.append(Patch(color=lighter("#555555", 1.0), label="lighter: later chunk"))
    figure.legend(
        handles=handles, loc="outside lower center", ncol=len(handles), fontsize=8, frameon=False
    )


def side_by_side_figure(
    panels: Sequence[tuple[str, Sequence[ComputeBar], Sequence[TransferBar]]],
    *,
    show_transfers: bool = False,
) -> Any:
    """Several timelines stacked on one time axis (measured above simulated, or one schedule
    above another), each titled by its panel's name; one legend below for all."""
    heights = []
    for _, compute, transfers in panels:
        devices = 1 + max((bar[0] for bar in compute), default=0)
        links = len({(s, d) for s, d, *_ in transfers}) if show_transfers else 0
        heights.append(devices + links)
    figure, axes = subplots(
        len(panels),
        1,
        sharex=True,
        figsize=(12, min(MAX_HEIGHT_IN, 0.9 + sum(0.8 + 0.36 * h for h in heights))),
        gridspec_kw={"height_ratios": [1.6 + h for h in heights]},
        squeeze=False,
    )
    axes_list = [row[0] for row in axes]
    end = max(
        [bar[3] for _, compute, _ in panels for bar in compute]
        + [bar[4] for _, _, transfers in panels for bar in transfers if show_transfers]
    )
    for index, (ax, (title, compute, transfers)) in enumerate(zip(axes_list, panels, strict=True)):
        draw_timeline(ax, compute, transfers, title=title, show_transfers=show_transfers, end_s=end)
        if index < len(panels) - 1:
            ax.set_xlabel("")
    shown = show_transfers and any(transfers for _, _, transfers in panels)
    _legend(figure, [compute for _, compute, _ in panels], shown)
    return figure
