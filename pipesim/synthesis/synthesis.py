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

The synthesiser is the paper's heuristic made into a small portfolio, judged by the engine,
with an exact refinement where the order is small:

* the greedy list scheduler of :mod:`pipesim.synthesis.list_scheduler`, one order per policy
  (I or F first, three ways to place W, waiting for an I about to arrive, and with several
  stages per device the stage order and the admission rule);
* the registered schedules of the same placement whose orders keep within the limit (1F1B,
  ZB-H1, ZB-H2 and GPipe with one stage per device; ZB-V, DualPipeV and the V-Min and V-Half
  building blocks of :mod:`pipesim.schedules.v_family` in a V; interleaved 1F1B, interleaved
  ZB and looped BFS looped over v chunks);
* with one stage per device, the paper's per-stage warm-up (:mod:`pipesim.synthesis.warmup`):
  each device's forwards before its first input gradient set from micro-batch 0's timing
  (two rules, :data:`WARMUP_POLICIES`), the best by the scheduler's own estimate, then its
  counts searched one device at a time (:data:`WARMUP_WORK` / actions greedy runs, at most
  :data:`WARMUP_SEARCH_RUNS`);
* then a local search from the best (:mod:`pipesim.synthesis.local_search`): moves of W and
  swaps of neighbouring actions, each kept only when the engine finds it better and the order
  stays within the limit;
* then, for orders of at most :data:`~pipesim.synthesis.exact.MAX_ACTIONS` actions (K = 3 and
  M = 4), the exact search of :mod:`pipesim.synthesis.exact` (branch and bound over the
  orders, pruned by the best found so far), which proves the result optimal
  (:attr:`Synthesis.optimal`) or finds a better order.

Every result carries :attr:`Synthesis.lower_bound_s`, the bound of
:mod:`pipesim.synthesis.bounds` that no schedule within the limit beats, computed apart from
the search; the tests hold every synthesised schedule to it and, on tiny shapes, to optima
found by exhaustive enumeration (``docs/synthesis-optimality.md``).

The work is bounded by the order's size (3·S·M actions, with split backwards), not only by
the size limit on it: each candidate is a pass over every action (a greedy order is built
action by action, and every candidate is simulated), so the portfolio may build and simulate
at most :data:`PORTFOLIO_WORK` / actions candidates (at least one), and the local search at
most :data:`SEARCH_WORK` / actions (and :data:`SEARCH_EVALUATIONS`) simulations. An order
small enough for the whole portfolio (13 candidates with one stage per device: up to 76,923
actions, K=64 and M=400; 39 or 40 with several: 25,000 actions) tries every candidate as
before; a larger one tries the fixed schedules within the limit first (built in closed form,
no greedy pass), then the greedy policies in their order, while the budget lasts; the warm-up
candidates come when the budget has room for all of their first runs. The first policy
reserves memory for whole micro-batches and always finishes, so there is always a candidate.

The objective is the simulated step time, or the zero-bubble paper's largest stage span
(:func:`largest_stage_span_s`, the measure of its Table 5). The best is returned, named
``synth`` (on a tie, a fixed schedule before a made order).
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
from pipesim.synthesis.bounds import lower_bound
from pipesim.synthesis.exact import MAX_ACTIONS, optimum
from pipesim.synthesis.list_scheduler import (
    GreedyPolicy,
    MemoryCount,
    byte_count,
    greedy_run,
    greedy_schedule,
    pair_count,
    policies,
    within,
)
from pipesim.synthesis.names import PLACEMENTS as PLACEMENTS
from pipesim.synthesis.names import SYNTH_NAME as SYNTH_NAME
from pipesim.synthesis.warmup import (
    WARMUP_RULES,
    estimate,
    one_stage_per_device,
    search_counts,
    warmup_counts,
)

if TYPE_CHECKING:
    from pipesim.engine.result import SimulationResult

