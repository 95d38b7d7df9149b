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

import itertools
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from pipesim.costs.pipeline_costs import PipelineCosts
from pipesim.memory.rules import changes
from pipesim.schedules.action import Action, Kind
from pipesim.schedules.schedule import Schedule

SYNTH_NAME = "synth"

WEIGHT_GRAD_MODES = ("eager", "fit", "late")


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
    """

    input_grad_first: bool = True
    weight_grad: str = "eager"
    deeper_first: bool = True
    reserve_all: bool = True

    @property
    def name(self) -> str:
        """``greedy-I-first-eager-W`` and so on (the last two only when not the default)."""
        first = "I-first" if self.input_grad_first else "F-first"
        words = ["greedy", first, f"{self.weight_grad}-W"]
        if not self.deeper_first:
            words.append("shallow-first")
        if not self.reserve_all:
            words.append("banker")
        return "-".join(words)


def policies(chunks: int) -> tuple[GreedyPolicy, ...]:
    """The portfolio for ``chunks`` stages per device: I or F first times the three W modes,
    and with several stages per device, deeper or shallower first and both admission rules."""
    several = (True, False) if chunks > 1 else (True,)
    return tuple(
        GreedyPolicy(first, weight, deeper, reserve)
        for first, weight, deeper, reserve in itertools.product(
            (True, False), WEIGHT_GRAD_MODES, several, several
        )
    )


def unit_changes(weight_fraction: float) -> dict[Kind, float]:
    """What each kind of action adds to a device's activations, in stashes of one (stage,
    micro-batch) (:mod:`pipesim.memory.rules`, without re-materialization; ``weight_fraction``
    is the part of the stash W keeps after I). Only an F adds, at its start, so a peak is read
    after each action."""
    return {
        kind: sum(change.bytes(1.0, weight_fraction, 0.0) for change in changes(kind, False))
        for kind in (Kind.F, Kind.B, Kind.I, Kind.W)
    }


def greedy_orders(
    costs: PipelineCosts,
    placement: Sequence[int],
    microbatches: int,
    memory_limit: float,
    policy: GreedyPolicy,
    weight_fraction: float = 1.0,
) -> tuple[tuple[Action, ...], ...] | None:
    """Each device's order (F, I and W of every stage and micro-batch, micro-batches in order
    within each stage and kind), or None when this policy stalls under the limit."""
    return _Run(costs, tuple(placement), microbatches, memory_limit, policy, weight_fraction).run()


def greedy_schedule(
    costs: PipelineCosts,
    microbatches: int,
    memory_limit: float,
    policy: GreedyPolicy,
    weight_fraction: float = 1.0,
    placement: Sequence[int] | None = None,
) -> Schedule | None:
    """:func:`greedy_orders` as a schedule named ``synth`` (one stage per device when
    ``placement`` is None), validated; None when the policy stalls."""
    placement = tuple(range(len(costs.stages))) if placement is None else tuple(placement)
    rows = greedy_orders(costs, placement, microbatches, memory_limit, policy, weight_fraction)
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
        weight_fraction: float,
    ) -> None:
        stages = len(placement)
        self.costs = costs.stages
        self.network = costs.network
        self.placement = placement
        self.devices = max(placement) + 1
        self.microbatches = microbatches
        self.limit = memory_limit + 1e-9
        self.change = unit_changes(weight_fraction)
        self.policy = policy
        self.stages_of = [
            [s for s in range(stages) if placement[s] == d] for d in range(self.devices)
        ]
        # The micro-batch's first stage on a device admits it; the device's later stages of it
        # are promised there and then.
        self.entry = [self.stages_of[d][0] for d in range(self.devices)]
        self.chunks = [len(row) for row in self.stages_of]
        self.forward_send_s = [self._send_s(s, s + 1, s) for s in range(stages)]
        self.backward_send_s = [self._send_s(s, s - 1, s - 1) for s in range(stages)]
        self.clock = [0.0] * self.devices
        self.next_forward = [0] * stages
        self.next_input_grad = [0] * stages
        self.weight_grads: list[deque[Action]] = [deque() for _ in range(self.devices)]
        self.held = [0.0] * self.devices
        self.promised = [0] * self.devices  # stages admitted micro-batches will still need
        # per device and admitted micro-batch: its stages there not yet forwarded
        self.owing: list[dict[int, int]] = [{} for _ in range(self.devices)]
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
        for _ in range(total):
            device = min(range(self.devices), key=lambda d: (choices[d][0], d))
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
        return tuple(tuple(row) for row in self.rows)

    # -- readiness -------------------------------------------------------------------------

    def _admits(self, device: int) -> bool:
        """Whether the device can take one more micro-batch in."""
        stash = self.change[Kind.F]
        need = self.chunks[device] * stash
        if self.policy.reserve_all or self.chunks[device] == 1:
            return self.held[device] + self.promised[device] * stash + need <= self.limit
        # Banker's rule: after admitting, the micro-batches in can finish one after another,
        # fewest stages owed first, each freeing what it holds and was promised.
        chunks = self.chunks[device]
        free = self.limit - self.held[device] - stash
        for count in sorted([*self.owing[device].values(), chunks - 1]):
            if count * stash > free:
                return False
            free += (chunks - count) * stash  # what it held comes back when it finishes
        return True

    def _forward_ready(self, stage: int) -> float | None:
        m = self.next_forward[stage]
        if m >= self.microbatches:
            return None
        device = self.placement[stage]
        if stage == self.entry[device]:
            if not self._admits(device):
                return None
        elif self.held[device] + self.change[Kind.F] > self.limit:
            return None  # promised under the banker's rule, but not free yet
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
        order = (Kind.I, Kind.F) if self.policy.input_grad_first else (Kind.F, Kind.I)
        depth = -1 if self.policy.deeper_first else 1
        # (when, kind's rank, stage's rank, stage, kind) of each ready F and I, soonest first
        ready: list[tuple[float, int, int, int, Kind]] = []
        for stage in self.stages_of[device]:
            for kind, at in (
                (Kind.I, self._input_grad_ready(stage)),
                (Kind.F, self._forward_ready(stage)),
            ):
                if at is not None:
                    ready.append((max(at, now), order.index(kind), depth * stage, stage, kind))
        ready.sort()
        owed = self.weight_grads[device]
        if ready and ready[0][0] <= now:
            return now, ready[0][3], ready[0][4]
        if owed and self._weight_now(device, ready[0][0] if ready else None):
            return now, owed[0].stage, Kind.W
        if ready:
            return ready[0][0], ready[0][3], ready[0][4]
        if owed:  # nothing else will come to this device before it
            return now, owed[0].stage, Kind.W
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
                self.promised[device] += self.chunks[device] - 1
                owing[m] = self.chunks[device] - 1
            else:
                self.promised[device] -= 1
                owing[m] -= 1
            if owing.get(m) == 0:
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
        self.held[device] += self.change[kind]
        self.clock[device] = end
        self.rows[device].append(action)
