"""The greedy list scheduler behind synthesis: one order per policy, for any placement.

It is the zero-bubble paper's heuristic (Qi et al., arXiv 2401.10241 §3) made explicit. Time is
estimated from each stage's F, I and W and the transfers between devices (a transfer between
two stages of one device is free). The scheduler always commits the action that can start
earliest anywhere; a device that is free chooses among its stages' ready actions by a
:class:`GreedyPolicy`: a ready I (it frees memory and is on the critical path) or a ready F if
the memory limit lets one more micro-batch in, and a W to fill idle time, in any idle time,
only where it fits before the next known arrival, or only when memory or the end of the step
forces it.

Memory is counted per device in (stage, micro-batch) pairs in flight, each weighing one stash
(less after its I where W keeps only part of it). A device that holds several stages of a
micro-batch (two in a V, v looped) must hold them all at once before the micro-batch's
backward starts, so a micro-batch is let into a device only with room for the stages it will
still need there: all of them (``reserve_all``), or, as the banker's algorithm allows, while
the micro-batches already in can still finish one after another. A policy whose run stalls
anyway gives no order (:func:`greedy_orders` returns None).
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from pipesim.costs.pipeline_costs import PipelineCosts
from pipesim.memory.rules import changes
from pipesim.schedules.action import Action, Kind
from pipesim.schedules.schedule import Schedule
from pipesim.synthesis.names import SYNTH_NAME as SYNTH_NAME

WEIGHT_GRAD_MODES = ("eager", "fit", "late")
# A memory count within this relative difference of the limit keeps within it (sums of
# fractional stashes differ from the limit in the last digits).
LIMIT_TOLERANCE = 1e-12
_KIND_F, _KIND_I, _KIND_W = Kind.F, Kind.I, Kind.W


def within(peak: float, limit: float) -> bool:
    """Whether a memory count's ``peak`` keeps within ``limit`` (up to rounding)."""
    return peak <= limit * (1 + LIMIT_TOLERANCE)


@dataclass(frozen=True)
class GreedyPolicy:
    """How the greedy scheduler breaks a free device's choice.

    Attributes:
        input_grad_first: a ready I before a ready F.
        weight_grad: ``eager`` (W in any idle time), ``fit`` (W only where it ends before the
            next known arrival) or ``late`` (W only when memory or the step's end forces it).
        deeper_first: among a device's stages with an action ready at once, the later stage
            first (it brings its micro-batch to the loss sooner); else the earlier one.
            Matters only when a device holds several stages.
        reserve_all: admit a micro-batch into a device only with room for every stage of it
            the device holds; else by the banker's rule.
        wait_for_input_grad: a device whose next action would be an F waits instead for an I
            known to arrive before that F would end (the I is on the critical path; an F
            started just before it arrives delays it by up to a forward's time per stage).
    """

    input_grad_first: bool = True
    weight_grad: str = "eager"
    deeper_first: bool = True
    reserve_all: bool = True
    wait_for_input_grad: bool = False

    @property
    def name(self) -> str:
        """``greedy-I-first-eager-W`` and so on (the last two only when not the default)."""
        first = "I-first" if self.input_grad_first else "F-first"
        words = ["greedy", first, f"{self.weight_grad}-W"]
        if not self.deeper_first:
            words.append("shallow-first")
        if not self.reserve_all:
            words.append("banker")
        if self.wait_for_input_grad:
            words.append("wait-I")
        return "-".join(words)


def policies(chunks: int) -> tuple[GreedyPolicy, ...]:
    """The portfolio for ``chunks`` stages per device: I or F first times the three W modes,
    and with several stages per device, deeper or shallower first and both admission rules;
    then the I-first ones again waiting for an I known to arrive before a ready F would end."""
    several = (True, False) if chunks > 1 else (True,)
    base = tuple(
        GreedyPolicy(first, weight, deeper, reserve)
        for first, weight, deeper, reserve in itertools.product(
            (True, False), WEIGHT_GRAD_MODES, several, several
        )
    )
    waiting = tuple(
        dataclasses.replace(policy, wait_for_input_grad=True)
        for policy in base
        if policy.input_grad_first
    )
    return base + waiting


