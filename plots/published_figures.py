"""Predicted against published step times of published training runs: one point per run,
coloured by framework (hollow where the run is in-sample), on log axes with the line of
agreement and a ±10% band."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from plots.style import new_figure, series_style


def predicted_against_published_figure(
    points: Sequence[tuple[str, str, float, float, bool]], *, title: str = ""
) -> Any:
    """``points``: (run, framework, published seconds per step, predicted seconds per step,
    in-sample); an in-sample run is drawn hollow and its framework's label says so."""
    if not points:
        raise ValueError("predicted_against_published_figure needs at least one run")
    figure, axes = new_figure(7.2, 5.2)
    groups = list(dict.fromkeys((framework, inside) for _, framework, _, _, inside in points))
    values = [v for _, _, published, predicted, _ in points for v in (published, predicted)]
    low, high = min(values) / 1.3, max(values) * 1.3
    axes.fill_between(
        [low, high], [low * 0.9, high * 0.9], [low * 1.1, high * 1.1], color="0.9", label="±10%"
    )
    axes.plot([low, high], [low, high], color="0.4", linewidth=1, label="predicted = published")
    for index, (framework, inside) in enumerate(groups):
        style = series_style(index)
        chosen = [(p, q) for _, f, p, q, i in points if (f, i) == (framework, inside)]
        axes.scatter(
            [p for p, _ in chosen],
            [q for _, q in chosen],
            facecolors="white" if inside else style["color"],
            edgecolors=style["color"],
            marker=style["marker"],
            s=36,
            label=f"{framework} (in-sample)" if inside else framework,
            zorder=3,
        )
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.set_xlim(low, high)
    axes.set_ylim(low, high)
    axes.set_xlabel("published step time (s, log scale)")
    axes.set_ylabel("pipesim's predicted step time (s, log scale)")
    axes.grid(alpha=0.3, which="both")
    axes.legend(fontsize=7, loc="upper left")
    axes.set_title(title or "Published runs: pipesim's prediction against the measurement")
    return figure
