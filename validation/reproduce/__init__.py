"""Reproduction suites: the papers' tables next to pipesim's numbers, one command each.

``pipesim reproduce NAME --out DIR`` writes ``table.md``, ``results.csv`` (columns table, model,
hardware, K, M, quantity, paper, simulated, ratio, difference, note), figures and a README per
suite. The suites only simulate: they need neither torch nor a GPU.
"""

from __future__ import annotations

from pathlib import Path

from application.outputs import new_output_directory
from pipesim.errors import PipesimError
from validation.reproduce.framework import Experiment, Outcome, write_outputs


def _experiments() -> dict[str, Experiment]:
    from validation.reproduce import (
        deepseek_v3,
        gpipe,
        interleaved,
        megatron,
        pipedream_2bw,
        published,
        zero_bubble,
    )

    return {
        e.name: e
        for e in (
            Experiment(
                "gpipe",
                "GPipe Tables 1-3 and the bubble claim",
                "Huang et al., arXiv 1811.06965",
                gpipe.run,
            ),
            Experiment(
                "pipedream-2bw",
                "PipeDream-2BW memory and throughput",
                "Narayanan et al., arXiv 2006.09503",
                pipedream_2bw.run,
            ),
            Experiment(
                "zero-bubble",
                "Zero-bubble schedules' bubble rates",
                "Qi et al., arXiv 2401.10241",
                zero_bubble.run,
            ),
            Experiment(
                "interleaved",
                "Megatron's interleaved 1F1B bubble and communication",
                "Narayanan et al., arXiv 2104.04473",
                interleaved.run,
            ),
            Experiment(
                "megatron",
                "Megatron-LM's hybrid-parallel GPT runs: throughput and layer times",
                "Narayanan et al., arXiv 2104.04473; Korthikanti et al., arXiv 2205.05198",
                megatron.run,
            ),
            Experiment(
                "deepseek-v3",
                "DeepSeek-V3's comparison of 1F1B, ZB1P and DualPipe (Table 2)",
                "DeepSeek-AI, arXiv 2412.19437 §3.2.1",
                deepseek_v3.run,
            ),
            Experiment(
                "published",
                "Published runs of several frameworks and eras, predicted out of sample",
                "MT-NLG, BLOOM, Llama 3, MegaScale, NeMo, torchtitan and others (see its README)",
                published.run,
            ),
        )
    }


def experiment_names() -> tuple[str, ...]:
    """The registered suites."""
    return tuple(_experiments())


def reproduce(name: str, out: str | Path) -> tuple[Outcome, dict[str, Path]]:
    """Run suite ``name``, writing everything into ``out``."""
    experiments = _experiments()
    if name not in experiments:
        raise PipesimError(
            f"unknown reproduction {name!r}; choose one of: {', '.join(experiments)}"
        )
    with new_output_directory(out, "--out") as folder:
        outcome = experiments[name].run(folder)
        return outcome, write_outputs(outcome, folder)
