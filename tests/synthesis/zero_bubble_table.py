"""The table of ``docs/synthesis-optimality.md``: at the zero-bubble paper's Table 3 setups, 2p
micro-batches in flight counted as the paper counts them (an I frees all but the M_W its W
keeps), the bubble rate of the largest stage span (the paper's Table 5 measure) for

* the published ZB-2p,
* the synthesiser before its warm-up candidates (switched off here: its greedy portfolio,
  seeds and local search, the orders pipesim synthesised before them),
* the synthesiser now without its searches (``search_evaluations=0``, as the zero-bubble
  reproduction suite calls it: the warm-up rule's counts, no counts search, no local search),
* the synthesiser now, by default,
* and the lower bound of :mod:`pipesim.synthesis.bounds` (no order within the limit is below),

with the seconds each default synthesis took, before and now. The costs are those the
zero-bubble reproduction suite uses (``validation/reproduce/zero_bubble.py``: the paper's
profiled times).

    python -m tests.synthesis.zero_bubble_table [--step] [--rows 0,3]

``--step`` rates the step time instead (the engine's, with its fill and drain).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from pipesim.costs import synthetic_costs
from pipesim.costs.pipeline_costs import PipelineCosts
from pipesim.synthesis import synthesis
from pipesim.synthesis.synthesis import synthesize
from validation.reproduce.zero_bubble import TABLE_5, weight_share


@dataclass(frozen=True)
class Row:
    """One setup's bubble rates (fractions) and synthesis times (seconds)."""

    model: str
    devices: int
    microbatches: int
    published: float
    before: float
    unsearched: float
    after: float
    bound: float
    before_s: float
    after_s: float


@contextmanager
def warmup_off() -> Iterator[None]:
    """The synthesiser without its warm-up candidates (its greedy portfolio and seeds)."""
    kept = synthesis.WARMUP_POLICIES
    synthesis.WARMUP_POLICIES = ()
    try:
        yield
    finally:
        synthesis.WARMUP_POLICIES = kept


def rows(selection: Sequence[int] | None = None, objective: str = "stage-span") -> list[Row]:
    """The table's rows, all of Table 5's settings or those at ``selection``."""
    made = []
    for index, (model, p, m, times, published) in enumerate(TABLE_5):
        if selection is not None and index not in selection:
            continue
        forward, grad, weight, comm = times
        costs = synthetic_costs(p, 1, forward, grad, weight, comm_s=comm)
        ideal = m * (forward + grad + weight)
        share = weight_share(model)
        with warmup_off():
            before, _, before_s = _synthesised(costs, m, 2 * p, share, objective, None)
        unsearched, _, _ = _synthesised(costs, m, 2 * p, share, objective, 0)
        after, bound, after_s = _synthesised(costs, m, 2 * p, share, objective, None)
        made.append(
            Row(
                model,
                p,
                m,
                published[-1],
                *(_rate(value, ideal) for value in (before, unsearched, after, bound)),
                before_s,
                after_s,
            )
        )
    return made


def _synthesised(
    costs: PipelineCosts,
    microbatches: int,
    limit: int,
    kept: float,
    objective: str,
    search_evaluations: int | None,
) -> tuple[float, float, float]:
    """The synthesis's objective value, its lower bound, and the seconds it took."""
    start = time.perf_counter()
    found = synthesize(
        costs,
        microbatches,
        limit,
        kept,
        objective=objective,
        search_evaluations=search_evaluations,
    )
    return found.objective_value, found.lower_bound_s, time.perf_counter() - start


def _rate(value: float, ideal: float) -> float:
    """The bubble rate (value - ideal) / value, 0 within rounding of the ideal."""
    rate = (value - ideal) / value
    return 0.0 if abs(rate) < 1e-12 else rate


def markdown(table: Sequence[Row], published: bool = True) -> str:
    """The rows as a Markdown table (rates in percent)."""
    lines = [
        "| model | p | m | ZB-2p (paper) | before | now, no search | now | lower bound "
        "| time before | time now |",
        "|" + " --- |" * 10,
    ]
    for r in table:
        paper = f"{100 * r.published:.2f}%" if published else "-"
        rates = " | ".join(
            f"{100 * rate:.2f}%" for rate in (r.before, r.unsearched, r.after, r.bound)
        )
        lines.append(
            f"| {r.model} | {r.devices} | {r.microbatches} | {paper} | {rates} "
            f"| {r.before_s:.1f} s | {r.after_s:.1f} s |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--step", action="store_true", help="rate the step time instead")
    parser.add_argument("--rows", default=None, help="Table 5's rows to run, e.g. 0,3")
    args = parser.parse_args(argv)
    selection = None if args.rows is None else [int(x) for x in args.rows.split(",")]
    objective = "step" if args.step else "stage-span"
    print(markdown(rows(selection, objective), published=not args.step))


if __name__ == "__main__":
    main()
