"""Zero Bubble (Qi et al., arXiv 2401.10241): bubble rates of 1F1B, interleaved 1F1B, ZB-H1,
ZB-H2 and ZB-V read off the schedules' own simulated timelines, against the paper's formulas,
and their activation memory against the paper's Table 2. See ``zero_bubble.md``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from pipesim.common.units import format_percent, format_seconds
from pipesim.costs import synthetic_costs
from pipesim.engine import simulate
from pipesim.schedules import build
from plots import bars_from_timeline, save, side_by_side_figure
from validation.reproduce.common import suite_readme
from validation.reproduce.framework import Outcome, Row

T = 1.0  # T_F = T_B = T_W, the paper's assumption for its formulas
SHAPES = [(4, 24), (8, 24), (8, 32), (8, 64), (16, 48)]  # (p, m), m >= 2p - 1
SCHEDULES: list[tuple[str, int, Callable[[int, int], float]]] = [
    # (name, chunks, the paper's bubble rate at T_F = T_B = T_W)
    ("1f1b", 1, lambda p, m: (p - 1) / m),
    ("interleaved-1f1b", 2, lambda p, m: (p - 1) / (2 * m)),
    ("zb-h1", 1, lambda p, m: (p - 1) / (3 * m)),
    ("zb-h2", 1, lambda p, m: 0.0),
    ("zbv", 2, lambda p, m: 0.0),
]


def bubble_rate(name: str, p: int, m: int, chunks: int) -> float:
    """Bubble time over the ideal m(T_F+T_B+T_W), steady state (optimizer steps not
    synchronized: the paper's 'post-validation', which ZB-H2 and ZB-V need)."""
    weight = T if name != "interleaved-1f1b" and name != "1f1b" else 0.0
    backward = T if weight else 2 * T  # B = I + W with the split, 2T without
    result = simulate(
        build(name, p, m, chunks), synthetic_costs(p, chunks, T, backward, weight), steps=3
    )
    ideal = m * 3 * T
    return (result.iteration_time_s - ideal) / ideal


def memory_rows() -> list[Row]:
    """Peak activation memory in micro-batches of activations (M_B): 1F1B and ZB-H1 p, ZB-H2
    2p-1, ZB-V p (Table 2; with equal M_B and M_W)."""
    rows = []
    for p in (4, 8):
        m = 4 * p
        for name, chunks, expected in [
            ("1f1b", 1, p),
            ("zb-h1", 1, p),
            ("zb-h2", 1, 2 * p - 1),
            ("zbv", 2, p),
        ]:
            per_microbatch = 1.0
            result = simulate(
                build(name, p, m, chunks),
                synthetic_costs(p, chunks, T, T, T, activation_bytes=per_microbatch),
            )
            peak = max(d.peak_activation_bytes for d in result.per_device)
            rows.append(
                Row(
                    "Table 2: peak activation memory (in M_B)",
                    name,
                    "equal stages",
                    p,
                    m,
                    "peak activation / M_B",
                    expected,
                    peak,
                    "W keeps all of M_B here (M_W = M_B), the bound's worst case",
                )
            )
    return rows


def run(out: Path) -> Outcome:
    rows = []
    for p, m in SHAPES:
        for name, chunks, formula in SCHEDULES:
            if name == "interleaved-1f1b" and m % p:
                continue
            rows.append(
                Row(
                    "Bubble rate at T_F = T_B = T_W",
                    name,
                    "equal stages",
                    p,
                    m,
                    "bubble rate",
                    formula(p, m),
                    bubble_rate(name, p, m, chunks),
                )
            )
    rows += memory_rows()
    panels: list[tuple[str, list[tuple[int, str, float, float]], list[Any]]] = []
    for name, chunks, _ in SCHEDULES:
        p, m = 4, 8
        weight = T if name not in ("1f1b", "interleaved-1f1b") else 0.0
        result = simulate(
            build(name, p, m, chunks), synthetic_costs(p, chunks, T, T if weight else 2 * T, weight)
        )
        compute, _ = bars_from_timeline(result.timeline)
        title = (
            f"{name}, K={p}, M={m}: step {format_seconds(result.iteration_time_s)}, "
            f"bubble {format_percent(result.bubble_fraction)}"
        )
        panels.append((title, [b for b in compute if b[1] != "opt"], []))
    figure = side_by_side_figure(panels)
    figure.suptitle("Zero-bubble schedules at T_F = T_B = T_W = 1 s (the paper's p, m are K, M)")
    save(figure, out / "schedules.png")
    readme = suite_readme("zero_bubble.md")
    return Outcome(
        "Zero Bubble Pipeline Parallelism (arXiv 2401.10241) reproduced with pipesim",
        rows,
        readme,
        {"The five schedules at K=4, M=8 (the paper's p, m; cf. its Figure 3)": "schedules.png"},
    )
