"""Per-stage warm-up counts: how many forwards each device runs before its first input
gradient, the zero-bubble paper's automatic scheduler (Qi et al., arXiv 2401.10241 §3) made a
parameter of the greedy list scheduler.

With one stage per device, the paper's heuristic lets stage j run, before its first backward,
as many forwards as fit (within the memory limit) before that backward's input arrives, and
no more: a forward started just before the gradient of micro-batch 0 arrives delays it, and
every stage above waits for it. The counts follow from micro-batch 0's timing alone, from the
last stage up (:func:`warmup_counts`): the last stage runs one forward, then its I; stage j
runs forwards while the next one would end before (``fit``) or start before (``overrun``)
that I's gradient arrives from stage j+1, no more than its memory allows; then, as the paper
does, each stage runs fewer than the one above it. After the warm-up a device takes a new
micro-batch in only while fewer than its count wait for their input gradient (a cap in the
greedy scheduler, :func:`pipesim.synthesis.list_scheduler.greedy_run`), so it keeps the
1F1B rhythm, and W passes fill its idle time as the greedy policy says.

:func:`search_counts` then tries each device's count one up and one down, keeping a change
when the scheduler's own estimate of the objective improves (the estimate is the engine's
timing when transfers do not queue on a link), within a budget of greedy runs.

On the paper's Table 3 setups at 2p micro-batches in flight (its own memory count, an I
freeing all but what W keeps), the counts alone give the published ZB-2p bubble rates (see
``docs/synthesis-optimality.md``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pipesim.costs.pipeline_costs import PipelineCosts
from pipesim.synthesis.list_scheduler import (
    LIMIT_TOLERANCE,
    GreedyPolicy,
    GreedyRun,
    MemoryCount,
    greedy_run,
)

WARMUP_RULES = ("fit", "overrun")


def one_stage_per_device(placement: Sequence[int]) -> bool:
    """Whether stage s is on device s for every s: the placement warm-up counts are for."""
    return tuple(placement) == tuple(range(len(placement)))


def memory_counts(count: MemoryCount, memory_limit: float, microbatches: int) -> list[int]:
    """Per stage (one per device), the most forwards the limit lets in before any backward
    frees memory: floor(limit / stash), at most M (all of them when a stage stashes nothing)."""
    most = []
    for stash in count.stash:
        if stash <= 0:
            most.append(microbatches)
        else:
            fits = math.floor(memory_limit * (1 + LIMIT_TOLERANCE) / stash)
            most.append(max(1, min(microbatches, fits)))
    return most


def warmup_counts(
    costs: PipelineCosts,
    microbatches: int,
    count: MemoryCount,
    memory_limit: float,
    rule: str = "fit",
) -> tuple[int, ...]:
    """Each device's forwards before its first input gradient, one stage per device, from
    micro-batch 0's timing (see the module's docstring): ``fit`` stops before a forward that
    would end after the gradient arrives, ``overrun`` lets the last one start before it.

    The forwards of the warm-up run back to back wherever their input has arrived: the k-th
    forward of stage j ends at ``E(j, k) = max(E(j, k-1), E(j-1, k) + t(j-1)) + F(j)``
    (``t``: the transfer between the two devices). The gradient of micro-batch 0 reaches
    stage j at ``A(j) = (start of I on stage j+1) + I(j+1) + t(j)``; the I on stage j starts
    once both its gradient and the stage's warm-up forwards are done."""
    stages = costs.stages
    count_of = len(stages)
    most = memory_counts(count, memory_limit, microbatches)
    forward_send = [_send_s(costs, s, s + 1) for s in range(count_of)]
    ends: list[list[float]] = []
    for stage in range(count_of):
        row: list[float] = []
        for k in range(microbatches):
            ready = 0.0 if stage == 0 else ends[stage - 1][k] + forward_send[stage - 1]
            if k:
                ready = max(ready, row[k - 1])
            row.append(ready + stages[stage].forward_s)
        ends.append(row)
    counts = [1] * count_of
    arrival = 0.0
    for stage in range(count_of - 1, -1, -1):
        warm = 1
        if stage < count_of - 1:
            while warm < most[stage]:
                if rule == "fit":
                    more = ends[stage][warm] <= arrival
                else:  # overrun: the next one starts before the gradient arrives
                    more = ends[stage][warm - 1] < arrival
                if not more:
                    break
                warm += 1
        counts[stage] = warm
        start = (
            ends[stage][warm - 1] if stage == count_of - 1 else max(arrival, ends[stage][warm - 1])
        )
        arrival = (
            start
            + stages[stage].input_grad_s
            + (_send_s(costs, stage, stage - 1) if stage else 0.0)
        )
    # The paper's last touch: a stage warms up with fewer forwards than the one above it.
    for stage in range(1, count_of):
        if counts[stage] >= counts[stage - 1]:
            counts[stage] = max(1, counts[stage - 1] - 1)
    return tuple(counts)


