"""What a validation case measures, however its devices run: interleaved rounds of every run
and the unpipelined baseline, the probes' in-situ samples, and the measurement's JSON.

:class:`Rounds` holds the measuring loop; how one step runs is its subclasses' part:
:class:`validation.session.DistributedRounds` (a process per device, barriers between them) and
:class:`validation.lane_session.LaneRounds` (every device a lane of this process). Both write
the same :class:`~validation.schema.CaseMeasurement`, so comparing, reporting and ``--reuse``
do not know which ran.
"""

from __future__ import annotations

import contextlib
import gc
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from executor import StepResult, StepState, split_model
from executor.profile import (
    LinkProfile,
    StageProfile,
    action_samples,
    latency_samples,
    profile_stage,
)
from pipesim.engine.records import Timeline
from pipesim.schedules import Schedule, build
from pipesim.schedules.registry import probe_schedules
from validation import synthesized_runs
from validation.estimate import relative_uncertainty
from validation.schema import RunMeasurement
from validation.suites import Case
from validation.workload import LOSS, make_batch, make_model

Run = tuple[str, int, int]  # (schedule, M, chunks)


@dataclass(frozen=True)
class Stability:
    """Measure until stable: after the case's repeats, keep adding rounds while the median
    over the runs of their step-time estimate's relative uncertainty (half the 90%
    order-statistic interval, :func:`~validation.estimate.relative_uncertainty`) is above
    ``target_uncertainty``, for at most ``budget_s`` more seconds of measuring (per case).
    Unlike the spread of the repeats, the uncertainty shrinks as repeats are added."""

    target_uncertainty: float
    budget_s: float


def keep_measuring(spans: list[list[float]], stability: Stability, elapsed_s: float) -> bool:
    """Whether another round is worth it: the median of the runs' uncertainties is above the
    target and the time spent measuring is within the budget."""
    if not spans or not all(spans) or elapsed_s >= stability.budget_s:
        return False
    uncertainty = statistics.median(relative_uncertainty(s) for s in spans)
    return uncertainty > stability.target_uncertainty


def step_span(result: StepResult) -> float:
    """A step's span: its first action's start to its last action's end."""
    records = result.timeline.compute
    return float(max(r.end_s for r in records) - min(r.start_s for r in records))


def probe_runs(case: Case, chunks: int) -> list[tuple[str, int]]:
    """The short pipelined runs that calibrate times in situ: the registry's full-backward and
    split-backward probes for this chunk count, at a micro-batch count the case does not
    validate (3K), so every validated run is predicted, not replayed."""
    microbatches = 3 * case.devices
    return [(name, microbatches) for name in probe_schedules(case.devices, microbatches, chunks)]


def shape_schedule(case: Case, chunks: int) -> Schedule:
    """A schedule with this many chunks, for its stage count and placement: the full-backward
    probe's, which every chunk count the registry offers has."""
    name = probe_schedules(case.devices, 3 * case.devices, chunks)[0]
    return build(name, case.devices, max(case.microbatches), chunks)


