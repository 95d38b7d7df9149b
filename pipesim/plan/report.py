"""A plan report as JSON (``pipesim plan --json``) and as a table."""

from __future__ import annotations

import math
import shlex
from typing import Any

from pipesim.common.units import format_bytes, format_seconds
from pipesim.plan.planner import Evaluated, PlanReport


def plan_json(e: Evaluated, settings_batch: int) -> dict[str, Any]:
    """One configuration as the JSON object ``plan --json`` lists."""
    c = e.candidate
    time_s = e.iteration_time_s
    simulated = e.simulated_peak_bytes
    peak = simulated if simulated is not None else max(e.peak_memory_bytes)
    return {
        "devices": c.devices,
        "data_parallel": c.data_parallel,
        "tensor_parallel": c.tensor,
        "sequence_parallel": c.sequence_parallel,
        "recompute": c.recompute,
        "zero": c.zero,
        "asynchronous": c.asynchronous,
        "schedule": c.schedule,
        "chunks": c.chunks,
        "microbatches": c.microbatches,
        "microbatch_size": c.microbatch_size,
        "remat": c.remat,
        "memory_limit": c.memory_limit,
        "partition": list(e.partition),
        "partition_objective": e.partition_objective,
        "steps": e.steps,
        "iteration_time": time_s,
        "throughput": None if time_s is None else settings_batch / time_s,
        "bubble_fraction": e.bubble_fraction,
        "lower_bound_time": e.bound_s,
        "allreduce_time": e.allreduce_s,
        "peak_memory_bytes": peak,
        "memory_capacity_bytes": _finite(e.capacity_bytes),
        "headroom_bytes": _finite(e.capacity_bytes - peak),
        "oom": e.oom,
        "mfu": e.mfu,
        "hfu": e.hfu,
    }


def _finite(value: float) -> float | None:
    """JSON has no infinity: unlimited memory (and its headroom) is null."""
    return None if math.isinf(value) else value


def simulate_command(report: PlanReport, e: Evaluated) -> str:
    """The ``pipesim simulate`` command line that reproduces ``e``."""
    s, c = report.settings, e.candidate
    words = [
        "pipesim",
        "simulate",
        "--model",
        s.model,
        "--hardware",
        s.hardware,
        "--schedule",
        c.schedule,
        *(["--memory-limit", str(c.memory_limit)] if c.memory_limit is not None else []),
        "-K",
        str(c.devices),
        "-M",
        str(c.microbatches),
        "-v",
        str(c.chunks),
        "--batch",
        str(s.batch),
        "--data-parallel",
        str(c.data_parallel),
        *(["--tensor-parallel", str(c.tensor)] if c.tensor > 1 else []),
        *(["--sequence-parallel"] if c.sequence_parallel else []),
        *(["--recompute", c.recompute] if c.recompute != "none" else []),
        *(["--zero", str(c.zero)] if c.zero else []),
        "--partition",
        ",".join(map(str, e.partition)),
        "--steps",
        str(e.steps),
    ]
    if c.remat:
        words.append("--remat")
    if s.optimizer_state is not None:
        words += ["--optimizer", s.optimizer_state]
    if s.master_weights is not None:
        words.append("--master-weights" if s.master_weights else "--no-master-weights")
    if s.dtype is not None:
        words += ["--dtype", s.dtype]
    if s.attention is not None:
        words += ["--attention", s.attention]
    if s.overlap_grad_reduce:
        words.append("--overlap-grad-reduce")
    return shlex.join(words)


def report_json(report: PlanReport) -> dict[str, Any]:
    """``{"plans": [...], "rejected": [...], "evaluated": N, "seconds": S, ...}``."""
    batch = report.settings.batch
    plans = []
    for e in report.plans:
        item = plan_json(e, batch)
        item["simulate_command"] = simulate_command(report, e)
        plans.append(item)
    return {
        "plans": plans,
        "rejected": [{**plan_json(e, batch), "reason": why} for e, why in report.rejected],
        "evaluated": report.configurations,
        "examined": len(report.evaluated),
        "simulated": report.simulated,
        "out_of_memory": sum(1 for e in report.evaluated if e.oom),
        "seconds": report.seconds,
        "configurations_per_second": report.configurations / report.seconds
        if report.seconds > 0
        else None,
        "model": report.settings.model,
        "hardware": report.settings.hardware,
        "cluster_devices": report.settings.devices,
        "cluster": report.cluster,
        "batch": batch,
    }


ASYNC_NOTE = (
    "* asynchronous weight updates: not the optimizer's own semantics (PipeDream-2BW "
    "W(t+1) = W(t) - lr x grad f(W(t-1)), PipeDream's stashed weights)"
)


def report_table(report: PlanReport) -> str:
    """The human table of the top plans and the rejected alternatives."""
    s = report.settings
    lines = [
        f"plans for {s.model} on {s.devices} x {s.hardware}, batch {s.batch} "
        f"({report.configurations} configurations bounded, {len(report.evaluated)} partitioned "
        f"and checked for memory, {report.simulated} simulated, {report.seconds:.2f} s)",
    ]
    if report.cluster:
        lines.append(f"cluster: {report.cluster}")
    lines += [
        "",
        f"{'#':>2} {'T':>2} {'SP':>2} {'K':>3} {'DP':>4} {'schedule':<18}{'v':>2} {'M':>4} "
        f"{'b':>3} {'recompute':>9} {'ZeRO':>4}  {'iteration':>10} {'samples/s':>10} "
        f"{'MFU':>6} {'bubble':>7} {'peak mem':>10} {'headroom':>10}  partition",
    ]
    any_async = False
    for rank, e in enumerate(report.plans, 1):
        c = e.candidate
        t = e.iteration_time_s or 0.0
        peak = e.simulated_peak_bytes or 0.0
        recompute = "remat" if c.remat else c.recompute
        label = c.schedule_label + ("*" if c.asynchronous else "")
        any_async = any_async or c.asynchronous
        mfu = "" if e.mfu is None else f"{e.mfu:.1%}"
        lines.append(
            f"{rank:>2} {c.tensor:>2} {'on' if c.sequence_parallel else '':>2} {c.devices:>3} "
            f"{c.data_parallel:>4} {label:<18}{c.chunks:>2} {c.microbatches:>4} "
            f"{c.microbatch_size:>3} {recompute:>9} {c.zero:>4}  {format_seconds(t):>10} "
            f"{s.batch / t:>10.4g} {mfu:>6} {e.bubble_fraction or 0.0:>7.1%} "
            f"{format_bytes(peak):>10} {format_bytes(e.capacity_bytes - peak):>10}  "
            f"{_partition_text(e.partition)}"
        )
    if any_async:
        lines.append(ASYNC_NOTE)
    if report.plans:
        best = simulate_command(report, report.plans[0])
        lines += ["", "re-simulate the best plan:", "  " + best]
    if report.rejected:
        lines += ["", "best rejected alternatives:"]
        for e, why in report.rejected:
            lines.append(f"  {e.candidate.label()}: {why}")
    return "\n".join(lines) + "\n"


def _partition_text(counts: tuple[int, ...], most: int = 12) -> str:
    """Layers per stage, the middle elided past ``most`` stages."""
    if len(counts) <= most:
        return ",".join(map(str, counts))
    head, tail = counts[: most // 2], counts[-(most // 2) :]
    return f"{','.join(map(str, head))},...,{','.join(map(str, tail))} ({len(counts)} stages)"
