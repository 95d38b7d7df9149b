"""Schedules made to measure: the fastest order found for a per-device memory limit.

Memory is counted in micro-batches in flight, as the zero-bubble paper counts it (Qi et al.,
arXiv 2401.10241 §3): on a device, a micro-batch's stage is in flight from the start of its F
until the end of its last backward action (W under the I/W split, B otherwise), and no device
may ever hold more than ``memory_limit`` of them. Actions on a device run one after another,
so that count depends on the device's order only (:func:`in_flight_peaks`).

The synthesiser is the paper's heuristic made into a small portfolio, judged by the engine:

* a greedy list scheduler over estimated times (each stage's F, I and W and the transfers
  between stages), always committing the action that can start earliest anywhere; a device
  that is free runs a ready I first (it frees memory and is on the critical path), else a
  ready F if the limit allows one more micro-batch in flight, else a W to fill the idle time;
  four variants (I or F first when both are ready; W eagerly in idle time, or only when memory
  or the end of the step forces it);
* the registered one-stage-per-device schedules whose orders keep within the limit (1F1B,
  ZB-H1, ZB-H2, GPipe), so the result is never slower than the best of them;

each candidate is simulated with the given costs and the fastest is returned, named
``synth`` (on a tie, a fixed schedule before a greedy order). The placement is looped with one
stage per device (V-shaped placements and the controllable-memory V family are not synthesised
yet).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pipesim.common import checks
from pipesim.costs.pipeline_costs import PipelineCosts
from pipesim.errors import ScheduleError
from pipesim.memory.rules import changes
from pipesim.schedules.action import Action, Kind
from pipesim.schedules.schedule import Schedule

if TYPE_CHECKING:
    from pipesim.engine.result import SimulationResult

SYNTH_NAME = "synth"
# Step times within this relative difference are a tie (the engines' sums differ in the last
# digits between orders of the same length).
TIE_TOLERANCE = 1e-12
# The fixed schedules offered beside the greedy orders (one stage per device, flush).
FIXED_SEEDS = ("1f1b", "zb-h1", "zb-h2", "gpipe")


@dataclass(frozen=True)
class GreedyPolicy:
    """How the greedy scheduler breaks a free device's choice."""

    input_grad_first: bool = True  # a ready I before a ready F
    eager_weight_grad: bool = True  # W in any idle time, not only when forced

    @property
    def name(self) -> str:
        """``greedy-I-first-eager-W`` and so on."""
        first = "I-first" if self.input_grad_first else "F-first"
        weight = "eager-W" if self.eager_weight_grad else "late-W"
        return f"greedy-{first}-{weight}"


POLICIES = tuple(GreedyPolicy(first, eager) for first in (True, False) for eager in (True, False))


@dataclass(frozen=True)
class Synthesis:
    """The schedule chosen and how it compares.

    Attributes:
        schedule: the fastest candidate, named ``synth``.
        chosen: the candidate it came from (a greedy policy's name, or a fixed schedule's).
        step_time_s: its simulated step time.
        candidates: every candidate tried within the limit, with its step time, fastest first.
        memory_limit: micro-batches in flight per device.
        result: the winner's simulation (its memory and timeline, without simulating again).
    """

    schedule: Schedule
    chosen: str
    step_time_s: float
    candidates: tuple[tuple[str, float], ...]
    memory_limit: int
    result: SimulationResult = field(repr=False, compare=False)


def in_flight_peaks(schedule: Schedule) -> tuple[int, ...]:
    """Each device's most micro-batches in flight (per stage it holds), from its order alone:
    a (stage, micro-batch) enters at its F's start and leaves at its last backward's end
    (:func:`activation_peaks` with W needing all of it)."""
    return tuple(round(peak) for peak in activation_peaks(schedule, 1.0))


def activation_peaks(schedule: Schedule, weight_fraction: float = 1.0) -> tuple[float, ...]:
    """Each device's peak activation memory in units of one micro-batch's stage activations
    (M_B), by the memory model's rules (:mod:`pipesim.memory.rules`, without
    re-materialization) with a stash of 1 and the part W keeps ``weight_fraction`` (M_W / M_B,
    the zero-bubble paper's Appendix G): an F adds 1, an I frees all but what its W still
    needs, the W frees that, a full B frees all."""
    step = _unit_changes(weight_fraction)
    peaks = []
    for row in schedule.device_actions:
        held = peak = 0.0
        for action in row:
            held += step[action.kind]
            peak = max(peak, held)
        peaks.append(peak)
    return tuple(peaks)


def _unit_changes(weight_fraction: float) -> dict[Kind, float]:
    """What each kind of action adds to a device's activations, in M_B units (net of its
    start and end: only an F adds, at its start, so a peak is read after each action)."""
    return {
        kind: sum(change.bytes(1.0, weight_fraction, 0.0) for change in changes(kind, False))
        for kind in (Kind.F, Kind.B, Kind.I, Kind.W)
    }


