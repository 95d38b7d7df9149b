"""Predicting a measured run: the simulator fed only what a case measured, round by round.

Each measured round stepped every run once, the probe runs among them. A round's costs are each
stage's profile with the mean time its actions took inside that round's probe steps (where the
probes ran that kind of action), and the link's ping-pong bandwidth with the mean latency the
round's probe transfers showed (a busy sender's transfers are slower than an idle ping-pong's).
The simulator predicts every run once per round, so a run has as many predicted step times as
measured ones, taken on the same machine in the same minutes; validation reduces both with the
same statistic (:mod:`validation.estimate`).

Why means within a round and a quantile across rounds: a step's time is the sum of its actions'
times, and a sum's low quantile is not the sum of its terms' low quantiles (measured on the
quick suite: predicting from each action's 20% quantile came out 3-5% fast on a quiet host,
more for schedules of many short actions). The mean composes; taking it within one round keeps
one disturbed round from reaching the others, and the 20% quantile across rounds then treats the
predicted and the measured step times alike.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from executor.backends import DeviceKind
from executor.profile import LinkProfile, StageProfile, calibrated_costs
from pipesim.costs import PipelineCosts
from pipesim.engine import simulate
from pipesim.engine.result import SimulationResult
from pipesim.errors import PipesimError
from pipesim.schedules import Schedule
from validation.estimate import STATISTIC, Statistic, estimate
from validation.schema import CaseMeasurement
from validation.synthesized_runs import run_schedule

KINDS = {"F": "forward_s", "B": "backward_s", "I": "input_grad_s", "W": "weight_grad_s"}


def round_profiles(measured: CaseMeasurement, chunks: int, round_: int) -> list[StageProfile]:
    """Each stage's profile with the mean of its actions' times in round ``round_``'s probe
    steps, where the probes ran that kind of action (the isolated profile otherwise)."""
    rounds = measured.in_situ_samples.get(chunks, ())
    samples = rounds[round_] if round_ < len(rounds) else {}
    profiles = []
    for stage, profile in enumerate(measured.isolated_calibration[chunks]):
        times = {
            field: statistics.fmean(samples[f"{stage}/{kind}"])
            for kind, field in KINDS.items()
            if samples.get(f"{stage}/{kind}")
        }
        profiles.append(dataclasses.replace(profile, **times))
    return profiles


def round_link(measured: CaseMeasurement, chunks: int, round_: int) -> LinkProfile:
    """The ping-pong bandwidth with the mean latency of round ``round_``'s probe transfers
    (the ping-pong latency where the round caught none)."""
    rounds = measured.latency_samples.get(chunks, ())
    latencies = rounds[round_] if round_ < len(rounds) else ()
    link = measured.link
    latency = max(0.0, statistics.fmean(latencies)) if latencies else link.latency_s
    return LinkProfile(latency, link.bandwidth_bytes_per_s, link.samples)


def _costs(
    measured: CaseMeasurement, profiles: Sequence[StageProfile], link: LinkProfile
) -> PipelineCosts:
    """The simulator's costs; on CUDA the allocated memory holds the gradients too, so the
    costs count them."""
    case = measured.case
    costs = calibrated_costs(
        list(profiles),
        link,
        case.devices,
        samples_per_microbatch=case.model.microbatch_size,
        description=f"calibrated on {measured.machine.processor}",
    )
    if case.backend.device_kind is DeviceKind.CUDA:
        costs = dataclasses.replace(
            costs,
            stages=tuple(
                dataclasses.replace(s, gradient_bytes=s.parameter_bytes) for s in costs.stages
            ),
        )
    return costs


def round_costs(measured: CaseMeasurement, chunks: int) -> list[PipelineCosts]:
    """The costs of every measured round (one, from the isolated profiles and the ping-pong
    link, when the case has no in-situ rounds for this chunk count)."""
    count = max(1, len(measured.in_situ_samples.get(chunks, ())))
    return [
        _costs(measured, round_profiles(measured, chunks, r), round_link(measured, chunks, r))
        for r in range(count)
    ]


@dataclass(frozen=True)
class RoundPrediction:
    """A run predicted once per measured round: each round's costs, the simulated step time
    of each round and the unpipelined time of the same mini-batch (M x the whole model's F + B
    profiled alone in that round; the sum of the stage costs where no solo profile was
    taken)."""

    schedule: Schedule
    costs: tuple[PipelineCosts, ...]
    times_s: tuple[float, ...]
    unpipelined_s: tuple[float, ...]

    def time_s(self, statistic: Statistic = STATISTIC) -> float:
        """The predicted step time."""
        return estimate(self.times_s, statistic)

    def speedup(self, statistic: Statistic = STATISTIC) -> float:
        """The predicted speedup over one device."""
        return estimate(self.unpipelined_s, statistic) / self.time_s(statistic)

    def representative_round(self, statistic: Statistic = STATISTIC) -> int:
        """The round whose predicted time is nearest the estimate (for timelines, bubble and
        memory, which need one simulated step)."""
        target = self.time_s(statistic)
        return min(range(len(self.times_s)), key=lambda r: abs(self.times_s[r] - target))

    def representative(
        self, statistic: Statistic = STATISTIC
    ) -> tuple[PipelineCosts, SimulationResult]:
        """The representative round's costs and the simulator's whole result for it."""
        costs = self.costs[self.representative_round(statistic)]
        return costs, simulate(self.schedule, costs)


def predict_rounds(
    measured: CaseMeasurement,
    name: str,
    microbatches: int,
    chunks: int,
    costs: Sequence[PipelineCosts] | None = None,
) -> RoundPrediction:
    """The schedule ``name`` at this M and v simulated with every round's costs (a
    synthesised run's recorded order, the registered schedule otherwise)."""
    order = next(
        (
            r.order
            for r in measured.runs
            if (r.schedule, r.microbatches, r.chunks) == (name, microbatches, chunks)
        ),
        (),
    )
    schedule = run_schedule(name, measured.case.devices, microbatches, chunks, order)
    every = list(costs) if costs is not None else round_costs(measured, chunks)
    results = [simulate(schedule, c, engine="fast") for c in every]
    solo = measured.solo_samples
    forward, backward = solo.get("forward_s", ()), solo.get("backward_s", ())
    if forward and backward and len(forward) == len(backward):
        unpipelined = tuple(microbatches * (f + b) for f, b in zip(forward, backward, strict=True))
    else:
        unpipelined = tuple(r.unpipelined_time_s for r in results)
    return RoundPrediction(
        schedule, tuple(every), tuple(r.iteration_time_s for r in results), unpipelined
    )


