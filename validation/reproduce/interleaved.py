"""Megatron-LM's interleaved schedule (Narayanan et al., arXiv 2104.04473 §2.2): the bubble
(1/v)(p-1)/m of the ideal time, and pipeline communication growing v-fold. See
``interleaved.md``."""

from __future__ import annotations

from pathlib import Path

from pipesim.costs import synthetic_costs
from pipesim.engine import simulate
from pipesim.schedules import build
from plots import bubble_figure, save
from validation.reproduce.common import suite_readme
from validation.reproduce.framework import Outcome, Row, Sample, SampleLabel, labelled

T_F, T_B = 1.0, 2.0


SAMPLES = {
    "Bubble (fraction of the ideal time)": SampleLabel(
        Sample.FORMULA, "§2.2.2's closed form (p-1)/(v·m), not a measurement"
    ),
    "Pipeline communication per step": SampleLabel(
        Sample.FORMULA, "the paper's claim that interleaving multiplies the messages by v"
    ),
}


def run(out: Path) -> Outcome:
    rows, series = [], []
    for p in (4, 8):
        transfers_v1 = None
        for v in (1, 2, 4):
            for m in (p, 2 * p, 4 * p, 8 * p):
                name = "1f1b" if v == 1 else "interleaved-1f1b"
                result = simulate(build(name, p, m, v), synthetic_costs(p, v, T_F, T_B))
                ideal = m * (T_F + T_B)
                bubble = (result.iteration_time_s - ideal) / ideal
                rows.append(
                    Row(
                        "Bubble (fraction of the ideal time)",
                        f"{name}, v={v}",
                        "equal stages",
                        p,
                        m,
                        "bubble / ideal",
                        (p - 1) / (v * m),
                        bubble,
                    )
                )
                series.append(
                    {
                        "schedule": f"v={v}",
                        "devices": p,
                        "microbatches": m,
                        "bubble_fraction": result.bubble_fraction,
                        "analytic_bubble_fraction": result.analytic_bubble_fraction,
                    }
                )
                if m == 4 * p:
                    count = len(result.transfers)
                    if v == 1:
                        transfers_v1 = count
                    rows.append(
                        Row(
                            "Pipeline communication per step",
                            f"{name}, v={v}",
                            "equal stages",
                            p,
                            m,
                            "transfers / transfers at v=1",
                            v,
                            count / transfers_v1 if transfers_v1 else None,
                            f"{count} point-to-point transfers"
                            + ("; the baseline: 1 by construction" if v == 1 else ""),
                            by_construction=v == 1,
                        )
                    )
    save(
        bubble_figure(
            [s for s in series if s["devices"] == 8],
            title="Interleaved 1F1B, K=8 (the paper's p): bubble fraction of the step",
        ),
        out / "bubble.png",
    )
    readme = suite_readme("interleaved.md")
    return Outcome(
        "Megatron-LM interleaved 1F1B (arXiv 2104.04473) reproduced with pipesim",
        labelled(rows, SAMPLES),
        readme,
        {"Bubble fraction against M, K=8 (the paper's p)": "bubble.png"},
    )