class Rounds:
    """Every run and the unpipelined baselines, measured in interleaved rounds.

    Each round steps every run once (round robin), so a slow spell of the machine (another
    tenant, a frequency change) touches every run a little rather than all repeats of one run,
    and the calibration probes are measured in the same rounds as the runs they predict. The
    baselines (the whole model on one device, the others idle) take their turn in every round
    too, with a profile of the whole model's F and B on one micro-batch.

    Subclasses say how a step runs (:meth:`_run`, :meth:`_unpipelined`), what must happen
    before one is timed (:meth:`_ready_to_time`), and how the processes of a case keep in step
    (:meth:`_barrier`, :meth:`_agree`; nothing to do in one process).
    """

    leader = True  # this process measures the baselines and decides on more rounds

    def __init__(
        self,
        case: Case,
        runs: list[Run],
        device: torch.device,
        stability: Stability | None,
        report: Callable[[str], None],
        made: dict[tuple[str, int], Schedule] | None = None,
    ) -> None:
        self.case, self.runs, self.device = case, runs, device
        self.stability, self.report = stability, report
        self.model = make_model(case.model, device)
        self.splits: dict[int, list[nn.Module]] = {}
        self.plans: list[tuple[Schedule, StepState]] = []
        for name, m, chunks in runs:
            schedule = (made or {}).get((name, m)) or build(name, case.devices, m, chunks)
            if chunks not in self.splits:
                self.splits[chunks] = split_model(self.model, schedule)
            self.plans.append((schedule, StepState()))
        self.batches = {
            m: make_batch(case.model, m, device)
            for m in {m for _, m, _ in runs} | set(case.microbatches)
        }
        # The one micro-batch the whole model is profiled on each round (never changes).
        self.one = make_batch(case.model, 1, device)
        self.spans: list[list[float]] = [[] for _ in runs]
        self.walls: list[list[float]] = [[] for _ in runs]
        self.stash: list[list[list[int]]] = [[] for _ in runs]
        self.allocated: list[list[list[int | None]]] = [[] for _ in runs]
        self.timelines: list[list[Timeline]] = [[] for _ in runs]
        self.baseline: dict[int, list[float]] = {m: [] for m in case.microbatches}
        self.solo: dict[str, list[float]] = {
            key: [] for key in ("forward_s", "backward_s", "input_grad_s", "weight_grad_s")
        }
        self.measured_rounds = 0
        self.rounds_run = 0

    # -- what a subclass says ---------------------------------------------------------------

    def _run(
        self,
        schedule: Schedule,
        stages: Sequence[nn.Module],
        x: torch.Tensor,
        y: torch.Tensor,
        round_: int,
        state: StepState,
    ) -> StepResult:
        """One pipelined step of ``schedule``."""
        raise NotImplementedError

    def _unpipelined(self, microbatches: int, x: torch.Tensor, y: torch.Tensor) -> StepResult:
        """The whole model as one stage on one device: F, B, F, B, ..."""
        raise NotImplementedError

    def _ready_to_time(self) -> None:
        """What must be done before a step's clock starts."""

    def _barrier(self) -> None:
        """Wait for the case's other processes (none here)."""

    def _agree(self, decision: bool) -> bool:
        """The leader's decision, known to every process of the case."""
        return decision

    def _check_time(self) -> None:
        """Raise when the case has run out of time (no bound here)."""

    def _first_device(self) -> contextlib.AbstractContextManager[None]:
        """Where the whole model's profile runs: as the first pipeline device would."""
        return contextlib.nullcontext()

    # -- the rounds --------------------------------------------------------------------------

    def step(self, index: int, round_: int) -> tuple[StepResult, float]:
        """One step of run ``index``; its result and this process's wall time."""
        schedule, state = self.plans[index]
        # Persistent gradient buffers, zeroed in place (as DDP and Megatron keep them): the
        # first round allocates them, measured rounds pay no first-touch page faults.
        self.model.zero_grad(set_to_none=False)
        x, y = self.batches[schedule.microbatches]
        self._ready_to_time()
        began = time.perf_counter()
        result = self._run(schedule, self.splits[self.runs[index][2]], x, y, round_, state)
        return result, time.perf_counter() - began

    def measure(self) -> None:
        """Warm-up rounds, the case's repeats, then (when measuring until stable) more rounds
        while the runs are noisy and the budget lasts.

        Python's cyclic garbage collector is off while steps are timed and runs once at the end
        of every round, in every process at once, outside any step: the rounds keep every
        step's timeline, and with that many objects alive a collection landing inside a step
        costs it tens of milliseconds (timeit turns it off for the same reason)."""
        enabled = gc.isenabled()
        gc.disable()
        try:
            self._measure_rounds()
        finally:
            if enabled:
                gc.enable()

    def _measure_rounds(self) -> None:
        case = self.case
        extra_from = None  # when the case's own repeats ended: the budget counts from there
        round_ = 0
        while True:
            self._check_time()
            keep = round_ >= case.warmup
            if round_ == case.warmup + case.repeats:
                extra_from = time.monotonic()
            planned = case.warmup + case.repeats
            self.report(
                f"round {round_ + 1}/{planned}" + (" (warm-up)" if not keep else "")
                if round_ < planned
                else f"round {round_ + 1} (measuring until stable)"
            )
            self._round(round_, keep)
            round_ += 1
            self.rounds_run = round_
            if keep:
                self.measured_rounds += 1
            if round_ >= case.warmup + case.repeats and not self._go_on(
                extra_from if extra_from is not None else time.monotonic()
            ):
                break

    def _go_on(self, started: float) -> bool:
        """Whether to measure another round (the leader decides, every process follows)."""
        decision = False
        if self.leader and self.stability is not None:
            decision = keep_measuring(self.spans, self.stability, time.monotonic() - started)
        return self._agree(decision)

    def _round(self, round_: int, keep: bool) -> None:
        for index in range(len(self.runs)):
            result, wall = self.step(index, round_)
            if keep:
                self.spans[index].append(step_span(result))
                self.walls[index].append(wall)
                self.stash[index].append(list(result.peak_stash_bytes))
                self.allocated[index].append(list(result.peak_allocated_bytes))
                self.timelines[index].append(result.timeline)
        self._barrier()
        if self.leader:
            model = self.model
            for m in self.case.microbatches:
                model.zero_grad(set_to_none=False)
                x, y = self.batches[m]
                span = step_span(self._unpipelined(m, x, y))
                if keep:
                    self.baseline[m].append(span)
            model.zero_grad(set_to_none=False)
            x1, y1 = self.one
            with self._first_device():
                profile = profile_stage(0, model, x1, y1, LOSS, last=True, repeats=2, warmup=1)
            if keep:
                for key, values in self.solo.items():
                    values.append(getattr(profile, key))
        gc.collect()
        self._barrier()


