"""Throughput per GPU against the global batch, one line per schedule (Megatron-LM's Figure 12
drawn from pipesim's simulated runs)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from plots.style import new_figure, series_style


def interleaving_figure(
    series: Mapping[str, Sequence[tuple[int, float]]], *, title: str = ""
) -> Any:
    """``series``: a label per schedule, its (batch, teraFLOP/s per GPU) points."""
    if not any(series.values()):
        raise ValueError("interleaving_figure needs at least one point")
    figure, axes = new_figure(6.4, 4.0)
    for index, (label, points) in enumerate(series.items()):
        style = series_style(index)
        axes.plot(
            [batch for batch, _ in points],
            [tflops for _, tflops in points],
            color=style["color"],
            marker=style["marker"],
            label=label,
        )
    axes.set_xlabel("global batch (sequences per step)")
    axes.set_ylabel("teraFLOP/s per GPU (recomputation counted)")
    axes.set_xticks(sorted({batch for points in series.values() for batch, _ in points}))
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8, loc="lower right")
    axes.set_title(
        title or "GPT-3 175B on 96 A100s (T=8, P=12, b=1): interleaving's gain shrinks with batch"
    )
    return figure
