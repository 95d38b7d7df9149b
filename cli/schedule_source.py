"""Where a command's schedule comes from: a registered name with -K/-M/-v, or a CSV file."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pipesim.errors import PipesimError
from pipesim.schedules import UpdateRule

if TYPE_CHECKING:  # the schedules' generators (and numpy) load when a schedule is loaded
    from pipesim.schedules import Schedule

_UPDATE_RULES = [rule.value for rule in UpdateRule]


def add_update_rule_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--update-rule",
        choices=_UPDATE_RULES,
        default=None,
        help="weight-update semantics of a schedule loaded from a file (default: flush)",
    )


def update_rule(args: argparse.Namespace) -> UpdateRule:
    """The ``--update-rule`` given for a schedule file, flush by default."""
    return UpdateRule(args.update_rule or UpdateRule.FLUSH.value)


def add_schedule_source_arguments(parser: argparse.ArgumentParser, *, allow_file: bool) -> None:
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--schedule", metavar="NAME", help="a schedule name (see: pipesim schedule list)"
    )
    if allow_file:
        source.add_argument("--schedule-file", metavar="CSV", help="a compute-only CSV file")
        add_update_rule_argument(parser)
    parser.add_argument(
        "-K", "--devices", type=int, default=None, metavar="N", help="pipeline devices"
    )
    parser.add_argument(
        "-M",
        "--microbatches",
        type=int,
        default=None,
        metavar="N",
        help="micro-batches per optimizer step",
    )
    parser.add_argument(
        "-v",
        "--chunks",
        type=int,
        default=None,
        metavar="N",
        help="model chunks (stages) per device; default: the schedule's own (1, or 2)",
    )
    parser.add_argument(
        "--remat",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="GPipe's re-materialization (full backwards only)",
    )


def require_shape(args: argparse.Namespace) -> None:
    """-K and -M, which a named ``--schedule`` needs (a file fixes its own shape)."""
    for flag, value in (("-K/--devices", args.devices), ("-M/--microbatches", args.microbatches)):
        if value is None:
            raise PipesimError(f"{flag} is required with --schedule {args.schedule}")


@dataclass(frozen=True)
class ScheduleSource:
    """Where the schedule comes from, as the command line gave it and checked: a registered
    name with its shape, or a CSV file (which fixes its own shape)."""

    name: str | None
    file: str | None
    devices: int | None
    microbatches: int | None
    chunks: int | None
    remat: bool
    update_rule: UpdateRule

    def load(self) -> Schedule:
        """The schedule itself: built by name, or read from the file."""
        from pipesim.schedules import build, read_csv

        if self.file is not None:
            schedule = read_csv(self.file, update_rule=self.update_rule)
            return schedule.replace(rematerialize=True) if self.remat else schedule
        assert self.name is not None and self.devices is not None
        assert self.microbatches is not None
        return build(self.name, self.devices, self.microbatches, self.chunks, remat=self.remat)


def read_schedule_source(args: argparse.Namespace) -> ScheduleSource:
    """``--schedule`` with -K/-M/-v, or ``--schedule-file``, read and checked against each
    other (nothing is built or read yet)."""
    if getattr(args, "schedule_file", None):
        for flag, value in (("-K", args.devices), ("-M", args.microbatches), ("-v", args.chunks)):
            if value is not None:
                raise PipesimError(
                    f"{flag}: not used with --schedule-file (the file fixes the shape), got {value}"
                )
        return ScheduleSource(
            None, args.schedule_file, None, None, None, args.remat, update_rule(args)
        )
    if getattr(args, "update_rule", None) is not None:
        raise PipesimError(
            f"--update-rule {args.update_rule}: only for --schedule-file; --schedule "
            f"{args.schedule} has its own update rule"
        )
    require_shape(args)
    return ScheduleSource(
        args.schedule,
        None,
        args.devices,
        args.microbatches,
        args.chunks,
        args.remat,
        UpdateRule.FLUSH,
    )


def load_schedule(args: argparse.Namespace) -> Schedule:
    """The schedule named by ``--schedule`` and -K/-M/-v, or loaded from ``--schedule-file``."""
    return read_schedule_source(args).load()
