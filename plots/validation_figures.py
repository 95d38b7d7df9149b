"""Validation figures from result records: predicted against measured step time, and speedup
against M per schedule with the closed form overlaid."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from matplotlib import ticker

from plots.facets import groups as grouped
from plots.style import series_style, subplots


def _sparse_minor_label(value: float, _position: object) -> str:
    """Label the minor ticks of a log axis at 2, 3 and 5 times a power of ten only, so the
    labels never crowd (20, 30, 50, 200, 300, 500)."""
    return f"{value:g}" if f"{value:.0e}"[0] in "235" else ""


def predicted_vs_measured_figure(records: Sequence[dict[str, Any]]) -> Any:
    """Predicted against measured step time per run, the y = x line and a ±5% band, one
    colour and marker per schedule."""
    figure, axes = subplots(figsize=(7, 6.5), constrained_layout=True)
    for index, (name, group) in enumerate(grouped(records, "schedule").items()):
        style = series_style(index)
        axes.scatter(
            [1e3 * r["measured_time"] for r in group],
            [1e3 * r["predicted_time"] for r in group],
            label=name,
            s=24,
            color=style["color"],
            marker=style["marker"],
        )
    values = [1e3 * r[k] for r in records for k in ("measured_time", "predicted_time")]
    low, high = (min(values) * 0.8, max(values) * 1.2) if values else (1.0, 10.0)
    line = [low, high]
    axes.plot(line, line, color="black", linewidth=1, label="predicted = measured")
    axes.fill_between(
        line,
        [v * 0.95 for v in line],
        [v * 1.05 for v in line],
        color="grey",
        alpha=0.2,
        label="±5%",
    )
    axes.set_xscale("log")
    axes.set_yscale("log")
    for axis in (axes.xaxis, axes.yaxis):  # plain milliseconds (300), not 3 x 10^2
        axis.set_major_formatter(ticker.FuncFormatter(lambda value, _: f"{value:g}"))
        axis.set_minor_formatter(ticker.FuncFormatter(_sparse_minor_label))
    axes.set_xlabel("measured step time (ms)")
    axes.set_ylabel("predicted step time (ms)")
    axes.set_title("Predicted vs measured step time")
    axes.legend(fontsize=7, ncol=2)
    return figure


CASE_LINES = ("-", ":", "-.")


def _case_label(record: dict[str, Any]) -> str:
    """What tells one case's records from another's: its name, or its K without one."""
    return str(record.get("case") or f"K={record['devices']}")


def speedup_figure(records: Sequence[dict[str, Any]]) -> Any:
    """One panel per schedule: measured speedup over one device (markers) and predicted (line)
    against M, with GPipe's closed form K·M/(M+K-1) dashed."""
    groups = grouped(records, "schedule")
    columns = min(4, max(1, len(groups)))
    rows = math.ceil(len(groups) / columns) if groups else 1
    figure, axes = subplots(
        rows,
        columns,
        figsize=(3.2 * columns, 2.6 * rows + 0.6),
        sharex=True,
        sharey=True,
        constrained_layout=True,
        squeeze=False,
    )
    # The partitioned suites put cases of several K in one figure: a closed form for each.
    ks = sorted({r["devices"] for r in records}) or [2]
    all_ms = sorted({r["microbatches"] for r in records}) or [1]
    closed = {k: [k * m / (m + k - 1) for m in all_ms] for k in ks}
    flat = [ax for row in axes for ax in row]
    # Records of several cases (models, or K) share a schedule's panel: a line style and a
    # marker fill per case, so no line joins one case's prediction to another's.
    cases = sorted({_case_label(r) for r in records})
    for index, (ax, (name, group)) in enumerate(zip(flat, groups.items(), strict=False)):
        style = series_style(index)
        for k, ideal in closed.items():
            label = "K·M/(M+K−1)" if len(ks) == 1 else f"K·M/(M+K−1), K={k}"
            ax.plot(all_ms, ideal, color="black", linestyle="--", linewidth=1, label=label)
        for number, case in enumerate(cases):
            own = sorted(
                (r for r in group if _case_label(r) == case), key=lambda r: r["microbatches"]
            )
            if not own:
                continue
            ms = [r["microbatches"] for r in own]
            suffix = f" ({case})" if len(cases) > 1 else ""
            ax.plot(
                ms,
                [r["predicted_speedup"] for r in own],
                color=style["color"],
                linestyle=CASE_LINES[number % len(CASE_LINES)],
                label=f"predicted{suffix}",
            )
            hollow = number % 2 == 1
            ax.scatter(
                ms,
                [r["measured_speedup"] for r in own],
                facecolors="none" if hollow else style["color"],
                edgecolors=style["color"],
                marker=style["marker"],
                s=28,
                label=f"measured{suffix}",
                zorder=3,
            )
        ax.set_title(name, fontsize=9)
        ax.set_xscale("log", base=2)
        ax.set_xticks(all_ms, [str(m) for m in all_ms])
        ax.grid(alpha=0.3)
    for ax in flat[len(groups) :]:
        ax.set_visible(False)
    for ax in axes[-1]:
        ax.set_xlabel("micro-batches (M)")
    for row in axes:
        row[0].set_ylabel("speedup")
    # Where it covers the fewest points: a fixed corner hid the K = 1 points of a partitioned
    # suite, whose panels hold several K.
    flat[0].legend(fontsize=7, loc="best")
    shown = ", ".join(map(str, ks))
    figure.suptitle(f"Speedup over one device, K={shown}: measured and predicted")
    return figure
