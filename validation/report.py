"""Validation output: a terminal table per case, ``report.md``, ``results.json`` and figures."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from application.outputs import write_text_atomically
from pipesim.common.units import format_bytes
from pipesim.files.strict_json import json_text
from validation.estimate import LOW_QUANTILE, STATISTIC, Statistic
from validation.results import CaseResult, ValidationResult
from validation.schema import Comparison, CrosscheckRecord, Summary


def _ms(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{1e3 * seconds:.2f}"


def _percent(value: float | None) -> str:
    return "n/a" if value is None else f"{value:+.1%}"


def table(records: Sequence[Comparison]) -> str:
    """One line per run: predicted and measured time, the measured estimate's uncertainty
    (half its 90% interval), speedup, memory error."""
    header = (
        f"{'schedule':<17}{'M':>4}  {'predicted':>10}  {'measured':>10}  {'+-':>5}  "
        f"{'error':>7}  {'speedup p/m':>12}  {'error':>7}  {'memory err':>10}"
    )
    lines = [header, "-" * len(header)]
    for r in records:
        memory = "n/a" if r.memory_error is None else f"{r.memory_error:.1%}"
        lines.append(
            f"{r.schedule:<17}{r.microbatches:>4}  {1e3 * r.predicted_time:>8.2f}ms  "
            f"{1e3 * r.measured_time:>8.2f}ms  {r.measured_time_uncertainty:>5.1%}  "
            f"{r.time_error:>+7.1%}  "
            f"{r.predicted_speedup:>5.2f}/{r.measured_speedup:<5.2f}  "
            f"{r.speedup_error:>+7.1%}  {memory:>10}"
        )
    return "\n".join(lines)


def _interval(summary: Summary, name: str) -> str:
    if not summary.confidence:
        return ""
    low = getattr(summary, f"{name}_low")
    high = getattr(summary, f"{name}_high")
    return f" ({summary.confidence:.0%} interval {low:.2%}-{high:.2%})"


def summary_lines(summary: Summary) -> list[str]:
    """The aggregate errors with their intervals, and the noise, one line each."""
    return [
        f"step time: median |error| {summary.median_time_error:.2%}"
        f"{_interval(summary, 'median_time_error')}, mean {summary.mean_time_error:.2%}, max "
        f"{summary.max_time_error:.2%}{_interval(summary, 'max_time_error')}",
        f"speedup:   median |error| {summary.median_speedup_error:.2%}"
        f"{_interval(summary, 'median_speedup_error')}, mean "
        f"{summary.mean_speedup_error:.2%}, max {summary.max_speedup_error:.2%}"
        f"{_interval(summary, 'max_speedup_error')}",
        f"memory:    median |error| {summary.median_memory_error:.2%}, max "
        f"{summary.max_memory_error:.2%} (against the measured peak)",
        f"noise:     median spread of repeated steps {summary.median_time_spread:.2%}, max "
        f"{summary.max_time_spread:.2%}",
    ]


def _statistic(statistic: Statistic) -> str:
    if statistic is Statistic.LOW_QUANTILE:
        return f"the {LOW_QUANTILE:.0%} quantile"
    return f"the {statistic.value}"


def crosscheck_table(rows: Sequence[CrosscheckRecord]) -> list[str]:
    """The cross-check's markdown table: both runtimes beside the prediction."""
    lines = [
        "| schedule | PyTorch class | M | gradient max rel. error | pipesim executor ms | "
        "PyTorch ms | predicted ms | error vs executor | error vs PyTorch |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for c in rows:
        lines.append(
            f"| {c.schedule} | {c.torch_class} | {c.microbatches} | "
            f"{c.gradient_max_relative_error:.2e} | {_ms(c.ours_wall_time)} | "
            f"{_ms(c.torch_wall_time)} | {_ms(c.predicted_time)} | "
            f"{_percent(c.error_vs_ours)} | {_percent(c.error_vs_torch)} |"
        )
    return lines


def _case_lines(case: CaseResult) -> list[str]:
    m = case.measurement
    link = m.link
    lines = [
        f"## Case `{case.name}`: K={m.case.devices}, model {m.case.model.to_json()}",
        "",
        f"Host while measuring: {m.host.describe()}, {m.host.duration_s:.0f} s; "
        f"{m.rounds} measured rounds.",
        "",
        f"Link (ping-pong fit, minimum of round trips; the prediction uses the in-situ "
        f"latency of each round instead): latency {link.latency_s * 1e6:.1f} us, "
        f"bandwidth {link.bandwidth_bytes_per_s / 1e9:.2f} GB/s.",
        "",
        "| schedule | M | predicted ms | measured ms (min-max) | spread / +- | time error | "
        "speedup predicted | speedup measured | speedup error | peak memory per device: "
        "predicted / measured / executor's stash count | memory error |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in case.records:
        memory = ", ".join(
            f"{format_bytes(p)} / {'n/a' if m_ is None else format_bytes(m_)} / {format_bytes(s)}"
            for p, m_, s in zip(
                r.predicted_peak_memory_bytes,
                r.measured_peak_memory_bytes,
                r.stash_peak_memory_bytes,
                strict=True,
            )
        )
        error = "n/a" if r.memory_error is None else f"{r.memory_error:.1%}"
        lines.append(
            f"| {r.schedule} | {r.microbatches} | {_ms(r.predicted_time)} | "
            f"{_ms(r.measured_time)} ({_ms(r.measured_time_min)}-{_ms(r.measured_time_max)}) | "
            f"{r.measured_time_spread:.1%} / {r.measured_time_uncertainty:.1%} | "
            f"{r.time_error:+.1%} | "
            f"{r.predicted_speedup:.2f} | {r.measured_speedup:.2f} | "
            f"{r.speedup_error:+.1%} | {memory} | {error} |"
        )
    if case.crosscheck:
        lines += [
            "",
            "Cross-check with torch.distributed.pipelining (same split, same data): gradients "
            "compared; wall-clock step times of both runtimes beside pipesim's prediction, and "
            "the prediction's error against each.",
            "",
            *crosscheck_table(case.crosscheck),
        ]
    lines.append("")
    return lines


def _verdict_line(result: ValidationResult) -> str:
    """The reason with its leading verdict word in bold ("**within** the thresholds (...)",
    "**inconclusive**: the host was busy (...)")."""
    word, reason = result.verdict.value, result.verdict_reason
    if reason.startswith(word):
        return f"**{word}**{reason[len(word) :]}"
    return f"**{word}**: {reason}"


def write_report(out: Path, result: ValidationResult, figures: dict[str, str]) -> None:
    """``results.json`` (every number) and ``report.md`` (tables, figures, what was skipped)."""
    write_text_atomically(
        out / "results.json", json_text(result.to_json(), indent=2), field="--out results.json"
    )
    machine = result.cases[0].measurement.machine if result.cases else None
    statistic = result.cases[0].statistic if result.cases else STATISTIC
    lines = [
        f"# pipesim validation: suite `{result.suite}` ({result.backend})",
        "",
        (
            f"Machine: {machine.processor} ({machine.cores} cores), {machine.platform}; Python "
            f"{machine.python}, torch {machine.torch}, pipesim {result.pipesim}; "
            f"{machine.threads_per_process} thread(s) per process."
            if machine is not None
            else "Machine: nothing was measured."
        ),
        "",
        "Method: calibrate each stage's F, B, I, W times and stashed bytes and the link between "
        "ranks in the processes that then run the pipeline: probe runs (M = 3K, a count no "
        "validated run uses) step in the same interleaved rounds as every validated run and "
        "the unpipelined baseline. Each round's costs are the mean time of each stage's actions "
        "in that round's probe steps and the mean latency of its probe transfers; the "
        "simulator predicts every run once per round from those numbers alone, and the step "
        "(first action's start to last action's end) is measured once per round. Predicted "
        f"and measured step times are each reduced with {_statistic(statistic)} over the "
        "rounds: interference only adds time, and a low quantile is moved only when most "
        "rounds were disturbed; the mean within a round composes the way a step's actions "
        "add up, where a quantile of each action would not. The intervals come from "
        "resampling whole rounds (a bootstrap): within means every median error's interval "
        "and every max error is under its threshold, exceeded means an interval is wholly "
        "above it, anything between is inconclusive, and so is every run on a host busier "
        "than its cores. Spread: (median - min) / min of a run's repeats; +-: half the 90% "
        "order-statistic interval of its estimate (min to max with fewer than 11 rounds). "
        "Memory: each rank's resident-memory rise during a step (the kernel's high-water "
        "mark), beside the executor's own count of stashed activations.",
        "",
        "## Summary",
        "",
        *[f"- {line}" for line in summary_lines(result.summary)],
        f"- thresholds: median {result.max_median_error:.1%}, max {result.max_error:.1%}",
        f"- verdict: {_verdict_line(result)}",
        "",
    ]
    if result.by_statistic:
        lines += [
            "## The statistic",
            "",
            "The same measurements predicted and compared with each way of reducing the rounds "
            "to one time (the predicted and the measured step times alike): |error| median / "
            "max.",
            "",
            "| statistic | step time | speedup |",
            "| --- | --- | --- |",
        ]
        for name, errors in result.by_statistic.items():
            chosen = " (used)" if name == statistic.value else ""
            lines.append(
                f"| {name}{chosen} | {errors.median_time_error:.2%} / "
                f"{errors.max_time_error:.2%} | {errors.median_speedup_error:.2%} / "
                f"{errors.max_speedup_error:.2%} |"
            )
        lines.append("")
    for case in result.cases:
        lines += _case_lines(case)
    if figures:
        lines += ["## Figures", ""]
        for title, name in figures.items():
            lines += [f"### {title}", "", f"![{title}]({name})", ""]
    if result.skipped:
        lines += ["## Skipped", ""]
        for s in result.skipped:
            lines.append(f"- {s['case']}: {s['schedule']} M={s['microbatches']}: {s['reason']}")
        lines.append("")
    write_text_atomically(out / "report.md", "\n".join(lines), field="--out report.md")