def unit_changes(weight_fraction: float) -> dict[Kind, float]:
    """What each kind of action adds to a device's activations, in stashes of one (stage,
    micro-batch) (:mod:`pipesim.memory.rules`, without re-materialization; ``weight_fraction``
    is the part of the stash W keeps after I). Only an F adds, at its start, so a peak is read
    after each action."""
    return {
        kind: sum(change.bytes(1.0, weight_fraction, 0.0) for change in changes(kind, False))
        for kind in (Kind.F, Kind.B, Kind.I, Kind.W)
    }


@dataclass(frozen=True)
class MemoryCount:
    """What a limit counts, per stage: the stash its F adds and what its W still keeps after
    its I, in pairs (a stash of 1) or in bytes (the costs' activation bytes). Each kind's
    change follows :mod:`pipesim.memory.rules` (without re-materialization): F adds the stash,
    I frees all but what W keeps, W frees that, a full B frees all."""

    stash: tuple[float, ...]
    kept: tuple[float, ...]
    unit: str = "pairs"

    def change(self, stage: int, kind: Kind) -> float:
        """What ``kind`` on ``stage`` adds (negative: frees)."""
        return sum(
            rule.bytes(self.stash[stage], self.kept[stage], 0.0) for rule in changes(kind, False)
        )

    def peaks(self, schedule: Schedule) -> tuple[float, ...]:
        """Each device's peak under this count, from its order alone (an F adds at its start,
        the others free at their end, so a peak is read after each action)."""
        peaks = []
        for row in schedule.device_actions:
            held = peak = 0.0
            for action in row:
                held += self.change(action.stage, action.kind)
                peak = max(peak, held)
            peaks.append(peak)
        return tuple(peaks)

    def fewest(self, placement: Sequence[int]) -> float:
        """The least any order of ``placement`` can run with: a device holds every stage of a
        micro-batch it has at once."""
        return max(
            sum(self.stash[s] for s, d in enumerate(placement) if d == device)
            for device in set(placement)
        )


def pair_count(stages: int, weight_fraction: float = 1.0) -> MemoryCount:
    """(stage, micro-batch) pairs in flight, W keeping ``weight_fraction`` of a pair after I."""
    return MemoryCount((1.0,) * stages, (weight_fraction,) * stages)


def byte_count(costs: PipelineCosts) -> MemoryCount:
    """Activation bytes, each stage's stash and the part its W keeps as the costs give them."""
    return MemoryCount(
        tuple(s.activation_bytes for s in costs.stages),
        tuple(s.weight_grad_activation_bytes for s in costs.stages),
        "bytes",
    )


def greedy_orders(
    costs: PipelineCosts,
    placement: Sequence[int],
    microbatches: int,
    memory_limit: float,
    policy: GreedyPolicy,
    count: MemoryCount | None = None,
    caps: Sequence[int] | None = None,
) -> tuple[tuple[Action, ...], ...] | None:
    """Each device's order (F, I and W of every stage and micro-batch, micro-batches in order
    within each stage and kind), or None when this policy stalls under the limit. ``count``
    is what the limit counts (pairs in flight when None); ``caps`` (one per device) let a
    device take a micro-batch in only while fewer than that many of its micro-batches wait
    for their input gradient there (its warm-up forwards, :mod:`pipesim.synthesis.warmup`)."""
    found = greedy_run(costs, placement, microbatches, memory_limit, policy, count, caps)
    return None if found is None else found.rows


@dataclass(frozen=True)
class GreedyRun:
    """A greedy order and the times the scheduler estimated for it: each device's first
    action's start and last action's end (the engine's, when transfers do not queue)."""

    rows: tuple[tuple[Action, ...], ...]
    first_start_s: tuple[float, ...]
    last_end_s: tuple[float, ...]


