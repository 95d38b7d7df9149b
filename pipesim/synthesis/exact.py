"""The optimal order for a tiny pipeline, by branch and bound: the reference the synthesiser
is held to, and its exact refinement where the shape is small enough.

**What is searched.** Every schedule with the I/W split (each stage runs one F, one I and one
W per micro-batch), each stage running its micro-batches' F, I and W in micro-batch order (as
every registered schedule and the greedy scheduler do), whose every device keeps within the
memory limit as the synthesiser counts it (an F adds its stash at its start; an I frees all
but what its W keeps, the W the rest; read after each action). Times are the synthesiser's:
each device runs its order one action after another, each action as soon as its device is free
and its input has arrived; a transfer between devices takes the route's time in isolation (the
engine's timing when transfers do not queue on a link, as with a latency-only link). The
objective is the step (each device's last end plus its optimizer step, the largest) or the
largest stage span.

**How.** A schedule is its devices' orders, and its timing is fixed by them; so the search
builds orders, one action at a time, in the order of the actions' start times (the lower
device first on a tie). Every set of orders is built exactly once: sort its actions by (start,
device) and each prefix is a state of the search (an action's input on another device ends
before it starts, as long as every F and I that feeds another device takes time, which is
checked). A branch is cut when its lower bound reaches the best schedule found: each device's
clock (no earlier than the last start committed) plus the work it still has, and for each
micro-batch's next F and I the earliest it can start plus the longest path after it.

The search is exponential: it refuses orders of more than :data:`MAX_ACTIONS` actions, and
stops after ``node_limit`` states when one is given (the result then says it is not proven).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from pipesim.costs.pipeline_costs import PipelineCosts
from pipesim.errors import ScheduleError, named
from pipesim.schedules.action import Action, Kind
from pipesim.schedules.schedule import Schedule
from pipesim.synthesis.list_scheduler import LIMIT_TOLERANCE, SYNTH_NAME, MemoryCount

# The most actions (3 x stages x micro-batches) an exact search takes: K = 3 and M = 4.
MAX_ACTIONS = 36
OBJECTIVES = ("step", "stage-span")
_F, _I, _W = 0, 1, 2
_KINDS = (Kind.F, Kind.I, Kind.W)
# States remembered so that one reached again by other orders is not searched twice.
MEMO_SIZE = 1_000_000


@dataclass(frozen=True)
class Optimum:
    """The best schedule the search found, and whether it is proven optimal.

    Attributes:
        schedule: the best order (named ``synth``), or None when none beat ``upper_bound``
            (then nothing does: the order that gave the bound is optimal, when proven).
        value_s: its objective value (``upper_bound`` when none beat it; infinity when no
            order keeps within the limit).
        proven: the search ran to its end (no order is better than ``value_s``).
        nodes: the search states visited.
    """

    schedule: Schedule | None
    value_s: float
    proven: bool
    nodes: int


def check_exact_size(stages: int, microbatches: int) -> None:
    """Refuse a search beyond :data:`MAX_ACTIONS` actions, naming the field at fault."""
    actions = 3 * stages * microbatches
    if actions > MAX_ACTIONS:
        raise ScheduleError(
            f"{named('microbatches')} {microbatches} with {stages} stages is {actions} actions: "
            f"an exact search takes at most {MAX_ACTIONS} (3 x stages x micro-batches, e.g. "
            "K = 3 and M = 4)"
        )


def optimum(
    costs: PipelineCosts,
    microbatches: int,
    count: MemoryCount,
    memory_limit: float,
    *,
    placement: Sequence[int] | None = None,
    objective: str = "step",
    upper_bound: float = math.inf,
    node_limit: int | None = None,
) -> Optimum:
    """The optimal order (see the module's docstring) for ``costs``, ``microbatches`` and
    ``placement`` (one stage per device when None) under ``memory_limit`` as ``count``
    counts it; only orders better than ``upper_bound`` are looked for (a known order's value
    prunes the search). Refuses shapes beyond :data:`MAX_ACTIONS` actions."""
    if objective not in OBJECTIVES:
        raise ScheduleError(f"objective must be one of {', '.join(OBJECTIVES)}, got {objective!r}")
    placement = tuple(range(len(costs.stages))) if placement is None else tuple(placement)
    if len(placement) != len(costs.stages):
        raise ScheduleError(f"placement has {len(placement)} stages, the costs {len(costs.stages)}")
    check_exact_size(len(placement), microbatches)
    from pipesim.synthesis.bounds import lower_bound

    search = _Search(costs, placement, microbatches, count, memory_limit, objective)
    floor = lower_bound(
        costs, microbatches, placement, objective=objective, memory=(count, memory_limit)
    )
    if floor.value_s >= upper_bound * (1 - 1e-12):  # nothing can beat the bound given
        return Optimum(None, upper_bound, True, 0)
    search.floor = list(floor.per_device_s)
    return search.run(upper_bound, node_limit)


class _Search:
    def __init__(
        self,
        costs: PipelineCosts,
        placement: tuple[int, ...],
        microbatches: int,
        count: MemoryCount,
        memory_limit: float,
        objective: str,
    ) -> None:
        stages = len(placement)
        self.placement = placement
        self.stages = stages
        self.devices = max(placement) + 1
        self.microbatches = microbatches
        self.span = objective == "stage-span"
        self.limit = memory_limit * (1 + LIMIT_TOLERANCE)
        self.duration = [(c.forward_s, c.input_grad_s, c.weight_grad_s) for c in costs.stages]
        self.change = [tuple(count.change(s, kind) for kind in _KINDS) for s in range(stages)]
        self.floor = [0.0] * (max(placement) + 1)  # each device's bound, whatever the state
        self.memo_size = MEMO_SIZE
        self.stages_of = [
            [s for s in range(stages) if placement[s] == d] for d in range(self.devices)
        ]
        self.optimizer = [
            sum(costs.stages[s].optimizer_step_s for s in row) for row in self.stages_of
        ]

        def send(source: int, target: int) -> float:
            a, b = placement[source], placement[target]
            if a == b:
                return 0.0
            sized_by = min(source, target)
            return costs.network.route(a, b).transfer_time_s(costs.stages[sized_by].output_bytes)

        self.send_forward = [send(s, s + 1) if s + 1 < stages else 0.0 for s in range(stages)]
        self.send_backward = [send(s, s - 1) if s > 0 else 0.0 for s in range(stages)]
        for s in range(stages):
            forward, grad = self.duration[s][_F], self.duration[s][_I]
            if s + 1 < stages and forward + self.send_forward[s] <= 0:
                raise ScheduleError(
                    f"stage {s}'s forward_s must be > 0 for an exact search (its output goes "
                    f"to another device), got {forward:g}"
                )
            if s > 0 and grad + self.send_backward[s] <= 0:
                raise ScheduleError(
                    f"stage {s}'s input_grad_s must be > 0 for an exact search (its output "
                    f"goes to another device), got {grad:g}"
                )
        self._tails()

    def _tails(self) -> None:
        """After each (stage, kind) ends, the longest path that must follow it: to the step's
        end (through the optimizer step of the device it ends on), or for the stage span to
        the end of an action on its own device."""
        stages = self.stages
        # The chain F(0..S-1), I(S-1..0); W(s) hangs off I(s).
        after: dict[tuple[int, int], float] = {}
        within: dict[tuple[int, int], float] = {}
        for s in range(stages):
            device = self.placement[s]
            after[s, _W] = self.optimizer[device]
        for s in range(stages):  # I(s), from stage 0 up (its successors: I(s-1) and W(s))
            device = self.placement[s]
            best = self.duration[s][_W] + after[s, _W]
            if s > 0:
                best = max(
                    best, self.send_backward[s] + self.duration[s - 1][_I] + after[s - 1, _I]
                )
            after[s, _I] = max(best, self.optimizer[device])
        for s in range(stages - 1, -1, -1):  # F(s): its successor F(s+1), or I(S-1)
            device = self.placement[s]
            if s == stages - 1:
                best = self.duration[s][_I] + after[s, _I]
            else:
                best = self.send_forward[s] + self.duration[s + 1][_F] + after[s + 1, _F]
            after[s, _F] = max(best, self.optimizer[device])
        # Within a device: the path's end must be on the device of the action it starts from.
        for device in range(self.devices):
            reach: dict[tuple[int, int], float] = {}
            for s in range(stages):
                reach[s, _W] = 0.0 if self.placement[s] == device else -math.inf
            for s in range(stages):
                best = self.duration[s][_W] + reach[s, _W]
                if s > 0:
                    best = max(
                        best, self.send_backward[s] + self.duration[s - 1][_I] + reach[s - 1, _I]
                    )
                reach[s, _I] = max(best, 0.0 if self.placement[s] == device else -math.inf)
            for s in range(stages - 1, -1, -1):
                if s == stages - 1:
                    best = self.duration[s][_I] + reach[s, _I]
                else:
                    best = self.send_forward[s] + self.duration[s + 1][_F] + reach[s + 1, _F]
                reach[s, _F] = max(best, 0.0 if self.placement[s] == device else -math.inf)
            for s in self.stages_of[device]:
                for kind in (_F, _I, _W):
                    within[s, kind] = reach[s, kind]
        # What an action adds to the bound from its start: its time and the path after it.
        self.rest = {
            key: self.duration[key[0]][key[1]] + (within[key] if self.span else after[key])
            for key in after
        }

    # -- the search ------------------------------------------------------------------------

    def run(self, upper_bound: float, node_limit: int | None) -> Optimum:
        stages, microbatches = self.stages, self.microbatches
        self.next = [[0, 0, 0] for _ in range(stages)]
        self.ends = [[[-1.0] * microbatches for _ in range(2)] for _ in range(stages)]
        self.clock = [0.0] * self.devices
        self.first = [-1.0] * self.devices
        self.held = [0.0] * self.devices
        self.work = [
            microbatches * sum(sum(self.duration[s]) for s in row) for row in self.stages_of
        ]
        self.actions = [3 * microbatches * len(row) for row in self.stages_of]
        self.saved: list[tuple[float, float, float, float]] = []
        self.rows: list[list[tuple[int, int, int]]] = [[] for _ in range(self.devices)]
        self.best = upper_bound
        self.best_rows: list[list[tuple[int, int, int]]] | None = None
        self.nodes = 0
        self.seen: set[tuple[object, ...]] = set()
        self.node_limit = node_limit
        self.stopped = False
        self.left = 3 * stages * microbatches
        self._branch(0.0, 0)
        schedule = None
        if self.best_rows is not None:
            rows = tuple(
                tuple(Action(s, _KINDS[k], m) for s, k, m in row) for row in self.best_rows
            )
            schedule = Schedule(SYNTH_NAME, microbatches, self.placement, rows)
        return Optimum(schedule, self.best, not self.stopped, self.nodes)

    def _ready(self, stage: int, kind: int) -> float | None:
        """When the next ``kind`` of ``stage`` may start as far as its input goes (None: not
        yet known, or none left)."""
        nxt = self.next[stage]
        m = nxt[kind]
        if m >= self.microbatches:
            return None
        if kind == _F:
            if stage == 0:
                return 0.0
            end = self.ends[stage - 1][_F][m]
            return None if end < 0 else end + self.send_forward[stage - 1]
        if kind == _I:
            if m >= nxt[_F]:
                return None
            if stage == self.stages - 1:
                return self.ends[stage][_F][m]
            end = self.ends[stage + 1][_I][m]
            return None if end < 0 else end + self.send_backward[stage + 1]
        if m >= nxt[_I]:
            return None
        return self.ends[stage][_I][m]

    def _key(self, last: float, last_device: int) -> tuple[object, ...]:
        """What the state's completions depend on: the counts done, each device's clock
        (and first start, for the span), the ends of actions whose successor on another
        stage has not run, and the last start committed."""
        ends: list[float] = []
        stages = self.stages
        for stage in range(stages):
            nxt = self.next[stage]
            if stage + 1 < stages:
                ends += self.ends[stage][_F][self.next[stage + 1][_F] : nxt[_F]]
            if stage > 0:
                ends += self.ends[stage][_I][self.next[stage - 1][_I] : nxt[_I]]
        counts = tuple(c for nxt in self.next for c in nxt)
        firsts = tuple(self.first) if self.span else ()
        return (counts, tuple(self.clock), firsts, tuple(ends), last, last_device)

    def _bound(self, last: float) -> float:
        """A lower bound on the objective of every completion of the current state."""
        bound = 0.0
        for device in range(self.devices):
            clock = self.clock[device]
            work = self.work[device]
            end = max(clock, last) + work if self.actions[device] else clock
            if self.span:
                first = self.first[device]
                value = end - first if first >= 0 else work
            else:
                value = end + self.optimizer[device]
            bound = max(bound, value, self.floor[device])
        for stage in range(self.stages):
            device = self.placement[stage]
            first = self.first[device]
            if self.span and first < 0:
                continue
            for kind in (_F, _I):
                ready = self._ready(stage, kind)
                if ready is None:
                    continue
                start = max(ready, last, self.clock[device])
                value = start + self.rest[stage, kind]
                bound = max(bound, value - first if self.span else value)
        return bound

    def _branch(self, last: float, last_device: int) -> None:
        self.nodes += 1
        if self.node_limit is not None and self.nodes > self.node_limit:
            self.stopped = True
            return
        if self.left == 0:
            if self.span:
                value = max(
                    self.clock[d] - self.first[d] for d in range(self.devices) if self.first[d] >= 0
                )
            else:
                value = max(self.clock[d] + self.optimizer[d] for d in range(self.devices))
            if value < self.best:
                self.best = value
                self.best_rows = [list(row) for row in self.rows]
            return
        if self._bound(last) >= self.best * (1 - 1e-12):
            return
        if len(self.seen) < self.memo_size:
            key = self._key(last, last_device)
            if key in self.seen:
                return  # the same state reached by other orders: its completions are known
            self.seen.add(key)
        moves = []
        for device in range(self.devices):
            clock = self.clock[device]
            held = self.held[device]
            for stage in self.stages_of[device]:
                for kind in (_I, _F, _W):
                    ready = self._ready(stage, kind)
                    if ready is None:
                        continue
                    if kind == _F and held + self.change[stage][_F] > self.limit:
                        continue
                    start = max(clock, ready)
                    if start < last or (start == last and device < last_device):
                        continue  # built in another order of the same schedules
                    moves.append((start, kind, device, stage))
        moves.sort()
        for start, kind, device, stage in moves:
            self._commit(device, stage, kind, start)
            self._branch(start, device)
            self._undo(device, stage, kind)
            if self.stopped:
                return

    def _commit(self, device: int, stage: int, kind: int, start: float) -> None:
        nxt = self.next[stage]
        m = nxt[kind]
        nxt[kind] += 1
        end = start + self.duration[stage][kind]
        if kind != _W:
            self.ends[stage][kind][m] = end
        self.saved.append(
            (self.clock[device], self.first[device], self.held[device], self.work[device])
        )
        if self.first[device] < 0:
            self.first[device] = start
        self.clock[device] = end
        self.held[device] += self.change[stage][kind]
        self.work[device] -= self.duration[stage][kind]
        self.actions[device] -= 1
        self.rows[device].append((stage, kind, m))
        self.left -= 1

    def _undo(self, device: int, stage: int, kind: int) -> None:
        nxt = self.next[stage]
        nxt[kind] -= 1
        m = nxt[kind]
        if kind != _W:
            self.ends[stage][kind][m] = -1.0
        saved = self.saved.pop()
        self.clock[device], self.first[device], self.held[device], self.work[device] = saved
        self.actions[device] += 1
        self.rows[device].pop()
        self.left += 1