def _send_s(costs: PipelineCosts, source: int, target: int) -> float:
    """The transfer between neighbouring stages on their own devices (none off the ends),
    sized by the lower stage's output, as the greedy scheduler costs it."""
    if not 0 <= target < len(costs.stages):
        return 0.0
    sized_by = min(source, target)
    return costs.network.route(source, target).transfer_time_s(costs.stages[sized_by].output_bytes)


def estimate(run: GreedyRun, costs: PipelineCosts, objective: str) -> float:
    """The scheduler's estimate of ``objective`` for a greedy run: the step (each device's
    last end plus its optimizer step, the largest) or the largest stage span."""
    if objective == "stage-span":
        return max(
            last - first
            for first, last, row in zip(run.first_start_s, run.last_end_s, run.rows, strict=True)
            if row
        )
    return max(
        last + costs.stages[device].optimizer_step_s for device, last in enumerate(run.last_end_s)
    )


@dataclass(frozen=True)
class WarmedUp:
    """The best warm-up counts found for a policy, its greedy run and estimate, and how many
    greedy runs the search made."""

    counts: tuple[int, ...]
    run: GreedyRun
    value: float
    runs: int


def search_counts(
    costs: PipelineCosts,
    microbatches: int,
    count: MemoryCount,
    memory_limit: float,
    policy: GreedyPolicy,
    start: Sequence[int],
    objective: str,
    runs: int,
    on_run: Callable[[], object] | None = None,
) -> WarmedUp | None:
    """Coordinate descent on the warm-up counts from ``start``: each device's count one up
    and one down (within 1 and its memory count), a change kept when the estimate of
    ``objective`` strictly improves, sweeps until none does or ``runs`` greedy runs are spent.
    None when the policy stalls at ``start``."""
    placement = tuple(range(len(costs.stages)))
    most = memory_counts(count, memory_limit, microbatches)

    def build(counts: Sequence[int]) -> GreedyRun | None:
        if on_run is not None:
            on_run()
        return greedy_run(costs, placement, microbatches, memory_limit, policy, count, counts)

    best_counts = tuple(start)
    found = build(best_counts)
    spent = 1
    if found is None:
        return None
    best_run, best = found, estimate(found, costs, objective)
    improved = True
    while improved and spent < runs:
        improved = False
        for device in range(len(best_counts)):
            for step in (-1, 1):
                value = best_counts[device] + step
                if not 1 <= value <= most[device] or spent >= runs:
                    continue
                counts = (*best_counts[:device], value, *best_counts[device + 1 :])
                tried = build(counts)
                spent += 1
                if tried is None:
                    continue
                tried_value = estimate(tried, costs, objective)
                if tried_value < best * (1 - 1e-12):
                    best_counts, best_run, best, improved = counts, tried, tried_value, True
                    break
    return WarmedUp(best_counts, best_run, best, spent)