# Objective values within this relative difference are a tie (the engines' sums differ in the
# last digits between orders of the same length).
TIE_TOLERANCE = 1e-12
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
# The warm-up candidates' policies (each with the counts of each rule): W passes fill idle
# time at once, I or F first (on random costs the others win a warm-up rarely).
WARMUP_POLICIES = (GreedyPolicy(True, "eager"), GreedyPolicy(False, "eager"))
# The warm-up counts' search: greedy runs, at most this many and this work (actions x runs).
WARMUP_SEARCH_RUNS = 60
WARMUP_WORK = 300_000
# The exact search's default budget of states (about a second; it proves most K = 3, M = 4
# orders optimal in a small part of it).
EXACT_NODES = 100_000


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
        lower_bound_s: no schedule of this placement within the limit does better by the
            objective (:func:`pipesim.synthesis.bounds.lower_bound`).
        optimal: the exact search (:mod:`pipesim.synthesis.exact`, on orders small enough)
            proved that no order does better, with times as the synthesiser models them (the
            engine's, when transfers do not queue on a link).
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
    lower_bound_s: float = 0.0
    optimal: bool = False

    @property
    def gap(self) -> float:
        """How far the objective is above its lower bound, as a fraction of the bound."""
        if self.lower_bound_s <= 0:
            return 0.0
        return self.objective_value / self.lower_bound_s - 1.0


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
    exact_nodes: int | None = None,
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
    for large orders; 0: none). ``exact_nodes`` bounds the exact search of orders of at most
    :data:`~pipesim.synthesis.exact.MAX_ACTIONS` actions (None: :data:`EXACT_NODES`; 0:
    none). ``progress`` advances once per candidate, per warm-up run, per search simulation
    and for the exact search (:func:`synthesis_steps` of them)."""
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
    searching = search_evaluations != 0
    made = _warmed_up(
        costs, placement, microbatches, count, limit, objective, budget - spent, searching, bar
    )
    results = []
    for name, schedule in candidates:
        results.append((name, schedule, simulate(schedule, costs)))
        bar.update()
    # the warm-up's candidates advanced the progress once per greedy run already
    results += [(name, schedule, simulate(schedule, costs)) for name, schedule in made]
    values = [measure(result) for _, _, result in results]
    fixed_names = {name for name, _ in seeds}

    def rank(index: int) -> tuple[float, bool, int]:
        """Best first; within a rounding error of the best, a fixed schedule (one with a
        name and a paper) before a made one; then the order tried first."""
        value = values[index]
        tied = value <= best_value * (1 + TIE_TOLERANCE)
        return (best_value if tied else value, results[index][0] not in fixed_names, index)

    best_value = min(values)
    ranked = sorted(range(len(results)), key=rank)
    chosen, best, result = results[ranked[0]]
    table = [(results[i][0], values[i]) for i in ranked]
    bar.set_postfix_str("local search")
    search_budget = _search_budget(placement, microbatches, search_evaluations)
    if search_budget:
        searched = improve(
            best,
            costs,
            measure,
            lambda order: within(max(count.peaks(order)), limit),
            search_budget,
            start=result,
            on_evaluation=bar.update,
        )
        if measure(searched.result) < values[ranked[0]] * (1 - TIE_TOLERANCE):
            chosen, best, result = f"{chosen}+search", searched.schedule, searched.result
            table.insert(0, (chosen, measure(result)))
    optimal = False
    if _exact_applies(placement, microbatches, exact_nodes):
        bar.set_postfix_str("exact")
        found = optimum(
            costs,
            microbatches,
            count,
            limit,
            placement=placement,
            objective=objective,
            upper_bound=measure(result),
            node_limit=EXACT_NODES if exact_nodes is None else exact_nodes,
        )
        bar.update()
        if found.schedule is not None:
            exact_result = simulate(found.schedule, costs)
            if measure(exact_result) < measure(result) * (1 - TIE_TOLERANCE):
                chosen, best, result = "exact", found.schedule, exact_result
                table.insert(0, (chosen, measure(result)))
        # Proven under the synthesiser's times; the engine's agree unless transfers queued.
        optimal = found.proven and measure(result) <= found.value_s * (1 + TIE_TOLERANCE)
    # A made order already is one (validated when built); a fixed one is renamed.
    schedule = (
        best
        if best.name == SYNTH_NAME
        else Schedule(SYNTH_NAME, microbatches, best.placement, best.device_actions)
    )
    bound = lower_bound(costs, microbatches, placement, objective=objective, memory=(count, limit))
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
        bound.value_s,
        optimal,
    )


def _exact_applies(placement: Sequence[int], microbatches: int, asked: int | None) -> bool:
    """Whether the exact search runs: asked for (``exact_nodes`` not 0) and the order within
    its :data:`~pipesim.synthesis.exact.MAX_ACTIONS`."""
    if asked is not None and (isinstance(asked, bool) or not isinstance(asked, int) or asked < 0):
        raise ScheduleError(f"exact_nodes must be an integer >= 0, got {asked!r}")
    return asked != 0 and 3 * len(placement) * microbatches <= MAX_ACTIONS


def _warmed_up(
    costs: PipelineCosts,
    placement: tuple[int, ...],
    microbatches: int,
    count: MemoryCount,
    limit: float,
    objective: str,
    budget: int,
    searching: bool,
    bar: Progress,
) -> list[tuple[str, Schedule]]:
    """The per-stage warm-up candidates (:mod:`pipesim.synthesis.warmup`; one stage per
    device): each of :data:`WARMUP_POLICIES` with the counts of each rule, the best of them
    by the scheduler's estimate, then its counts searched. ``budget`` is what is left of the
    portfolio's greedy runs: the warm-up's runs come out of it, the search's out of
    :data:`WARMUP_WORK` (none unless ``searching``). At most two candidates: the best run
    and, when it improved, the searched one."""
    steps = warmup_steps(placement, microbatches, searching)
    if not steps or budget < len(WARMUP_RULES) * len(WARMUP_POLICIES):
        bar.update(steps)
        return []
    runs: list[tuple[float, str, GreedyPolicy, tuple[int, ...], Schedule]] = []
    for rule in WARMUP_RULES:
        counts = warmup_counts(costs, microbatches, count, limit, rule)
        for policy in WARMUP_POLICIES:
            bar.update()
            run = greedy_run(costs, placement, microbatches, limit, policy, count, counts)
            if run is None:  # stalled under the limit: no candidate
                continue
            name = f"{policy.name}-warmup-{rule}"
            rows = Schedule(SYNTH_NAME, microbatches, placement, run.rows)
            runs.append((estimate(run, costs, objective), name, policy, counts, rows))
    left = steps - len(WARMUP_RULES) * len(WARMUP_POLICIES)
    if not runs:
        bar.update(left)
        return []
    value, name, policy, counts, first = min(runs, key=lambda run: run[0])
    made = [(name, first)]
    if not left:
        return made
    searched = search_counts(
        costs, microbatches, count, limit, policy, counts, objective, left, bar.update
    )
    if searched is not None:
        bar.update(left - searched.runs)
        if searched.value < value * (1 - TIE_TOLERANCE):
            rows = Schedule(SYNTH_NAME, microbatches, placement, searched.run.rows)
            made.append((f"{name}+counts", rows))
    return made


def warmup_steps(placement: Sequence[int], microbatches: int, searching: bool = True) -> int:
    """The greedy runs of the warm-up candidates, at most (0 where they do not apply): one
    per rule and policy, and when ``searching`` the counts' search (:data:`WARMUP_WORK` /
    3·S·M runs, at most :data:`WARMUP_SEARCH_RUNS`, at least one)."""
    if not one_stage_per_device(placement):
        return 0
    actions = 3 * len(placement) * microbatches
    search = max(1, min(WARMUP_SEARCH_RUNS, WARMUP_WORK // max(1, actions))) if searching else 0
    return len(WARMUP_RULES) * len(WARMUP_POLICIES) + search


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
    placement: Sequence[int],
    microbatches: int,
    search_evaluations: int | None = None,
    exact_nodes: int | None = None,
) -> int:
    """How many times :func:`synthesize` advances its progress: a candidate per greedy
    policy and per seed of the placement, the warm-up's greedy runs, the local search's
    simulations (at most) and the exact search (one, where it runs)."""
    placement = tuple(placement)
    return (
        len(policies(minimum_limit(placement)))
        + len(_seeds(placement))
        + warmup_steps(placement, microbatches, search_evaluations != 0)
        + _search_budget(placement, microbatches, search_evaluations)
        + (1 if _exact_applies(placement, microbatches, exact_nodes) else 0)
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
