"""A lower bound on the step time (or the largest stage span) of every schedule of a pipeline.

The bound holds for any order of any schedule with this placement, split backward or not, and
is what a synthesised schedule is measured against (:attr:`Synthesis.lower_bound_s`).

**The graph of one micro-batch.** With stages 0..S-1, micro-batch m's actions form a chain
F(0,m) -> F(1,m) -> ... -> F(S-1,m) -> I(S-1,m) -> ... -> I(0,m), and each W(s,m) hangs off
its I(s,m). An edge between stages on different devices carries the transfer's time in
isolation (the route's latency plus bytes / bandwidth; a transfer never arrives sooner, it may
queue behind another); on one device it is free. Micro-batches do not depend on each other.
For every action j (its stage and kind: all micro-batches alike) let p_j be its duration,
r_j its *head* (the longest path from the step's start to j's start) and q_j its *tail* (the
longest path from j's end to the step's end: the actions that must follow j, then the
optimizer step of the device they end on, at least j's own device's optimizer step). Every
schedule starts j at or after r_j and ends the step at or after j's end + q_j.

**One device is one machine.** A device runs its actions one at a time. Take any set J of
them: from the first start of any action of J, all of J runs on the device one after another,
so the last of J to end ends at or after min_J r + sum_J p; its tail follows, so

    step >= min_{j in J} r_j + sum_{j in J} p_j + min_{j in J} q_j.

This is the one-machine relaxation with heads and tails (Carlier's bound for job shops); the
best J for given lower limits a on the heads and b on the tails takes every action with
r >= a and q >= b, so the bound is the largest over the pairs (a, b) of values that occur. A
set of one action is the critical path through it (r + p + q); the whole device is its work
plus the least head and tail, the unavoidable fill and drain on that device.

**Memory** (one stage per device, with a limit): before the device's first input gradient
nothing is freed, so at most n = floor(limit / stash) forwards run before an I has ended: the
forwards beyond the n-th have the head r_I + p_I rather than r_F. And a micro-batch holds its
whole stash from its F's start to its I's end (to its W's end when W keeps all of it), at
least L = r_I + p_I - r_F (+ p_W), so at most n of these intervals overlap at any time: they
fall into n chains of intervals one after another (an interval graph's colouring), one of them
holds ceil(M/n), and

    step >= r_F + ceil(M / n) * L + q_release.

With M micro-batches each action is M copies of the same (r, p, q) (with several copies of
the model, DualPipe's two, each copy is a chain of its own and its actions are as many as the
micro-batches routed through it); a full backward B is
counted as I + W (as it is timed; a calibrated B shorter than I + W lowers W, then I, to
match, so the bound holds for a schedule with full backwards too).

**The largest stage span** (the zero-bubble paper's measure, from each device's first action's
start to its last action's end) has the same bound per device with heads measured from the
device's first action (an F of its first stage, which every action of the device follows in
its micro-batch's chain) and tails to the device's last action (no optimizer).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from pipesim.costs.pipeline_costs import PipelineCosts
from pipesim.errors import ScheduleError
from pipesim.schedules.action import Kind
from pipesim.schedules.schedule import Schedule
from pipesim.synthesis.list_scheduler import LIMIT_TOLERANCE, MemoryCount

OBJECTIVES = ("step", "stage-span")
NEVER = -math.inf


@dataclass(frozen=True)
class LowerBound:
    """A lower bound on ``objective`` for every schedule of the pipeline.

    Attributes:
        value_s: the bound, the largest of the devices'.
        objective: ``step`` (the step time) or ``stage-span`` (the largest stage span).
        device: the device whose bound it is.
        reason: which term gave it (``work``, ``critical path``, ``memory``, ...).
        per_device_s: each device's bound.
    """

    value_s: float
    objective: str
    device: int
    reason: str
    per_device_s: tuple[float, ...]


@dataclass(frozen=True)
class _Node:
    stage: int
    kind: Kind
    duration: float
    device: int


def lower_bound(
    costs: PipelineCosts,
    microbatches: int,
    placement: Sequence[int] | None = None,
    *,
    objective: str = "step",
    memory: tuple[MemoryCount, float] | None = None,
    copies: int = 1,
    routes: Sequence[int] | None = None,
) -> LowerBound:
    """The lower bound of the module's docstring for ``microbatches`` micro-batches with
    ``placement`` (one stage per device when None), on ``objective`` (``step`` or
    ``stage-span``), with a memory limit when ``memory`` gives what it counts and its value.

    With ``copies`` copies of the model (DualPipe's two), the stages are numbered copy-major
    and micro-batch m runs through copy ``routes[m]`` only: each copy is a chain of its own,
    its actions as many as the micro-batches routed to it (:func:`schedule_lower_bound` reads
    both from a schedule)."""
    if objective not in OBJECTIVES:
        raise ScheduleError(f"objective must be one of {', '.join(OBJECTIVES)}, got {objective!r}")
    placement = tuple(range(len(costs.stages))) if placement is None else tuple(placement)
    if len(placement) != len(costs.stages):
        raise ScheduleError(f"placement has {len(placement)} stages, the costs {len(costs.stages)}")
    if copies < 1 or len(placement) % copies:
        raise ScheduleError(f"copies {copies} must divide the {len(placement)} stages")
    if routes is None:
        if copies > 1:
            raise ScheduleError(f"copies {copies} needs each micro-batch's route")
        routes = (0,) * microbatches
    per_copy = len(placement) // copies
    chains = []
    for copy in range(copies):
        routed = sum(1 for route in routes if route == copy)
        if routed:
            stages = range(copy * per_copy, (copy + 1) * per_copy)
            nodes = _chain(costs, placement, stages)
            chains.append((nodes, _edges(costs, placement, nodes), routed))
    best = (NEVER, 0, "")
    per_device = []
    for device in range(max(placement) + 1):
        value, reason = _device_bound(costs, placement, chains, device, objective, memory)
        per_device.append(value)
        if value > best[0]:
            best = (value, device, reason)
    return LowerBound(best[0], objective, best[1], best[2], tuple(per_device))


def schedule_lower_bound(
    schedule: Schedule,
    costs: PipelineCosts,
    *,
    objective: str = "step",
    memory: tuple[MemoryCount, float] | None = None,
) -> LowerBound:
    """:func:`lower_bound` for the shape of ``schedule``: its micro-batches, placement, and
    its copies of the model and their routes where it has several."""
    copies = getattr(schedule, "copies", 1)
    routes = getattr(schedule, "routes", None) if copies > 1 else None
    return lower_bound(
        costs,
        schedule.microbatches,
        schedule.placement,
        objective=objective,
        memory=memory,
        copies=copies,
        routes=routes,
    )


def _chain(costs: PipelineCosts, placement: tuple[int, ...], stages: range) -> list[_Node]:
    """One micro-batch's F and I chain over ``stages`` in order, then each stage's W."""
    nodes = []
    for stage in stages:
        nodes.append(_Node(stage, Kind.F, costs.stages[stage].forward_s, placement[stage]))
    for stage in reversed(stages):
        grad, _ = _backward_parts_s(costs, stage)
        nodes.append(_Node(stage, Kind.I, grad, placement[stage]))
    for stage in stages:
        _, weight = _backward_parts_s(costs, stage)
        nodes.append(_Node(stage, Kind.W, weight, placement[stage]))
    return nodes


def _backward_parts_s(costs: PipelineCosts, stage: int) -> tuple[float, float]:
    """I's and W's times, lowered where a full backward takes less than I + W, so that a
    full backward is never shorter than the two (W no longer than B, then I what is left)."""
    cost = costs.stages[stage]
    weight = min(cost.weight_grad_s, cost.backward_s)
    return min(cost.input_grad_s, cost.backward_s - weight), weight


def _edges(
    costs: PipelineCosts, placement: tuple[int, ...], nodes: list[_Node]
) -> list[tuple[int, int, float]]:
    """(from, to, transfer) for every dependency of one micro-batch's chain (positions in
    ``nodes``), in topological order."""
    stages = len(nodes) // 3
    edges = []
    for position in range(stages - 1):  # F(s) -> F(s+1): the activation
        lower = nodes[position].stage
        edges.append((position, position + 1, _send_s(costs, placement, lower, lower + 1, lower)))
    edges.append((stages - 1, stages, 0.0))  # the loss: F(last) -> I(last) on one device
    for position in range(stages, 2 * stages - 1):  # I(s+1) -> I(s): the gradient
        upper = nodes[position].stage
        edges.append(
            (position, position + 1, _send_s(costs, placement, upper, upper - 1, upper - 1))
        )
    for offset in range(stages):  # I(s) -> W(s)
        edges.append((2 * stages - 1 - offset, 2 * stages + offset, 0.0))
    return edges


def _send_s(
    costs: PipelineCosts, placement: tuple[int, ...], source: int, target: int, sized_by: int
) -> float:
    a, b = placement[source], placement[target]
    if a == b:
        return 0.0
    return costs.network.route(a, b).transfer_time_s(costs.stages[sized_by].output_bytes)


Chain = tuple[list[_Node], list[tuple[int, int, float]], int]


def _device_bound(
    costs: PipelineCosts,
    placement: tuple[int, ...],
    chains: list[Chain],
    device: int,
    objective: str,
    memory: tuple[MemoryCount, float] | None,
) -> tuple[float, str]:
    """The device's bound and the term that gave it."""
    optimizers = [
        sum(costs.stages[s].optimizer_step_s for s, d in enumerate(placement) if d == device_)
        for device_ in range(max(placement) + 1)
    ]
    span = objective == "stage-span"
    groups: list[tuple[float, float, float, int]] = []
    timed: list[tuple[list[_Node], list[float], list[float], list[int], int]] = []
    for nodes, edges, routed in chains:
        mine = [position for position, node in enumerate(nodes) if node.device == device]
        if not mine:
            continue
        # Heads: from the step's start (the chain's first F), or from the device's first F
        # of this chain (every action of it on the device follows that F in its chain).
        head = [NEVER] * len(nodes)
        head[min(mine) if span else 0] = 0.0
        for a, b, transfer in edges:
            if head[a] > NEVER:
                head[b] = max(head[b], head[a] + nodes[a].duration + transfer)
        # Tails: to the step's end (past the optimizer step of the device a path ends on),
        # or to the end of the device's last action.
        if span:
            tail = [0.0 if node.device == device else NEVER for node in nodes]
        else:
            tail = [optimizers[node.device] for node in nodes]
        for a, b, transfer in reversed(edges):
            if tail[b] > NEVER:
                tail[a] = max(tail[a], transfer + nodes[b].duration + tail[b])
        groups += [(head[p], nodes[p].duration, tail[p], routed) for p in mine]
        timed.append((nodes, head, tail, mine, routed))
    best, reason = _one_machine(groups)
    if memory is not None and len(timed) == 1 and len(timed[0][3]) == 3:
        terms = _memory_terms(*timed[0], memory)
        if terms is not None:
            split_groups, interval = terms
            value, _ = _one_machine(split_groups)
            if value > best * (1 + 1e-12):
                best, reason = value, "memory: forwards before the first input gradient"
            if interval > best * (1 + 1e-12):
                best, reason = interval, "memory: micro-batches in flight"
    return best, reason


