"""``pipesim sweep``: many schedules and shapes under one cost model, as a table/CSV/JSON."""

from __future__ import annotations

import argparse
import contextlib
import sys
from typing import Any

from application.command_line import EXIT_OK, add_cluster_argument, positive_ints
from application.outputs import output_path
from application.rows_file import SweepFile, row_of
from cli.commands import command_summary
from cli.run_file import add_run_argument
from cli.simulate_cmd import (
    add_cost_arguments,
    add_engine_argument,
    add_steps_argument,
    cost_request,
)
from pipesim.common.progress import progress
from pipesim.common.units import format_bytes, format_percent, format_seconds
from pipesim.errors import Interrupted, PipesimError, RunFailed, shown
from pipesim.files.strict_json import write_json


def _int_list(flag: str, text: str) -> list[int]:
    values = positive_ints(text)
    if values is None:
        raise PipesimError(
            f"{flag}: expected a comma-separated list of integers >= 1, got {shown(text)}"
        )
    return list(values)


def register(subparsers: Any) -> None:
    """Add ``sweep``."""
    parser = subparsers.add_parser(
        "sweep",
        help=command_summary("sweep"),
        description="Simulate every combination; combinations a schedule cannot take are "
        "listed as skipped with the reason.",
    )
    add_run_argument(parser)
    parser.add_argument(
        "--schedules",
        required=True,
        metavar="A,B,...",
        help="schedule names (see pipesim schedule list)",
    )
    parser.add_argument("-K", "--devices", required=True, metavar="N,N,...", help="device counts")
    parser.add_argument(
        "-M", "--microbatches", required=True, metavar="N,N,...", help="micro-batch counts"
    )
    parser.add_argument(
        "-v", "--chunks", metavar="N,N,...", help="chunks per device (default: each schedule's own)"
    )
    parser.add_argument(
        "--remat",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="re-materialization everywhere",
    )
    parser.add_argument(
        "--memory-limits",
        metavar="N,N,...",
        help="with synth in --schedules: a synthesised schedule for each limit ((stage, "
        "micro-batch) pairs in flight on any device, looped over -v stages per device), a "
        "series each",
    )
    add_cost_arguments(parser)
    add_steps_argument(parser)
    add_engine_argument(parser)
    parser.add_argument(
        "--jobs",
        type=int,
        default=1,
        metavar="N",
        help="worker processes (default 1; never more than the CPUs or the points); with "
        "--cluster local, the local cluster's workers (at least 2)",
    )
    add_cluster_argument(parser, "points")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument(
        "--out",
        metavar="FILE",
        help="also write the results, saved as they complete: .json for JSON, otherwise CSV",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="keep the rows already in --out and run only the points it lacks (after Ctrl-C)",
    )
    parser.set_defaults(handler=_sweep)


