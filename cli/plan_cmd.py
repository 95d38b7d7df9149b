"""``pipesim plan``: the best configurations of a model on N devices, ranked, explained."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from application.command_line import (
    EXIT_CHECK_FAILED,
    EXIT_OK,
    add_cluster_argument,
    positive_ints,
)
from cli.commands import command_summary
from cli.run_config import add_recipe_argument
from cli.run_file import add_run_argument
from pipesim.errors import Interrupted, PipesimError
from pipesim.files.strict_json import write_json


def register(subparsers: Any) -> None:
    """Add ``plan``."""
    parser = subparsers.add_parser(
        "plan",
        help=command_summary("plan"),
        description=(
            "Find the fastest configurations of a model on N devices for a global batch: "
            "tensor-parallel size T inside a node, pipeline depth K and N/(T K)-way data "
            "parallelism (collectives on the cluster's links), schedule, chunks, micro-batches "
            "and their size, recomputation, optimizer sharding (ZeRO-1), sequence parallelism "
            "and the exact partition; only what fits memory; finalists simulated in full after "
            "lower bounds prune the rest. Synchronous schedules unless asynchronous ones "
            "(pipedream-2bw, pipedream) are named. Each plan comes with the pipesim simulate "
            "command that reproduces it."
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
        "--time-budget",
        type=float,
        metavar="SECONDS",
        help="stop the search after this many seconds and show the best of what it examined, "
        "marked NOT EXHAUSTIVE with the least time any configuration not examined takes (Ctrl-C "
        "does the same, exit status 130); default: search to the end",
    )
    parser.add_argument(
        "--schedules",
        metavar="A,B,...",
        help="schedules to consider (default: gpipe, 1f1b, interleaved-1f1b, zb-h1, zb-h2, zbv); "
        "pipedream-2bw or pipedream when named (asynchronous: they change what the optimizer "
        "computes); add synth for a schedule synthesised to the memory of the best shapes",
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
        "--seq-length",
        type=int,
        metavar="N",
        help="train on sequences of N tokens (default: the model's; a Hugging Face config's is "
        "its max_position_embeddings)",
    )
    parser.add_argument(
        "--tensor-parallel",
        metavar="T,T",
        help="tensor-parallel sizes to try (default: every divisor of a node's devices that "
        "splits the model's heads, MLP and vocabulary evenly)",
    )
    parser.add_argument(
        "--context-parallel",
        metavar="CP,CP",
        help="context-parallel sizes to try (default 1: none; e.g. 1,2,4 for long sequences)",
    )
    parser.add_argument(
        "--expert-parallel",
        metavar="EP,EP",
        help="expert-parallel sizes to try on a mixture-of-experts model (default: every power "
        "of two up to 64 that divides its experts; 1 on a dense model)",
    )
    parser.add_argument(
        "--recompute",
        metavar="MODE,MODE",
        help="recomputation modes to try: none, selective, full, N (the first N layers of each "
        "stage fully, Megatron's --recompute-method block) or layers (N chosen per "
        "configuration: the fewest that fit memory; none is searched with it) (default: none, "
        "selective, full, layers on a transformer)",
    )
    parser.add_argument(
        "--zero",
        metavar="0,1,2,3",
        help="ZeRO stages to try where there are replicas (default 1: never slower and never "
        "larger than 0 in pipesim's model; inside a pipeline 2 and 3 hold and move what 1 "
        "does, so they are tried without one only: 1,3 adds FSDP without a pipeline, whose "
        "overlap with the passes is not yet held against a measured run)",
    )
    parser.add_argument(
        "--sequence-parallel",
        choices=["on", "off", "both"],
        help="sequence parallelism where T > 1: on (default: the same communication, less "
        "memory), off, or both",
    )
    parser.add_argument(
        "--attention", choices=["eager", "flash"], help="attention (default: the model's)"
    )
    parser.add_argument(
        "--overlap-grad-reduce",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="gradient reductions overlap each stage's last backward (DDP buckets)",
    )
    parser.add_argument(
        "--plot", metavar="FIGURE", help="throughput against peak memory, Pareto front (.png/.svg)"
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=1,
        metavar="N",
        help="worker processes that partition and simulate candidates ahead of the search "
        "(default 1: this process; never more than the CPUs); the same plans and report; with "
        "--cluster local, the local cluster's workers (at least 2)",
    )
    add_cluster_argument(parser, "partitioning and simulation of candidates")
    add_recipe_argument(parser)
    add_run_argument(parser)
    parser.add_argument(
        "--export",
        metavar="DIR",
        help="write each ranked plan into DIR as a run file, plan-N.toml (for pipesim "
        "simulate --run), beside the framework files each translator can write",
    )
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.set_defaults(handler=_plan)


def _ints(text: str, field: str) -> tuple[int, ...]:
    values = positive_ints(text)
    if values is None:
        raise PipesimError(f"{field} must be integers >= 1 separated by commas, got {text!r}")
    return values


def _words(text: str, field: str) -> tuple[str, ...]:
    words = tuple(w.strip() for w in text.split(",") if w.strip())
    if not words:
        raise PipesimError(f"{field} must name at least one value, got {text!r}")
    return words


def _zero_stages(text: str) -> tuple[int, ...]:
    stages = []
    for word in _words(text, "--zero"):
        if word not in ("0", "1", "2", "3"):
            raise PipesimError(f"--zero must be stages 0 to 3 (e.g. 1 or 1,3), got {text!r}")
        stages.append(int(word))
    return tuple(sorted(set(stages)))


def _plan(args: argparse.Namespace) -> int:
    from application.workers import check_cluster_address, open_workers
    from cli.plan_command import simulate_command
    from cli.run_config import run_config_of
    from pipesim.plan import DEFAULT_SCHEDULES, PlanSettings, plan
    from pipesim.plan.planner import Evaluated, PlanReport
    from pipesim.plan.report import report_json, report_table

    for field, value in (("--devices", args.devices), ("--top", args.top)):
        if value < 1:
            raise PipesimError(f"{field} must be an integer >= 1, got {value}")
    if args.batch is not None and args.batch < 1:
        raise PipesimError(f"--batch must be an integer >= 1, got {args.batch}")
    if args.time_budget is not None and not (0 < args.time_budget < float("inf")):
        raise PipesimError(f"--time-budget must be a number of seconds > 0, got {args.time_budget}")
    if args.plot is not None:
        from plots.style import figure_path

        figure_path(args.plot, "--plot")  # before the search: a bad path loses no work
    run = run_config_of(args)
    model_name = args.model if isinstance(args.model, str) else args.model.name  # inline: --run
    batch = args.batch if args.batch is not None else run.model.default_batch
    schedules = (
        tuple(s.strip() for s in args.schedules.split(",") if s.strip())
        if args.schedules is not None
        else DEFAULT_SCHEDULES
    )
    if not schedules:
        raise PipesimError(f"--schedules must name at least one schedule, got {args.schedules!r}")
    settings = PlanSettings(
        run,
        args.devices,
        batch,
        schedules,
        args.top,
        _ints(args.chunks, "--chunks"),
        None if args.tensor_parallel is None else _ints(args.tensor_parallel, "--tensor-parallel"),
        None if args.recompute is None else _words(args.recompute, "--recompute"),
        PlanSettings.zero if args.zero is None else _zero_stages(args.zero),
        PlanSettings.sequence_parallel
        if args.sequence_parallel is None
        else {"on": (True,), "off": (False,), "both": (False, True)}[args.sequence_parallel],
        model_name=model_name,
        hardware_name=args.hardware,
        context_sizes=(1,)
        if args.context_parallel is None
        else _ints(args.context_parallel, "--context-parallel"),
        expert_sizes=None
        if args.expert_parallel is None
        else _ints(args.expert_parallel, "--expert-parallel"),
        time_budget_s=args.time_budget,
    )
    if args.jobs < 1:
        raise PipesimError(f"--jobs must be an integer >= 1, got {args.jobs}")
    if args.cluster is not None:
        check_cluster_address(args.cluster)
    if args.export is not None:
        from application.outputs import output_directory

        output_directory(args.export, "--export", create=False)  # before the search

    def command_for(report: PlanReport, e: Evaluated) -> str:
        return simulate_command(report, e, args)

    with open_workers(args.jobs, args.cluster) as workers:
        report = plan(settings, show_progress=not args.json, workers=workers)
    if args.plot is not None:
        from plots.plan_figures import plan_figure
        from plots.style import save

        save(plan_figure(report), args.plot, field="--plot")
    if args.export is not None:
        from cli.plan_export import export_plans

        export_plans(report, args)
    if args.json:
        write_json(report_json(report, command_for))
    else:
        sys.stdout.write(report_table(report, command_for))
    if report.stopped == "interrupted":  # the plans so far are written: the usual last line
        raise Interrupted(
            f"the plan search stopped after examining {len(report.evaluated):,} configurations; "
            "the plans above are the best of them (marked NOT EXHAUSTIVE)"
        )
    if not report.plans:  # the search ran, and nothing fits: the table says why, per config
        sys.stderr.write(
            f"pipesim: failed: no configuration of {model_name} on {args.devices:,} devices "
            f"fits memory ({len(report.evaluated):,} examined; the best rejected are listed)\n"
        )
        return EXIT_CHECK_FAILED
    return EXIT_OK
