"""``pipesim plan``: the best configurations of a model on N devices, found exactly.

The space (:mod:`.space`) is every hybrid-parallel configuration: tensor-parallel size,
pipeline depth, data parallelism, schedule, chunks, micro-batches and their size, recomputation,
optimizer sharding and sequence parallelism, with T x K x D = N.

1. Enumerate the space.
2. For each candidate: the balanced partition of its K·v stages (exact, transfers counted);
   if that overflows a device under the schedule's peak memory (closed form, exactly the
   simulator's), the memory-aware partition; if none fits, the candidate is rejected as out
   of memory with the device and the bytes. Recomputing the first N blocks of each stage
   (``layers`` in the space) is resolved here to the fewest N that fit memory, and the few N
   above it up to the first whose balanced partition fits
   (:meth:`PlanContext.evaluate_all`); the partitions weigh the N recomputed blocks of every
   stage exactly (:class:`pipesim.partition.RecomputeFirst`).
3. A lower bound on its iteration time (:mod:`.bounds`), all-reduce included.
4. Candidates in order of their bound are simulated in full until the next bound is slower
   than the ``top``-th best simulated time: the ranking of the top plans is then exact (no
   candidate left out could beat them).
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import math
import time
import uuid
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

import numpy as np

from pipesim.common import checks
from pipesim.common.checks import SpecError
from pipesim.common.limits import Limit, check
from pipesim.common.limits import limit as limit_now
from pipesim.common.progress import progress
from pipesim.common.units import format_bytes
from pipesim.common.workers import InProcess, Workers, ordered_map
from pipesim.config.run_config import RunConfig
from pipesim.costs.data_parallel import add_to_optimizer_step, sync_times_s
from pipesim.costs.model_on_hardware import layer_costs_on_hardware, model_on_hardware
from pipesim.costs.pipeline_costs import PipelineCosts, StageCosts
from pipesim.engine import simulate
from pipesim.engine.durations import OVERLAPPED_SCHEDULES, hideable_s
from pipesim.errors import named
from pipesim.hardware.catalogue import HardwareSpec
from pipesim.hardware.collectives import Collective, collective_time_s
from pipesim.memory.forms import MemoryForm
from pipesim.parallel.config import Parallelism, Recompute
from pipesim.parallel.groups import TensorGroup
from pipesim.parallel.ranks import RankLayout
from pipesim.parallel.sharding import ZERO_STAGES
from pipesim.partition import (
    BeyondComputeLimit,
    NoPartitionFits,
    PartitionProblem,
    RecomputeFirst,
    balanced,
    memory_aware,
    memory_forms,
)
from pipesim.partition.from_model import layer_costs, model_problem
from pipesim.partition.solver import Partition, certainly_overflows, stage_peaks
from pipesim.plan.bounds import iteration_lower_bound_s
from pipesim.plan.space import (
    DEFAULT_RECOMPUTE,
    DEFAULT_SCHEDULES,
    RECOMPUTE_LAYERS,
    Candidate,
    SpaceLimits,
    candidates,
    divisors,
    recompute_layers,
    recomputes_in_full,
)
from pipesim.request.cost_request import copy_sync_s, on_copies
from pipesim.schedules import Schedule, UpdateRule, build
from pipesim.synthesis.synthesis import SYNTH_NAME
from pipesim.workload.model import Model
from pipesim.workload.transformer import check_tensor_parallel, is_block

# No-flush schedules are timed in steady state over this many steps back to back. Their steps
# run as one 1F1B stream (pipesim.schedules.unroll.no_flush_order), so the per-step interval is
# never below a device's own work and the bounds hold unrelaxed for every update rule (an
# earlier weave of the steps read low, by up to a step / (S - 1), and needed relaxing).
NO_FLUSH_STEPS = 6
PLAN_NODE_BUDGET = 5_000  # per memory-aware search with several stages per device
# Recompute ``layers``: below the fewest N whose balanced partition fits, the N whose
# memory-aware partitions fit are tried one by one down to this many, then the fewest of the
# rest found by bisection.
RECOMPUTE_SCAN = 4


@dataclass(frozen=True)
class PlanSettings:
    """What to plan for: a run's configuration (its model, hardware and recipe; the parallel
    layout is what the search chooses, so ``run.parallelism`` is not read), the devices and
    batch, and the space to search. ``model_name`` and ``hardware_name`` say how the caller
    named the model and the hardware (a TOML path, as on the command line: a report repeats
    them); by default their own names. ``time_budget_s``: the search stops after this many
    seconds with what it has ranked (None: it runs to its end). ``context_sizes`` are the
    context-parallel sizes to try (1: none), ``expert_sizes`` the expert-parallel ones (None:
    on a mixture-of-experts model every power of two up to 64 that divides its experts)."""

    run: RunConfig
    devices: int
    batch: int
    schedules: tuple[str, ...] = DEFAULT_SCHEDULES
    top: int = 5
    chunk_options: tuple[int, ...] = (2, 4)
    tensor_sizes: tuple[int, ...] | None = None
    recompute: tuple[str, ...] | None = None
    zero: tuple[int, ...] = (1,)
    sequence_parallel: tuple[bool, ...] = (True,)
    model_name: str = ""
    hardware_name: str = ""
    context_sizes: tuple[int, ...] = (1,)
    expert_sizes: tuple[int, ...] | None = None
    time_budget_s: float | None = None

    @property
    def model(self) -> str:
        """The model as the caller named it."""
        return self.model_name or self.run.model.name

    @property
    def hardware(self) -> str:
        """The hardware as the caller named it."""
        return self.hardware_name or self.run.hardware.name


@dataclass(frozen=True)
class Evaluated:
    """One candidate after partitioning and bounding (and simulation for finalists)."""

    candidate: Candidate
    partition: tuple[int, ...]
    steps: int
    bound_s: float
    peak_memory_bytes: tuple[float, ...]
    capacity_bytes: float
    allreduce_s: float
    partition_objective: str
    oom_reason: str | None = None
    beyond_limit: bool = False
    iteration_time_s: float | None = None
    bubble_fraction: float | None = None
    simulated_peak_bytes: float | None = None
    mfu: float | None = None
    hfu: float | None = None

    @property
    def oom(self) -> bool:
        """True when no partition fits."""
        return self.oom_reason is not None

    @property
    def simulated(self) -> bool:
        """True when the full simulation ran."""
        return self.iteration_time_s is not None

    @property
    def simulated_oom(self) -> bool:
        """True when the simulated peak exceeds the device's capacity (False before the
        simulation); such a finalist is not ranked."""
        return (self.simulated_peak_bytes or 0.0) > self.capacity_bytes


@dataclass
class PlanReport:
    """The search's outcome: ranked plans, the best rejected alternatives, the configurations
    examined in full (partition, memory, bound; ``simulated`` of them simulated), how many
    the space held (every one bounded), and the wall time."""

    settings: PlanSettings
    plans: list[Evaluated]
    rejected: list[tuple[Evaluated, str]]
    evaluated: list[Evaluated]
    seconds: float
    simulated: int = 0
    configurations: int = 0
    cluster: str = ""
    stopped: str | None = None
    unexamined_bound_s: float | None = None

    @property
    def exhaustive(self) -> bool:
        """True when the search ran to its end: the plans are the space's best."""
        return self.stopped is None


def plan(
    settings: PlanSettings, *, show_progress: bool = True, workers: Workers | None = None
) -> PlanReport:
    """Search ``settings``' space; see the module docstring. ``workers`` other than this process
    (a Dask cluster's, :mod:`application.workers`) partition and simulate candidates ahead of
    the search; the search keeps only what it would have computed itself, so the report is the
    same as without them.

    numpy's overflow warnings are silenced throughout (here and in the workers' tasks): a
    model of absurd costs (1e300 FLOPs or optimizer bytes) overflows the partition solver's
    sums of squares to infinity, which is expected; what follows (a refusal of the costs, an
    out-of-memory rejection, or plans of huge but finite times) is reported in one line of
    its own, and the warnings would only print lines of source code above it."""
    with np.errstate(over="ignore", invalid="ignore"):
        return _plan(settings, show_progress, InProcess() if workers is None else workers)


