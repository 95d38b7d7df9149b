"""Memory figures: peak memory per device of a few runs (stacked bars, term by term where the
run gives its ``memory_breakdown``: weights, gradients, optimizer state and master weights
below, activations and the largest action's transient above, the fragmentation and runtime
allowances on top; hatched where a device runs out of memory), the
largest device's peak against M for a grid of runs (one panel per K), and one run's memory
over time.

The axis unit follows the data (bytes to TiB), and a figure of memory that is zero everywhere
is refused (:class:`plots.style.EmptyPlotError`): synthetic costs without activation bytes
count no memory at all, and a flat line at zero would say otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from matplotlib.patches import Patch

from pipesim.common.units import format_bytes
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
from plots.style import OOM_COLOUR, OOM_HATCH, EmptyPlotError, byte_unit, new_figure, time_unit

# A grid with more runs than this draws one line per schedule instead of bars per device.
MAX_BAR_RUNS = 8
# A capacity more than this many times the largest peak is named, not drawn: a line that far
# up would squash every bar to the floor.
CAPACITY_SCALE = 4.0
NO_MEMORY = (
    "synthetic --costs count no memory unless given --activation-bytes N (or use --model "
    "with --hardware)"
)
STATIC_COLOUR, ACTIVATION_COLOUR = "#8c8c8c", "#4c72b0"
# Each term of a device's peak (``memory_breakdown``), bottom to top: the static terms in
# greys and browns, what the schedule holds in blues, the allowances in pale tones.
TERM_STYLES = {
    "weights": ("weights", "#4d4d4d"),
    "gradients": ("gradients", "#8c8c8c"),
    "optimizer_state": ("optimizer state", "#b3a27f"),
    "master_weights": ("master weights", "#d9c9a3"),
    "activations": ("activations", ACTIVATION_COLOUR),
    "transient": ("transient (largest action)", "#8fb3e0"),
    "fragmentation": ("fragmentation", "#e6d2f0"),
    "runtime_reserve": ("runtime reserve", "#f2e6b3"),
}


def _peak(device: dict[str, Any]) -> float:
    return float(
        device.get("peak_memory_bytes")
        or device["static_memory_bytes"] + device["peak_activation_bytes"]
    )


def peak_memory_figure(rows: Sequence[Row], *, title: str = "") -> Any:
    """Up to eight runs: a bar per device per run; more: the largest device's peak against
    M, one panel per K. Capacity as a red dashed line (named in the legend)."""
    peaks = [_peak(d) for r in rows for d in r["per_device"]]
    if not peaks or max(peaks) <= 0:
        raise EmptyPlotError(f"peak memory is 0 bytes on every device of every run; {NO_MEMORY}")
    capacities = sorted(
        {c for r in rows for d in r["per_device"] if (c := d.get("memory_capacity_bytes"))}
    )
    if len(rows) <= MAX_BAR_RUNS:
        return _bars(rows, max(peaks), capacities, title)
    return _grid(rows, max(peaks), capacities, title)


def _axis_unit(largest: float, capacities: Sequence[float]) -> tuple[float, str]:
    """The memory axis's unit (its size in bytes and name): for the largest peak and each
    capacity drawn on the scale (within :data:`CAPACITY_SCALE` of it)."""
    return byte_unit(max([largest, *[c for c in capacities if c <= CAPACITY_SCALE * largest]]))


def _bars(rows: Sequence[Row], largest: float, capacities: list[float], title: str) -> Any:
    scale, unit = _axis_unit(largest, capacities)
    figure, axes = new_figure(max(8.0, 1.3 * len(rows) + 4), 4.5)
    varied = len({(r["devices"], r["microbatches"]) for r in rows}) > 1
    names = [
        f"{r['schedule']}\nK={r['devices']} M={r['microbatches']}" if varied else r["schedule"]
        for r in rows
    ]
    any_oom = False
    drawn: dict[str, str] = {}  # the terms drawn, for the legend (top term first)
    for i, row in enumerate(rows):
        per_device = row["per_device"]
        width = 0.8 / max(1, len(per_device))
        positions = [i - 0.4 + (d + 0.5) * width for d in range(len(per_device))]
        oom = [bool(d.get("oom")) for d in per_device]
        any_oom = any_oom or any(oom)
        bottom = [0.0] * len(per_device)
        for term, heights in _stack(row, scale):
            colour = TERM_STYLES[term][1] if term in TERM_STYLES else _TWO_TERMS[term][1]
            drawn.setdefault(term, colour)
            bars = axes.bar(positions, heights, 0.88 * width, bottom=bottom, color=colour)
            bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
            for bar, out in zip(bars, oom, strict=True):
                if out:
                    bar.set_hatch(OOM_HATCH)
                    bar.set_edgecolor(OOM_COLOUR)
                    bar.set_gid("oom")
    labels = {**{t: label for t, (label, _) in TERM_STYLES.items()}, **_TWO_LABELS}
    order = [*TERM_STYLES, *_TWO_TERMS]
    handles: list[Any] = [
        Patch(color=drawn[term], label=labels[term]) for term in reversed(order) if term in drawn
    ]
    handles += _capacity_lines(axes, capacities, largest, scale)
    if any_oom:
        handles.append(
            Patch(
                facecolor="white",
                edgecolor=OOM_COLOUR,
                hatch=OOM_HATCH,
                label="hatched: out of memory",
            )
        )
    axes.set_xticks(range(len(rows)), names, fontsize=8)
    axes.set_ylabel(f"peak memory per device ({unit})")
    axes.set_title(title or "Peak memory per device (one bar per device, 0..K−1, left to right)")
    figure.legend(handles=handles, fontsize=8, loc="outside right upper")
    return figure


_TWO_TERMS = {
    "static": ("weights, gradients, optimizer", STATIC_COLOUR),
    "dynamic": ("activations", ACTIVATION_COLOUR),
}
_TWO_LABELS = {term: label for term, (label, _) in _TWO_TERMS.items()}


def _stack(row: Row, scale: float) -> list[tuple[str, list[float]]]:
    """The layers of one run's bars, bottom to top, each a height per device: every term of
    the peak where each device gives them (``memory_breakdown``; terms that are zero on every
    device left out), else static memory and the rest of the peak."""
    per_device = row["per_device"]
    terms = [d.get("memory_breakdown") for d in per_device]
    if all(isinstance(t, dict) for t in terms):
        return [
            (term, [t.get(term, 0.0) / scale for t in terms])
            for term in TERM_STYLES
            if any(t.get(term, 0.0) > 0 for t in terms)
        ]
    return [
        ("static", [d["static_memory_bytes"] / scale for d in per_device]),
        ("dynamic", [(_peak(d) - d["static_memory_bytes"]) / scale for d in per_device]),
    ]


def _grid(rows: Sequence[Row], largest: float, capacities: list[float], title: str) -> Any:
    scale, unit = _axis_unit(largest, capacities)
    styles = schedule_styles(rows)
    panels = sorted(groups(rows, "devices").items())
    figure, axes_list = panel_grid(len(panels), sharey=True)
    for axes, (devices, group) in zip(axes_list, panels, strict=True):
        for line in series(
            group,
            "microbatches",
            lambda r: max(_peak(d) for d in r["per_device"]) / scale,
            list(styles),
        ):
            draw_series(axes, line, styles[line.names[0]])
        log2_axis(axes, [r["microbatches"] for r in group], "microbatches")
        axes.set_title(f"K = {devices}", fontsize=10)
        handles = labelled_handles(axes)  # before the capacity lines add theirs
        handles += _capacity_lines(axes, capacities, largest, scale)
        panel_legend(axes, handles, oom=any(r.get("oom") for r in group))
    axes_list[0].set_ylim(bottom=0)  # after every panel is drawn: the axis is shared
    axes_list[0].set_ylabel(f"largest device's peak memory ({unit})")
    for axes in axes_list[1:]:
        axes.tick_params(labelleft=True)
    figure.suptitle(title or "Peak memory of the fullest device against M")
    return figure


def _capacity_lines(axes: Any, capacities: list[float], largest: float, scale: float) -> list[Any]:
    """Each capacity as a dashed red line where it is on the scale; named in the legend
    either way."""
    handles = []
    for capacity in capacities:
        if capacity <= CAPACITY_SCALE * largest:
            handles.append(
                axes.axhline(
                    capacity / scale,
                    color=OOM_COLOUR,
                    linestyle="--",
                    label=f"capacity {format_bytes(capacity)}",
                )
            )
        else:
            handles.append(
                Patch(
                    color="none", label=f"capacity {format_bytes(capacity)} (far above: not drawn)"
                )
            )
    return handles


def memory_timeline_figure(
    curves: Sequence[Sequence[tuple[float, float]]],
    capacity_bytes: float | None = None,
    *,
    title: str = "",
) -> Any:
    """Each device's memory over one run, as steps; the capacity dashed red where on the
    scale."""
    values = [b for curve in curves for _, b in curve]
    if not values or max(values) <= 0:
        raise EmptyPlotError(f"memory is 0 bytes on every device throughout the run; {NO_MEMORY}")
    largest = max(values)
    capacities = [capacity_bytes] if capacity_bytes else []
    scale, unit = _axis_unit(largest, capacities)
    seconds, time_name = time_unit(max((t for curve in curves for t, _ in curve), default=1.0))
    figure, axes = new_figure(9, 4.5)
    styles = schedule_styles([{"schedule": f"device {d}"} for d in range(len(curves))])
    for device, curve in enumerate(curves):
        style = styles[f"device {device}"]
        axes.step(
            [t * seconds for t, _ in curve],
            [b / scale for _, b in curve],
            where="post",
            color=style["color"],
            label=f"device {device}",
        )
    handles = axes.get_legend_handles_labels()[0]
    handles += _capacity_lines(axes, capacities, largest, scale)
    axes.set_xlabel(f"time ({time_name})")
    axes.set_ylabel(f"memory ({unit})")
    axes.set_ylim(bottom=0)
    # over the whole figure: an axes title that long runs into the legend beside it
    figure.suptitle(title or "Memory of each device over time", fontsize=11)
    axes.grid(alpha=0.3)
    # beside the axes, not on them: with many devices a legend inside covers the ramp-up
    figure.legend(handles=handles, fontsize=8, loc="outside right center")
    return figure