def _one_machine(groups: list[tuple[float, float, float, int]]) -> tuple[float, str]:
    """max over (a, b) of a + (the work with head >= a and tail >= b) + b."""
    best, reason = NEVER, ""
    heads = sorted({g[0] for g in groups})
    tails = sorted({g[2] for g in groups})
    total = sum(g[1] * g[3] for g in groups)
    for a in heads:
        for b in tails:
            chosen = [g for g in groups if g[0] >= a and g[2] >= b]
            if not chosen:
                continue
            work = sum(g[1] * g[3] for g in chosen)
            value = a + work + b
            if value > best:
                best = value
                if work == total:
                    reason = "work"
                elif len(chosen) == 1 and chosen[0][3] == 1:
                    reason = "critical path"
                else:
                    reason = "work after a head, before a tail"
    return best, reason


def _memory_terms(
    nodes: list[_Node],
    head: list[float],
    tail: list[float],
    mine: list[int],
    microbatches: int,
    memory: tuple[MemoryCount, float],
) -> tuple[list[tuple[float, float, float, int]], float] | None:
    """For a device holding one stage (its F, I and W at ``mine``): its groups with the
    forwards beyond the n-th given the head of an I's end, and the in-flight intervals' bound.
    None when the limit lets every micro-batch in at once."""
    count, limit = memory
    forward, grad, weight = mine
    stage = nodes[forward].stage
    stash, kept = count.stash[stage], count.kept[stage]
    if stash <= 0:
        return None
    most = math.floor(limit * (1 + LIMIT_TOLERANCE) / stash)
    if not 1 <= most < microbatches:
        return None
    grad_end = head[grad] + nodes[grad].duration
    groups = [
        (head[forward], nodes[forward].duration, tail[forward], most),
        (grad_end, nodes[forward].duration, tail[forward], microbatches - most),
        (head[grad], nodes[grad].duration, tail[grad], microbatches),
        (head[weight], nodes[weight].duration, tail[weight], microbatches),
    ]
    if kept >= stash:  # W keeps all of it: the stash is held until W ends
        held, after = head[weight] + nodes[weight].duration - head[forward], tail[weight]
    else:
        held, after = grad_end - head[forward], tail[grad]
    return groups, head[forward] + math.ceil(microbatches / most) * held + after
