"""``pipesim plan``: the best configurations of a model on N devices, found exactly.

1. Enumerate the space (:mod:`.space`).
2. For each candidate: the balanced partition of its K·v stages (exact, transfers counted);
   if that overflows a device under the schedule's peak memory (closed form, exactly the
   simulator's), the memory-aware partition; if none fits, the candidate is rejected as out
   of memory with the device and the bytes.
3. A lower bound on its iteration time (:mod:`.bounds`), all-reduce included.
4. Candidates in order of their bound are simulated in full until the next bound is slower
   than the ``top``-th best simulated time: the ranking of the top plans is then exact (no
   candidate left out could beat them).
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass
from typing import Any

from pipesim.common.checks import SpecError
from pipesim.common.limits import Limit, check
from pipesim.common.progress import progress
from pipesim.costs.data_parallel import (
    add_to_optimizer_step,
    allreduce_times_s,
    replica_group,
    ring_allreduce_s,
)
from pipesim.costs.model_on_hardware import model_on_hardware
from pipesim.costs.pipeline_costs import StageCosts
from pipesim.engine import simulate
from pipesim.hardware import resolve_hardware
from pipesim.hardware.catalogue import HardwareSpec
from pipesim.memory.forms import MemoryForm
from pipesim.partition import (
    NoPartitionFits,
    PartitionProblem,
    balanced,
    device_peaks,
    memory_aware,
    memory_forms,
)
from pipesim.partition.from_model import layer_costs, model_problem
from pipesim.partition.solver import Partition, partition_stage_costs
from pipesim.plan.bounds import iteration_lower_bound_s
from pipesim.plan.space import DEFAULT_SCHEDULES, Candidate, candidates
from pipesim.request.cost_request import resolved_model
from pipesim.schedules import UpdateRule, build
from pipesim.schedules.synthesis import SYNTH_NAME
from pipesim.workload.model import Model

# No-flush schedules are timed in steady state over this many steps back to back. Their steps
# run as one 1F1B stream (pipesim.schedules.unroll.no_flush_order), so the per-step interval is
# never below a device's own work and the bounds hold unrelaxed for every update rule (an
# earlier weave of the steps read low, by up to a step / (S - 1), and needed relaxing).
NO_FLUSH_STEPS = 6
PLAN_NODE_BUDGET = 5_000  # per memory-aware search with several stages per device


@dataclass(frozen=True)
class PlanSettings:
    """What to plan for. ``model`` and ``hardware`` are names or TOML paths, as on the
    command line (the re-simulation command repeats them)."""

    model: str
    hardware: str
    devices: int
    batch: int
    schedules: tuple[str, ...] = DEFAULT_SCHEDULES
    optimizer_state: str | None = None
    master_weights: bool | None = None
    dtype: str | None = None
    top: int = 5
    chunk_options: tuple[int, ...] = (2, 4)


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
    iteration_time_s: float | None = None
    bubble_fraction: float | None = None
    simulated_peak_bytes: float | None = None

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


def plan(settings: PlanSettings, *, show_progress: bool = True) -> PlanReport:
    """Search ``settings``' space; see the module docstring."""
    started = time.perf_counter()
    if settings.devices < 1 or settings.batch < 1 or settings.top < 1:
        raise SpecError(
            f"--devices, --batch and --top must be integers >= 1, got {settings.devices}, "
            f"{settings.batch} and {settings.top}"
        )
    check(Limit.CLUSTER_DEVICES, settings.devices, f"--devices {settings.devices:,}")
    for chunks in settings.chunk_options:
        check(Limit.CHUNKS, chunks, f"--chunks {chunks:,}")
    if not settings.schedules:
        raise SpecError("--schedules must name at least one schedule, got none")
    if set(settings.schedules) == {SYNTH_NAME}:
        raise SpecError(
            f"--schedules {SYNTH_NAME}: a synthesised schedule is offered beside the fixed ones "
            "(for the shapes of their best plans); name at least one registered schedule too"
        )
    model = resolved_model(
        settings.model, settings.optimizer_state, settings.master_weights, settings.dtype
    )
    hardware = resolve_hardware(settings.hardware)
    space = list(
        candidates(
            settings.devices,
            settings.batch,
            len(model.layers),
            settings.schedules,
            settings.chunk_options,
        )
    )
    if not space:
        raise SpecError(
            f"no configuration: {settings.devices} devices and batch {settings.batch} admit no "
            f"schedule of {', '.join(settings.schedules)} for {len(model.layers)} layers"
        )
    context = PlanContext(model, hardware, settings)
    ordered = sorted(((context.quick_bound(c), i, c) for i, c in enumerate(space)))
    examined: list[Evaluated] = []
    finished: list[Evaluated] = []
    limit = math.inf
    with progress(len(space), "plan: configurations", enabled=show_progress) as bar:
        for position, (quick, _, candidate) in enumerate(ordered):
            if quick * (1 - 1e-9) > limit:
                bar.update(len(ordered) - position)  # the rest: slower than the top plans
                break
            item = context.evaluate(candidate)
            examined.append(item)
            bar.update()
            if item.oom or item.bound_s * (1 - 1e-9) > limit:
                continue
            finished.append(context.simulate(item))
            times = sorted(e.iteration_time_s or math.inf for e in finished if not e.simulated_oom)
            if len(times) >= settings.top:
                limit = times[settings.top - 1]
            if times:
                bar.set_postfix_str(f"{len(finished)} simulated, best {times[0]:.4g} s")
    if SYNTH_NAME in settings.schedules:
        finished += context.synthesized(finished, settings.top)
    ranked = sorted(
        (e for e in finished if not e.simulated_oom),
        key=lambda e: e.iteration_time_s or math.inf,
    )
    plans = ranked[: settings.top]
    done = {e.candidate: e for e in finished}
    examined = [done.get(e.candidate, e) for e in examined]
    rejected = _rejected(plans, ranked[settings.top :], examined, settings.top)
    return PlanReport(
        settings,
        plans,
        rejected,
        examined,
        time.perf_counter() - started,
        len(finished),
        len(space),
    )