def _plan(settings: PlanSettings, show_progress: bool, workers: Workers) -> PlanReport:
    started = time.perf_counter()
    if settings.devices < 1 or settings.batch < 1 or settings.top < 1:
        raise SpecError(
            f"{named('devices')}, {named('batch')} and {named('top')} must be integers >= 1, "
            f"got {settings.devices}, {settings.batch} and {settings.top}"
        )
    check(Limit.CLUSTER_DEVICES, settings.devices, f"{named('devices')} {settings.devices:,}")
    for chunks in settings.chunk_options:
        check(Limit.CHUNKS, chunks, f"{named('chunks')} {chunks:,}")
    if not settings.schedules:
        raise SpecError(f"{named('schedules')} must name at least one schedule, got none")
    if set(settings.schedules) == {SYNTH_NAME}:
        raise SpecError(
            f"{named('schedules')} {SYNTH_NAME}: a synthesised schedule is offered beside the "
            "fixed ones (for the shapes of their best plans); name at least one registered "
            "schedule too"
        )
    model, hardware = settings.run.trained_model, settings.run.job_hardware
    limits = space_limits(model, hardware, settings)
    # the space is bounded as it is enumerated, before it is held or any candidate costed
    most = limit_now(Limit.CONFIGS)
    space = list(
        itertools.islice(
            candidates(
                settings.devices,
                settings.batch,
                limits,
                settings.schedules,
                settings.chunk_options,
            ),
            most + 1,
        )
    )
    check(
        Limit.CONFIGS,
        len(space),
        f"plan of {settings.devices:,} devices and batch {settings.batch:,}: its search space",
    )
    if not space:
        raise SpecError(
            f"no configuration: {settings.devices} devices and batch {settings.batch} admit no "
            f"schedule of {', '.join(settings.schedules)} for {len(model.layers)} layers "
            f"(tensor-parallel sizes {', '.join(map(str, limits.tensor_sizes))})"
        )
    context = PlanContext(settings)
    ordered = sorted(((context.quick_bound(c), i, c) for i, c in enumerate(space)))
    examined: list[Evaluated] = []
    finished: list[Evaluated] = []
    seen: set[tuple[Candidate, tuple[int, ...]]] = set()
    limit = math.inf
    # the first configurations that fit, simulated ahead: their top-th time is the limit
    # every evaluation is given (the same on a cluster's workers: the same evaluations)
    seeds = context.seed_times([c for _, _, c in ordered], settings.top)
    if len(seeds) >= settings.top:
        limit = context.time_limit_s = seeds[settings.top - 1]
    stopped: str | None = None
    unexamined: float | None = None
    budget = settings.time_budget_s
    with (
        progress(len(space), "plan: configurations", enabled=show_progress) as bar,
        contextlib.closing(_evaluations(context, [c for _, _, c in ordered], workers)) as results,
    ):
        quick = 0.0
        try:
            for position, (quick, _, candidate) in enumerate(ordered):
                if quick * (1 - 1e-9) > limit:
                    bar.update(len(ordered) - position)  # the rest: slower than the top plans
                    break
                if budget is not None and time.perf_counter() - started > budget:
                    stopped, unexamined = f"its time budget of {budget:g} s ran out", quick
                    break
                searched, items = next(results)
                assert searched == candidate  # in order, whatever ran them
                bar.update()
                for item, simulated in items:
                    # recompute ``layers`` resolves to counts that may be configurations of
                    # their own (a count asked for, ``none``, ``full``): each examined once
                    if (item.candidate, item.partition) in seen:
                        continue
                    seen.add((item.candidate, item.partition))
                    examined.append(item)
                    ahead = (item.candidate, item.partition) in context.simulations
                    if not (_may_win(item, limit) or ahead):
                        continue  # (one simulated ahead fits, and is ranked whatever its bound)
                    finished.append(simulated if simulated is not None else context.simulated(item))
                    times = sorted(
                        e.iteration_time_s or math.inf for e in finished if not e.simulated_oom
                    )
                    if len(times) >= settings.top:
                        limit = times[settings.top - 1]
                    if times:
                        bar.set_postfix_str(f"{len(finished)} simulated, best {times[0]:.4g} s")
        except KeyboardInterrupt:  # Ctrl-C or a stop signal: what is ranked so far stands
            stopped, unexamined = "interrupted", quick
    if stopped is not None:  # the configurations simulated ahead count, examined or not yet
        for item in context.seeds:
            if (item.candidate, item.partition) not in seen:
                seen.add((item.candidate, item.partition))
                examined.append(item)
                finished.append(context.simulated(item))
    if SYNTH_NAME in settings.schedules and stopped is None:
        finished += context.synthesized(finished, settings.top)
    ranked = sorted(
        (e for e in finished if not e.simulated_oom),
        key=lambda e: e.iteration_time_s or math.inf,
    )
    plans = ranked[: settings.top]
    done = {(e.candidate, e.partition): e for e in finished}
    examined = [done.get((e.candidate, e.partition), e) for e in examined]
    rejected = _rejected(plans, ranked[settings.top :], examined, settings.top)
    return PlanReport(
        settings,
        plans,
        rejected,
        examined,
        time.perf_counter() - started,
        len(finished),
        len(space),
        hardware.describe(settings.devices),
        stopped,
        unexamined,
    )


Evaluations = list[tuple[Evaluated, Evaluated | None]]
"""What one candidate of the space became (:meth:`PlanContext.evaluate_all`: one
configuration, or several for recompute ``layers``), each with its simulation when a cluster's
worker ran it already (None: the search simulates it if it needs it)."""


def _evaluations(
    context: PlanContext, ordered: list[Candidate], workers: Workers
) -> Generator[tuple[Candidate, Evaluations], None, None]:
    """Each candidate evaluated, in order: here, one at a time as the search asks (and
    simulated by the search when it needs it); in worker processes (a local pool, a cluster),
    several ahead, each one that fits in memory and could still win simulated too (the search
    discards what it would not have computed). Each worker builds its own context once from
    the settings and keeps its caches from one candidate to the next."""
    if isinstance(workers, InProcess):
        for candidate in ordered:
            yield candidate, [(item, None) for item in context.evaluate_all(candidate)]
        return
    shared = workers.share(_Shared(uuid.uuid4().hex, context.settings, context.time_limit_s))
    yield from ordered_map(workers, _evaluate_and_simulate, ordered, shared)


@dataclass(frozen=True)
class _Shared:
    """What a worker needs to evaluate a search's candidates as the searching process does:
    the settings (from which it builds its context once, ``token`` naming the search) and the
    limit the search gives every evaluation (:meth:`PlanContext.seed_times`)."""

    token: str
    settings: PlanSettings
    time_limit_s: float


_WORKER_CONTEXTS: dict[str, PlanContext] = {}  # a worker's context, for one search at a time


def _evaluate_and_simulate(candidate: Candidate, shared: _Shared) -> tuple[Candidate, Evaluations]:
    """A worker's task: the candidate evaluated, and each configuration it became simulated
    when it fits and its bound is within the limit (numpy's overflow warnings silenced, as in
    :func:`plan`)."""
    context = _WORKER_CONTEXTS.get(shared.token)
    if context is None:
        _WORKER_CONTEXTS.clear()
        context = _WORKER_CONTEXTS[shared.token] = PlanContext(shared.settings)
        context.time_limit_s = shared.time_limit_s
    with np.errstate(over="ignore", invalid="ignore"):
        items = context.evaluate_all(candidate)
        return candidate, [
            (item, context.simulated(item) if _may_win(item, shared.time_limit_s) else None)
            for item in items
        ]


def _may_win(item: Evaluated, limit: float) -> bool:
    """Whether the search could simulate ``item``: it fits and its bound is within the
    limit (the search's own limit only falls from there)."""
    return not item.oom and not item.beyond_limit and item.bound_s * (1 - 1e-9) <= limit