def greedy_run(
    costs: PipelineCosts,
    placement: Sequence[int],
    microbatches: int,
    memory_limit: float,
    policy: GreedyPolicy,
    count: MemoryCount | None = None,
    caps: Sequence[int] | None = None,
) -> GreedyRun | None:
    """:func:`greedy_orders` with the scheduler's estimate of each device's first start and
    last end (None when the policy stalls)."""
    placement = tuple(placement)
    count = pair_count(len(placement)) if count is None else count
    run = _Run(costs, placement, microbatches, memory_limit, policy, count, caps)
    rows = run.run()
    if rows is None:
        return None
    return GreedyRun(rows, tuple(run.first), tuple(run.clock))


def greedy_schedule(
    costs: PipelineCosts,
    microbatches: int,
    memory_limit: float,
    policy: GreedyPolicy,
    weight_fraction: float = 1.0,
    placement: Sequence[int] | None = None,
    count: MemoryCount | None = None,
    caps: Sequence[int] | None = None,
) -> Schedule | None:
    """:func:`greedy_orders` as a schedule named ``synth`` (one stage per device when
    ``placement`` is None), validated; None when the policy stalls. The limit counts pairs,
    W keeping ``weight_fraction`` of one after I, unless ``count`` says otherwise."""
    placement = tuple(range(len(costs.stages))) if placement is None else tuple(placement)
    if count is None:
        count = pair_count(len(placement), weight_fraction)
    rows = greedy_orders(costs, placement, microbatches, memory_limit, policy, count, caps)
    return None if rows is None else Schedule(SYNTH_NAME, microbatches, placement, rows)


