"""Independent optima for tiny pipelines (one stage per device), written apart from the
library's branch and bound (:mod:`pipesim.synthesis.exact`) so that the two can disagree:

* :func:`brute_force`: every combination of the devices' orders, each timed by a naive sweep;
* :func:`pareto_step`: dynamic programming over the actions done, keeping for each set of
  them every timing that no other one beats in every coordinate (the step is monotone in
  every start time, so a beaten timing never leads to a shorter step).

Both search the same space as the library: each stage runs its micro-batches' F, I and W in
micro-batch order, an F adds a stash of 1 at its start, an I frees all but
``weight_fraction`` of it and the W the rest, and no device ever holds more than the limit.
Times: an action starts when its device is free and its input has arrived; a transfer between
devices takes the route's time for the lower stage's output.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

from pipesim.costs.pipeline_costs import PipelineCosts
from pipesim.schedules.action import Action, Kind

Order = tuple[str, ...]  # a device's kinds in order: the k-th F is micro-batch k's


def orders(microbatches: int) -> list[Order]:
    """Every order of one stage's M forwards, input gradients and weight gradients with each
    kind's micro-batches in order (an I after its F, a W after its I)."""
    found: list[Order] = []

    def grow(f: int, i: int, w: int, order: tuple[str, ...]) -> None:
        if w == microbatches:
            found.append(order)
            return
        if f < microbatches:
            grow(f + 1, i, w, (*order, "F"))
        if i < f:
            grow(f, i + 1, w, (*order, "I"))
        if w < i:
            grow(f, i, w + 1, (*order, "W"))

    grow(0, 0, 0, ())
    return found


def peak(order: Order, weight_fraction: float) -> float:
    """The most a device holds over ``order``, in stashes."""
    held = most = 0.0
    for kind in order:
        held += {"F": 1.0, "I": weight_fraction - 1.0, "W": -weight_fraction}[kind]
        most = max(most, held)
    return most


def _sends(costs: PipelineCosts) -> tuple[list[float], list[float]]:
    """The forward transfer out of each stage, and the backward one out of each stage."""
    stages = len(costs.stages)

    def send(a: int, b: int) -> float:
        lower = min(a, b)
        return costs.network.route(a, b).transfer_time_s(costs.stages[lower].output_bytes)

    forward = [send(s, s + 1) if s + 1 < stages else 0.0 for s in range(stages)]
    backward = [send(s, s - 1) if s > 0 else 0.0 for s in range(stages)]
    return forward, backward


def timed(costs: PipelineCosts, rows: Sequence[Order], objective: str) -> float | None:
    """The objective of these orders (None when they deadlock): sweep the devices, running
    each one's next action once its input has ended."""
    stages = len(rows)
    microbatches = sum(1 for kind in rows[0] if kind == "F")
    forward, backward = _sends(costs)
    ends: dict[tuple[str, int, int], float] = {}
    clock = [0.0] * stages
    first: list[float | None] = [None] * stages
    done = [{"F": 0, "I": 0, "W": 0} for _ in range(stages)]
    heads = [0] * stages
    moved = True
    while moved:
        moved = False
        for s, row in enumerate(rows):
            while heads[s] < len(row):
                kind = row[heads[s]]
                m = done[s][kind]
                if kind == "F":
                    need = None if s == 0 else ends.get(("F", s - 1, m))
                    ready = 0.0 if s == 0 else (None if need is None else need + forward[s - 1])
                    took = costs.stages[s].forward_s
                elif kind == "I":
                    if s == stages - 1:
                        ready = ends.get(("F", s, m))
                    else:
                        need = ends.get(("I", s + 1, m))
                        ready = None if need is None else need + backward[s + 1]
                    took = costs.stages[s].input_grad_s
                else:
                    ready = ends.get(("I", s, m))
                    took = costs.stages[s].weight_grad_s
                if ready is None:
                    break
                start = max(ready, clock[s])
                first[s] = start if first[s] is None else first[s]
                clock[s] = start + took
                ends[kind, s, m] = clock[s]
                done[s][kind] += 1
                heads[s] += 1
                moved = True
    if any(heads[s] < len(rows[s]) for s in range(stages)):
        return None
    if microbatches and objective == "stage-span":
        return max(clock[s] - (first[s] or 0.0) for s in range(stages))
    return max(clock[s] + costs.stages[s].optimizer_step_s for s in range(stages))


