"""``pipesim schedule``: list, show, export and check schedules."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from application.command_line import EXIT_OK
from application.outputs import write_text_atomically
from cli.commands import command_summary
from cli.schedule_source import (
    add_schedule_source_arguments,
    add_update_rule_argument,
    load_schedule,
    update_rule,
)
from cli.synthesized import (
    add_memory_limit_argument,
    synthesis_line,
    synthesized_schedule,
    wants_synthesis,
)
from pipesim.errors import PipesimError
from pipesim.files.strict_json import write_json
from pipesim.synthesis.names import SYNTH_NAME

if TYPE_CHECKING:  # the schedules' generators and the synthesis (numpy) load in the handlers
    from pipesim.schedules import Schedule
    from pipesim.synthesis.synthesis import Synthesis


def register(subparsers: Any) -> None:
    """Add ``schedule`` and its sub-commands."""
    parser = subparsers.add_parser(
        "schedule",
        help=command_summary("schedule"),
        description="List, show, export and check pipeline schedules.",
    )
    commands = parser.add_subparsers(dest="schedule_command", metavar="COMMAND", required=True)

    listing = commands.add_parser("list", help="the schedules, with the paper each comes from")
    listing.add_argument("--json", action="store_true", help="print JSON instead of a table")
    listing.set_defaults(handler=_list)

    show = commands.add_parser(
        "show",
        help="print a schedule as a grid, one row per device",
        description=(
            "Print a schedule as a grid: one row per device, one column per unit-time slot "
            "(every action takes one slot), '.' where the device idles."
        ),
    )
    add_schedule_source_arguments(show, allow_file=True)
    add_synthesis_arguments(show)
    show.add_argument("--json", action="store_true", help="print JSON instead of the grid")
    show.set_defaults(handler=_show)

    export = commands.add_parser(
        "export",
        help="write a schedule as compute-only CSV (torch.distributed.pipelining's format)",
    )
    add_schedule_source_arguments(export, allow_file=False)
    add_synthesis_arguments(export)
    export.add_argument("--out", metavar="FILE", help="write here instead of stdout")
    export.set_defaults(handler=_export)

    check = commands.add_parser(
        "check",
        help="validate a compute-only CSV schedule (exit 0 if valid, 2 with the error if not)",
    )
    check.add_argument("file", metavar="FILE", help="compute-only CSV, one line per device")
    add_update_rule_argument(check)
    check.add_argument("--json", action="store_true", help="print JSON instead of text")
    check.set_defaults(handler=_check)


def describe(schedule: Schedule) -> dict[str, Any]:
    """The JSON object of a schedule: its shape, semantics and per-device order (and, for a
    schedule with model copies, how many and each micro-batch's)."""
    document: dict[str, Any] = {
        "schedule": schedule.name,
        "devices": schedule.devices,
        "microbatches": schedule.microbatches,
        "chunks": schedule.chunks,
        "stages": schedule.stages,
        "update_rule": schedule.update_rule.value,
        "rematerialize": schedule.rematerialize,
        "placement": list(schedule.placement),
        "device_actions": [[str(a) for a in row] for row in schedule.device_actions],
    }
    if schedule.copies > 1:  # model copies (DualPipe): each micro-batch's copy
        document["copies"] = schedule.copies
        document["routes"] = list(schedule.routes)
    return document


def _list(args: argparse.Namespace) -> int:
    from pipesim.schedules import schedule_info, schedule_names

    infos = [schedule_info(name) for name in schedule_names()]
    if args.json:
        write_json(
            [
                {
                    "name": info.name,
                    "summary": info.summary,
                    "reference": info.reference,
                    "default_chunks": info.default_chunks,
                    "supports_remat": info.supports_remat,
                }
                for info in infos
            ]
        )
        return EXIT_OK
    width = max(len(info.name) for info in infos)
    for info in infos:
        sys.stdout.write(f"{info.name:<{width}}  {info.summary}  [{info.reference}]\n")
    sys.stdout.write(
        f"{SYNTH_NAME:<{width}}  made for the costs and a memory limit: --schedule {SYNTH_NAME} "
        "--memory-limit N with --costs or --model (simulate, schedule show|export), sweep "
        f"--memory-limits, plan --schedules ...,{SYNTH_NAME}  [Qi et al., arXiv 2401.10241 §3]\n"
    )
    return EXIT_OK


def add_synthesis_arguments(parser: argparse.ArgumentParser) -> None:
    """--memory-limit and the costs a synthesised schedule is made for."""
    from cli.simulate_cmd import add_cost_arguments

    add_memory_limit_argument(parser)
    add_cost_arguments(parser)


def _schedule(args: argparse.Namespace) -> tuple[Schedule, Synthesis | None]:
    """The schedule asked for, and its synthesis when it was synthesised."""
    if wants_synthesis(args):
        from cli.simulate_cmd import cost_request

        found = synthesized_schedule(args, cost_request(args))
        return found.schedule, found
    # Costs only make a synthesised order: a named schedule or a file has its order already,
    # so a cost option given is refused rather than ignored.
    from cli.simulate_cmd import given_cost_options

    given = given_cost_options(args)
    if given:
        flag, value = given[0]
        raise PipesimError(
            f"{flag} goes with --schedule {SYNTH_NAME} here (a schedule's order does not "
            f"depend on costs), got {value!r}"
        )
    return load_schedule(args), None


def _show(args: argparse.Namespace) -> int:
    from pipesim.schedules import render_schedule, unit_slots

    schedule, synthesis = _schedule(args)
    if synthesis is not None and not args.json:
        sys.stdout.write(synthesis_line(synthesis) + "\n")
    if args.json:
        payload = describe(schedule)
        payload["slots"] = [
            [None if a is None else str(a) for a in row] for row in unit_slots(schedule)
        ]
        write_json(payload)
    else:
        sys.stdout.write(render_schedule(schedule) + "\n")
    return EXIT_OK


def _export(args: argparse.Namespace) -> int:
    from pipesim.schedules import to_csv

    schedule, _ = _schedule(args)
    text = to_csv(schedule)
    if args.out is not None:
        write_text_atomically(args.out, text, field="--out")
    else:
        sys.stdout.write(text)
    return EXIT_OK


def _check(args: argparse.Namespace) -> int:
    from pipesim.schedules import read_csv

    schedule = read_csv(args.file, update_rule=update_rule(args))
    if args.json:
        payload = describe(schedule)
        payload["valid"] = True
        write_json(payload)
    else:
        sys.stdout.write(
            f"{args.file}: valid: K={schedule.devices} devices, M={schedule.microbatches} "
            f"micro-batches, v={schedule.chunks} chunk(s) per device, "
            f"{schedule.action_arrays.actions} actions, no deadlock\n"
        )
    return EXIT_OK