class PlanContext:
    """Caches shared across candidates: layer costs per micro-batch size, schedules' memory
    forms, balanced partitions per shape."""

    def __init__(self, model: Model, hardware: HardwareSpec, settings: PlanSettings) -> None:
        self.model = model
        self.hardware = hardware
        self.settings = settings
        self.layers: dict[int, tuple[StageCosts, ...]] = {}
        self.forms: dict[tuple[str, int, int, int, bool, int], tuple[MemoryForm, ...]] = {}
        self.balanced: dict[tuple[int, tuple[int, ...], int, bool], Partition] = {}
        self.compute_bottleneck: dict[tuple[int, int, bool], float] = {}
        self.rings: dict[tuple[int, int], tuple[float, float]] = {}
        self.rules: dict[str, UpdateRule] = {}

    def problem(self, candidate: Candidate, placement: tuple[int, ...]) -> PartitionProblem:
        b = candidate.microbatch_size
        if b not in self.layers:
            self.layers[b] = layer_costs(self.model, self.hardware.cluster(1), b)
        return model_problem(
            self.model,
            self.hardware.cluster(candidate.devices),
            b,
            placement,
            rematerialize=candidate.remat,
            layers=self.layers[b],
        )

    def quick_bound(self, c: Candidate) -> float:
        """A lower bound on ``c``'s iteration time that holds for every partition: the least
        possible slowest stage's compute (exact, transfers left out) for M micro-batches, the
        average device's share of all compute, optimizer steps and all-reduces, and (flush
        schedules) one micro-batch through every stage and back (forward and input gradient)."""
        b = c.microbatch_size
        if b not in self.layers:
            self.layers[b] = layer_costs(self.model, self.hardware.cluster(1), b)
        layers = self.layers[b]
        key = (c.stages, b, c.remat)
        if key not in self.compute_bottleneck:
            free = PartitionProblem(
                layers, 0.0, tuple(range(c.stages)), None, rematerialize=c.remat
            )
            self.compute_bottleneck[key] = balanced(free).bottleneck_s
        work = sum(x.forward_s * (2 if c.remat else 1) + x.backward_s for x in layers)
        path = sum(x.forward_s * (2 if c.remat else 1) + x.input_grad_s for x in layers)
        optimizer = sum(x.optimizer_step_s for x in layers)
        gradients = sum(x.gradient_bytes for x in layers)
        slope, intercept = self.ring_terms(c.devices, c.data_parallel)
        allreduce = slope * gradients + c.stages * intercept
        average = (c.microbatches * work + optimizer + allreduce) / c.devices
        if c.schedule not in self.rules:
            shape = build(c.schedule, c.devices, c.microbatches, c.chunks, remat=c.remat)
            self.rules[c.schedule] = shape.update_rule
        rule = self.rules[c.schedule]
        if rule is not UpdateRule.FLUSH:  # steady state: steps overlap, no one-batch path
            bound = max(c.microbatches * self.compute_bottleneck[key], average)
            return float(bound)
        return float(max(c.microbatches * self.compute_bottleneck[key], average, path))

    def ring_terms(self, devices: int, data_parallel: int) -> tuple[float, float]:
        """The least per-byte and fixed all-reduce costs over the K data-parallel groups."""
        key = (devices, data_parallel)
        if key not in self.rings:
            network = self.hardware.network(devices * data_parallel)
            slopes, intercepts = [], []
            for device in range(devices):
                group = replica_group(device, devices, data_parallel)
                one = ring_allreduce_s(network, group, 1.0)
                two = ring_allreduce_s(network, group, 2.0)
                slopes.append(two - one)
                intercepts.append(one - (two - one))
            self.rings[key] = (min(slopes), max(0.0, min(intercepts)))
        return self.rings[key]

    def evaluate(self, c: Candidate) -> Evaluated:
        key = (c.schedule, c.devices, c.microbatches, c.chunks, c.remat)
        schedule = build(c.schedule, c.devices, c.microbatches, c.chunks, remat=c.remat)
        flush = schedule.update_rule is UpdateRule.FLUSH
        steps = 1 if flush else NO_FLUSH_STEPS
        if (*key, steps) not in self.forms:
            self.forms[(*key, steps)] = memory_forms(schedule, steps)
        forms = self.forms[(*key, steps)]
        placement = schedule.placement
        problem = self.problem(c, placement)
        shape = (c.devices, placement, c.microbatch_size, c.remat)
        if shape not in self.balanced:
            self.balanced[shape] = balanced(problem)
        chosen, objective, oom_reason = self.balanced[shape], "balanced", None
        capacity = self.hardware.accelerator.memory_bytes
        peaks = device_peaks(problem, forms, chosen.counts)
        if max(peaks) > capacity:
            try:
                chosen = memory_aware(problem, forms, PLAN_NODE_BUDGET)
                objective = "memory-aware"
                peaks = device_peaks(problem, forms, chosen.counts)
            except NoPartitionFits as error:
                oom_reason = str(error)
        stage_costs = partition_stage_costs(problem, chosen.counts)
        cluster_network = self.hardware.network(c.devices * c.data_parallel)
        allreduce = allreduce_times_s(
            [s.gradient_bytes for s in stage_costs],
            placement,
            cluster_network,
            c.devices,
            c.data_parallel,
        )
        with_allreduce = [
            add_to_optimizer_step(s, extra) for s, extra in zip(stage_costs, allreduce, strict=True)
        ]
        bound = iteration_lower_bound_s(
            with_allreduce,
            placement,
            problem.network,  # type: ignore[arg-type]
            c.microbatches,
            remat=c.remat,
            flush=flush,
        )
        per_device = [0.0] * c.devices
        for stage, extra in enumerate(allreduce):
            per_device[placement[stage]] += extra
        return Evaluated(
            c,
            chosen.counts,
            steps,
            bound,
            peaks,
            capacity,
            max(per_device),
            objective,
            oom_reason,
        )

    def synthesized(self, finished: list[Evaluated], top: int) -> list[Evaluated]:
        """A synthesised schedule for each of the best plans' shapes: the largest memory
        limit (from 2K-1 micro-batches in flight down to 1) whose schedule fits every
        device's memory in simulation, then the smallest limit below it that is as fast, on
        the costs of 1F1B's partition of that shape; offered when it is faster than every
        fixed schedule simulated for that shape."""
        from pipesim.errors import LimitError
        from pipesim.schedules.synthesis import check_synthesis_size, synthesize

        fastest: dict[tuple[int, int, int, int], float] = {}
        for e in finished:
            if e.simulated and not e.simulated_oom:
                c = e.candidate
                key = (c.devices, c.data_parallel, c.microbatches, c.microbatch_size)
                fastest[key] = min(fastest.get(key, math.inf), e.iteration_time_s or math.inf)
        offered = []
        for shape in _synthesis_shapes(finished, top):
            base = self.evaluate(shape)
            if base.oom:
                continue
            costs = model_on_hardware(
                self.model,
                self.hardware,
                shape.devices,
                1,
                shape.microbatch_size,
                base.partition,
                data_parallel=shape.data_parallel,
                placement=tuple(range(shape.devices)),
            )
            key = (shape.devices, shape.data_parallel, shape.microbatches, shape.microbatch_size)
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
            # The search keeps the pairs in flight, not the bytes: where the searched order of
            # the limit chosen no longer fits memory, the next smaller limit's is tried.
            for limit in range(chosen[0], 0, -1) if chosen is not None else ():
                searched = synthesize(costs, shape.microbatches, limit).result
                peaks = tuple(d.peak_memory_bytes for d in searched.per_device)
                chosen = (limit, searched, peaks) if max(peaks) <= base.capacity_bytes else None
                if chosen is not None:
                    break
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
                )
            )
        return offered

    def simulate(self, item: Evaluated) -> Evaluated:
        """``item`` simulated in full with the default engine, its costs built from the model
        and hardware the context holds by :func:`model_on_hardware`, as ``pipesim simulate``
        builds them for the same settings: the plan and its re-simulation agree exactly."""
        c = item.candidate
        schedule = build(c.schedule, c.devices, c.microbatches, c.chunks, remat=c.remat)
        costs = model_on_hardware(
            self.model,
            self.hardware,
            c.devices,
            c.chunks,
            c.microbatch_size,
            item.partition,
            data_parallel=c.data_parallel,
            placement=schedule.placement,
        )
        result = simulate(schedule, costs, steps=item.steps)
        return dataclasses.replace(
            item,
            iteration_time_s=result.iteration_time_s,
            bubble_fraction=result.bubble_fraction,
            simulated_peak_bytes=max(d.peak_memory_bytes for d in result.per_device),
        )


def _synthesis_shapes(finished: list[Evaluated], top: int) -> list[Candidate]:
    """The shapes of the best simulated plans that a synthesised schedule can take (one stage
    per device, no re-materialization, a flush schedule's update), fastest first, at most
    ``top`` of them."""
    shapes: list[Candidate] = []
    seen = set()
    ranked = sorted(
        (e for e in finished if not e.simulated_oom and e.steps == 1),
        key=lambda e: e.iteration_time_s or math.inf,
    )
    for e in ranked:
        c = e.candidate
        key = (c.devices, c.data_parallel, c.microbatches, c.microbatch_size)
        if c.devices > 1 and key not in seen:
            seen.add(key)
            shapes.append(
                Candidate(
                    c.devices, c.data_parallel, "1f1b", 1, c.microbatches, c.microbatch_size, False
                )
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
            f"communication: gradient all-reduce {e.allreduce_s:.3g} s per step "
            f"(best plan {best.allreduce_s:.3g} s)"
        )
    if bubble > best_bubble + 0.01:
        reasons.append(f"bubble {bubble:.1%} (best plan {best_bubble:.1%})")
    if not reasons:
        reasons.append("more time in compute and transfers per step")
    return f"{lost / best_time:.1%} slower: " + "; ".join(reasons)
