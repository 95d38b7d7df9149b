"""``pipesim plot``: figures from saved results (simulate --save, sweep --out x.json,
validate's results.json)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from application.command_line import EXIT_OK
from cli.commands import command_summary
from pipesim.errors import PipesimError

KINDS = {
    "timeline": "a run's timeline (from simulate --save); several files: stacked on one time axis",
    "memory": "a run's memory over time (from simulate --save)",
    "speedup": "speedup against M per K, or --against K (from sweep --out FILE.json)",
    "throughput": "normalized throughput (GPipe Table 2's), against M or K (from sweep --out)",
    "bubble": "bubble fraction against M (from sweep --out FILE.json)",
    "peak-memory": "peak memory per device per schedule (from sweep --out FILE.json)",
    "predicted-vs-measured": "predicted against measured step time (validate's results.json)",
    "validation-speedup": "measured and predicted speedup (validate's results.json)",
}


MAX_TIMELINES = 12


MAX_TITLE_CHARACTERS = 300  # a few lines across a figure; longer only costs time and memory


def register(subparsers: Any) -> None:
    """Add ``plot``."""
    parser = subparsers.add_parser(
        "plot",
        help=command_summary("plot"),
        description="Kinds: " + "; ".join(f"{k}: {v}" for k, v in KINDS.items()),
    )
    parser.add_argument(
        "kind", choices=list(KINDS), metavar="KIND", help="what to draw: " + ", ".join(KINDS)
    )
    parser.add_argument(
        "files",
        nargs="+",
        metavar="FILE",
        help="the saved results (JSON); timeline takes several, stacked on one time axis",
    )
    parser.add_argument(
        "--out", required=True, metavar="FIGURE", help="where to write it (.png or .svg)"
    )
    parser.add_argument("--title", default="", help="a title of your own")
    parser.add_argument(
        "--against",
        choices=("M", "K"),
        default="M",
        help="x axis of speedup and throughput: micro-batches or devices (default M)",
    )
    parser.set_defaults(handler=_plot)


def _plot(args: argparse.Namespace) -> int:
    import plots
    from pipesim.export import saved
    from plots.style import check_text, figure_path

    figure_path(args.out, "--out")  # before any work: a bad --out costs nothing
    files: list[str] = args.files
    if args.kind != "timeline" and len(files) > 1:
        raise PipesimError(f"FILE: {args.kind} draws one file, got {len(files)}")
    if len(files) > MAX_TIMELINES:
        raise PipesimError(f"FILE: timeline stacks at most {MAX_TIMELINES} files, got {len(files)}")
    title = args.title
    if len(title) > MAX_TITLE_CHARACTERS:
        raise PipesimError(
            f"--title has {len(title):,} characters; at most {MAX_TITLE_CHARACTERS} fit a figure"
        )
    check_text(title, "--title")
    if args.kind == "timeline":
        runs = [saved.load_run(path, memory=False) for path in files]
        if len(runs) == 1:
            figure = plots.timeline_figure(
                runs[0].compute, runs[0].transfers, title=title or runs[0].title
            )
        else:
            figure = plots.side_by_side_figure([(run.title, run.compute, ()) for run in runs])
            if title:
                figure.suptitle(title)
    elif args.kind == "memory":
        run = saved.load_run(files[0], timeline=False)
        figure = plots.memory_timeline_figure(
            run.memory, run.capacity_bytes, title=title or f"Memory of each device: {run.title}"
        )
    elif args.kind in saved.SWEEP_CHECKS:
        rows = saved.load_sweep(files[0], args.kind)
        if args.kind == "throughput" and any(
            r.get("costs", "").startswith("synthetic") for r in rows
        ):
            sys.stderr.write(
                "pipesim plot: note: synthetic costs give each device the same work whatever K, "
                "so throughput across K compares different models; sweep a --model instead\n"
            )
        if args.kind in ("speedup", "throughput"):
            quantity = "speedup" if args.kind == "speedup" else "normalized_throughput"
            figure = plots.throughput_figure(rows, quantity, against=args.against, title=title)
        elif args.kind == "bubble":
            figure = plots.bubble_figure(rows, title=title)
        else:
            figure = plots.peak_memory_figure(rows, title=title)
    else:
        records = saved.load_records(files[0])
        figure = (
            plots.predicted_vs_measured_figure(records)
            if args.kind == "predicted-vs-measured"
            else plots.speedup_figure(records)
        )
        if title:
            figure.suptitle(title)
    path = plots.save(figure, args.out, field="--out")
    sys.stdout.write(f"{path}\n")
    return EXIT_OK
