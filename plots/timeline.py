"""Timelines (Gantt charts) of simulated or measured runs: one row per device, F, B, I and W in
distinct colours with micro-batch numbers, transfers on rows of their own, bubbles visible as
gaps. The picture of GPipe's Figure 2(c) and of the zero-bubble paper's schedules.

Functions take plain data: compute bars ``(device, label, start_s, end_s)`` with labels such as
``2F0`` or ``opt``, and transfer bars ``(source, destination, label, start_s, end_s)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
from matplotlib.collections import PolyCollection
from matplotlib.patches import Patch

from pipesim.export.saved import ComputeBar, TransferBar
from plots.style import (
    DPI,
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
    whichever contrasts more with the bar's fill. Bars narrower than a pixel are merged as a
    trace viewer merges them (see :func:`merged_by_pixel`), so a run of any length draws in
    bounded time."""
    devices = 1 + max((bar[0] for bar in compute), default=0)
    links = _busy_links(transfers) if show_transfers else []
    rows = [f"device {d}" for d in range(devices)] + [f"link {s}→{d}" for s, d in links]
    end = end_s or max([bar[3] for bar in compute] + [bar[4] for bar in transfers] + [1e-12])
    scale, unit = time_unit(end)
    points_per_s = _axes_width_points(axes) / end
    pixel_s = 72.0 / (DPI * points_per_s)
    chunk_of = {
        label: int(label[: label.index(kind_of(label))]) // devices
        for _, label, _, _ in compute
        if kind_of(label) != "opt"
    }
    chunks = 1 + max(chunk_of.values(), default=0)
    fills: dict[tuple[float, ...], int] = {}
    fill_index = []
    for _, label, _, _ in compute:
        fill = tuple(
            lighter(KIND_COLOURS[kind_of(label)], chunk_of.get(label, 0) / max(1, chunks - 1))
        )
        fill_index.append(fills.setdefault(fill, len(fills)))
    bars = _Bars(
        np.array([bar[0] for bar in compute], dtype=np.int64),
        np.array([bar[2] for bar in compute], dtype=np.float64),
        np.array([bar[3] for bar in compute], dtype=np.float64),
        np.array(fill_index, dtype=np.int64),
    )
    colours = list(fills)
    merged = _draw_bars(axes, bars, colours, height=0.8, scale=scale, pixel_s=pixel_s)
    for (device, label, start, finish), fill_number in zip(compute, fill_index, strict=True):
        kind = kind_of(label)
        text = label[label.index(kind) + 1 :] if kind != "opt" else ""
        size = label_size(text, (finish - start) * points_per_s)
        if size:
            fill = colours[fill_number]
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
    if links:
        row_of = {link: devices + index for index, link in enumerate(links)}
        kept = [t for t in transfers if (t[0], t[1]) in row_of]
        link_bars = _Bars(
            np.array([row_of[(t[0], t[1])] for t in kept], dtype=np.int64),
            np.array([t[3] for t in kept], dtype=np.float64),
            np.array([t[4] for t in kept], dtype=np.float64),
            np.zeros(len(kept), dtype=np.int64),
        )
        merged |= _draw_bars(
            axes,
            link_bars,
            [TRANSFER_COLOUR],
            height=0.5,
            scale=scale,
            pixel_s=pixel_s,
            alpha=0.7,
            edged=False,
        )
    axes.set_yticks(range(len(rows)), rows)
    axes.set_ylim(len(rows) - 0.5, -0.5)
    axes.set_xlabel(f"time ({unit})")
    axes.set_xlim(0, end * scale)
    if title:
        axes.set_title(title, loc="left", fontsize=10)
    if merged:
        axes.set_title(MERGED_NOTE, loc="right", fontsize=7, color="#555555")


def _busy_links(transfers: Sequence[TransferBar]) -> list[tuple[int, int]]:
    """The links that carry a transfer taking time, in order: a link whose every transfer takes
    none (no --comm) gets no row of its own."""
    return sorted({(s, d) for s, d, _, start, end in transfers if end > start})


TRANSFER_COLOUR = "#c44e52"
# Said on a timeline whose bars were merged (at the top right), so no one reads a merged pixel
# as one long action.
MERGED_NOTE = "bars under a pixel merged: each pixel shows the kind that fills most of it"
# Bars narrower than this many pixels are merged (drawn exactly, a bar of one or two pixels
# beside merged pixels leaves slivers of white where there is no idle time).
MERGE_BELOW_PIXELS = 3.0
# A bar at least this many pixels wide gets a white outline, so back-to-back actions of one
# kind tell apart; a thinner one would be all outline.
OUTLINE_FROM_PIXELS = 3.0


class _Bars(NamedTuple):
    """Bars of one layer as arrays: their row, start and end (seconds) and fill (an index)."""

    row: np.ndarray
    start_s: np.ndarray
    end_s: np.ndarray
    fill: np.ndarray