def synthesize(
    costs: PipelineCosts, microbatches: int, memory_limit: int, weight_fraction: float = 1.0
) -> Synthesis:
    """The fastest schedule found for ``costs`` (one stage per device), ``microbatches`` and
    at most ``memory_limit`` micro-batches in flight on any device (1 runs the micro-batches
    one at a time through the pipeline; K is 1F1B's memory). With ``weight_fraction`` below 1
    the limit is on activation memory in M_B units, an I freeing all but that fraction (see
    :func:`activation_peaks`): more micro-batches may then wait for their W."""
    from pipesim.engine import simulate

    microbatches = checks.positive_int("microbatches", microbatches, error=ScheduleError)
    memory_limit = checks.positive_int("--memory-limit", memory_limit, error=ScheduleError)
    if not 0.0 <= weight_fraction <= 1.0:
        raise ScheduleError(f"weight_fraction must be from 0 to 1, got {weight_fraction}")
    candidates: list[tuple[str, Schedule]] = [
        (
            policy.name,
            greedy_schedule(costs, microbatches, memory_limit, policy, weight_fraction),
        )
        for policy in POLICIES
    ]
    candidates += fixed_within(
        len(costs.stages), microbatches, memory_limit, weight_fraction=weight_fraction
    )
    results = [(name, schedule, simulate(schedule, costs)) for name, schedule in candidates]
    fastest_s = min(result.iteration_time_s for _, _, result in results)

    def rank(index: int) -> tuple[float, bool, int]:
        """Fastest first; within a rounding error of the fastest, a fixed schedule (one with
        a name and a paper) before a greedy order; then the order tried first."""
        name, _, result = results[index]
        time_s = result.iteration_time_s
        tied = time_s <= fastest_s * (1 + TIE_TOLERANCE)
        return (fastest_s if tied else time_s, name.startswith("greedy-"), index)

    timed = sorted(range(len(results)), key=rank)
    chosen, best, result = results[timed[0]]
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
        tuple((results[i][0], results[i][2].iteration_time_s) for i in timed),
        memory_limit,
        result,
    )


def check_synthesis_size(devices: int, microbatches: int, steps: int = 1) -> None:
    """Refuse, before any costs are built, a synthesis beyond the size limits: K devices, and
    the 3·K·M actions of a one-stage-per-device order with split backwards (ZB-H1's size) over
    ``steps``."""
    from pipesim.schedules.registry import check_size, schedule_info

    check_size(schedule_info("zb-h1"), devices, microbatches, 1, steps, name=SYNTH_NAME)


def greedy_schedule(
    costs: PipelineCosts,
    microbatches: int,
    memory_limit: int,
    policy: GreedyPolicy,
    weight_fraction: float = 1.0,
) -> Schedule:
    """One greedy order (see the module's docstring), F, I and W on each of the K devices,
    micro-batches in order within each kind."""
    return Schedule(
        SYNTH_NAME,
        microbatches,
        tuple(range(len(costs.stages))),
        _GreedyRun(costs, microbatches, memory_limit, policy, weight_fraction).orders(),
    )