class _Run:
    """The scheduler's state: per device its clock, the W it owes and the memory it holds or
    has promised; per stage its next F and I; per (stage, micro-batch) when its F and I end."""

    def __init__(
        self,
        costs: PipelineCosts,
        placement: tuple[int, ...],
        microbatches: int,
        memory_limit: float,
        policy: GreedyPolicy,
        count: MemoryCount,
        caps: Sequence[int] | None = None,
    ) -> None:
        stages = len(placement)
        self.costs = costs.stages
        self.network = costs.network
        self.placement = placement
        self.devices = max(placement) + 1
        self.microbatches = microbatches
        self.limit = memory_limit * (1 + LIMIT_TOLERANCE)
        self.change = [{kind: count.change(s, kind) for kind in Kind} for s in range(stages)]
        self.stash = count.stash
        self.policy = policy
        self.stages_of = [
            [s for s in range(stages) if placement[s] == d] for d in range(self.devices)
        ]
        self.kind_rank = (0, 1) if policy.input_grad_first else (1, 0)  # I's, F's
        self.depth = -1 if policy.deeper_first else 1
        # The micro-batch's first stage on a device admits it; the device's later stages of it
        # are promised there and then.
        self.entry = [self.stages_of[d][0] for d in range(self.devices)]
        self.chunks = [len(row) for row in self.stages_of]
        # what a micro-batch's stages on a device stash in all
        self.need = [sum(self.stash[s] for s in row) for row in self.stages_of]
        self.forward_send_s = [self._send_s(s, s + 1, s) for s in range(stages)]
        self.backward_send_s = [self._send_s(s, s - 1, s - 1) for s in range(stages)]
        self.clock = [0.0] * self.devices
        self.first = [0.0] * self.devices  # each device's first action's start
        self.caps = None if caps is None else tuple(caps)
        self.next_forward = [0] * stages
        self.next_input_grad = [0] * stages
        self.weight_grads: list[deque[Action]] = [deque() for _ in range(self.devices)]
        self.held = [0.0] * self.devices
        self.promised = [0.0] * self.devices  # what admitted micro-batches will still stash
        # per device and admitted micro-batch: its stages there not yet forwarded
        self.owing: list[dict[int, list[int]]] = [{} for _ in range(self.devices)]
        self.forward_end = [[-1.0] * microbatches for _ in range(stages)]
        self.input_grad_end = [[-1.0] * microbatches for _ in range(stages)]
        self.rows: list[list[Action]] = [[] for _ in range(self.devices)]

    def _send_s(self, source: int, target: int, sized_by: int) -> float:
        """The transfer from stage ``source`` to ``target`` (free on one device, none off the
        ends), sized as the engines size it: the output of the lower stage."""
        if not 0 <= target < len(self.placement):
            return 0.0
        a, b = self.placement[source], self.placement[target]
        if a == b:
            return 0.0
        return self.network.route(a, b).transfer_time_s(self.costs[sized_by].output_bytes)

    def run(self) -> tuple[tuple[Action, ...], ...] | None:
        total = 3 * len(self.placement) * self.microbatches
        choices = [self._choice(device) for device in range(self.devices)]
        # The soonest choice first, the lower device on a tie: a heap of (start, device,
        # version), an entry stale once its device has chosen again.
        versions = [0] * self.devices
        heap = [(choice[0], device, 0) for device, choice in enumerate(choices)]
        heapq.heapify(heap)
        for _ in range(total):
            while True:
                _, device, version = heapq.heappop(heap)
                if version == versions[device]:
                    break
            start, stage, kind = choices[device]
            if kind is None:
                return None
            self._commit(device, stage, kind, start)
            # What changed: this device, and the devices of the stages next to the action's.
            near = {device}
            for neighbour in (stage - 1, stage + 1):
                if 0 <= neighbour < len(self.placement):
                    near.add(self.placement[neighbour])
            for d in near:
                choices[d] = self._choice(d)
                versions[d] += 1
                heapq.heappush(heap, (choices[d][0], d, versions[d]))
        return tuple(tuple(row) for row in self.rows)

    # -- readiness -------------------------------------------------------------------------

    def _admits(self, device: int) -> bool:
        """Whether the device can take one more micro-batch in."""
        if self.policy.reserve_all or self.chunks[device] == 1:
            return self.held[device] + self.promised[device] + self.need[device] <= self.limit
        return self._safe(device, self.entry[device], None)

    def _safe(self, device: int, stage: int, microbatch: int | None) -> bool:
        """The banker's rule: whether, after ``stage``'s F is granted its stash (for an
        admitted ``microbatch``, or for a new one when None), the micro-batches in the device
        can still finish one after another, least owed first, each freeing all it holds when
        it finishes. Checked for every grant, not only admissions: a younger micro-batch must
        not take what the oldest needs to finish."""
        need = self.need[device]
        stash = self.stash[stage]
        free = self.limit - self.held[device] - stash
        if free < 0:
            return False
        owed = []
        for m, rest in self.owing[device].items():
            amount = sum(self.stash[s] for s in rest)
            owed.append(amount - stash if m == microbatch else amount)
        if microbatch is None:
            owed.append(need - stash)
        for amount in sorted(owed):
            if amount > free:
                return False
            free += need - amount  # what it held comes back when it finishes
        return True

    def _forward_ready(self, stage: int) -> float | None:
        m = self.next_forward[stage]
        if m >= self.microbatches:
            return None
        device = self.placement[stage]
        if stage == self.entry[device]:
            if not self._admits(device):
                return None
            if self.caps is not None and m - self.next_input_grad[stage] >= self.caps[device]:
                return None  # the device's warm-up count of micro-batches wait for I
        elif self.policy.reserve_all:
            if self.held[device] + self.stash[stage] > self.limit:  # pragma: no cover - promised
                return None
        elif not self._safe(device, stage, m):
            return None
        if stage == 0:
            return 0.0
        end = self.forward_end[stage - 1][m]
        return None if end < 0 else end + self.forward_send_s[stage - 1]

    def _input_grad_ready(self, stage: int) -> float | None:
        m = self.next_input_grad[stage]
        if m >= self.next_forward[stage]:  # its own F has not run
            return None
        if stage == len(self.placement) - 1:
            return self.forward_end[stage][m]
        end = self.input_grad_end[stage + 1][m]
        return None if end < 0 else end + self.backward_send_s[stage + 1]

    def _choice(self, device: int) -> tuple[float, int, Kind | None]:
        """What ``device`` runs next and when, by the policy, from what is known now."""
        now = self.clock[device]
        rank_i, rank_f = self.kind_rank
        depth = self.depth
        # (when, kind's rank, stage's rank, stage, kind) of each ready F and I, soonest first
        ready: list[tuple[float, int, int, int, Kind]] = []
        for stage in self.stages_of[device]:
            at = self._input_grad_ready(stage)
            if at is not None:
                ready.append((at if at > now else now, rank_i, depth * stage, stage, _KIND_I))
            at = self._forward_ready(stage)
            if at is not None:
                ready.append((at if at > now else now, rank_f, depth * stage, stage, _KIND_F))
        if len(ready) > 1:
            ready.sort()
        if self.policy.wait_for_input_grad and ready and ready[0][4] is _KIND_F:
            # An I known to arrive before this F would end goes first: the device waits.
            ends = ready[0][0] + self.costs[ready[0][3]].forward_s
            coming = [entry for entry in ready if entry[4] is _KIND_I and entry[0] < ends]
            if coming:
                ready.remove(coming[0])
                ready.insert(0, coming[0])
        owed = self.weight_grads[device]
        if ready and ready[0][0] <= now:
            return now, ready[0][3], ready[0][4]
        if owed and self._weight_now(device, ready[0][0] if ready else None):
            return now, owed[0].stage, _KIND_W
        if ready:
            return ready[0][0], ready[0][3], ready[0][4]
        if owed:  # nothing is known to be coming: a W rather than idle
            return now, owed[0].stage, _KIND_W
        return float("inf"), -1, None

    def _weight_now(self, device: int, next_at: float | None) -> bool:
        """Whether the device, idle now with W owed, runs the oldest rather than wait for
        what is next known to arrive (at ``next_at``)."""
        mode = self.policy.weight_grad
        if mode == "eager":
            return True
        stages = self.stages_of[device]
        finished = all(self.next_input_grad[s] >= self.microbatches for s in stages)
        if finished or not self._admits(device):
            return True
        if mode == "fit":
            weight = self.weight_grads[device][0]
            ends = self.clock[device] + self.costs[weight.stage].weight_grad_s
            return next_at is None or ends <= next_at
        return False

    # -- commits ---------------------------------------------------------------------------

    def _commit(self, device: int, stage: int, kind: Kind, start: float) -> None:
        if kind is Kind.F:
            m = self.next_forward[stage]
            self.next_forward[stage] += 1
            owing = self.owing[device]
            if stage == self.entry[device]:
                owing[m] = self.stages_of[device][1:]
                self.promised[device] += self.need[device] - self.stash[stage]
            else:
                owing[m].remove(stage)
                self.promised[device] -= self.stash[stage]
            if not owing[m]:
                del owing[m]
            action = Action(stage, kind, m)
            end = start + self.costs[stage].forward_s
            self.forward_end[stage][m] = end
        elif kind is Kind.I:
            m = self.next_input_grad[stage]
            self.next_input_grad[stage] += 1
            action = Action(stage, kind, m)
            end = start + self.costs[stage].input_grad_s
            self.input_grad_end[stage][m] = end
            self.weight_grads[device].append(Action(stage, Kind.W, m))
        else:
            action = self.weight_grads[device].popleft()
            end = start + self.costs[stage].weight_grad_s
        self.held[device] += self.change[stage][kind]
        if not self.rows[device]:
            self.first[device] = start
        self.clock[device] = end
        self.rows[device].append(action)
