"""The command line's sub-commands: each one's name, the module that registers it and its
one-line summary.

The console script imports only the module of the command it runs (:func:`cli.main.
build_parser`): the others appear in ``pipesim --help`` by their summaries alone, so a small
command does not pay for importing every other command's dependencies (the planner's, the
plots', the executor's). Each module states its command's summary by :func:`command_summary`, so the
listing and the command's own parser say the same thing.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Command:
    """One sub-command: ``pipesim NAME``, registered by ``MODULE.register``."""

    name: str
    module: str
    summary: str


COMMANDS: tuple[Command, ...] = (
    Command("schedule", "cli.schedule_cmd", "list, show, export and check pipeline schedules"),
    Command(
        "simulate",
        "cli.simulate_cmd",
        "simulate a schedule: iteration time, bubble, throughput, memory",
    ),
    Command(
        "sweep", "cli.sweep_cmd", "simulate a grid of schedules x K x M (x v) under one cost model"
    ),
    Command("hardware", "cli.catalogue_cmd", "the hardware catalogue"),
    Command("models", "cli.catalogue_cmd", "the model catalogue"),
    Command(
        "recipes",
        "cli.catalogue_cmd",
        "the software recipes: how each framework and era runs a step",
    ),
    Command(
        "bench",
        "cli.bench_cmd",
        "measure the engines' actions per second and sweeps' configurations per second",
    ),
    Command(
        "validate",
        "cli.validate_cmd",
        "calibrate, predict, run for real, compare (needs the executor extra: torch)",
    ),
    Command(
        "reproduce",
        "cli.reproduce_cmd",
        "reproduce a paper's tables with the simulator (gpipe, pipedream-2bw, ...)",
    ),
    Command("plot", "cli.plot_cmd", "draw a figure from saved results"),
    Command(
        "partition",
        "cli.partition_cmd",
        "the best contiguous partition of a model's layers into pipeline stages",
    ),
    Command(
        "plan",
        "cli.plan_cmd",
        "search tensor, pipeline and data parallelism, schedule, M, b, recomputation, ZeRO, "
        "partition",
    ),
    Command("run", "cli.run_cmd", "run files: show what one configures"),
)

_BY_NAME = {command.name: command for command in COMMANDS}


def command_summary(name: str) -> str:
    """The one-line summary of ``pipesim NAME`` (its help in ``pipesim --help``)."""
    return _BY_NAME[name].summary


def command_named(name: str) -> Command | None:
    """The sub-command called ``name``, or None."""
    return _BY_NAME.get(name)
