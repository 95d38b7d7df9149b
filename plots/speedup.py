"""Speedup and throughput of many runs against M (one panel per K) or against K (one panel per
M), every schedule measured against one common baseline, never against itself.

- ``speedup``: throughput over the same model and mini-batch unpipelined on one device (the
  sweep's ``speedup`` field), with GPipe's closed form K·M/(M+K−1) dashed: what GPipe and 1F1B
  reach with equal stages and free transfers.
- ``normalized_throughput``: throughput over that of one run shared by every line, the sweep's
  smallest K and M (GPipe's Table 2 normalizes to K=2, M=1), GPipe's where it ran there; the
  axis names the run and its throughput. The closed form is the one-device throughput times
  K·M/(M+K−1), over the same baseline.

Out-of-memory runs are hollow markers; schedules whose values coincide share one line named
after all of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pipesim.errors import PipesimError
from plots.facets import (
    SHORT_NAMES,
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
from plots.style import CLOSED_FORM_COLOUR

QUANTITIES = ("speedup", "normalized_throughput")
CLOSED_FORM = "K·M/(M+K−1)"


def ideal_speedup(devices: int, microbatches: int) -> float:
    """GPipe's closed form with equal stages and free transfers: K·M/(M+K−1)."""
    return devices * microbatches / (microbatches + devices - 1)


def common_baseline(rows: Sequence[Row]) -> Row:
    """The run every line is normalized to: the smallest K, then M, of the sweep; GPipe's run
    there if it has one (the paper's convention), else the first schedule's."""
    smallest = min((r["devices"], r["microbatches"]) for r in rows)
    at = [r for r in rows if (r["devices"], r["microbatches"]) == smallest]
    return next((r for r in at if r["schedule"] == "gpipe"), at[0])


def throughput_figure(
    rows: Sequence[Row],
    quantity: str = "speedup",
    *,
    against: str = "M",
    title: str = "",
    closed_form: bool = True,
) -> Any:
    """``quantity`` (``speedup`` or ``normalized_throughput``) against M, one panel per K, or
    against K, one panel per M; a colour per schedule, the closed form dashed black."""
    if quantity not in QUANTITIES:
        raise ValueError(f"quantity {quantity!r}: expected one of {', '.join(QUANTITIES)}")
    if against not in ("M", "K"):
        raise ValueError(f"against {against!r}: expected 'M' or 'K'")
    panel_key, x_key = (
        ("devices", "microbatches") if against == "M" else ("microbatches", "devices")
    )
    styles = schedule_styles(rows)
    if quantity == "speedup":
        base_throughput = 1.0
        ylabel = "speedup over one device (×)"
    else:
        base = common_baseline(rows)
        base_throughput = float(base["throughput"])
        unit = base.get("throughput_unit") or "per s"
        ylabel = (
            f"throughput ÷ {base['schedule']}'s at K={base['devices']}, M={base['microbatches']}"
            f"\n(= {base_throughput:.3g} {unit})"
        )

    def value(row: Row) -> float:
        return (
            float(row["speedup"]) if quantity == "speedup" else row["throughput"] / base_throughput
        )

    panels = sorted(groups(rows, panel_key).items())
    figure, axes_list = panel_grid(len(panels), sharey=True)
    drew_closed = False
    for axes, (fixed, group) in zip(axes_list, panels, strict=True):
        for line in series(group, x_key, value, list(styles)):
            draw_series(axes, line, styles[line.names[0]])
        if closed_form:
            ideal = _closed_form(group, x_key, fixed, against, quantity, base_throughput)
            if ideal:
                drew_closed = True
                axes.plot(
                    [x for x, _ in ideal],
                    [y for _, y in ideal],
                    color=CLOSED_FORM_COLOUR,
                    linestyle="--",
                    linewidth=1.2,
                    label=f"closed form {CLOSED_FORM}",
                    zorder=4,
                )
        log2_axis(axes, [r[x_key] for r in group], x_key)
        axes.set_title(f"{SHORT_NAMES[panel_key]} = {fixed}", fontsize=10)
        panel_legend(axes, labelled_handles(axes), oom=any(r.get("oom") for r in group))
    axes_list[0].set_ylabel(ylabel)
    for axes in axes_list[1:]:
        axes.tick_params(labelleft=True)
    name = "Speedup over one device" if quantity == "speedup" else "Normalized throughput"
    default = f"{name} against {against}" + (
        f" (dashed: GPipe's closed form {CLOSED_FORM})" if drew_closed else ""
    )
    figure.suptitle(title or default)
    if quantity == "normalized_throughput" and any(
        str(r.get("costs", "")).startswith("synthetic") for r in rows
    ):
        figure.text(
            0.01,
            0.0,
            "synthetic costs: each device does the same work whatever K, so panels of "
            "different K are different models",
            fontsize=8,
            color="#c44e52",
            va="bottom",
        )
    return figure


def _closed_form(
    group: Sequence[Row],
    x_key: str,
    fixed: int,
    against: str,
    quantity: str,
    base_throughput: float,
) -> list[tuple[float, float]]:
    """The closed form at each x of a panel; for normalized throughput, from the one-device
    throughput the rows imply (throughput / speedup), so none where they carry no speedup."""
    points = []
    for x, runs in sorted(groups(group, x_key).items()):
        devices, microbatches = (fixed, x) if against == "M" else (x, fixed)
        ideal = ideal_speedup(devices, microbatches)
        if quantity == "speedup":
            points.append((float(x), ideal))
            continue
        run = runs[0]
        if not run.get("speedup"):
            return []
        one_device = run["throughput"] / run["speedup"]
        points.append((float(x), one_device * ideal / base_throughput))
    return points


def speedup_figure(rows: Sequence[Row], *, against: str = "M", title: str = "") -> Any:
    """Speedup over one device from either kind of rows: sweep rows (``speedup``: one panel per
    K, a line per schedule, the closed form dashed) or validation records
    (``predicted_speedup`` and ``measured_speedup``: one panel per schedule, see
    :func:`plots.validation_figures.speedup_figure`)."""
    if rows and all("predicted_speedup" in r and "measured_speedup" in r for r in rows):
        from plots.validation_figures import speedup_figure as validation_speedup_figure

        figure = validation_speedup_figure(rows)
        if title:
            figure.suptitle(title)
        return figure
    if not rows or not all("speedup" in r for r in rows):
        raise PipesimError(
            "speedup_figure: rows need 'speedup' (pipesim sweep) or 'predicted_speedup' and "
            "'measured_speedup' (pipesim validate); "
            + ("got no rows" if not rows else f"a row has keys {sorted(rows[0])[:8]}")
        )
    return throughput_figure(rows, "speedup", against=against, title=title)
