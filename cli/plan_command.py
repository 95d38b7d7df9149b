"""The ``pipesim simulate`` command line that reproduces a plan: command-line vocabulary, so it
lives with the command line; ``pipesim plan`` hands it to the library's report
(:func:`pipesim.plan.report.report_json`, :func:`~pipesim.plan.report.report_table`)."""

from __future__ import annotations

import argparse
import shlex

from pipesim.plan.planner import Evaluated, PlanReport


def simulate_command(report: PlanReport, e: Evaluated, args: argparse.Namespace) -> str:
    """The ``pipesim simulate`` command line that reproduces ``e``, with the optimizer,
    precision and recipe flags the plan was given (``args``)."""
    s, c = report.settings, e.candidate
    words = [
        "pipesim",
        "simulate",
        "--model",
        s.model,
        "--hardware",
        s.hardware,
        "--schedule",
        c.schedule,
        *(["--memory-limit", str(c.memory_limit)] if c.memory_limit is not None else []),
        "-K",
        str(c.devices),
        "-M",
        str(c.microbatches),
        "-v",
        str(c.chunks),
        "--batch",
        str(s.batch),
        "--data-parallel",
        str(c.data_parallel),
        *(["--tensor-parallel", str(c.tensor)] if c.tensor > 1 else []),
        *(["--sequence-parallel"] if c.sequence_parallel else []),
        *(["--recompute", c.recompute] if c.recompute != "none" else []),
        *(["--zero", str(c.zero)] if c.zero else []),
        "--partition",
        ",".join(map(str, e.partition)),
        "--steps",
        str(e.steps),
    ]
    if c.remat:
        words.append("--remat")
    if args.optimizer is not None:
        words += ["--optimizer", args.optimizer]
    if args.master_weights is not None:
        words.append("--master-weights" if args.master_weights else "--no-master-weights")
    if args.dtype is not None:
        words += ["--dtype", args.dtype]
    if args.recipe is not None:
        words += ["--recipe", args.recipe]
    if args.attention is not None:
        words += ["--attention", args.attention]
    if args.overlap_grad_reduce:
        words.append("--overlap-grad-reduce")
    return shlex.join(words)
