"""A published quantity beside pipesim's, against M, one colour per K: the reproduction suites'
picture of a paper's table."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from plots.facets import Row, groups, log2_axis
from plots.style import new_figure, series_style


def paper_vs_simulated_figure(
    rows: Sequence[Row], quantity: str, *, title: str = "", baseline: str = ""
) -> Any:
    """The paper's values (dashed, hollow markers) and pipesim's (solid, filled) against M,
    one colour per K. ``baseline`` names what a normalized quantity is normalized to, and goes
    on the axis (``relative to K=2, M=1``)."""
    figure, axes = new_figure(7.5, 5)
    for index, (devices, group) in enumerate(sorted(groups(rows, "devices").items())):
        group = sorted(group, key=lambda r: r["microbatches"])
        style = series_style(index)
        ms = [r["microbatches"] for r in group]
        axes.plot(
            ms,
            [r["simulated"] for r in group],
            color=style["color"],
            marker=style["marker"],
            label=f"K={devices}, pipesim",
        )
        axes.plot(
            ms,
            [r["paper"] for r in group],
            color=style["color"],
            marker=style["marker"],
            linestyle="--",
            markerfacecolor="none",
            label=f"K={devices}, paper",
        )
    log2_axis(axes, [r["microbatches"] for r in rows], "microbatches")
    axes.set_ylabel(f"{quantity}\n(relative to {baseline})" if baseline else quantity)
    axes.set_title(title or f"{quantity}: paper (dashed) and pipesim (solid)")
    axes.legend(fontsize=8, ncol=2)
    return figure
