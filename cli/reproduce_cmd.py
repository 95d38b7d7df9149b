"""``pipesim reproduce``: the papers' tables next to pipesim's numbers."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from application.command_line import EXIT_OK
from cli.commands import command_summary
from pipesim.files.strict_json import write_json


def register(subparsers: Any) -> None:
    """Add ``reproduce``."""
    parser = subparsers.add_parser(
        "reproduce",
        help=command_summary("reproduce"),
        description="Write table.md, results.csv (paper, simulated, ratio per table cell), "
        "figures and a README explaining the setup and the differences into --out.",
    )
    parser.add_argument(
        "name", nargs="?", metavar="NAME", help="the suite (see --list); gpipe is the main one"
    )
    parser.add_argument("--list", action="store_true", help="list the suites")
    parser.add_argument(
        "--out", metavar="DIR", help="output folder, created if missing (default: reproduce-NAME)"
    )
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    parser.set_defaults(handler=_reproduce)


def _reproduce(args: argparse.Namespace) -> int:
    from pipesim.errors import PipesimError
    from validation.reproduce import _experiments, reproduce
    from validation.reproduce.framework import summary_lines

    if args.list and args.name is not None:
        raise PipesimError(f"--list lists every suite and takes no NAME, got {args.name!r}")
    if args.list or args.name is None:
        if args.name is None and not args.list:
            raise PipesimError("NAME is required (see pipesim reproduce --list)")
        for experiment in _experiments().values():
            sys.stdout.write(f"{experiment.name:<14} {experiment.title}  [{experiment.paper}]\n")
        return EXIT_OK
    out = args.out if args.out is not None else f"reproduce-{args.name}"
    outcome, paths = reproduce(args.name, out)
    if args.json:
        write_json([r.to_json() for r in outcome.rows])
        return EXIT_OK
    compared = [r for r in outcome.rows if r.difference is not None]
    sys.stdout.write(
        f"{outcome.title}: {len(outcome.rows)} table cells, {len(compared)} with both a "
        "published and a simulated number\n"
    )
    for line in summary_lines(outcome.rows):
        sys.stdout.write(f"  {line}\n")
    sys.stdout.write(f"table: {paths['table']}\ncsv: {paths['csv']}\nREADME: {paths['readme']}\n")
    for file in outcome.figures.values():
        sys.stdout.write(f"figure: {Path(out) / file}\n")
    return EXIT_OK
