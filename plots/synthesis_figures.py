"""The memory-time trade-off of synthesised schedules: step time against the most micro-batches
in flight on any device, the synthesised schedule as a curve over the memory limit and the
fixed schedules as points (see :func:`pipesim.synthesis.synthesis.memory_tradeoff`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from plots.style import new_figure, series_style, time_unit

SYNTH_COLOUR = "black"


def memory_tradeoff_figure(fixed: Sequence[Any], curve: Sequence[Any], *, title: str = "") -> Any:
    """``fixed`` and ``curve`` are :class:`~pipesim.synthesis.synthesis.MemoryPoint` rows."""
    if not curve:
        raise ValueError("memory_tradeoff_figure needs at least one synthesised point")
    largest = max(p.step_time_s for p in [*fixed, *curve])
    scale, unit = time_unit(largest)
    figure, axes = new_figure(7.0, 4.2)
    axes.plot(
        [p.limit for p in curve],
        [p.step_time_s * scale for p in curve],
        color=SYNTH_COLOUR,
        marker="o",
        markersize=4,
        label="synth (x = its memory limit)",
        zorder=3,
    )
    for index, point in enumerate(fixed):
        style = series_style(index + 1)
        axes.scatter(
            [point.in_flight],
            [point.step_time_s * scale],
            s=70,
            color=style["color"],
            marker=style["marker"],
            edgecolors="black",
            linewidths=0.6,
            label=f"{point.name} (fixed)",
            zorder=4,
        )
    axes.set_xlabel("micro-batches in flight on the fullest device (activation memory)")
    axes.set_ylabel(f"step time ({unit})")
    axes.set_xticks(sorted({*(p.limit for p in curve), *(p.in_flight for p in fixed)}))
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8, loc="upper right")
    axes.set_title(title or "Step time against memory: synthesised (curve) and fixed schedules")
    return figure