def brute_force(
    costs: PipelineCosts,
    microbatches: int,
    limit: float,
    weight_fraction: float,
    objective: str = "step",
) -> tuple[float, tuple[Order, ...] | None]:
    """The best objective over every combination of orders within the limit, and one order
    that has it (infinity and None when none runs to completion)."""
    kept = [o for o in orders(microbatches) if peak(o, weight_fraction) <= limit + 1e-9]
    best: tuple[float, tuple[Order, ...] | None] = (math.inf, None)
    for rows in itertools.product(kept, repeat=len(costs.stages)):
        value = timed(costs, rows, objective)
        if value is not None and value < best[0]:
            best = (value, rows)
    return best


def as_actions(rows: Sequence[Order]) -> tuple[tuple[Action, ...], ...]:
    """Orders of kinds as each device's actions."""
    kinds = {"F": Kind.F, "I": Kind.I, "W": Kind.W}
    made = []
    for s, row in enumerate(rows):
        seen = {"F": 0, "I": 0, "W": 0}
        actions = []
        for kind in row:
            actions.append(Action(s, kinds[kind], seen[kind]))
            seen[kind] += 1
        made.append(tuple(actions))
    return tuple(made)


def pareto_step(
    costs: PipelineCosts, microbatches: int, limit: float, weight_fraction: float
) -> float:
    """The least step over every order within the limit, by dynamic programming over the
    counts of each stage's F, I and W done (one action more per layer), keeping per count
    the timings no other beats in every coordinate. A timing is each device's clock, and
    the ends of F and I whose successor on the next stage has not run."""
    stages = len(costs.stages)
    forward, backward = _sends(costs)
    duration = [(c.forward_s, c.input_grad_s, c.weight_grad_s) for c in costs.stages]
    size = stages * microbatches
    # timing: clocks (stages), F ends (stages x M), I ends (stages x M); -1: not run yet
    layer: dict[tuple[int, ...], list[tuple[float, ...]]] = {
        (0,) * (3 * stages): [(0.0,) * stages + (-1.0,) * (2 * size)]
    }
    for _ in range(3 * size):
        grown: dict[tuple[int, ...], set[tuple[float, ...]]] = {}
        for counts, timings in layer.items():
            for s in range(stages):
                f, i, w = counts[3 * s : 3 * s + 3]
                held = f - i * (1 - weight_fraction) - w * weight_fraction
                for kind in range(3):
                    if kind == 0 and (
                        f == microbatches
                        or held + 1 > limit + 1e-9
                        or (s > 0 and counts[3 * (s - 1)] <= f)
                    ):
                        continue
                    if kind == 1 and (i == f or (s < stages - 1 and counts[3 * (s + 1) + 1] <= i)):
                        continue
                    if kind == 2 and w == i:
                        continue
                    after = list(counts)
                    after[3 * s + kind] += 1
                    bucket = grown.setdefault(tuple(after), set())
                    done = (f, i, w)
                    for timing in timings:
                        bucket.add(
                            _step(timing, s, kind, done, duration, forward, backward, microbatches)
                        )
        layer = {counts: _frontier(list(found)) for counts, found in grown.items()}
    (final,) = layer.values()
    return min(max(t[s] + costs.stages[s].optimizer_step_s for s in range(stages)) for t in final)


def _step(
    timing: tuple[float, ...],
    s: int,
    kind: int,
    done: tuple[int, int, int],
    duration: list[tuple[float, float, float]],
    forward: list[float],
    backward: list[float],
    microbatches: int,
) -> tuple[float, ...]:
    """The timing after stage ``s`` runs its next action of ``kind``."""
    f, i, _ = done
    stages = len(duration)
    size = stages * microbatches
    t = list(timing)

    def f_end(stage: int, m: int) -> int:
        return stages + stage * microbatches + m

    def i_end(stage: int, m: int) -> int:
        return stages + size + stage * microbatches + m

    if kind == 0:
        ready = 0.0 if s == 0 else t[f_end(s - 1, f)] + forward[s - 1]
    elif kind == 1:
        ready = t[f_end(s, i)] if s == stages - 1 else t[i_end(s + 1, i)] + backward[s + 1]
    else:
        ready = t[s]  # its I ran on this device, before the clock
    end = max(ready, t[s]) + duration[s][kind]
    t[s] = end
    if kind == 0:
        t[f_end(s, f)] = end
        if s > 0:
            t[f_end(s - 1, f)] = 0.0  # consumed: no longer needed
    elif kind == 1:
        t[i_end(s, i)] = end
        if s == stages - 1:
            t[f_end(s, i)] = 0.0
        else:
            t[i_end(s + 1, i)] = 0.0
    return tuple(t)


def _frontier(timings: list[tuple[float, ...]]) -> list[tuple[float, ...]]:
    """The timings no other is at most in every coordinate."""
    timings.sort()
    kept: list[tuple[float, ...]] = []
    for timing in timings:
        if not any(all(a <= b for a, b in zip(other, timing, strict=True)) for other in kept):
            kept.append(timing)
    return kept