def space_limits(model: Model, hardware: HardwareSpec, settings: PlanSettings) -> SpaceLimits:
    """What the model and the hardware let the search try: tensor-parallel sizes that divide a
    node's devices and split the model evenly (asked-for sizes are checked the same way; a
    model given as layers has none but 1), layer-level recomputation on a transformer:
    ``none``, ``selective``, ``full``, a count N of each stage's first blocks (at most the
    model's blocks), or ``layers`` (N chosen per configuration, ``none`` searched with it:
    N = 0)."""
    arch = model.architecture
    node = hardware.devices_per_node or settings.devices
    if settings.tensor_sizes is not None:
        for tensor in settings.tensor_sizes:
            if settings.devices % tensor:
                raise SpecError(
                    f"{named('tensor_parallel')} {tensor} must divide the "
                    f"{settings.devices:,} devices"
                )
            if tensor > 1:
                if arch is None:
                    raise SpecError(
                        f"{named('tensor_parallel')} {tensor}: model {model.name!r} is given "
                        "as layers, "
                        "with no heads or widths to split"
                    )
                check_tensor_parallel(arch, tensor)
                if node % tensor:
                    raise SpecError(
                        f"{named('tensor_parallel')} {tensor} must divide the {node} devices "
                        "of one "
                        f"{hardware.name} node: the planner keeps tensor parallelism in a node"
                    )
        sizes = tuple(sorted(set(settings.tensor_sizes)))
    elif arch is None:
        sizes = (1,)
    else:
        sizes = tuple(t for t in divisors(node) if settings.devices % t == 0 and _splits(arch, t))
    blocks = sum(1 for layer in model.layers if is_block(layer)) if arch is not None else 0
    recompute: tuple[str, ...]
    if settings.recompute is not None:
        labels = [_recompute_label(mode, model, blocks) for mode in settings.recompute]
        if RECOMPUTE_LAYERS in labels:
            labels.append("none")  # N = 0: the fewest layers may be none
        # each mode once, in the order given (--recompute full,full is one mode)
        recompute = tuple(dict.fromkeys(labels))
    else:
        recompute = DEFAULT_RECOMPUTE if arch is not None else ("none",)
    for stage in settings.zero:
        if stage not in ZERO_STAGES or isinstance(stage, bool):
            raise SpecError(f"{named('zero')} must be 0, 1, 2 or 3, got {stage}")
    return SpaceLimits(
        len(model.layers),
        sizes,
        recompute,
        tuple(dict.fromkeys(settings.zero)),
        tuple(dict.fromkeys(settings.sequence_parallel)) if arch is not None else (False,),
        tuple(t for t in sizes if arch is not None and arch.seq % t == 0),
        blocks,
        _context_sizes(settings.context_sizes, model, settings.devices),
        _expert_sizes(settings.expert_sizes, model),
    )


def _context_sizes(sizes: tuple[int, ...], model: Model, devices: int) -> tuple[int, ...]:
    """The context-parallel sizes asked for, each checked against the model (a transformer
    whose sequence splits into 2 x CP chunks) and the devices (CP must divide them)."""
    out = tuple(sorted(set(sizes)))
    arch = model.architecture
    for cp in out:
        checks.positive_int(named("context_parallel"), cp)
        if cp == 1:
            continue
        if arch is None:
            raise SpecError(
                f"{named('context_parallel')} {cp}: model {model.name!r} is given as layers, "
                "with no sequence to split"
            )
        if arch.seq % (2 * cp):
            raise SpecError(
                f"{named('context_parallel')} {cp}: the sequence ({arch.seq:,} tokens) must "
                f"split into {2 * cp} equal chunks"
            )
        if devices % cp:
            raise SpecError(f"{named('context_parallel')} {cp} must divide the {devices:,} devices")
    return out


def _expert_sizes(sizes: tuple[int, ...] | None, model: Model) -> tuple[int, ...]:
    """The expert-parallel sizes to try: those asked for (each dividing the experts), or on
    a mixture-of-experts model every power of two that divides its experts, up to 64; 1
    on a dense model."""
    arch = model.architecture
    moe = None if arch is None else arch.moe
    if sizes is None:
        if moe is None:
            return (1,)
        return tuple(e for e in (1, 2, 4, 8, 16, 32, 64) if moe.experts % e == 0)
    out = tuple(sorted(set(sizes)))
    for ep in out:
        checks.positive_int(named("expert_parallel"), ep)
        if ep > 1 and (moe is None or moe.experts % ep):
            what = "has no experts" if moe is None else f"has {moe.experts} experts"
            raise SpecError(
                f"{named('expert_parallel')} {ep}: model {model.name!r} {what}; the size must "
                "divide the experts"
            )
    return out


def _recompute_label(mode: str, model: Model, blocks: int) -> str:
    """One ``--recompute`` value of a plan as its label in the space: ``none``,
    ``selective``, ``full``, a count of layers per stage, or ``layers``; a value the model
    cannot take is one line naming it."""
    if mode.strip().lower() == RECOMPUTE_LAYERS:
        label = RECOMPUTE_LAYERS
    else:
        try:
            parsed = Recompute.parse(mode)
        except SpecError:
            raise SpecError(
                f"{named('recompute')} must be none, selective, full, a number of layers per "
                f"stage or {RECOMPUTE_LAYERS} (the fewest that fit), got {mode!r}"
            ) from None
        label = parsed.label
    if model.architecture is None and label != "none":
        raise SpecError(
            f"{named('recompute')} {mode}: model {model.name!r} is given as layers, with none to "
            "recompute; its stages can re-materialize (remat is searched)"
        )
    count = recompute_layers(label)
    if count is not None and count > blocks:
        raise SpecError(
            f"{named('recompute')} {mode}: model {model.name!r} has {blocks} transformer blocks; "
            f"give at most {blocks} layers per stage, or {named('recompute')} full"
        )
    return label


def _splits(arch: object, tensor: int) -> bool:
    try:
        check_tensor_parallel(arch, tensor)  # type: ignore[arg-type]
    except SpecError:
        return False
    return True


@dataclass(frozen=True)
class SyncTerms:
    """A stage's data-parallel communication as a line in its bytes."""

    gradient_per_byte: float
    weight_per_byte: float
    fixed_s: float


LayerKey = tuple[int, bool, str, int, tuple[int, ...]]
"""(T, sequence parallel, recompute, b, sharding): what one rank's per-layer costs depend on
(the sharding is :func:`sharding_key`'s); under recompute N, what its partitions and
stages depend on besides the layers."""


def layer_key(c: Candidate) -> LayerKey:
    """The per-layer costs ``c`` reads (under recompute N, N's: its partitions and stages are
    cached by it)."""
    return (c.tensor, c.sequence_parallel, c.recompute, c.microbatch_size, sharding_key(c))


def sharding_key(c: Candidate) -> tuple[int, ...]:
    """What of ``c``'s ZeRO stage its per-layer costs depend on: the ranks sharing the state,
    the stage (1 stands for every stage that shards the optimizer alone, or nothing at all
    with one replica) and, for ZeRO-2/3, whether the layers sit in a pipeline
    (:mod:`pipesim.parallel.sharding`)."""
    spread = _spread_key(c)
    replicas = c.data_parallel * c.context
    if not c.zero or replicas == 1:
        return (1, 0, True, *spread)
    if c.zero == 1:
        return (replicas, 1, True, *spread)
    return (replicas, c.zero, c.stages > 1, *spread)


def _spread_key(c: Candidate) -> tuple[int, ...]:
    """What else of ``c`` one rank's layers depend on: CP, and with EP the expert groups'
    place in the job (EP, D and K number their ranks)."""
    if c.context == 1 and c.expert == 1:
        return ()
    if c.expert == 1:
        return (c.context,)
    return (c.context, c.expert, c.data_parallel, c.devices)