class _GreedyRun:
    """The list scheduler's state: per device its clock, its next F and I, its pending W and
    what it holds in flight; per (stage, micro-batch) when its F and I end."""

    def __init__(
        self,
        costs: PipelineCosts,
        microbatches: int,
        memory_limit: int,
        policy: GreedyPolicy,
        weight_fraction: float = 1.0,
    ) -> None:
        self.stages = costs.stages
        self.devices = len(costs.stages)
        self.microbatches = microbatches
        self.limit = memory_limit
        self.change = _unit_changes(weight_fraction)
        self.policy = policy
        self.forward_send_s = [
            costs.network.route(s, s + 1).transfer_time_s(self.stages[s].output_bytes)
            if s + 1 < self.devices
            else 0.0
            for s in range(self.devices)
        ]
        self.backward_send_s = [
            costs.network.route(s, s - 1).transfer_time_s(self.stages[s].input_bytes)
            if s > 0
            else 0.0
            for s in range(self.devices)
        ]
        self.clock = [0.0] * self.devices
        self.next_forward = [0] * self.devices
        self.next_input_grad = [0] * self.devices
        self.weight_grads: list[deque[int]] = [deque() for _ in range(self.devices)]
        self.held = [0.0] * self.devices  # activation memory in M_B units
        self.forward_end: list[list[float | None]] = [
            [None] * microbatches for _ in range(self.devices)
        ]
        self.input_grad_end: list[list[float | None]] = [
            [None] * microbatches for _ in range(self.devices)
        ]
        self.rows: list[list[Action]] = [[] for _ in range(self.devices)]

    def orders(self) -> tuple[tuple[Action, ...], ...]:
        total = 3 * self.devices * self.microbatches
        # A device's choice depends on its own state, its upstream neighbour's F ends and its
        # downstream neighbour's I ends: after a commit only those three are chosen again.
        choices = [self._choice(device) for device in range(self.devices)]
        for _ in range(total):
            device = min(range(self.devices), key=lambda d: (choices[d][0], d))
            start, kind = choices[device]
            if kind is None:  # pragma: no cover - every limit >= 1 makes progress
                raise ScheduleError("synthesis stalled: no device can run an action")
            self._run(device, kind, start)
            for near in range(max(0, device - 1), min(self.devices, device + 2)):
                choices[near] = self._choice(near)
        return tuple(tuple(row) for row in self.rows)

    def _room(self, device: int) -> bool:
        """Whether one more F fits the limit."""
        return self.held[device] + self.change[Kind.F] <= self.limit + 1e-9

    def _forward_ready(self, device: int) -> float | None:
        m = self.next_forward[device]
        if m >= self.microbatches or not self._room(device):
            return None
        if device == 0:
            return 0.0
        end = self.forward_end[device - 1][m]
        return None if end is None else end + self.forward_send_s[device - 1]

    def _input_grad_ready(self, device: int) -> float | None:
        m = self.next_input_grad[device]
        if m >= self.next_forward[device]:  # its own F has not run
            return None
        if device == self.devices - 1:
            end = self.forward_end[device][m]
            return end
        end = self.input_grad_end[device + 1][m]
        return None if end is None else end + self.backward_send_s[device + 1]

    def _choice(self, device: int) -> tuple[float, Kind | None]:
        """What ``device`` runs next and when, by the policy, from what is known now."""
        now = self.clock[device]
        ready = {Kind.I: self._input_grad_ready(device), Kind.F: self._forward_ready(device)}
        order = (Kind.I, Kind.F) if self.policy.input_grad_first else (Kind.F, Kind.I)
        for kind in order:
            at = ready[kind]
            if at is not None and at <= now:
                return now, kind
        pending_weight = bool(self.weight_grads[device])
        forced = ready[Kind.F] is None and not self._room(device)
        finished = self.next_input_grad[device] >= self.microbatches
        if pending_weight and (self.policy.eager_weight_grad or forced or finished):
            return now, Kind.W
        known = [(at, kind) for kind, at in ready.items() if at is not None]
        if known:
            at, kind = min(known, key=lambda k: (k[0], order.index(k[1])))
            return at, kind
        if pending_weight:  # late W: nothing else will come to this device before it
            return now, Kind.W
        return float("inf"), None

    def _run(self, device: int, kind: Kind, start: float) -> None:
        stage = self.stages[device]
        if kind is Kind.F:
            m = self.next_forward[device]
            self.next_forward[device] += 1
            end = start + stage.forward_s
            self.forward_end[device][m] = end
        elif kind is Kind.I:
            m = self.next_input_grad[device]
            self.next_input_grad[device] += 1
            end = start + stage.input_grad_s
            self.input_grad_end[device][m] = end
            self.weight_grads[device].append(m)
        else:
            m = self.weight_grads[device].popleft()
            end = start + stage.weight_grad_s
        self.held[device] += self.change[kind]
        self.clock[device] = end
        self.rows[device].append(Action(device, kind, m))


def fixed_within(
    devices: int,
    microbatches: int,
    memory_limit: int,
    names: Sequence[str] = FIXED_SEEDS,
    weight_fraction: float = 1.0,
) -> list[tuple[str, Schedule]]:
    """The registered schedules among ``names`` that take this shape with one stage per
    device and whose orders keep within the limit: the synthesiser's seeds, and what a
    synthesised schedule is compared with."""
    from pipesim.schedules.registry import build, unsupported_reason

    within = []
    for name in names:
        if unsupported_reason(name, devices, microbatches, 1) is None:
            fixed = build(name, devices, microbatches, 1)
            if max(activation_peaks(fixed, weight_fraction)) <= memory_limit + 1e-9:
                within.append((name, fixed))
    return within


@dataclass(frozen=True)
class MemoryPoint:
    """One schedule's place in the memory-time plane: its most micro-batches in flight on any
    device and its simulated step time (``limit`` is the limit it was synthesised for, None
    for a fixed schedule)."""

    name: str
    in_flight: int
    step_time_s: float
    limit: int | None = None


def memory_tradeoff(
    costs: PipelineCosts, microbatches: int, limits: Sequence[int]
) -> tuple[tuple[MemoryPoint, ...], tuple[MemoryPoint, ...]]:
    """The fixed one-stage schedules as points, and the synthesised schedule at each of
    ``limits`` (its actual peak may be below the limit): the data of a Pareto figure."""
    from pipesim.engine import simulate

    devices = len(costs.stages)
    fixed = tuple(
        MemoryPoint(name, max(in_flight_peaks(s)), simulate(s, costs).iteration_time_s)
        for name, s in fixed_within(devices, microbatches, microbatches)
    )
    curve = []
    for limit in limits:
        found = synthesize(costs, microbatches, limit)
        peak = max(in_flight_peaks(found.schedule))
        curve.append(MemoryPoint(found.chosen, peak, found.step_time_s, limit))
    return fixed, tuple(curve)
