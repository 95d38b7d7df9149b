"""The ``pipesim simulate`` command line that reproduces a plan: command-line vocabulary, so it
lives with the command line; ``pipesim plan`` hands it to the library's report
(:func:`pipesim.plan.report.report_json`, :func:`~pipesim.plan.report.report_table`)."""

from __future__ import annotations

import shlex

from pipesim.plan.planner import Evaluated, PlanReport


def simulate_command(report: PlanReport, e: Evaluated) -> str:
    """The ``pipesim simulate`` command line that reproduces ``e``."""
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
    if s.optimizer_state is not None:
        words += ["--optimizer", s.optimizer_state]
    if s.master_weights is not None:
        words.append("--master-weights" if s.master_weights else "--no-master-weights")
    if s.dtype is not None:
        words += ["--dtype", s.dtype]
    if s.attention is not None:
        words += ["--attention", s.attention]
    if s.overlap_grad_reduce:
        words.append("--overlap-grad-reduce")
    return shlex.join(words)
