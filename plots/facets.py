"""What the figures of many runs share: grouping rows, one panel per value of a key, a colour
per schedule that stays the same in every panel, a log2 axis of M or K, hollow markers for
out-of-memory runs, and merging series that coincide so none hides another.

Rows are plain dicts as ``pipesim sweep --json`` writes them (``schedule``, ``devices``,
``microbatches``, the quantity, optionally ``oom``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from plots.style import OOM_MARKER_FACE, series_style, subplots

Row = dict[str, Any]
AXIS_NAMES = {"microbatches": "micro-batches per step (M)", "devices": "devices (K)"}
SHORT_NAMES = {"microbatches": "M", "devices": "K"}


def groups(rows: Sequence[Row], key: str) -> dict[Any, list[Row]]:
    """Rows by ``row[key]``, in order of first appearance."""
    out: dict[Any, list[Row]] = {}
    for row in rows:
        out.setdefault(row[key], []).append(row)
    return out


def schedule_styles(rows: Sequence[Row]) -> dict[str, dict[str, str]]:
    """One colour and marker per schedule, in order of first appearance, the same in every
    panel of a figure."""
    names = list(groups(rows, "schedule"))
    return {name: series_style(index) for index, name in enumerate(names)}


def panel_grid(
    count: int, *, width: float = 4.6, height: float = 3.6, sharey: bool = False
) -> tuple[Figure, list[Any]]:
    """A figure with ``count`` panels, at most three a row; unused cells are hidden."""
    columns = min(3, max(1, count))
    rows = math.ceil(max(1, count) / columns)
    figure, axes = subplots(
        rows,
        columns,
        figsize=(width * columns + 0.4, height * rows + 0.5),
        sharey=sharey,
        squeeze=False,
    )
    flat = [ax for line in axes for ax in line]
    for ax in flat[count:]:
        ax.set_visible(False)
    return figure, flat[:count]


def log2_axis(axes: Any, values: Sequence[int], key: str) -> None:
    """A log2 x axis with a tick at each value of ``key`` drawn, named with its letter and
    marked as logarithmic (unmarked, a line linear in M reads as exponential)."""
    axes.set_xscale("log", base=2)
    ticks = sorted(set(values))
    axes.set_xticks(ticks, [str(t) for t in ticks])
    axes.minorticks_off()
    axes.set_xlabel(f"{AXIS_NAMES[key]}, log scale")
    axes.grid(alpha=0.3)


@dataclass(frozen=True)
class Series:
    """One line of a panel: the schedules it stands for (several where their values
    coincide), its points and which of them ran out of memory."""

    names: tuple[str, ...]
    xs: tuple[float, ...]
    ys: tuple[float, ...]
    oom: tuple[bool, ...]

    @property
    def label(self) -> str:
        """``gpipe`` or, where lines coincide, ``gpipe = 1f1b``."""
        return " = ".join(self.names)


def series(
    rows: Sequence[Row], x_key: str, value: Callable[[Row], float], order: Sequence[str]
) -> list[Series]:
    """A series per schedule (in ``order``), sorted by ``x_key``; schedules whose points are
    the same (to 1e-9 relative) are merged into one series named after all of them."""
    by_name = groups(rows, "schedule")
    merged: list[Series] = []
    for name in order:
        if name not in by_name:
            continue
        runs = sorted(by_name[name], key=lambda r: r[x_key])
        line = Series(
            (name,),
            tuple(float(r[x_key]) for r in runs),
            tuple(float(value(r)) for r in runs),
            tuple(bool(r.get("oom", False)) for r in runs),
        )
        for index, other in enumerate(merged):
            if _same(other, line):
                merged[index] = Series(
                    other.names + line.names,
                    other.xs,
                    other.ys,
                    tuple(a or b for a, b in zip(other.oom, line.oom, strict=True)),
                )
                break
        else:
            merged.append(line)
    return merged


def _same(a: Series, b: Series) -> bool:
    return (
        a.xs == b.xs
        and a.oom == b.oom
        and all(
            math.isclose(p, q, rel_tol=1e-9, abs_tol=1e-12) for p, q in zip(a.ys, b.ys, strict=True)
        )
    )


def draw_series(
    axes: Any, line: Series, style: dict[str, str], *, linewidth: float = 1.8, alpha: float = 1.0
) -> None:
    """The line with filled markers, and its out-of-memory points again as hollow markers
    (tagged ``gid='oom'`` so tests and readers can find them)."""
    axes.plot(
        line.xs,
        line.ys,
        color=style["color"],
        marker=style["marker"],
        linewidth=linewidth,
        alpha=alpha,
        markersize=6,
        label=line.label,
        zorder=2,
    )
    hollow = [(x, y) for x, y, oom in zip(line.xs, line.ys, line.oom, strict=True) if oom]
    if hollow:
        axes.plot(
            [x for x, _ in hollow],
            [y for _, y in hollow],
            linestyle="none",
            marker=style["marker"],
            markersize=8,
            markerfacecolor=OOM_MARKER_FACE,
            markeredgecolor=style["color"],
            markeredgewidth=1.8,
            gid="oom",
            label="_oom",
            zorder=3,
        )


def oom_handle() -> Line2D:
    """The legend entry that explains hollow markers."""
    return Line2D(
        [],
        [],
        linestyle="none",
        marker="o",
        markersize=7,
        markerfacecolor=OOM_MARKER_FACE,
        markeredgecolor="black",
        label="hollow marker: out of memory",
    )


def labelled_handles(axes: Any) -> list[Any]:
    """The legend handles of what ``axes`` has drawn so far, those labelled ``_...`` left out."""
    return [h for h in axes.get_legend_handles_labels()[0] if not h.get_label().startswith("_")]


def panel_legend(axes: Any, handles: list[Any], *, oom: bool) -> None:
    """A panel's legend of ``handles``, then the hollow-marker entry when a point of the panel
    ran out of memory; the same size and placement in every figure of many runs."""
    if oom:
        handles = [*handles, oom_handle()]
    axes.legend(handles=handles, fontsize=7, loc="best", framealpha=0.85)
