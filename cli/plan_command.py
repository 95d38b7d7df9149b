"""A plan as a run file (:class:`~pipesim.config.run_file.RunFile`), and the ``pipesim
simulate`` command line that reproduces it: the run file's flags (:func:`cli.run_file.run_flags`),
so the printed command and a written run file say the same thing. ``pipesim plan`` hands the
command to the library's report (:func:`pipesim.plan.report.report_json`,
:func:`~pipesim.plan.report.report_table`) and writes the run files (``--export``)."""

from __future__ import annotations

import argparse
import shlex

from cli.run_file import INLINE_MODEL, run_flag_pairs, words_of
from pipesim.config.run_file import RunFile
from pipesim.plan.planner import Evaluated, PlanReport
from pipesim.workload.model import Model


def plan_run_file(report: PlanReport, e: Evaluated, args: argparse.Namespace) -> RunFile:
    """``e`` as a run file: every layout choice stated (none left to a default a base run
    file could fill), with the model, hardware, optimizer, precision and recipe the plan was
    given (``args``)."""
    s, c = report.settings, e.candidate
    given = getattr(args, "model", None)  # a run file's inline model (--run), or a name
    model: str | Model = given if isinstance(given, Model) else s.model
    return RunFile(
        model,
        s.hardware,
        batch=s.batch,
        microbatch_size=c.microbatch_size,
        optimizer=args.optimizer,
        master_weights=args.master_weights,
        dtype=args.dtype,
        seq_length=getattr(args, "seq_length", None),
        tensor_parallel=c.tensor,
        sequence_parallel=c.sequence_parallel,
        pipeline_parallel=c.devices,
        data_parallel=c.data_parallel,
        zero=c.zero,
        context_parallel=c.context if c.context > 1 else None,
        expert_parallel=c.expert if c.expert > 1 else None,
        recompute=c.recompute,
        schedule=c.schedule,
        chunks=c.chunks,
        microbatches=c.microbatches,
        partition=",".join(map(str, e.partition)),
        remat=c.remat,
        memory_limit=c.memory_limit,
        steps=e.steps,
        recipe=args.recipe,
        overlap_grad_reduce=args.overlap_grad_reduce,
        attention=args.attention,
    )


# Flags a plan's command leaves out at these values, simulate's defaults (None: always; the
# micro-batch size follows from the batch, M and D), unless a run file is in play.
_DEFAULTS: dict[str, str | None] = {
    "--tensor-parallel": "1",
    "--zero": "0",
    "--recompute": "none",
    "--no-sequence-parallel": None,
    "--no-remat": None,
    "--microbatch-size": None,
}


def simulate_command(report: PlanReport, e: Evaluated, args: argparse.Namespace) -> str:
    """The ``pipesim simulate`` command line that reproduces ``e``. With a model stated inline
    in the plan's run file (``--run``), the command reads that file and states every other
    setting, defaults included, so nothing of the file's layout leaks in."""
    run = plan_run_file(report, e, args)
    pairs, _, _ = run_flag_pairs(run, "simulate")
    base = ["pipesim", "simulate"]
    if isinstance(run.model, Model):
        pairs = [(flag, value) for flag, value in pairs if value != INLINE_MODEL]
        base += ["--run", str(getattr(args, "run", None))]
    else:
        pairs = [
            (flag, value)
            for flag, value in pairs
            if flag not in _DEFAULTS or (_DEFAULTS[flag] is not None and value != _DEFAULTS[flag])
        ]
    return shlex.join(base + words_of(pairs))