def _draw_bars(
    axes: Any,
    bars: _Bars,
    fills: Sequence[Any],
    *,
    height: float,
    scale: float,
    pixel_s: float,
    alpha: float = 1.0,
    edged: bool = True,
) -> bool:
    """Draw ``bars``, one collection per fill: bars a pixel wide or more as they are, narrower
    ones merged by :func:`merged_by_pixel`. Returns whether any were merged."""
    wide = (bars.end_s - bars.start_s) >= MERGE_BELOW_PIXELS * pixel_s
    shown = _Bars(*(column[wide] for column in bars))
    merged = merged_by_pixel(_Bars(*(column[~wide] for column in bars)), pixel_s)
    for layer, outline in ((shown, edged), (merged, False)):
        for fill in np.unique(layer.fill):
            pick = layer.fill == fill
            row, start, finish = layer.row[pick], layer.start_s[pick], layer.end_s[pick]
            left, right = start * scale, finish * scale
            top, bottom = row - height / 2, row + height / 2
            corners = np.stack(
                [
                    np.column_stack([left, top]),
                    np.column_stack([left, bottom]),
                    np.column_stack([right, bottom]),
                    np.column_stack([right, top]),
                ],
                axis=1,
            )
            widths_px = (finish - start) / pixel_s
            collection = PolyCollection(
                list(corners),
                facecolors=[fills[fill]],
                edgecolors="white",
                linewidths=np.where(outline & (widths_px >= OUTLINE_FROM_PIXELS), 0.5, 0.0),
                alpha=alpha,
                gid="merged" if layer is merged else "bars",
            )
            axes.add_collection(collection, autolim=False)
    return len(merged.row) > 0


def merged_by_pixel(bars: _Bars, pixel_s: float) -> _Bars:
    """Bars narrower than :data:`MERGE_BELOW_PIXELS`, merged as trace viewers merge them: each
    bar's busy time is shared among the pixel columns it covers, each pixel of a row that has
    any takes the fill with the most busy time in it, and neighbouring pixels of one fill
    become one bar. A pixel with no busy time stays empty, so an idle gap of a pixel or more
    still shows; at most one bar per pixel per row comes out, however many went in. Bars of
    no duration are not drawn (as when drawn at their width)."""
    busy = bars.end_s > bars.start_s
    row, start, end, fill = (column[busy] for column in bars)
    if len(row) == 0:
        return _Bars(row, start, end, fill)
    first_pixel = np.floor(start / pixel_s).astype(np.int64)
    pieces = []
    for offset in range(int(MERGE_BELOW_PIXELS) + 2):  # the pixels a narrow bar can touch
        pixel = first_pixel + offset
        overlap_s = np.minimum(end, (pixel + 1) * pixel_s) - np.maximum(start, pixel * pixel_s)
        touched = overlap_s > 0
        pieces.append((row[touched], pixel[touched], fill[touched], overlap_s[touched]))
    rows, pixels, fills, overlaps = (np.concatenate(part) for part in zip(*pieces, strict=True))
    # One key per (row, pixel, fill); np.unique keeps it sparse whatever the numbers.
    keys, inverse = np.unique(np.stack([rows, pixels, fills], axis=1), axis=0, return_inverse=True)
    busy_s = np.bincount(inverse.ravel(), weights=overlaps)
    # Per (row, pixel), the fill with the most busy time: sort by cell then busy, keep the last.
    keys = keys[np.lexsort((busy_s, keys[:, 1], keys[:, 0]))]
    last = np.ones(len(keys), dtype=bool)
    last[:-1] = (keys[1:, 0] != keys[:-1, 0]) | (keys[1:, 1] != keys[:-1, 1])
    cells = keys[last]  # row, pixel, fill; sorted by row then pixel
    starts = np.ones(len(cells), dtype=bool)
    starts[1:] = (
        (cells[1:, 0] != cells[:-1, 0])
        | (cells[1:, 1] != cells[:-1, 1] + 1)
        | (cells[1:, 2] != cells[:-1, 2])
    )
    first = np.flatnonzero(starts)
    final = np.append(first[1:], len(cells)) - 1
    return _Bars(
        cells[first, 0],
        cells[first, 1] * pixel_s,
        (cells[final, 1] + 1) * pixel_s,
        cells[first, 2],
    )


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
    links = len(_busy_links(transfers))
    figure, axes = new_figure(12, min(MAX_HEIGHT_IN, 1.4 + 0.45 * (devices + links)))
    draw_timeline(axes, compute, transfers, title=title)
    _legend(figure, [compute], links > 0)
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
        handles.append(Patch(color=TRANSFER_COLOUR, alpha=0.7, label="transfer"))
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
        links = len(_busy_links(transfers)) if show_transfers else 0
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
    shown = show_transfers and any(_busy_links(transfers) for _, _, transfers in panels)
    _legend(figure, [compute for _, compute, _ in panels], shown)
    return figure
