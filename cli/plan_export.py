"""``pipesim plan --export DIR``: each ranked plan written as a run file, ``plan-N.toml``,
which ``pipesim simulate --run`` reproduces number for number, and as the launch files of the
frameworks whose translators can write it (:mod:`pipesim.config.translate`), each with the
list of what that framework cannot express of the plan."""

from __future__ import annotations

import argparse
import dataclasses
import os
import shlex
from pathlib import Path

from application.outputs import output_directory, write_text_atomically
from cli.plan_command import plan_run_file, simulate_command
from pipesim.common.units import format_seconds
from pipesim.config.run_file import RunFile, run_file_toml
from pipesim.plan.planner import PlanReport


def export_plans(report: PlanReport, args: argparse.Namespace) -> list[Path]:
    """Write every ranked plan of ``report`` into ``args.export``; the paths written."""
    folder = output_directory(args.export, "--export")
    written = []
    for rank, plan in enumerate(report.plans, start=1):
        run = _portable(plan_run_file(report, plan, args))
        header = (
            f"pipesim plan: rank {rank} of {len(report.plans)} for "
            f"{report.settings.model} on {report.settings.devices:,} x {report.settings.hardware}, "
            f"batch {report.settings.batch:,}",
            f"predicted iteration {format_seconds(plan.iteration_time_s or 0.0)}",
            "reproduce: pipesim simulate --run THIS_FILE",
            f"(the plan's own command: {simulate_command(report, plan, args)})",
        )
        path = folder / f"plan-{rank}.toml"
        write_text_atomically(path, run_file_toml(run, header), field="--export")
        written.append(path)
        for suffix, text in _framework_files(run, report, header[:2]):
            path = folder / f"plan-{rank}.{suffix}"
            write_text_atomically(path, text, field="--export")
            written.append(path)
    return written


def _framework_files(
    run: RunFile, report: PlanReport, header: tuple[str, ...]
) -> list[tuple[str, str]]:
    """The plan as a Megatron-LM argument file and a torchtitan job TOML, each opening with
    what that framework cannot express of it (a ``# not expressed:`` line each)."""
    from pipesim.config.translate.megatron import megatron_args
    from pipesim.config.translate.torchtitan import torchtitan_toml

    model = report.settings.run.model
    files = []
    words, lost = megatron_args(run, model)
    lines = [f"# {line}" for line in header]
    lines += [f"# not expressed: {item}" for item in lost]
    lines += _argument_lines(words)
    files.append(("megatron.args", "\n".join(lines) + "\n"))
    text, _ = torchtitan_toml(run, model)  # its own "# not expressed:" lines open the text
    files.append(("torchtitan.toml", "".join(f"# {line}\n" for line in header) + text))
    return files


def _argument_lines(words: list[str]) -> list[str]:
    """Megatron-LM's arguments an option per line, continued with backslashes, as its
    example launch scripts write them."""
    lines: list[list[str]] = []
    for word in words:
        if word.startswith("--") or not lines:
            lines.append([word])
        else:
            lines[-1].append(word)
    texts = [shlex.join(line) for line in lines]
    return [text + " \\" for text in texts[:-1]] + texts[-1:]


def _portable(run: RunFile) -> RunFile:
    """``run`` with its model and hardware files named by absolute paths, so the run file
    reads them wherever it is written."""

    def absolute(name: str) -> str:
        is_file = name.endswith((".toml", ".json")) and Path(name).exists()
        return os.path.abspath(name) if is_file else name

    model = absolute(run.model) if isinstance(run.model, str) else run.model
    return dataclasses.replace(run, model=model, hardware=absolute(run.hardware))