def run_measurement(
    case: Case,
    run: Run,
    rounds: Rounds,
    index: int,
    rss: Sequence[int | None],
    made: Schedule | None = None,
    device_peak_bytes: int | None = None,
) -> RunMeasurement:
    """Run ``index`` of ``rounds`` as a measurement: every step's span and wall time, the
    peaks, and the timeline of the step whose span was the median."""
    name, microbatches, chunks = run
    spans = rounds.spans[index]
    median_index = sorted(range(len(spans)), key=lambda i: spans[i])[len(spans) // 2]
    timeline = rounds.timelines[index][median_index]
    allocated = rounds.allocated[index]
    stash = rounds.stash[index]
    return RunMeasurement(
        schedule=name,
        devices=case.devices,
        microbatches=microbatches,
        chunks=chunks,
        step_times_s=tuple(spans),
        wall_times_s=tuple(rounds.walls[index]),
        peak_stash_bytes=tuple(max(r[d] for r in stash) for d in range(case.devices)),
        peak_allocated_bytes=tuple(
            None if allocated[0][d] is None else max(int(r[d] or 0) for r in allocated)
            for d in range(case.devices)
        ),
        peak_rss_bytes=tuple(rss),
        timeline=tuple(
            (r.device, r.step, None if r.action is None else str(r.action), r.start_s, r.end_s)
            for r in timeline.compute
        ),
        order=() if made is None else synthesized_runs.order_of(made),
        device_peak_bytes=device_peak_bytes,
    )


def _action_samples(timelines: list[Timeline]) -> dict[str, list[float]]:
    """Every compute action's duration in ``timelines``, by "stage/kind" (the JSON keys)."""
    return {
        f"{stage}/{kind.value}": durations
        for (stage, kind), durations in action_samples(timelines).items()
    }


def measurement_json(
    case: Case,
    machine: dict[str, Any],
    link: LinkProfile,
    isolated: dict[int, list[StageProfile]],
    probes: dict[int, list[tuple[str, int]]],
    rounds: Rounds,
    runs: Sequence[RunMeasurement],
    crosscheck: list[dict[str, Any]],
) -> dict[str, Any]:
    """The JSON of a :class:`~validation.schema.CaseMeasurement` without the host's load:
    with, per chunk count and per measured round, what that round's probe steps showed (each
    action's durations, and the latencies of the transfers whose receiver was waiting)."""
    probe_list = [(name, m, c) for c, names in probes.items() for name, m in names]
    in_situ: dict[int, list[dict[str, list[float]]]] = {}
    latencies: dict[int, list[list[float]]] = {}
    for chunks in probes:
        here = [i for i, (_, _, c) in enumerate(probe_list) if c == chunks]
        per_round = [[rounds.timelines[i][r] for i in here] for r in range(rounds.measured_rounds)]
        in_situ[chunks] = [_action_samples(timelines) for timelines in per_round]
        latencies[chunks] = [
            latency_samples(timelines, link.bandwidth_bytes_per_s) for timelines in per_round
        ]
    return {
        "case": case.to_json(),
        "machine": machine,
        "link": link.to_json(),
        "isolated_calibration": {
            str(c): [p.to_json() for p in profiles] for c, profiles in isolated.items()
        },
        "probes": {str(c): [f"{name} M={m}" for name, m in names] for c, names in probes.items()},
        "in_situ_samples": {str(c): samples for c, samples in in_situ.items()},
        "latency_samples": {str(c): values for c, values in latencies.items()},
        "runs": [r.to_json() for r in runs],
        "baseline_samples": {str(m): v for m, v in rounds.baseline.items()},
        "solo_samples": rounds.solo,
        "crosscheck": crosscheck,
        "rounds": rounds.measured_rounds,
    }
