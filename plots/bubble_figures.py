"""Bubble fraction against M, one panel per K, a colour per schedule; each schedule's closed
form (the rows' ``analytic_bubble_fraction``) dashed in a darker shade of its colour on top of
its line, so it shows even where the simulation meets it exactly. The title mentions the
dashed lines only when some are drawn."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from matplotlib.lines import Line2D

from plots.facets import (
    Row,
    draw_series,
    groups,
    labelled_handles,
    log2_axis,
    panel_grid,
    panel_legend,
    schedule_styles,
    series,
)
from plots.style import darker


def bubble_figure(rows: Sequence[Row], *, title: str = "") -> Any:
    """Bubble (% of step time) against M: one panel per K, a line per schedule, closed forms
    dashed where the rows carry them, out-of-memory runs hollow."""
    styles = schedule_styles(rows)
    panels = sorted(groups(rows, "devices").items())
    figure, axes_list = panel_grid(len(panels), sharey=True)
    dashed = False
    for axes, (devices, group) in zip(axes_list, panels, strict=True):
        colour_of = {}
        for line in series(
            group, "microbatches", lambda r: 100 * r["bubble_fraction"], list(styles)
        ):
            draw_series(axes, line, styles[line.names[0]], linewidth=3.0, alpha=0.6)
            colour_of.update({name: styles[line.names[0]]["color"] for name in line.names})
        drawn: list[list[tuple[int, float]]] = []
        for name, runs in groups(group, "schedule").items():
            known = sorted(
                (r["microbatches"], 100 * r["analytic_bubble_fraction"])
                for r in runs
                if r.get("analytic_bubble_fraction") is not None
            )
            if known and known not in drawn:  # a merged line's closed forms, drawn once
                drawn.append(known)
                dashed = True
                axes.plot(
                    [m for m, _ in known],
                    [a for _, a in known],
                    color=darker(colour_of[name]),
                    linestyle="--",
                    linewidth=1.4,
                    label="_closed form",
                    gid="closed form",
                    zorder=4,
                )
        log2_axis(axes, [r["microbatches"] for r in group], "microbatches")
        axes.set_title(f"K = {devices}", fontsize=10)
        handles = labelled_handles(axes)
        if any(line.get_gid() == "closed form" for line in axes.lines):
            handles.append(
                Line2D([], [], color="black", linestyle="--", linewidth=1.1, label="closed form")
            )
        panel_legend(axes, handles, oom=any(r.get("oom") for r in group))
    axes_list[0].set_ylim(bottom=0)  # after every panel is drawn: the axis is shared
    axes_list[0].set_ylabel("bubble (% of step time)")
    for axes in axes_list[1:]:
        axes.tick_params(labelleft=True)
    default = "Bubble fraction against M" + (
        " (dashed: each schedule's closed form, where one exists)" if dashed else ""
    )
    figure.suptitle(title or default)
    return figure