def calibrated_profiles(
    measured: CaseMeasurement, chunks: int, statistic: Statistic = STATISTIC
) -> list[StageProfile]:
    """Each stage's times as one figure for the report: ``statistic`` over the rounds of each
    round's mean (the isolated profile where the probes did not run that kind)."""
    count = len(measured.in_situ_samples.get(chunks, ()))
    if count == 0:
        return list(measured.isolated_calibration[chunks])
    per_round = [round_profiles(measured, chunks, r) for r in range(count)]
    return [
        dataclasses.replace(
            profile,
            **{
                field: estimate([getattr(p[stage], field) for p in per_round], statistic)
                for field in KINDS.values()
            },
        )
        for stage, profile in enumerate(measured.isolated_calibration[chunks])
    ]


def calibrated_link(
    measured: CaseMeasurement, chunks: int, statistic: Statistic = STATISTIC
) -> LinkProfile:
    """The link as one figure for the report: ``statistic`` over the rounds of each round's
    mean in-situ latency."""
    count = len(measured.latency_samples.get(chunks, ()))
    if count == 0:
        return measured.link
    latencies = [round_link(measured, chunks, r).latency_s for r in range(count)]
    link = measured.link
    return LinkProfile(estimate(latencies, statistic), link.bandwidth_bytes_per_s, link.samples)


def check_aligned(measured: CaseMeasurement) -> None:
    """Every per-round series of a case has one entry per measured round (what pairs a
    round's prediction with the same round's measurement); a file that breaks this is refused
    in one line."""
    expected = measured.rounds
    series: list[tuple[str, int]] = [
        (f"in_situ_samples[{c}]", len(v)) for c, v in measured.in_situ_samples.items()
    ]
    series += [(f"latency_samples[{c}]", len(v)) for c, v in measured.latency_samples.items()]
    series += [
        (f"{r.schedule} M={r.microbatches} step_times_s", len(r.step_times_s))
        for r in measured.runs
    ]
    series += [(f"baseline_samples[{m}]", len(v)) for m, v in measured.baseline_samples.items()]
    for name, length in series:
        if length != expected:
            raise PipesimError(
                f"measurements: {name} has {length} rounds, the case measured {expected} "
                "(written by an older pipesim? measure again)"
            )
