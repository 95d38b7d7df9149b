"""The planner's figure: throughput against peak memory per device for every configuration
the planner examined, the Pareto front (no other plan is both faster and smaller) marked."""

from __future__ import annotations

from typing import Any

from pipesim.plan.planner import PlanReport
from plots.style import new_figure, series_style

GiB = 2**30


def pareto_front(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the points (memory, throughput) no other point beats on both: less or equal
    memory and more or equal throughput, one strictly. In increasing memory."""
    order = sorted(range(len(points)), key=lambda i: (points[i][0], -points[i][1]))
    front, best = [], float("-inf")
    for i in order:
        if points[i][1] > best:
            front.append(i)
            best = points[i][1]
    return front


def plan_figure(report: PlanReport) -> Any:
    """Simulated plans by schedule (filled), configurations out of memory (crosses, at the
    bound's throughput), the device's memory as a line, the Pareto front joined, the chosen
    plan ringed."""
    figure, axes = new_figure(9.0, 4.8)
    batch = report.settings.batch
    simulated = [e for e in report.evaluated if e.simulated]
    schedules = sorted({e.candidate.schedule_label for e in simulated})
    for index, name in enumerate(schedules):
        style = series_style(index)
        mine = [e for e in simulated if e.candidate.schedule_label == name]
        axes.scatter(
            [(e.simulated_peak_bytes or 0.0) / GiB for e in mine],
            [batch / (e.iteration_time_s or 1.0) for e in mine],
            color=style["color"],
            marker=style["marker"],
            s=28,
            alpha=0.85,
            label=name,
            zorder=3,
        )
    capacity = report.evaluated[0].capacity_bytes if report.evaluated else None
    edge = None
    if capacity is not None and capacity != float("inf"):
        fitting = [(e.simulated_peak_bytes or 0.0) / GiB for e in simulated]
        edge = max([1.6 * capacity / GiB, *fitting])
    oom = [e for e in report.evaluated if e.oom]
    if oom:
        peaks = [max(e.peak_memory_bytes) / GiB for e in oom]
        clipped = edge is not None and any(p > edge for p in peaks)
        axes.scatter(
            [p if edge is None else min(p, edge) for p in peaks],
            [batch / e.bound_s for e in oom],
            color="#999999",
            marker="x",
            s=18,
            label="out of memory, at most this fast"
            + (" (needing more: at the right edge)" if clipped else ""),
            zorder=2,
        )
    if edge is not None:
        axes.set_xlim(0, edge * 1.03)
    if capacity is not None and capacity != float("inf"):
        axes.axvline(
            capacity / GiB,
            color="#c44e52",
            linestyle="--",
            linewidth=1.2,
            label=f"device memory {capacity / GiB:.0f} GiB",
        )
    points = [
        ((e.simulated_peak_bytes or 0.0) / GiB, batch / (e.iteration_time_s or 1.0))
        for e in simulated
        if (e.simulated_peak_bytes or 0.0) <= e.capacity_bytes
    ]
    front = [points[i] for i in pareto_front(points)]
    if front:
        axes.step(
            [p[0] for p in front],
            [p[1] for p in front],
            where="post",
            color="black",
            linewidth=1.4,
            label="Pareto front (fastest for its memory)",
            zorder=4,
        )
    if report.plans:
        best = report.plans[0]
        axes.scatter(
            [(best.simulated_peak_bytes or 0.0) / GiB],
            [batch / (best.iteration_time_s or 1.0)],
            s=160,
            facecolors="none",
            edgecolors="black",
            linewidths=1.6,
            label=f"best: {best.candidate.label()}",
            zorder=5,
        )
    s = report.settings
    axes.set_xlabel("peak memory per device (GiB)")
    axes.set_ylabel("throughput (samples/s)")
    axes.set_title(
        f"pipesim plan: {s.model} on {s.devices} x {s.hardware}, batch {s.batch}\n"
        f"{report.configurations} configurations bounded, {len(report.evaluated)} checked for "
        f"memory, {report.simulated} simulated",
        fontsize=10,
    )
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return figure