def table_key(c: Candidate, recompute: str | None = None) -> LayerKey:
    """The table of one rank's per-layer costs that ``c`` reads: its own recomputation's, or
    under recompute N (and ``layers``) the table without recomputation, whose blocks its
    stages swap for the ``full`` table's first N (``recompute`` names that other table)."""
    if recompute is None:
        recompute = "none" if recomputes_first(c) else c.recompute
    return (c.tensor, c.sequence_parallel, recompute, c.microbatch_size, sharding_key(c))


def recomputes_first(c: Candidate) -> bool:
    """True when ``c`` recomputes the first N blocks of each stage (a count, or ``layers``
    before it is resolved)."""
    return c.recompute == RECOMPUTE_LAYERS or recompute_layers(c.recompute) is not None


def _with_recompute(c: Candidate, layers_per_stage: int) -> Candidate:
    """``c`` recomputing its stages' first ``layers_per_stage`` blocks (``none`` for 0)."""
    label = str(layers_per_stage) if layers_per_stage else "none"
    return dataclasses.replace(c, recompute=label)


class PlanContext:
    """Caches shared across candidates: one rank's layer costs per (T, SP, recompute, b),
    schedules' memory forms, balanced partitions per shape, collective slopes per group, and
    each configuration's evaluation (recompute ``layers`` evaluates several counts, which
    other candidates may be too)."""

    def __init__(self, settings: PlanSettings) -> None:
        self.run = settings.run
        self.model = settings.run.trained_model
        self.hardware = settings.run.job_hardware
        self.settings = settings
        self.job = self.hardware.network(settings.devices)
        self.layers: dict[LayerKey, tuple[StageCosts, ...]] = {}
        # per schedule shape: its memory forms (one step, or NO_FLUSH_STEPS without a
        # flush), its placement and whether it flushes
        self.forms: dict[
            tuple[str, int, int, int, bool],
            tuple[tuple[MemoryForm, ...], tuple[int, ...], bool],
        ] = {}
        self.balanced: dict[tuple[int, tuple[int, ...], LayerKey, bool], Partition] = {}
        self.compute_bottleneck: dict[tuple[int, LayerKey, bool, bool], float] = {}
        self.sums: dict[tuple[LayerKey, bool, bool], tuple[float, float, float, float, float]] = {}
        self.syncs: dict[tuple[int, ...], SyncTerms] = {}
        self.spans: dict[tuple[LayerKey, int, int], StageCosts] = {}
        self.rules: dict[str, tuple[UpdateRule, int, bool]] = {}
        # per layer table and remat: the blocks' count, least forward and least work
        self.block_minima: dict[tuple[LayerKey, bool], tuple[int, float, float]] = {}
        self.schedules: dict[tuple[str, int, int, int, bool], Schedule] = {}
        self.extras: dict[LayerKey, tuple[float, float]] = {}
        self.evaluations: dict[Candidate, Evaluated] = {}
        self.blocks = tuple(is_block(layer) for layer in self.model.layers)
        # the top-th best time of the configurations simulated ahead (:meth:`seed_times`): a
        # configuration whose every partition that fits memory needs longer is dropped
        # without its partition searched
        self.time_limit_s = math.inf
        self.simulations: dict[tuple[Candidate, tuple[int, ...]], Evaluated] = {}
        self.seeds: list[Evaluated] = []  # what seed_times evaluated and simulated

    def parallelism(self, c: Candidate, recompute: str | None = None) -> Parallelism:
        """``c``'s parallel configuration besides the pipeline (with ``recompute`` instead of
        its own recomputation when given)."""
        return Parallelism(
            tensor=c.tensor,
            sequence_parallel=c.sequence_parallel,
            recompute=Recompute.parse(c.recompute if recompute is None else recompute),
            zero=c.zero,
            data=c.data_parallel,
            context=c.context,
            expert=c.expert,
        )

    def layout(self, c: Candidate) -> RankLayout:
        """``c``'s ranks: which recomputation it uses does not change them, so they are read
        without it (a recompute ``layers`` candidate stands for several counts, each with the
        same ranks)."""
        return self.parallelism(c, "none").layout(c.devices)

    def run_of(self, c: Candidate) -> RunConfig:
        """The run's configuration under ``c``'s parallel layout."""
        return self.run.with_parallelism(self.parallelism(c))

    def groups(self, c: Candidate) -> TensorGroup | None:
        """Where ``c``'s tensor-, context- and expert-parallel collectives run: its first
        pipeline device's groups on the job's network."""
        if c.context == 1 and c.expert == 1:
            return self.tensor_group(c.tensor)
        return TensorGroup.of(self.job, self.layout(c), self.run.recipe.tp_comm_overlap)

    def tensor_group(self, tensor: int) -> TensorGroup | None:
        """Where the tensor-parallel collectives run: the first T ranks of the job, overlapped
        with the GEMMs where the recipe says so (as model_on_hardware's group)."""
        return TensorGroup.first(self.job, tensor, self.run.recipe.tp_comm_overlap)

    def layer_costs(self, c: Candidate, recompute: str | None = None) -> tuple[StageCosts, ...]:
        """One rank's per-layer costs for ``c`` (cached per :data:`LayerKey`): under recompute
        N the layers without recomputation (:func:`table_key`; ``recompute`` names another
        table, ``full`` for the twins)."""
        key = table_key(c, recompute)
        if key not in self.layers:
            self.layers[key] = layer_costs(
                self.model,
                self.hardware.cluster(1),
                c.microbatch_size,
                parallelism=self.parallelism(c, key[2]),
                tensor_group=self.groups(c),
                pipelined=c.stages > 1,
            )
        return self.layers[key]

    def recomputed(self, c: Candidate) -> RecomputeFirst | None:
        """Under recompute N, what its partition problem swaps into each stage's first N
        blocks: the ``full`` table's layers; None otherwise."""
        count = recompute_layers(c.recompute)
        if count is None:
            return None
        return RecomputeFirst(count, self.layer_costs(c, "full"), self.blocks)

    def problem(self, candidate: Candidate, placement: tuple[int, ...]) -> PartitionProblem:
        return model_problem(
            self.model,
            self.hardware.cluster(
                candidate.devices, rank_stride=candidate.tensor * candidate.context
            ),
            candidate.microbatch_size,
            placement,
            rematerialize=candidate.remat,
            layers=self.layer_costs(candidate),
            recomputed=self.recomputed(candidate),
        )

    def _sums(self, c: Candidate) -> tuple[float, float, float, float, float]:
        """Over every layer: work per micro-batch (F + B, F twice under remat), the one-batch
        path (F and the input gradient), optimizer steps, gradient and weight bytes (under
        recompute N, of the layers without recomputation: :meth:`recompute_extra` adds the
        least the N blocks add). Under DualPipe's overlapped pairs each pass counts without
        the communication it may hide (:func:`pipesim.engine.durations.hideable_s`)."""
        overlapped = c.schedule in OVERLAPPED_SCHEDULES
        key = (table_key(c), c.remat, overlapped)
        if key not in self.sums:
            layers = self.layer_costs(c)
            again = 2 if c.remat else 1
            hidden = sum(hideable_s(x) for x in layers) if overlapped else 0.0
            self.sums[key] = (
                sum(x.forward_s * again + x.backward_s for x in layers) - hidden,
                sum(x.forward_s * (again - 1) + x.forward_s + x.input_grad_s for x in layers)
                - hidden,
                sum(x.optimizer_step_s for x in layers),
                # the routed experts' gradients and weights go over the smaller expert data
                # group: left out of the data group's bytes (the bound only gets lower)
                sum(x.whole_gradient_bytes - x.expert_gradient_bytes for x in layers),
                sum(x.whole_parameter_bytes for x in layers)
                - sum(x.expert_gradient_bytes for x in layers) * self._weight_per_gradient_byte,
            )
        return self.sums[key]

    @property
    def _weight_per_gradient_byte(self) -> float:
        """A parameter's weight bytes over its gradient bytes (experts' weights from their
        gradient bytes)."""
        model = self.model
        if not model.gradient_bytes_per_parameter:
            return 0.0
        return model.weight_bytes_per_parameter / model.gradient_bytes_per_parameter

    def recompute_extra(self, c: Candidate) -> tuple[float, float]:
        """Under recompute N (N >= 1, or ``layers``): the least time one recomputed block adds
        to a stage per micro-batch, to its work (F + B) and to the one-batch path (F and the
        input gradient); (0, 0) otherwise."""
        if not recomputes_first(c):
            return 0.0, 0.0
        key = table_key(c)
        if key not in self.extras:
            plain, twins = self.layer_costs(c), self.layer_costs(c, "full")
            pairs = [(x, y) for x, y, block in zip(plain, twins, self.blocks, strict=True) if block]
            work = min(
                (y.forward_s + y.backward_s - x.forward_s - x.backward_s for x, y in pairs),
                default=0.0,
            )
            path = min(
                (y.forward_s + y.input_grad_s - x.forward_s - x.input_grad_s for x, y in pairs),
                default=0.0,
            )
            self.extras[key] = (max(work, 0.0), max(path, 0.0))
        return self.extras[key]

    def recomputing_stages(self, c: Candidate) -> int:
        """Under recompute N (N >= 1, or ``layers``) the fewest of the K·v stages that hold a
        block, each recomputing at least one, under any partition: every stage but those a
        layer other than a block fills alone; 0 otherwise."""
        if not recomputes_first(c):
            return 0
        blocks = sum(self.blocks)
        if blocks == 0:
            return 0
        return max(1, c.stages - (len(self.blocks) - blocks))

    def bottleneck(self, c: Candidate) -> float:
        """A lower bound on the slowest stage's compute per micro-batch over every partition
        into K·v stages: exact for a model given as layers (the balanced partition without
        transfers), for a transformer the larger of the average stage and the blocks some
        stage must hold (ceil(blocks / stages) of the identical blocks), each with the least
        that recompute N adds (one block recomputed on that stage; the stages that must hold
        a block, on average)."""
        overlapped = c.schedule in OVERLAPPED_SCHEDULES
        key = (c.stages, table_key(c), c.remat, overlapped)
        if key not in self.compute_bottleneck:
            layers = self.layer_costs(c)
            if overlapped:  # a pass may hide its exposed communication: count without it
                layers = tuple(_without_hideable(x) for x in layers)
            if self.model.architecture is None:
                free = PartitionProblem(
                    layers, 0.0, tuple(range(c.stages)), None, rematerialize=c.remat
                )
                value = balanced(free).bottleneck_s
            else:
                again = 2 if c.remat else 1
                work = [x.forward_s * again + x.backward_s for x in layers]
                blocks = [
                    w for w, layer in zip(work, self.model.layers, strict=True) if is_block(layer)
                ]
                least = min(blocks) if blocks else 0.0
                value = max(
                    sum(work) / c.stages,
                    max(work),
                    -(-len(blocks) // c.stages) * least,
                )
            self.compute_bottleneck[key] = value
        value = self.compute_bottleneck[key]
        extra, _ = self.recompute_extra(c)
        if extra <= 0:
            return value
        # every recompute-N variant shares the table's entry; the extra is added on top
        layers = self.layer_costs(c)
        if overlapped:
            layers = tuple(_without_hideable(x) for x in layers)
        work = [x.forward_s + x.backward_s for x in layers]
        blocks = [w for w, block in zip(work, self.blocks, strict=True) if block]
        return max(
            value,
            (sum(work) + self.recomputing_stages(c) * extra) / c.stages,
            -(-len(blocks) // c.stages) * min(blocks, default=0.0) + extra,
        )

    def quick_bound(self, c: Candidate) -> float:
        """A lower bound on ``c``'s iteration time that holds for every partition: the least
        possible slowest stage's compute for M micro-batches, the average device's share of
        all compute, optimizer steps and data-parallel communication, and (flush schedules)
        one micro-batch through every stage and back (forward and input gradient). Under
        recompute N (and ``layers``, whose N = 0 is the ``none`` configuration) at least one
        block of every stage that must hold one is recomputed."""
        work, path, optimizer, gradients, weights = self._sums(c)
        extra_work, extra_path = self.recompute_extra(c)
        recomputing = self.recomputing_stages(c)
        work += recomputing * extra_work
        path += recomputing * extra_path
        sync = 0.0
        # ZeRO-2/3 without a pipeline move their bytes during the passes, which may hide them
        per_pass = c.zero >= 2 and c.stages == 1
        if c.data_parallel > 1 and not self.run.recipe.overlap_grad_reduce and not per_pass:
            terms = self.sync_terms(c)
            sync = (
                terms.gradient_per_byte * gradients
                + terms.weight_per_byte * weights
                + terms.fixed_s * c.stages
            )
        average = (c.microbatches * work + optimizer + sync) / c.devices
        bottleneck = c.microbatches * self.bottleneck(c)
        rule, copies = self.rule_and_copies(c)
        if copies > 1:
            # each micro-batch runs through one copy: the device of the slowest stage runs it
            # for the micro-batches of that stage's copy only (at least M // C of them)
            bottleneck = (c.microbatches // copies) * self.bottleneck(c)
        if rule is not UpdateRule.FLUSH:  # steady state: no one-batch path
            # timed from the first step's end, by which a device may have run up to K of the
            # next step's forwards (each at most a micro-batch's work: bounds.py)
            kept = max(0.0, 1.0 - c.devices / ((NO_FLUSH_STEPS - 1) * c.microbatches))
            return float(max(bottleneck, average) * kept)
        fill = self.fill_bound(c) if copies == 1 else 0.0  # the fill assumes one copy's flow
        return float(max(bottleneck, average, path, fill))

    def rule_and_copies(self, c: Candidate) -> tuple[UpdateRule, int]:
        """``c``'s schedule's update rule and copies of the model (the generator's, whatever
        the shape: :meth:`_schedule_facts`)."""
        rule, copies, _ = self._schedule_facts(c)
        return rule, copies

    def _schedule_facts(self, c: Candidate) -> tuple[UpdateRule, int, bool]:
        """What ``c``'s schedule generator decides at every shape: its update rule, its copies
        of the model, and whether it runs every backward whole (never I and W apart); read
        from ``c``'s shape once per schedule name."""
        if c.schedule not in self.rules:
            shape = build(c.schedule, c.devices, c.microbatches, c.chunks, remat=c.remat)
            whole = not shape.uses_split_backward()
            self.rules[c.schedule] = (shape.update_rule, shape.copies, whole)
        return self.rules[c.schedule]

    def fill_bound(self, c: Candidate) -> float:
        """For one stage per device on a transformer: device d works M·w times its own blocks
        (w a block's forward and backward), and outside that work the chain of the stages
        before it runs: before its first forward, micro-batch 0's forwards through them;
        where every backward is whole (no I and W apart), after its last backward that
        micro-batch's backwards through them too (they need its result, and the device has
        nothing left to run). So the step is at least g times the blocks before d plus M·w
        times d's, g a block's share of that chain (its forward, or its whole work f + b:
        under re-materialization the backward recomputes the forward, 2f + b). Weighting the
        devices' bounds so that every block counts alike (lambda_d proportional to (1 -
        r)^(K-1-d), r = g / (M w)) gives, for any partition of the L blocks, the step at least
        L g / (1 - (1 - r)^K): M L w / K with the pipeline's fill (and drain) on top. With I
        and W apart a device's weight gradients may run after the chain, so g is the forward
        alone. 0 where it does not apply."""
        if c.chunks != 1 or self.model.architecture is None or c.devices == 1:
            return 0.0
        key = (table_key(c), c.remat)
        if key not in self.block_minima:
            layers = self.layer_costs(c)
            again = 2 if c.remat else 1
            blocks = [x for x, block in zip(layers, self.blocks, strict=True) if block]
            self.block_minima[key] = (
                len(blocks),
                min((x.forward_s for x in blocks), default=0.0),
                min((x.forward_s * again + x.backward_s for x in blocks), default=0.0),
            )
        count, forward, work = self.block_minima[key]
        chain = work if self.whole_backward(c) else forward
        if count == 0 or chain <= 0 or work <= 0:
            return 0.0
        share = chain / (c.microbatches * work)
        if share >= 1:
            return count * chain  # one micro-batch: every block's chain in turn
        return count * chain / (1 - (1 - share) ** c.devices)

    def whole_backward(self, c: Candidate) -> bool:
        """Whether ``c``'s schedule runs every backward whole, never as I and W apart (a
        generator splits the backward at every shape or at none: :meth:`_schedule_facts`)."""
        return self._schedule_facts(c)[2]

    def sync_terms(self, c: Candidate) -> SyncTerms:
        """The least per-byte and fixed costs of a stage's data-parallel communication over
        the K groups (gradients all-reduced, or reduce-scattered with the weights all-gathered
        under ZeRO-1): every group's cost is at least these."""
        key = (c.devices, c.tensor, c.data_parallel, c.zero, c.context, c.expert)
        if key not in self.syncs:
            layout = self.layout(c)
            grad_kind = Collective.REDUCE_SCATTER if c.zero else Collective.ALL_REDUCE
            terms = []
            for device in range(c.devices):
                group = layout.data_group(device)
                g1, g2 = (collective_time_s(self.job, group, grad_kind, n) for n in (1.0, 2.0))
                w1, w2 = (
                    collective_time_s(self.job, group, Collective.ALL_GATHER, n) if c.zero else 0.0
                    for n in (1.0, 2.0)
                )
                terms.append(SyncTerms(g2 - g1, w2 - w1, (g1 - (g2 - g1)) + (w1 - (w2 - w1))))
            self.syncs[key] = SyncTerms(
                min(t.gradient_per_byte for t in terms),
                min(t.weight_per_byte for t in terms),
                max(0.0, min(t.fixed_s for t in terms)),
            )
        return self.syncs[key]

    def stage_costs(
        self, c: Candidate, problem: PartitionProblem, counts: tuple[int, ...]
    ) -> list[StageCosts]:
        """The stages of ``counts`` (cached per layer key and span: every device here is the
        same kind, so a span costs the same wherever it sits)."""
        out, start = [], 0
        key = layer_key(c)
        for count in counts:
            span = (key, start, start + count)
            if span not in self.spans:
                self.spans[span] = problem.stage_costs(start, start + count, 0)
            out.append(self.spans[span])
            start += count
        return out

    def schedule_of(self, c: Candidate) -> Schedule:
        """``c``'s schedule (cached per shape)."""
        key = (c.schedule, c.devices, c.microbatches, c.chunks, c.remat)
        if key not in self.schedules:
            self.schedules[key] = build(
                c.schedule, c.devices, c.microbatches, c.chunks, remat=c.remat
            )
        return self.schedules[key]

    def schedule_shape(self, c: Candidate) -> tuple[tuple[MemoryForm, ...], tuple[int, ...], bool]:
        """``c``'s schedule as the memory check reads it (cached per shape): its memory forms
        (one step, or NO_FLUSH_STEPS without a flush), the placement of the model's K·v
        stages (with copies of the model, the first copy's: what a partition cuts; the forms
        take per-model-stage costs and give each copy's stage its model stage's, so a device
        holds the weights of every copy it has a stage of), whether it flushes."""
        key = (c.schedule, c.devices, c.microbatches, c.chunks, c.remat)
        if key not in self.forms:
            schedule = self.schedule_of(c)
            flush = schedule.update_rule is UpdateRule.FLUSH
            steps = 1 if flush else NO_FLUSH_STEPS
            placement = schedule.placement[: schedule.model_stages]
            self.forms[key] = (memory_forms(schedule, steps), placement, flush)
        return self.forms[key]

    def balanced_partition(self, c: Candidate, problem: PartitionProblem) -> Partition:
        """The balanced partition of ``c``'s problem (cached per shape and layer key)."""
        shape = (c.devices, problem.placement, layer_key(c), c.remat)
        if shape not in self.balanced:
            self.balanced[shape] = balanced(problem)
        return self.balanced[shape]

    def balanced_fits(self, c: Candidate) -> bool:
        """True when ``c``'s balanced partition fits every device's memory (no memory-aware
        search: the cheap test recompute ``layers`` bisects with)."""
        forms, placement, _ = self.schedule_shape(c)
        problem = self.problem(c, placement)
        counts = self.balanced_partition(c, problem).counts
        peaks = stage_peaks(problem, forms, self.stage_costs(c, problem, counts))
        return max(peaks) <= self.hardware.accelerator.memory_bytes

    def most_recomputed(self, c: Candidate) -> int:
        """The most blocks one of ``c``'s K·v stages can hold, each other stage holding one
        layer (a layer other than a block where there are such): no N above it recomputes
        more."""
        blocks = sum(self.blocks)
        others = len(self.blocks) - blocks
        return max(1, blocks - max(0, c.stages - 1 - others))

    def evaluate_all(self, c: Candidate) -> list[Evaluated]:
        """The configurations a candidate of the space is: ``c`` evaluated
        (:meth:`evaluate`), or for recompute ``layers`` the counts N worth simulating:

        * the fewest N whose balanced partition fits memory (N = 0 is ``none``), found by
          doubling N and then bisecting (a larger N only adds recomputation to the same
          balanced stages);
        * below it, the N that fit only with a memory-aware partition, which may be slower
          than the next N's balanced one: one by one down to :data:`RECOMPUTE_SCAN` of them,
          then the fewest N that fits at all by bisection (fitting some partition only gets
          easier with N, every stage's stash shrinking).

        Each count is a configuration of its own (``recompute=3``); an N that covers every
        block of every stage of its partition is ``full`` (the same run). When no N fits, the
        most N is returned, out of memory."""
        if c.recompute != RECOMPUTE_LAYERS:
            return [self.evaluate(c, limited=True)]
        most = self.most_recomputed(c)

        def fits_balanced(count: int) -> bool:
            return self.balanced_fits(_with_recompute(c, count))

        def evaluated(count: int) -> Evaluated:
            return self.evaluate(_with_recompute(c, count))

        if fits_balanced(0):
            return [evaluated(0)]  # nothing to recompute: the configuration without
        failing, fitting, count = 0, None, 1
        while fitting is None and failing < most:  # doubling: N is mostly small
            count = min(count, most)
            if fits_balanced(count):
                fitting = count
            else:
                failing, count = count, 2 * count
        items: list[Evaluated] = []
        below = most
        if fitting is not None:
            while fitting - failing > 1:
                middle = (failing + fitting) // 2
                if fits_balanced(middle):
                    fitting = middle
                else:
                    failing = middle
            items.append(evaluated(fitting))
            below = fitting - 1
        count = below
        while count >= 0 and below - count < RECOMPUTE_SCAN:
            item = evaluated(count)
            if item.oom:
                break
            items.append(item)
            count -= 1
        else:
            if count >= 0:  # more fit below the scan: the fewest that does, by bisection
                failing, fitting = -1, count + 1
                while fitting - failing > 1:
                    middle = (failing + fitting) // 2
                    if evaluated(middle).oom:
                        failing = middle
                    else:
                        fitting = middle
                if fitting <= count:
                    items.append(evaluated(fitting))
        return [self._full_when_whole(item) for item in items or [evaluated(most)]]

    def _full_when_whole(self, item: Evaluated) -> Evaluated:
        """``item``, labelled ``full`` where its N recomputes every block of every stage of
        its partition (the same costs, and the plan reads as what it is)."""
        count = recompute_layers(item.candidate.recompute)
        if count is None or count < self._most_in_a_stage(item.partition):
            return item
        return dataclasses.replace(
            item, candidate=dataclasses.replace(item.candidate, recompute="full")
        )

    def _most_in_a_stage(self, counts: tuple[int, ...]) -> int:
        """The most blocks a stage of the partition ``counts`` holds."""
        most, start = 0, 0
        for size in counts:
            most = max(most, sum(self.blocks[start : start + size]))
            start += size
        return most

    def evaluate(self, c: Candidate, limited: bool = False) -> Evaluated:
        """``c`` partitioned (balanced, or memory-aware where the balanced partition
        overflows), checked for memory and bounded (cached per configuration). Under recompute
        N the partitions weigh each stage's first N blocks recomputed, in time and memory; an
        N above the most blocks a stage of the partition holds is labelled with that most
        (the same run, and the count ``pipesim simulate`` accepts)."""
        if c.recompute == RECOMPUTE_LAYERS:
            raise ValueError("recompute layers is several configurations: see evaluate_all")
        cached = self.evaluations.get(c)
        if cached is None or (cached.beyond_limit and not limited):
            self.evaluations[c] = self._evaluate(c, self._compute_limit_s(c) if limited else None)
        return self.evaluations[c]

    def _compute_limit_s(self, c: Candidate) -> float | None:
        """The least compute per micro-batch on one stage above which ``c`` cannot beat the
        search's top plans (its time limit over M: every device runs each of its stages' M
        micro-batches, forward and backward, and the step is at least that), or None where
        that does not hold or nothing is ranked yet: a schedule with copies of the model (a
        device runs each copy's micro-batches only) or whose forward and backward overlap
        (DualPipe's: a pair takes less than the two)."""
        if not math.isfinite(self.time_limit_s) or c.schedule in OVERLAPPED_SCHEDULES:
            return None
        rule, copies = self.rule_and_copies(c)
        if copies > 1 or rule is not UpdateRule.FLUSH:  # a no-flush step is timed apart
            return None
        return self.time_limit_s / c.microbatches

    def _evaluate(self, c: Candidate, compute_limit_s: float | None = None) -> Evaluated:
        forms, placement, flush = self.schedule_shape(c)
        steps = 1 if flush else NO_FLUSH_STEPS
        problem = self.problem(c, placement)
        chosen, objective, oom_reason = self.balanced_partition(c, problem), "balanced", None
        capacity = self.hardware.accelerator.memory_bytes
        stage_costs = self.stage_costs(c, problem, chosen.counts)
        peaks = stage_peaks(problem, forms, stage_costs)
        if max(peaks) > capacity and certainly_overflows(problem, forms):
            device = max(range(len(peaks)), key=lambda d: peaks[d])
            over = peaks[device] - capacity
            oom_reason = (
                f"no partition fits memory: the balanced one overflows device {device} by "
                f"{format_bytes(over)} (needs {format_bytes(peaks[device])} of "
                f"{format_bytes(capacity)}), and the devices cannot hold the layers with the "
                "micro-batches their schedule keeps in flight under any partition"
            )
        elif max(peaks) > capacity:
            try:
                chosen = memory_aware(
                    problem,
                    forms,
                    PLAN_NODE_BUDGET,
                    first=chosen,
                    compute_limit_s=math.inf if compute_limit_s is None else compute_limit_s,
                )
                objective = "memory-aware"
                stage_costs = self.stage_costs(c, problem, chosen.counts)
                peaks = stage_peaks(problem, forms, stage_costs)
            except BeyondComputeLimit:
                # every partition that fits memory is slower than the plans found: the
                # balanced partition and its peaks stand for it, never simulated
                return Evaluated(
                    self._labelled(c, chosen.counts),
                    chosen.counts,
                    steps,
                    self.time_limit_s,
                    peaks,
                    capacity,
                    0.0,
                    "memory-aware",
                    beyond_limit=True,
                )
            except NoPartitionFits as error:
                oom_reason = str(error)
            if oom_reason is None and max(peaks) > capacity:
                # with copies of the model the memory-aware search weighs one copy's stage
                # per device (pipesim.partition.solver): its partition is checked exactly
                device = max(range(len(peaks)), key=lambda d: peaks[d])
                oom_reason = (
                    f"no partition found that fits memory: the memory-aware one "
                    f"({','.join(map(str, chosen.counts))}) overflows device {device} by "
                    f"{format_bytes(peaks[device] - capacity)} (needs "
                    f"{format_bytes(peaks[device])} of {format_bytes(capacity)}), each device "
                    "holding a stage of both model copies"
                )
        sync = sync_times_s(
            stage_costs,
            placement,
            self.job,
            self.layout(c),
            self.parallelism(c),
            self.run.recipe.overlap_grad_reduce,
        )
        with_sync = [
            add_to_optimizer_step(s, extra) for s, extra in zip(stage_costs, sync, strict=True)
        ]
        schedule = self.schedule_of(c)
        bound_stages, bound_placement = with_sync, schedule.placement
        if schedule.copies > 1:
            # as the request layer: each copy's stage costs its model stage's, and its
            # optimizer step waits for the copies' gradient all-reduce too
            copy_sync = copy_sync_s(
                self.run_of(c),
                PipelineCosts(tuple(with_sync), problem.network),  # type: ignore[arg-type]
                schedule,
            )
            with_sync = [
                add_to_optimizer_step(s, extra) if extra else s
                for s, extra in zip(with_sync, copy_sync, strict=True)
            ]
            sync = [x + y for x, y in zip(sync, copy_sync, strict=True)]
            bound_stages = list(schedule.on_stages(with_sync))
        bound = iteration_lower_bound_s(
            bound_stages,
            bound_placement,
            problem.network,  # type: ignore[arg-type]
            c.microbatches,
            remat=c.remat,
            flush=flush,
            copies=schedule.copies,
            routes=schedule.routes,
            overlapped=c.schedule in OVERLAPPED_SCHEDULES,
            steps=steps,
        )
        per_device = [0.0] * c.devices
        for stage, extra in enumerate(schedule.on_stages(sync)):
            per_device[schedule.placement[stage]] += extra
        return Evaluated(
            self._labelled(c, chosen.counts),
            chosen.counts,
            steps,
            bound,
            peaks,
            capacity,
            max(per_device),
            objective,
            oom_reason,
        )

    def _labelled(self, c: Candidate, counts: tuple[int, ...]) -> Candidate:
        """``c``, its recompute N lowered to the most blocks a stage of ``counts`` holds where
        N is above it (the same costs: every stage recomputes all its blocks either way)."""
        count = recompute_layers(c.recompute)
        if count is None:
            return c
        most = self._most_in_a_stage(counts)
        return c if count <= most else _with_recompute(c, most)

    def synthesized(self, finished: list[Evaluated], top: int) -> list[Evaluated]:
        """A synthesised schedule for each of the best plans' shapes: the largest memory
        limit (from 2K-1 micro-batches in flight down to 1) whose schedule fits every
        device's memory in simulation, then the smallest limit below it that is as fast
        (first on the greedy portfolio, then searched), on the costs of 1F1B's partition of
        that shape; offered when it is faster than every fixed schedule simulated for that
        shape."""
        from pipesim.errors import LimitError
        from pipesim.synthesis.synthesis import check_synthesis_size, synthesize

        fastest: dict[tuple[object, ...], float] = {}
        for e in finished:
            if e.simulated and not e.simulated_oom:
                c = e.candidate
                key = _shape_key(c)
                fastest[key] = min(fastest.get(key, math.inf), e.iteration_time_s or math.inf)
        offered = []
        for shape in _synthesis_shapes(finished, top):
            base = self.evaluate(shape)
            if base.oom:
                continue
            costs = model_on_hardware(
                self.run_of(shape),
                shape.devices,
                1,
                shape.microbatch_size,
                base.partition,
                placement=tuple(range(shape.devices)),
            )
            key = _shape_key(shape)
            chosen: tuple[int, Any, tuple[float, ...]] | None = None
            try:
                check_synthesis_size(shape.devices, shape.microbatches)
            except LimitError:
                continue  # 3·K·M actions beyond the limit: no synthesis for this shape
            # Above M micro-batches the limit binds nothing; above 2K-1 nothing is gained.
            for limit in range(min(2 * shape.devices - 1, shape.microbatches), 0, -1):
                # The limit is chosen on the greedy portfolio alone (a local search per limit
                # would cost 2K-1 of them); the one offered is searched, as simulate's is.
                found = synthesize(costs, shape.microbatches, limit, search_evaluations=0)
                result = found.result
                peaks = tuple(d.peak_memory_bytes for d in result.per_device)
                if max(peaks) > base.capacity_bytes:
                    continue
                if chosen is not None and result.iteration_time_s > chosen[1].iteration_time_s * (
                    1 + 1e-9
                ):
                    break  # less memory now costs time: keep the smallest limit as fast
                chosen = (limit, result, peaks)
            # The limit offered is searched: from the one chosen on the greedy portfolio down,
            # the first whose searched order fits memory (the search keeps the pairs in
            # flight, not the bytes), then the smallest below it still fitting and as fast.
            searched_choice: tuple[int, Any, tuple[float, ...]] | None = None
            for limit in range(chosen[0], 0, -1) if chosen is not None else ():
                searched = synthesize(costs, shape.microbatches, limit).result
                peaks = tuple(d.peak_memory_bytes for d in searched.per_device)
                fits = max(peaks) <= base.capacity_bytes
                if searched_choice is None:
                    if fits:
                        searched_choice = (limit, searched, peaks)
                    continue
                slower = searched.iteration_time_s > searched_choice[1].iteration_time_s * (
                    1 + 1e-9
                )
                if not fits or slower:
                    break
                searched_choice = (limit, searched, peaks)
            chosen = searched_choice
            if chosen is None or chosen[1].iteration_time_s >= fastest[key] * (1 - 1e-9):
                continue  # nothing fits, or no faster than a fixed schedule of this shape
            limit, result, peaks = chosen
            offered.append(
                dataclasses.replace(
                    base,
                    candidate=dataclasses.replace(shape, schedule=SYNTH_NAME, memory_limit=limit),
                    peak_memory_bytes=peaks,
                    iteration_time_s=result.iteration_time_s,
                    bubble_fraction=result.bubble_fraction,
                    simulated_peak_bytes=max(peaks),
                    mfu=result.model_flops_utilization,
                    hfu=result.hardware_flops_utilization,
                )
            )
        return offered

    def seed_times(self, ordered: list[Candidate], top: int) -> list[float]:
        """The simulated times, fastest first, of the first ``top`` configurations in
        ``ordered`` whose balanced partition fits memory (fewer where the space has fewer):
        configurations of the space, simulated ahead of their turn (the search finds them
        cached), so that the top-th of them bounds the search's limit from the start and the
        out-of-memory configurations that come first are not partitioned in full."""
        times: list[float] = []
        for c in ordered:
            if len(times) == top:
                break
            if c.recompute == RECOMPUTE_LAYERS or not self.balanced_fits(c):
                continue
            item = self.evaluate(c)
            if item.oom:
                continue
            self.seeds.append(item)
            result = self.simulated(item)
            if not result.simulated_oom and result.iteration_time_s is not None:
                times.append(result.iteration_time_s)
        return sorted(times)

    def simulated(self, item: Evaluated) -> Evaluated:
        """:meth:`simulate`, cached per configuration and partition."""
        key = (item.candidate, item.partition)
        if key not in self.simulations:
            self.simulations[key] = self.simulate(item)
        return self.simulations[key]

    def simulate(self, item: Evaluated) -> Evaluated:
        """``item`` simulated in full with the default engine, its costs built from the run's
        configuration under its layout by :func:`model_on_hardware`, as ``pipesim simulate``
        builds them for the same settings (from the per-layer costs the search has already:
        merged, not costed again; under recompute N, whose stages mix two tables, costed by
        :func:`model_on_hardware` itself): the plan and its re-simulation agree exactly."""
        c = item.candidate
        schedule = build(c.schedule, c.devices, c.microbatches, c.chunks, remat=c.remat)
        # with copies of the model, the first copy's placement: the model's stages in order
        placement = schedule.placement[: schedule.model_stages]
        if recomputes_first(c):
            costs = model_on_hardware(
                self.run_of(c),
                c.devices,
                c.chunks,
                c.microbatch_size,
                item.partition,
                placement=placement,
            )
        else:
            costs = layer_costs_on_hardware(
                self.run_of(c),
                c.devices,
                c.chunks,
                c.microbatch_size,
                self.layer_costs(c),
                item.partition,
                placement=placement,
            )
        if schedule.copies > 1:  # as ModelRequest.build: every copy's stage, the copies' sync
            costs = on_copies(costs, schedule, copy_sync_s(self.run_of(c), costs, schedule))
        result = simulate(schedule, costs, steps=item.steps)
        return dataclasses.replace(
            item,
            iteration_time_s=result.iteration_time_s,
            bubble_fraction=result.bubble_fraction,
            simulated_peak_bytes=max(d.peak_memory_bytes for d in result.per_device),
            mfu=result.model_flops_utilization,
            hfu=result.hardware_flops_utilization,
        )


def _without_hideable(layer: StageCosts) -> StageCosts:
    """``layer`` with its forward and input gradient less their exposed communication."""
    if not hideable_s(layer):
        return layer
    return dataclasses.replace(
        layer,
        forward_s=layer.forward_s - layer.forward_comm_s,
        input_grad_s=layer.input_grad_s - layer.input_grad_comm_s,
        forward_comm_s=0.0,
        input_grad_comm_s=0.0,
        full_backward_s=None
        if layer.full_backward_s is None
        else max(0.0, layer.full_backward_s - layer.input_grad_comm_s),
    )


def _shape_key(c: Candidate) -> tuple[object, ...]:
    """What a synthesised schedule is compared within: the same shape and configuration."""
    return (c.devices, c.data_parallel, c.microbatches, c.microbatch_size, layer_key(c), c.zero)


def _synthesis_shapes(finished: list[Evaluated], top: int) -> list[Candidate]:
    """The shapes of the best simulated plans that a synthesised schedule can take (one stage
    per device, no re-materialization, a flush schedule's update, no full recomputation of
    every block or of the first N: its backward is split), fastest first, at most ``top`` of
    them."""
    shapes: list[Candidate] = []
    seen = set()
    ranked = sorted(
        (e for e in finished if not e.simulated_oom and e.steps == 1),
        key=lambda e: e.iteration_time_s or math.inf,
    )
    for e in ranked:
        c = e.candidate
        key = _shape_key(c)
        if c.devices > 1 and key not in seen and not recomputes_in_full(c.recompute):
            seen.add(key)
            shapes.append(
                dataclasses.replace(c, schedule="1f1b", chunks=1, remat=False, memory_limit=None)
            )
        if len(shapes) == top:
            break
    return shapes


def _rejected(
    plans: list[Evaluated],
    slower: list[Evaluated],
    evaluated: list[Evaluated],
    top: int,
) -> list[tuple[Evaluated, str]]:
    """The best alternatives that lost, each with why: out of memory (by how much), or, for
    simulated ones, the bubble or communication that made them slower than the best plan."""
    out: list[tuple[Evaluated, str]] = []
    oom = sorted((e for e in evaluated if e.oom), key=lambda e: e.bound_s)
    if plans:
        best_time = plans[0].iteration_time_s or math.inf
        oom = [e for e in oom if e.bound_s < best_time] or oom
    for e in oom[:top]:
        out.append((e, e.oom_reason or "out of memory"))
    if plans:
        best = plans[0]
        best_time = best.iteration_time_s or math.inf
        for e in slower[:top]:
            out.append((e, _why_slower(e, best, best_time)))
    return out


def _why_slower(e: Evaluated, best: Evaluated, best_time: float) -> str:
    t = e.iteration_time_s or math.inf
    bubble, best_bubble = e.bubble_fraction or 0.0, best.bubble_fraction or 0.0
    lost = t - best_time
    reasons = []
    if e.allreduce_s > best.allreduce_s and e.allreduce_s - best.allreduce_s >= 0.3 * lost:
        reasons.append(
            f"communication: gradient reduction {e.allreduce_s:.3g} s per step "
            f"(best plan {best.allreduce_s:.3g} s)"
        )
    if bubble > best_bubble + 0.01:
        reasons.append(f"bubble {bubble:.1%} (best plan {best_bubble:.1%})")
    if not reasons:
        reasons.append("more time in compute and transfers per step")
    return f"{lost / best_time:.1%} slower: " + "; ".join(reasons)
