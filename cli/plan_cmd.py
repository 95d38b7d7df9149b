"""``pipesim plan``: the best configurations of a model on N devices, ranked, explained."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from pipesim.common.command_line import EXIT_CHECK_FAILED, EXIT_OK, positive_ints
from pipesim.errors import PipesimError
from pipesim.files.strict_json import write_json


def register(subparsers: Any) -> None:
    """Add ``plan``."""
    parser = subparsers.add_parser(
        "plan",
        help="search depth, data parallelism, schedule, M, micro-batch size, remat, partition",
        description=(
            "Find the fastest configurations of a model on N devices for a global batch: "
            "pipeline depth K with N/K-way data parallelism (ring all-reduce on the cluster's "
            "links), schedule, chunks, micro-batches and their size, re-materialization and the "
            "exact partition; only what fits memory; finalists simulated in full after lower "
            "bounds prune the rest. Each plan comes with the pipesim simulate command that "
            "reproduces it."
        ),
    )
    parser.add_argument("--model", required=True, metavar="NAME|FILE", help="a model or TOML")
    parser.add_argument("--hardware", required=True, metavar="NAME|FILE", help="hardware or TOML")
    parser.add_argument("--devices", type=int, required=True, metavar="N", help="devices, N")
    parser.add_argument(
        "--batch", type=int, metavar="B", help="global batch per step (default: the model's)"
    )
    parser.add_argument("--top", type=int, default=5, metavar="N", help="plans to show (5)")
    parser.add_argument(
        "--schedules",
        metavar="A,B,...",
        help="schedules to consider (default: gpipe, 1f1b, interleaved-1f1b, zb-h1, zb-h2, zbv, "
        "pipedream-2bw); add synth for a schedule synthesised to the memory of the best shapes",
    )
    parser.add_argument(
        "--chunks",
        default="2,4",
        metavar="N,N",
        help="chunks per device to try for interleaved schedules (default 2,4)",
    )
    parser.add_argument(
        "--optimizer",
        metavar="NAME|BYTES",
        help="optimizer state per parameter: sgd, momentum, rmsprop, adam, or bytes",
    )
    parser.add_argument(
        "--master-weights",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="fp32 master weights (default: when weights are narrower than fp32)",
    )
    parser.add_argument("--dtype", metavar="NAME", help="compute dtype (default: the model's)")
    parser.add_argument(
        "--plot", metavar="FIGURE", help="throughput against peak memory, Pareto front (.png/.svg)"
    )
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.set_defaults(handler=_plan)


def _ints(text: str, field: str) -> tuple[int, ...]:
    values = positive_ints(text)
    if values is None:
        raise PipesimError(f"{field} must be integers >= 1 separated by commas, got {text!r}")
    return values


def _plan(args: argparse.Namespace) -> int:
    from pipesim.plan import DEFAULT_SCHEDULES, PlanSettings, plan
    from pipesim.plan.report import report_json, report_table
    from pipesim.workload import resolve_model

    for field, value in (("--devices", args.devices), ("--top", args.top)):
        if value < 1:
            raise PipesimError(f"{field} must be an integer >= 1, got {value}")
    if args.batch is not None and args.batch < 1:
        raise PipesimError(f"--batch must be an integer >= 1, got {args.batch}")
    if args.plot is not None:
        from plots.style import figure_path

        figure_path(args.plot, "--plot")  # before the search: a bad path loses no work
    batch = args.batch if args.batch is not None else resolve_model(args.model).default_batch
    schedules = (
        tuple(s.strip() for s in args.schedules.split(",") if s.strip())
        if args.schedules is not None
        else DEFAULT_SCHEDULES
    )
    if not schedules:
        raise PipesimError(f"--schedules must name at least one schedule, got {args.schedules!r}")
    settings = PlanSettings(
        args.model,
        args.hardware,
        args.devices,
        batch,
        schedules,
        args.optimizer,
        args.master_weights,
        args.dtype,
        args.top,
        _ints(args.chunks, "--chunks"),
    )
    report = plan(settings, show_progress=not args.json)
    if args.plot is not None:
        from plots.plan_figures import plan_figure
        from plots.style import save

        save(plan_figure(report), args.plot, field="--plot")
    if args.json:
        write_json(report_json(report))
    else:
        sys.stdout.write(report_table(report))
    if not report.plans:  # the search ran, and nothing fits: the table says why, per config
        sys.stderr.write(
            f"pipesim: failed: no configuration of {args.model} on {args.devices:,} devices "
            f"fits memory ({len(report.evaluated):,} examined; the best rejected are listed)\n"
        )
        return EXIT_CHECK_FAILED
    return EXIT_OK
