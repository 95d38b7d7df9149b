"""The console script loads only the module of the command it runs (cli.commands, cli.main)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pytest

from cli.commands import COMMANDS, command_summary
from cli.main import build_parser


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def _summaries(parser: argparse.ArgumentParser) -> dict[str, str | None]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {choice.dest: choice.help for choice in action._choices_actions}


def test_the_table_names_every_command_of_the_full_parser_with_its_own_summary() -> None:
    full = build_parser()
    assert list(_subcommands(full)) == [command.name for command in COMMANDS]
    assert _summaries(full) == {command.name: command.summary for command in COMMANDS}


@pytest.mark.parametrize("name", [command.name for command in COMMANDS])
def test_a_lazy_parser_lists_every_command_and_builds_the_chosen_one_in_full(name: str) -> None:
    lazy, full = build_parser(name, lazily=True), build_parser()
    assert _summaries(lazy) == _summaries(full)
    chosen, whole = _subcommands(lazy)[name], _subcommands(full)[name]
    assert chosen.format_help() == whole.format_help()
    assert command_summary(name) == _summaries(full)[name]


@pytest.mark.parametrize(
    "words",
    [
        ["simulate", "--schedule", "1f1b", "-K", "4", "-M", "8", "--costs", "1,2"],
        ["plan", "--model", "gpt3-175b", "--hardware", "a100", "--devices", "64"],
        ["hardware", "show", "a100"],
        ["recipes", "list"],
        ["schedule", "show", "--schedule", "zb-h1", "-K", "3", "-M", "4"],
    ],
)
def test_a_lazy_parser_reads_a_command_line_as_the_full_one_does(words: list[str]) -> None:
    lazy = vars(build_parser(words[0], lazily=True).parse_args(words))
    full = vars(build_parser().parse_args(words))
    assert lazy.keys() == full.keys()
    assert {k: v for k, v in lazy.items() if k != "handler"} == {
        k: v for k, v in full.items() if k != "handler"
    }
    assert lazy["handler"] is full["handler"]


def _modules_after(words: list[str]) -> set[str]:
    """The modules a fresh process has imported after ``pipesim WORDS``."""
    code = (
        "import contextlib, io, json, sys\n"
        "from cli.main import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    try:\n        main({words!r})\n    except SystemExit:\n        pass\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


def test_version_and_help_import_no_command_module_and_no_numpy() -> None:
    for words in (["--version"], ["--help"], ["no-such-command"]):
        loaded = _modules_after(words)
        assert "numpy" not in loaded, words
        assert not {command.module for command in COMMANDS} & loaded, words


def test_a_command_imports_its_own_module_and_not_the_others() -> None:
    loaded = _modules_after(["schedule", "list"])
    assert "cli.schedule_cmd" in loaded
    assert not {"cli.plan_cmd", "cli.plot_cmd", "cli.bench_cmd", "cli.validate_cmd"} & loaded


@pytest.mark.parametrize("name", sorted({command.name for command in COMMANDS}))
def test_a_commands_help_imports_no_numpy(name: str) -> None:
    """Issue 39: a command's parser (its help, its choices) reads only light modules; the
    library's heavy ones load in the handler that uses them."""
    loaded = _modules_after([name, "--help"])
    assert "numpy" not in loaded
    assert not {"pipesim.workload.catalogue", "pipesim.hardware.catalogue"} & loaded


def test_a_small_synthetic_simulation_loads_no_catalogue_synthesis_or_planner() -> None:
    loaded = _modules_after(
        ["simulate", "--schedule", "1f1b", "-K", "4", "-M", "8", "--costs", "1,2"]
    )
    assert "pipesim.engine" in loaded  # it did simulate
    heavy = {
        "pipesim.workload.catalogue",  # the models
        "pipesim.hardware.catalogue",  # the hardware
        "pipesim.config.run_config",  # a model's run
        "pipesim.costs.model_on_hardware",
        "pipesim.partition",
        "pipesim.synthesis.synthesis",
        "pipesim.plan",
        "pipesim.sweep",
        "pipesim.export",
        "plots",
    }
    assert not heavy & loaded
