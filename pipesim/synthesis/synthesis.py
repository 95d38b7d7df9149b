"""Schedules made to measure: the fastest order found for a per-device memory limit.

Memory is counted in micro-batches in flight, as the zero-bubble paper counts it (Qi et al.,
arXiv 2401.10241 §3): on a device, a micro-batch's stage is in flight from the start of its F
until the end of its last backward action (W under the I/W split, B otherwise), and no device
may ever hold more than ``memory_limit`` (stage, micro-batch) pairs. Actions on a device run
one after another, so that count depends on the device's order only (:func:`in_flight_peaks`).
A device holding v stages holds v pairs of a micro-batch whose every stage there is in flight:
with a V placement, 1F1B's memory of K micro-batches is 2K pairs of half-size stages. A limit
in bytes (``memory_limit_bytes``) counts each stage's activation bytes as the costs give them
instead, an I freeing all but what its W keeps.

The synthesiser is the paper's heuristic made into a small portfolio, judged by the engine:

* the greedy list scheduler of :mod:`pipesim.synthesis.list_scheduler`, one order per policy
  (I or F first, three ways to place W, waiting for an I about to arrive, and with several
  stages per device the stage order and the admission rule);
* the registered schedules of the same placement whose orders keep within the limit (1F1B,
  ZB-H1, ZB-H2 and GPipe with one stage per device; ZB-V, DualPipeV and the V-Min and V-Half
  building blocks of :mod:`pipesim.schedules.v_family` in a V; interleaved 1F1B, interleaved
  ZB and looped BFS looped over v chunks), so the result is never slower than the best of them;
* then a local search from the best (:mod:`pipesim.synthesis.local_search`): moves of W and
  swaps of neighbouring actions, each kept only when the engine finds it better and the order
  stays within the limit.

The work is bounded by the order's size (3·S·M actions, with split backwards), not only by
the size limit on it: each candidate is a pass over every action (a greedy order is built
action by action, and every candidate is simulated), so the portfolio may build and simulate
at most :data:`PORTFOLIO_WORK` / actions candidates (at least one), and the local search at
most :data:`SEARCH_WORK` / actions (and :data:`SEARCH_EVALUATIONS`) simulations. An order
small enough for the whole portfolio (13 candidates with one stage per device: up to 76,923
actions, K=64 and M=400; 39 or 40 with several: 25,000 actions) tries every candidate as
before; a larger one tries the fixed schedules within the limit first (built in closed form,
no greedy pass), then the greedy policies in their order, while the budget lasts. The first
policy reserves memory for whole micro-batches and always finishes, so there is always a
candidate.

The objective is the simulated step time, or the zero-bubble paper's largest stage span
(:func:`largest_stage_span_s`, the measure of its Table 5). The best is returned, named
``synth`` (on a tie, a fixed schedule before a greedy order).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from pipesim.common import checks
from pipesim.common.progress import SILENT, Progress
from pipesim.common.units import format_bytes
from pipesim.costs.pipeline_costs import PipelineCosts
from pipesim.errors import ScheduleError, named
from pipesim.parallel.placement import looped, v_shape
from pipesim.schedules.schedule import Schedule
from pipesim.schedules.v_family import v_block_schedule
from pipesim.synthesis.list_scheduler import SYNTH_NAME as SYNTH_NAME
from pipesim.synthesis.list_scheduler import (
    MemoryCount,
    byte_count,
    greedy_schedule,
    pair_count,
    policies,
    within,
)

if TYPE_CHECKING:
    from pipesim.engine.result import SimulationResult

# Objective values within this relative difference are a tie (the engines' sums differ in the
# last digits between orders of the same length).
TIE_TOLERANCE = 1e-12
PLACEMENTS = ("looped", "v")
# The fixed schedules offered beside the greedy orders, per placement (all flush).
FIXED_SEEDS = ("1f1b", "zb-h1", "zb-h2", "gpipe")
V_BLOCKS = ("v-min", "v-half")  # 2405.15362's building blocks (pipesim.schedules.v_family)
V_SEEDS = ("zbv", "dualpipev", *V_BLOCKS)
LOOPED_SEEDS = ("interleaved-1f1b", "interleaved-zb", "looped-bfs")
# The local search's default budget: simulations, and actions times simulations (a large
# order is simulated fewer times).
SEARCH_EVALUATIONS = 100
SEARCH_WORK = 50_000
# The portfolio's budget, in actions times candidates (greedy orders built and candidates
# simulated): the whole portfolio up to 76,923 actions with one stage per device, one
# candidate at the size limit's 2^20 (see the module's docstring).
PORTFOLIO_WORK = 1_000_000


def step_time_s(result: SimulationResult) -> float:
    """The simulated step time: the objective of a synthesis by default."""
    return result.iteration_time_s


def largest_stage_span_s(result: SimulationResult) -> float:
    """The zero-bubble paper's 'largest execution time of all stages' (its Table 5): on each
    device, from its first action's start to its last action's end (a device that starts late
    does not count its wait), the largest over devices."""
    run = result.run
    actions = run.stage >= 0
    device, start, end = run.device[actions], run.start_s[actions], run.end_s[actions]
    devices = result.schedule.devices
    first = np.full(devices, np.inf)
    last = np.full(devices, -np.inf)
    np.minimum.at(first, device, start)
    np.maximum.at(last, device, end)
    used = np.isfinite(first)
    return float(np.max(last[used] - first[used]))


OBJECTIVES: dict[str, Callable[[SimulationResult], float]] = {
    "step": step_time_s,
    "stage-span": largest_stage_span_s,
}


@dataclass(frozen=True)
class Synthesis:
    """The schedule chosen and how it compares.

    Attributes:
        schedule: the best candidate, named ``synth``.
        chosen: the candidate it came from (a greedy policy's name, or a fixed schedule's),
            with ``+search`` when the local search improved it.
        step_time_s: its simulated step time.
        candidates: every candidate tried within the limit, with its objective value, best
            first (the local search's result first when it improved).
        memory_limit: (stage, micro-batch) pairs in flight per device (None for a limit in
            bytes).
        result: the winner's simulation (its memory and timeline, without simulating again).
        objective: what was minimised (``step`` or ``stage-span``).
        objective_value: the winner's value of it (its step time for ``step``).
        memory_limit_bytes: the limit on each device's activation bytes, when given so.
    """

    schedule: Schedule
    chosen: str
    step_time_s: float
    candidates: tuple[tuple[str, float], ...]
    memory_limit: int | None
    result: SimulationResult = field(repr=False, compare=False)
    objective: str = "step"
    objective_value: float = 0.0
    memory_limit_bytes: float | None = None


def in_flight_peaks(schedule: Schedule) -> tuple[int, ...]:
    """Each device's most (stage, micro-batch) pairs in flight, from its order alone: a pair
    enters at its F's start and leaves at its last backward's end (:func:`activation_peaks`
    with W needing all of it)."""
    return tuple(round(peak) for peak in activation_peaks(schedule, 1.0))


def activation_peaks(schedule: Schedule, weight_fraction: float = 1.0) -> tuple[float, ...]:
    """Each device's peak activation memory in units of one stage's stash for one
    micro-batch (M_B when a device holds one stage), by the memory model's rules
    (:mod:`pipesim.memory.rules`, without re-materialization) with a stash of 1 and the part
    W keeps ``weight_fraction`` (M_W / M_B, the zero-bubble paper's Appendix G): an F adds 1,
    an I frees all but what its W still needs, the W frees that, a full B frees all."""
    return pair_count(schedule.stages, weight_fraction).peaks(schedule)


def placement_of(name: str, devices: int, chunks: int = 1) -> tuple[int, ...]:
    """The stage-to-device placement a synthesis is asked for by name: ``looped`` over
    ``chunks`` stages per device, or ``v`` (two per device)."""
    if name == "looped":
        return looped(devices, chunks)
    if name == "v":
        if chunks not in (1, 2):
            raise ScheduleError(
                f"{named('chunks_per_device')}: a V placement has 2 stages per device, got {chunks}"
            )
        return v_shape(devices)
    raise ScheduleError(
        f"{named('placement')} must be one of {', '.join(PLACEMENTS)}, got {name!r}"
    )


def minimum_limit(placement: Sequence[int]) -> int:
    """The fewest pairs in flight any order of ``placement`` can run with: a device holds
    every stage of a micro-batch it has at once (its chunk count)."""
    return max(list(placement).count(device) for device in set(placement))


def synthesize(
    costs: PipelineCosts,
    microbatches: int,
    memory_limit: int | None,
    weight_fraction: float = 1.0,
    *,
    memory_limit_bytes: float | None = None,
    placement: Sequence[int] | None = None,
    objective: str = "step",
    search_evaluations: int | None = None,
    progress: Progress | None = None,
) -> Synthesis:
    """The best schedule found for ``costs``, ``microbatches`` and at most ``memory_limit``
    (stage, micro-batch) pairs in flight on any device, with ``placement`` (one stage per
    device when None; the costs have one entry per stage). 1 runs the micro-batches one at a
    time through a one-stage-per-device pipeline; K is 1F1B's memory. With ``weight_fraction``
    below 1 the limit is on activation memory in stashes, an I freeing all but that fraction
    (see :func:`activation_peaks`): more micro-batches may then wait for their W.
    ``memory_limit_bytes`` instead (``memory_limit`` None) limits each device's activation
    bytes as the costs give them (each stage's stash, and what its W keeps after I): the
    engine's peak activation memory of the result never exceeds it (up to rounding, one part
    in 10^12).
    ``objective`` is ``step`` or ``stage-span`` (:data:`OBJECTIVES`);
    ``search_evaluations`` bounds the local search (None: :data:`SEARCH_EVALUATIONS`, fewer
    for large orders; 0: none). ``progress`` advances once per candidate and per search
    simulation (:func:`synthesis_steps` of them)."""
    from pipesim.engine import simulate
    from pipesim.synthesis.local_search import improve

    microbatches = checks.positive_int("microbatches", microbatches, error=ScheduleError)
    if not 0.0 <= weight_fraction <= 1.0:
        raise ScheduleError(f"weight_fraction must be from 0 to 1, got {weight_fraction}")
    if objective not in OBJECTIVES:
        raise ScheduleError(f"objective must be one of {', '.join(OBJECTIVES)}, got {objective!r}")
    placement = tuple(range(len(costs.stages))) if placement is None else tuple(placement)
    if len(placement) != len(costs.stages):
        raise ScheduleError(f"placement has {len(placement)} stages, the costs {len(costs.stages)}")
    devices = max(placement, default=-1) + 1
    if len(placement) % max(devices, 1) or any(
        placement.count(device) != len(placement) // devices for device in range(devices)
    ):
        raise ScheduleError(
            f"placement {placement} must hold the same number of stages on each of devices "
            f"0..{devices - 1}"
        )
    count, limit = _limit(costs, placement, memory_limit, weight_fraction, memory_limit_bytes)
    measure = OBJECTIVES[objective]
    bar = progress if progress is not None else SILENT
    portfolio = policies(minimum_limit(placement))
    seeds = fixed_within(placement, microbatches, limit, count=count)
    bar.update(len(_seeds(placement)) - len(seeds))  # seeds beyond the limit: none to simulate
    budget = portfolio_budget(placement, microbatches)
    everything = budget >= len(portfolio) + len(seeds)
    # Within the budget, every candidate in the portfolio's order; beyond it, the seeds first.
    candidates: list[tuple[str, Schedule]] = [] if everything else seeds[:budget]
    bar.update(0 if everything else len(seeds) - len(candidates))  # seeds beyond the budget
    spent = len(candidates)
    for policy in portfolio:
        if spent >= budget and candidates:
            bar.update()  # beyond the budget: not built
            continue
        spent += 1
        bar.set_postfix_str(policy.name)
        greedy = greedy_schedule(
            costs, microbatches, limit, policy, placement=placement, count=count
        )
        if greedy is not None:
            candidates.append((policy.name, greedy))
        else:
            bar.update()  # stalled: nothing to simulate
    if everything:
        candidates += seeds
    if not candidates:  # pragma: no cover - the reserving policies always finish
        raise ScheduleError(f"no order found within the memory limit {limit:g}")
    results = []
    for name, schedule in candidates:
        results.append((name, schedule, simulate(schedule, costs)))
        bar.update()
    bar.set_postfix_str("local search")
    values = [measure(result) for _, _, result in results]
    best_value = min(values)

    def rank(index: int) -> tuple[float, bool, int]:
        """Best first; within a rounding error of the best, a fixed schedule (one with a
        name and a paper) before a greedy order; then the order tried first."""
        value = values[index]
        tied = value <= best_value * (1 + TIE_TOLERANCE)
        return (best_value if tied else value, results[index][0].startswith("greedy-"), index)

    ranked = sorted(range(len(results)), key=rank)
    chosen, best, result = results[ranked[0]]
    table = [(results[i][0], values[i]) for i in ranked]
    budget = _search_budget(placement, microbatches, search_evaluations)
    if budget:
        searched = improve(
            best,
            costs,
            measure,
            lambda order: within(max(count.peaks(order)), limit),
            budget,
            start=result,
            on_evaluation=bar.update,
        )
        if measure(searched.result) < values[ranked[0]] * (1 - TIE_TOLERANCE):
            chosen, best, result = f"{chosen}+search", searched.schedule, searched.result
            table.insert(0, (chosen, measure(result)))
    # A greedy order already is one (validated when built); a fixed one is renamed.
    schedule = (
        best
        if best.name == SYNTH_NAME
        else Schedule(SYNTH_NAME, microbatches, best.placement, best.device_actions)
    )
    return Synthesis(
        schedule,
        chosen,
        result.iteration_time_s,
        tuple(table),
        memory_limit,
        result,
        objective,
        measure(result),
        memory_limit_bytes,
    )


def _limit(
    costs: PipelineCosts,
    placement: tuple[int, ...],
    memory_limit: int | None,
    weight_fraction: float,
    memory_limit_bytes: float | None,
) -> tuple[MemoryCount, float]:
    """What the limit counts and its value; one of the two limits, and no less than the
    fewest any order of the placement needs."""
    if (memory_limit is None) == (memory_limit_bytes is None):
        raise ScheduleError("give one memory limit: in pairs in flight or in bytes")
    if memory_limit_bytes is not None:
        if weight_fraction != 1.0:
            raise ScheduleError("weight_fraction goes with a limit in pairs; bytes take the costs'")
        limit = float(memory_limit_bytes)
        if not (math.isfinite(limit) and limit > 0):
            raise ScheduleError(
                f"{named('memory_limit_bytes')} must be a finite number > 0, got {limit:g}"
            )
        count = byte_count(costs)
        if not any(count.stash):
            raise ScheduleError(
                f"{named('memory_limit_bytes')} {limit:g}: the costs stash no activation "
                "bytes, so it "
                "would limit nothing (give activation bytes, or a model)"
            )
        fewest = count.fewest(placement)
        if limit < fewest:
            raise ScheduleError(
                f"{named('memory_limit_bytes')} must be >= {fewest:.0f} "
                f"({format_bytes(fewest)}: a device "
                f"holds every stage of a micro-batch it has at once), got {limit:.0f}"
            )
        return count, limit
    limit_pairs = check_pair_limit(memory_limit, placement)
    return pair_count(len(placement), weight_fraction), float(limit_pairs)


def check_pair_limit(memory_limit: object, placement: Sequence[int]) -> int:
    """A limit in pairs in flight: an integer, no less than the stages each device holds (a
    device holds every stage of a micro-batch it has at once)."""
    limit = checks.positive_int(named("memory_limit"), memory_limit, error=ScheduleError)
    fewest = minimum_limit(placement)
    if limit < fewest:
        raise ScheduleError(
            f"{named('memory_limit')} must be >= {fewest} with {fewest} stages per device (a "
            f"device holds every stage of a micro-batch it has at once), got {limit}"
        )
    return limit


def synthesis_steps(
    placement: Sequence[int], microbatches: int, search_evaluations: int | None = None
) -> int:
    """How many times :func:`synthesize` advances its progress: a candidate per greedy
    policy and per seed of the placement, and the local search's simulations (at most)."""
    placement = tuple(placement)
    return (
        len(policies(minimum_limit(placement)))
        + len(_seeds(placement))
        + _search_budget(placement, microbatches, search_evaluations)
    )


def portfolio_budget(placement: Sequence[int], microbatches: int) -> int:
    """Candidates the portfolio may build and simulate: :data:`PORTFOLIO_WORK` / the order's
    3·S·M actions, at least one (see the module's docstring)."""
    actions = 3 * len(placement) * microbatches
    return max(1, PORTFOLIO_WORK // max(1, actions))


def _search_budget(placement: Sequence[int], microbatches: int, asked: int | None) -> int:
    """Simulations the local search may spend: ``asked``, or by default
    :data:`SEARCH_EVALUATIONS`, fewer for orders beyond :data:`SEARCH_WORK` / that many
    actions (3·S·M, the order's size with split backwards)."""
    if asked is not None:
        if isinstance(asked, bool) or not isinstance(asked, int) or asked < 0:
            raise ScheduleError(f"search_evaluations must be an integer >= 0, got {asked!r}")
        return asked
    actions = 3 * len(placement) * microbatches
    return min(SEARCH_EVALUATIONS, SEARCH_WORK // max(1, actions))


def check_synthesis_size(devices: int, microbatches: int, steps: int = 1, chunks: int = 1) -> None:
    """Refuse, before any costs are built, a synthesis beyond the size limits: K devices, v
    chunks, and the 3·K·v·M actions of an order with split backwards (ZB-H1's size) over
    ``steps``."""
    from pipesim.schedules.registry import check_size, schedule_info

    check_size(schedule_info("zb-h1"), devices, microbatches, chunks, steps, name=SYNTH_NAME)


def fixed_within(
    placement: Sequence[int] | int,
    microbatches: int,
    memory_limit: float,
    names: Sequence[str] | None = None,
    weight_fraction: float = 1.0,
    count: MemoryCount | None = None,
) -> list[tuple[str, Schedule]]:
    """The registered schedules among ``names`` (the seeds of the placement when None) that
    take this shape and ``placement`` (an int K: one stage per device) and whose orders keep
    within the limit (in pairs, W keeping ``weight_fraction``, unless ``count`` says what it
    counts): the synthesiser's seeds, and what a synthesised schedule is compared with."""
    from pipesim.schedules.registry import build, unsupported_reason

    placement = tuple(range(placement)) if isinstance(placement, int) else tuple(placement)
    count = pair_count(len(placement), weight_fraction) if count is None else count
    devices = max(placement) + 1
    chunks = len(placement) // devices
    if names is None:
        names = _seeds(placement)
    kept = []
    for name in names:
        if name in V_BLOCKS:
            if placement != v_shape(devices) or devices < 2:
                continue
            fixed = v_block_schedule(name, devices, microbatches)
        elif unsupported_reason(name, devices, microbatches, chunks) is None:
            fixed = build(name, devices, microbatches, chunks)
        else:
            continue
        if fixed.placement != placement:
            continue
        if within(max(count.peaks(fixed)), memory_limit):
            kept.append((name, fixed))
    return kept


def _seeds(placement: tuple[int, ...]) -> tuple[str, ...]:
    devices = max(placement) + 1
    if len(placement) == devices:
        return FIXED_SEEDS
    if placement == v_shape(devices):
        return V_SEEDS
    return LOOPED_SEEDS


@dataclass(frozen=True)
class MemoryPoint:
    """One schedule's place in the memory-time plane: its most (stage, micro-batch) pairs in
    flight on any device and its simulated step time (``limit`` is the limit it was
    synthesised for, None for a fixed schedule)."""

    name: str
    in_flight: int
    step_time_s: float
    limit: int | None = None


def memory_tradeoff(
    costs: PipelineCosts,
    microbatches: int,
    limits: Sequence[int],
    placement: Sequence[int] | None = None,
) -> tuple[tuple[MemoryPoint, ...], tuple[MemoryPoint, ...]]:
    """The fixed schedules of the placement as points, and the synthesised schedule at each
    of ``limits`` (its actual peak may be below the limit): the data of a Pareto figure."""
    from pipesim.engine import simulate

    placement = tuple(range(len(costs.stages))) if placement is None else tuple(placement)
    fixed = tuple(
        MemoryPoint(name, max(in_flight_peaks(s)), simulate(s, costs).iteration_time_s)
        for name, s in fixed_within(placement, microbatches, len(placement) * microbatches)
    )
    curve = []
    for limit in limits:
        found = synthesize(costs, microbatches, limit, placement=placement)
        peak = max(in_flight_peaks(found.schedule))
        curve.append(MemoryPoint(found.chosen, peak, found.step_time_s, limit))
    return fixed, tuple(curve)
