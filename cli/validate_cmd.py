"""``pipesim validate``: the simulator's predictions checked against real runs."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from application.command_line import EXIT_CHECK_FAILED, EXIT_OK
from application.outputs import new_output_directory, output_directory
from cli.commands import command_summary
from pipesim.errors import PipesimError
from pipesim.files.strict_json import write_json

DEFAULT_MAX_MEDIAN_ERROR = 0.05
DEFAULT_MAX_ERROR = 0.25


def register(subparsers: Any) -> None:
    """Add ``validate``."""
    parser = subparsers.add_parser(
        "validate",
        help=command_summary("validate"),
        description=(
            "Calibrate stage costs and the link on this machine, predict every run with the "
            "simulator, run it with the PyTorch executor, and compare step time, speedup over "
            "one device and peak memory. Exit 1 when the median or the max error of step time "
            "or speedup exceeds its threshold, or when the repeated measurements were noisier "
            "than the median threshold (inconclusive: the host was busy)."
        ),
    )
    parser.add_argument(
        "--suite",
        choices=["quick", "full", "memory"],
        default="quick",
        help="quick: K=2 on a 2-core machine in minutes; full: every schedule, "
        "K in 2,4,8, M in 1..32 as far as the machine allows; memory: GPT stages traced with "
        "PyTorch's MemTracker on fake tensors against pipesim's per-stage peak, term by term "
        "(no runs; a few minutes) (default quick)",
    )
    parser.add_argument(
        "--backend",
        choices=["cpu", "cuda", "cpu-partitioned", "cuda-partitioned"],
        default="cpu",
        help="cpu: a gloo process per device on CPU cores; cuda: an NCCL process per GPU; "
        "cuda-partitioned: one GPU cut into 4 lanes (green contexts of equal SM shares) running "
        "K = 1, 2, 4 pipeline devices at once; cpu-partitioned: its CPU twin, lanes as threads "
        "with equal thread budgets (default cpu)",
    )
    parser.add_argument(
        "--out",
        metavar="DIR",
        default="validation-results",
        help="where report.md, results.json and the figures go (default validation-results)",
    )
    parser.add_argument(
        "--max-median-error",
        type=float,
        default=DEFAULT_MAX_MEDIAN_ERROR,
        metavar="F",
        help=f"largest allowed median |relative error| (default {DEFAULT_MAX_MEDIAN_ERROR})",
    )
    parser.add_argument(
        "--max-error",
        type=float,
        default=DEFAULT_MAX_ERROR,
        metavar="F",
        help=f"largest allowed |relative error| (default {DEFAULT_MAX_ERROR})",
    )
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="predict again from the measurements already in --out (no runs)",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="keep the cases already measured in --out (an interrupted run) and measure the rest",
    )
    parser.add_argument(
        "--repeat-until-stable",
        type=float,
        default=None,
        metavar="SECONDS",
        help="after the suite's repeats, keep measuring a case for up to SECONDS more while the "
        "median uncertainty of its runs' step times (half their 90%% interval) is above half "
        "--max-median-error",
    )
    parser.add_argument("--json", action="store_true", help="print results.json's object")
    parser.set_defaults(handler=_validate)


MAX_ERROR_THRESHOLD = 10.0
MAX_REPEAT_S = 86_400


def _validate(args: argparse.Namespace) -> int:
    for flag, value in (
        ("--max-median-error", args.max_median_error),
        ("--max-error", args.max_error),
    ):
        # Above 10 (1,000%) no prediction can fail the gate: a verdict that cannot fail.
        if not 0 < value <= MAX_ERROR_THRESHOLD:
            raise PipesimError(
                f"{flag} must be a relative error > 0 and at most {MAX_ERROR_THRESHOLD:g}, got "
                f"{value}"
            )
    if args.repeat_until_stable is not None:
        if not 0 < args.repeat_until_stable <= MAX_REPEAT_S:
            raise PipesimError(
                f"--repeat-until-stable must be seconds > 0 and at most {MAX_REPEAT_S:,} (a "
                f"day per case), got {args.repeat_until_stable}"
            )
        if args.reuse:
            raise PipesimError(
                "--repeat-until-stable goes with measuring, not with --reuse (which measures "
                "nothing)"
            )
    if args.reuse and args.resume:
        raise PipesimError("--reuse and --resume: choose one")
    if args.suite == "memory":
        return _validate_memory(args)
    try:
        from validation.report import summary_lines, table
        from validation.rounds import Stability
        from validation.runner import run_validation
    except ImportError as error:
        raise _needs_executor(error) from None
    # Not a folder, read-only: refused before any work (and without creating it here).
    out = output_directory(args.out, "--out", create=False)
    stability = (
        None
        if args.repeat_until_stable is None
        else Stability(args.max_median_error / 2, args.repeat_until_stable)
    )
    result = run_validation(
        args.suite,
        args.backend,
        out,
        args.max_median_error,
        args.max_error,
        reuse=args.reuse,
        resume=args.resume,
        stability=stability,
        show_progress=not args.json,
    )
    if args.json:
        write_json(result.to_json())
    else:
        for case in result.cases:
            sys.stdout.write(f"case {case.name} ({case.measurement.host.describe()})\n")
            sys.stdout.write(f"{table(case.records)}\n\n")
        for line in summary_lines(result.summary):
            sys.stdout.write(line + "\n")
        for skipped in result.skipped:
            sys.stdout.write(
                f"skipped {skipped['case']} {skipped['schedule']} M={skipped['microbatches']}: "
                f"{skipped['reason']}\n"
            )
        sys.stdout.write(f"verdict: {result.verdict_reason}\n")
        sys.stdout.write(f"report: {out / 'report.md'}, data: {out / 'results.json'}\n")
    if not result.passed:
        # Past a threshold: the breaches alone, as always; otherwise why there is no verdict.
        reason = "; ".join(result.breaches) if result.verdict.value == "exceeded" else ""
        sys.stderr.write(f"pipesim validate: {reason or result.verdict_reason}\n")
        return EXIT_CHECK_FAILED
    return EXIT_OK


def _validate_memory(args: argparse.Namespace) -> int:
    """``--suite memory``: traced stages against pipesim's, report.md and results.json."""
    for flag, given in (
        ("--reuse", args.reuse),
        ("--resume", args.resume),
        ("--repeat-until-stable", args.repeat_until_stable is not None),
        (f"--backend {args.backend}", args.backend != "cpu"),
    ):
        if given:
            raise PipesimError(
                f"{flag} goes with the measured suites; --suite memory traces fake tensors"
            )
    try:
        from validation import memory_report
    except ImportError as error:
        raise _needs_executor(error) from None
    output_directory(args.out, "--out", create=False)  # a bad folder refused before work
    with new_output_directory(args.out, "--out") as out:
        rows = memory_report.run(show_progress=not args.json)
        memory_report.write(rows, out)
    stats = memory_report.summary(rows)
    if args.json:
        write_json({"summary": stats, "stages": [r.to_json() for r in rows]})
    else:
        sys.stdout.write(memory_report.table(rows) + "\n\n")
        sys.stdout.write(
            f"median |peak error| {stats['median_abs_error']:.1%}, largest "
            f"{stats['max_abs_error']:.1%} over {len(rows)} stages\n"
        )
        sys.stdout.write(f"report: {out / 'report.md'}, data: {out / 'results.json'}\n")
    breaches = []
    if stats["median_abs_error"] > args.max_median_error:
        breaches.append(
            f"median |peak error| {stats['median_abs_error']:.1%} > {args.max_median_error:.1%}"
        )
    if stats["max_abs_error"] > args.max_error:
        breaches.append(f"largest |peak error| {stats['max_abs_error']:.1%} > {args.max_error:.1%}")
    if breaches:
        sys.stderr.write(f"pipesim validate: {'; '.join(breaches)}\n")
        return EXIT_CHECK_FAILED
    return EXIT_OK


def _needs_executor(error: ImportError) -> PipesimError:
    """The one-line refusal when the validation suites' torch is not installed."""
    return PipesimError(
        f"pipesim validate needs the executor extra (torch): {error}; install with "
        "pip install torch==2.13.0 '.[executor]'"
    )
