"""A plan report as JSON (``pipesim plan --json``) and as a table.

How to reproduce a plan is the caller's to say, in its own words: ``command_for`` (``pipesim
plan`` passes the ``pipesim simulate`` command of a plan), which the JSON lists with each plan
and the table shows for the best; the library speaks no command line's flags.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from pipesim.common.units import format_bytes, format_seconds
from pipesim.plan.caveats import assumptions, tie
from pipesim.plan.planner import Evaluated, PlanReport
from pipesim.plan.space import Candidate, recompute_layers


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
        "recompute_layers_per_stage": recompute_layers(c.recompute),
        "zero": c.zero,
        "context_parallel": c.context,
        "expert_parallel": c.expert,
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


# How a caller reproduces one plan of a report: a command line, in words it runs.
CommandFor = Callable[[PlanReport, Evaluated], str]


def report_json(report: PlanReport, command_for: CommandFor | None = None) -> dict[str, Any]:
    """``{"plans": [...], "rejected": [...], "evaluated": N, "seconds": S, ...}``; with
    ``command_for``, each plan's ``simulate_command`` is what it says for that plan."""
    batch = report.settings.batch
    plans = []
    for e in report.plans:
        item = plan_json(e, batch)
        if command_for is not None:
            item["simulate_command"] = command_for(report, e)
        plans.append(item)
    return {
        "plans": plans,
        "rejected": [{**plan_json(e, batch), "reason": why} for e, why in report.rejected],
        "evaluated": report.configurations,
        "examined": len(report.evaluated),
        "simulated": report.simulated,
        "out_of_memory": sum(1 for e in report.evaluated if e.oom),
        "exhaustive": report.exhaustive,
        "stopped": report.stopped,
        "unexamined_at_least_s": report.unexamined_bound_s,
        "seconds": report.seconds,
        "configurations_per_second": report.configurations / report.seconds
        if report.seconds > 0
        else None,
        "model": report.settings.model,
        "hardware": report.settings.hardware,
        "recipe": report.settings.run.recipe.to_json(),
        "cluster_devices": report.settings.devices,
        "cluster": report.cluster,
        "batch": batch,
        "assumptions": assumptions(report),
        "tie": None
        if (tied := tie(report)) is None
        else {
            "plans": tied.last,
            "spread": tied.spread,
            "differ_in": list(tied.differ),
            "note": tied.sentence(),
        },
    }


def stopped_line(report: PlanReport) -> str:
    """What a search stopped early (Ctrl-C, its time budget) says of its plans: the best of
    what it examined, and how long every configuration it did not examine takes at least."""
    rest = report.unexamined_bound_s
    bound = f"; every configuration not examined takes at least {rest:.4g} s" if rest else ""
    return (
        f"NOT EXHAUSTIVE: the search stopped ({report.stopped}) after examining "
        f"{len(report.evaluated):,} configurations: these are the best of them{bound}"
    )


ASYNC_NOTE = (
    "* asynchronous weight updates: not the optimizer's own semantics (PipeDream-2BW "
    "W(t+1) = W(t) - lr x grad f(W(t-1)), PipeDream's stashed weights)"
)


def report_table(report: PlanReport, command_for: CommandFor | None = None) -> str:
    """The human table of the top plans and the rejected alternatives; with ``command_for``,
    what it says reproduces the best plan, under the table."""
    s = report.settings
    lines = [
        f"plans for {s.model} on {s.devices} x {s.hardware}, batch {s.batch} "
        f"({report.configurations} configurations bounded, {len(report.evaluated)} partitioned "
        f"and checked for memory, {report.simulated} simulated, {report.seconds:.2f} s)",
    ]
    if report.cluster:
        lines.append(f"cluster: {report.cluster}")
    if report.stopped is not None:
        lines.append(stopped_line(report))
    spread = any(e.candidate.context > 1 or e.candidate.expert > 1 for e in report.plans)
    spread_head = f" {'CP':>2} {'EP':>3}" if spread else ""
    lines += [
        "",
        f"{'#':>2} {'T':>2} {'SP':>2}{spread_head} {'K':>3} {'DP':>4} {'schedule':<21}{'v':>2} "
        f"{'M':>4} "
        f"{'b':>3} {'recompute':>9} {'ZeRO':>4}  {'iteration':>10} {'samples/s':>10} "
        f"{'MFU':>6} {'bubble':>7} {'peak mem':>10} {'headroom':>10}  partition",
    ]
    any_async = False
    for rank, e in enumerate(report.plans, 1):
        c = e.candidate
        t = e.iteration_time_s or 0.0
        peak = e.simulated_peak_bytes or 0.0
        recompute = _recompute_text(c)
        label = c.schedule_label + ("*" if c.asynchronous else "")
        any_async = any_async or c.asynchronous
        mfu = "" if e.mfu is None else f"{e.mfu:.1%}"
        lines.append(
            f"{rank:>2} {c.tensor:>2} {'on' if c.sequence_parallel else '':>2}"
            + (f" {c.context:>2} {c.expert:>3}" if spread else "")
            + f" {c.devices:>3} "
            f"{c.data_parallel:>4} {label:<21}{c.chunks:>2} {c.microbatches:>4} "
            f"{c.microbatch_size:>3} {recompute:>9} {c.zero:>4}  {format_seconds(t):>10} "
            f"{s.batch / t:>10.4g} {mfu:>6} {e.bubble_fraction or 0.0:>7.1%} "
            f"{format_bytes(peak):>10} {format_bytes(e.capacity_bytes - peak):>10}  "
            f"{_partition_text(e.partition)}"
        )
    if any_async:
        lines.append(ASYNC_NOTE)
    tied = tie(report)
    if tied is not None:
        lines += ["", tied.sentence()]
    lines += ["", "assumed:", *(f"  {line}" for line in assumptions(report))]
    if report.plans and command_for is not None:
        best = command_for(report, report.plans[0])
        lines += ["", "re-simulate the best plan:", "  " + best]
    if report.rejected:
        first = report.plans[0].candidate if report.plans else None
        lines += [
            "",
            "best rejected alternatives (every setting; in brackets plan 1's where it differs):"
            if first is not None
            else "best rejected alternatives:",
        ]
        for e, why in report.rejected:
            lines.append(f"  {e.candidate.full_label()}")
            if first is not None:
                lines.append(f"      differs in {e.candidate.differences(first)}")
            lines.append(f"      rejected: {why}")
    return "\n".join(lines) + "\n"


def _recompute_text(c: Candidate) -> str:
    """The table's recompute column: ``remat``, ``none``, ``selective``, ``full``, or ``first
    N`` for the first N blocks of each stage (``--recompute N``)."""
    if c.remat:
        return "remat"
    count = recompute_layers(c.recompute)
    return c.recompute if count is None else f"first {count}"


def _partition_text(counts: tuple[int, ...], most: int = 12) -> str:
    """Layers per stage, the middle elided past ``most`` stages."""
    if len(counts) <= most:
        return ",".join(map(str, counts))
    head, tail = counts[: most // 2], counts[-(most // 2) :]
    return f"{','.join(map(str, head))},...,{','.join(map(str, tail))} ({len(counts)} stages)"