def _sweep(args: argparse.Namespace) -> int:
    from application.sweeps import run_sweep
    from application.workers import check_cluster_address
    from pipesim.sweep.grid import preflight, run_point, sweep_points

    if args.steps < 1:
        raise PipesimError(f"--steps must be an integer >= 1, got {args.steps}")
    if args.jobs < 1:
        raise PipesimError(f"--jobs must be an integer >= 1, got {args.jobs}")
    if args.cluster is not None:
        check_cluster_address(args.cluster)
    if args.resume and args.out is None:
        raise PipesimError("--resume needs --out FILE: the file of the sweep to finish")
    chunks = None if args.chunks is None else _int_list("-v/--chunks", args.chunks)
    points, skipped = sweep_points(
        [s.strip() for s in args.schedules.split(",")],
        _int_list("-K/--devices", args.devices),
        _int_list("-M/--microbatches", args.microbatches),
        chunks,
        args.remat,
        args.steps,
        None if args.memory_limits is None else _int_list("--memory-limits", args.memory_limits),
    )
    request = cost_request(args)
    preflight(request)  # input that no row can use: refused before any work
    skipped_json = [
        {
            "schedule": s.point.schedule,
            "devices": s.point.devices,
            "microbatches": s.point.microbatches,
            "chunks": s.point.chunks,
            "reason": s.reason,
        }
        for s in skipped
    ]
    keys = [(p.schedule, p.devices, p.microbatches, p.chunks) for p in points]
    sink = None
    if args.out is not None:
        output_path(args.out, "--out")  # before the sweep: a bad path loses no work
        sink = SweepFile(args.out, keys, skipped_json)
        if args.resume and sink.resume():
            by_key = dict(zip(keys, points, strict=True))
            sink.check_same_sweep(
                lambda key: run_point(by_key[key], request, args.steps, args.engine)
            )
    done = sink.keys() if sink is not None else set()
    todo = [p for p, key in zip(points, keys, strict=True) if key not in done]
    fresh: list[dict[str, Any]] = []
    with progress(len(todo), "sweep", enabled=not args.json) as bar:
        try:
            with contextlib.closing(
                run_sweep(todo, request, args.steps, args.jobs, args.engine, args.cluster)
            ) as results:
                for result in results:
                    fresh.append(result)
                    if sink is not None:
                        sink.add(result)
                    bar.update()
        except KeyboardInterrupt:
            if sink is None:
                raise
            if not sink.save():
                raise Interrupted(
                    f"no point had finished without an error; nothing written to {args.out}"
                ) from None
            raise Interrupted(
                f"{len(sink):,} of {len(points):,} points saved to {args.out}; run the same "
                "command with --resume to finish the sweep"
            ) from None
        except RunFailed as error:  # the cluster failed (its scheduler went away): keep the rows
            if sink is None:
                raise
            if not sink.save():
                raise RunFailed(
                    f"{error}; no point had finished without an error, nothing written to "
                    f"{args.out}"
                ) from None
            raise RunFailed(
                f"{error}; {len(sink):,} of {len(points):,} points saved to {args.out}; run the "
                "same command with --resume to finish the sweep"
            ) from None
    if sink is not None:
        sink.save()
        entries = sink.entries()
    else:
        entries = fresh
    payload = {"results": entries, "skipped": skipped_json}
    if args.json:
        write_json(payload)
    else:
        sys.stdout.write(_table([row_of(e) for e in entries]))
        for s in skipped:
            p = s.point
            sys.stdout.write(
                f"skipped {p.schedule} K={p.devices} M={p.microbatches} v={p.chunks}: {s.reason}\n"
            )
    failed = [e for e in entries if e.get("error")]
    if entries and len(failed) == len(entries):
        kept = f"; nothing written to {args.out}" if sink is not None else ""
        raise PipesimError(f"every point failed{kept}; the first: {failed[0]['error']}")
    if not entries and skipped:  # the grid held points, and no schedule can take any of them
        raise PipesimError(
            f"every point of the sweep was skipped ({len(skipped):,}); the first: "
            f"{skipped[0].reason}"
        )
    return EXIT_OK


def _table(rows: list[dict[str, Any]]) -> str:
    header = (
        f"{'schedule':<18}{'K':>4}{'M':>5}{'v':>3}  {'iteration':>11}  {'bubble':>8}  "
        f"{'closed':>8}  {'speedup':>7}  {'peak mem':>10}\n"
    )
    lines = [header]
    for r in rows:
        if r["error"]:
            lines.append(
                f"{r['schedule']:<18}{r['devices']:>4}{r['microbatches']:>5}"
                f"{r['chunks']:>3}  error: {r['error']}\n"
            )
            continue
        closed = r["analytic_bubble_fraction"]
        memory = format_bytes(r["max_peak_memory_bytes"]) + (" OOM" if r["oom"] else "")
        lines.append(
            f"{r['schedule']:<18}{r['devices']:>4}{r['microbatches']:>5}{r['chunks']:>3}  "
            f"{format_seconds(r['iteration_time']):>11}  {format_percent(r['bubble_fraction']):>8}"
            f"  {'-' if closed is None else format_percent(closed):>8}  "
            f"{r['speedup']:>6.3g}x  {memory:>10}\n"
        )
    return "".join(lines)
