"""Predicting a measured run: the simulator fed only what a case measured.

The one composition of calibration and simulation that validation uses, for the compared runs,
the cross-check and the simulated timelines in the figures alike. Stage times are each stage's
profile with the times its actions took inside the probe runs (where the probes ran that kind
of action); the link is the ping-pong bandwidth with the latency transfers showed inside the
probe runs (a busy sender's transfers are slower than an idle ping-pong's) where some were
caught. Every time is reduced from its samples with the same statistic
(:mod:`validation.estimate`).
"""

from __future__ import annotations

import dataclasses

from executor.profile import LinkProfile, StageProfile, calibrated_costs
from pipesim.costs import PipelineCosts
from pipesim.engine import simulate
from pipesim.engine.result import SimulationResult
from pipesim.schedules import Schedule, build
from validation.estimate import STATISTIC, Statistic, estimate
from validation.records import CaseMeasurement

KINDS = {"F": "forward_s", "B": "backward_s", "I": "input_grad_s", "W": "weight_grad_s"}


def calibrated_profiles(
    measured: CaseMeasurement, chunks: int, statistic: Statistic = STATISTIC
) -> list[StageProfile]:
    """Each stage's profile, with its times estimated from the probe runs where they ran."""
    samples = measured.in_situ_samples.get(chunks, {})
    profiles = []
    for stage, profile in enumerate(measured.isolated_calibration[chunks]):
        times = {
            field: estimate(samples[f"{stage}/{kind}"], statistic)
            for kind, field in KINDS.items()
            if samples.get(f"{stage}/{kind}")
        }
        profiles.append(dataclasses.replace(profile, **times))
    return profiles


def calibrated_link(
    measured: CaseMeasurement, chunks: int, statistic: Statistic = STATISTIC
) -> LinkProfile:
    """The ping-pong bandwidth and the latency transfers showed in the probe runs."""
    latencies = measured.latency_samples.get(chunks, ())
    link = measured.link
    latency = max(0.0, estimate(latencies, statistic)) if latencies else link.latency_s
    return LinkProfile(latency, link.bandwidth_bytes_per_s, link.samples)


def predicted_costs(
    measured: CaseMeasurement, chunks: int, statistic: Statistic = STATISTIC
) -> PipelineCosts:
    """The simulator's costs for the case's model split into ``chunks`` chunks per device.
    On CUDA the allocated memory holds the gradients too, so the costs count them."""
    case = measured.case
    costs = calibrated_costs(
        calibrated_profiles(measured, chunks, statistic),
        calibrated_link(measured, chunks, statistic),
        case.devices,
        samples_per_microbatch=case.model.microbatch_size,
        description=f"calibrated on {measured.machine.processor}",
    )
    if case.backend == "cuda":
        costs = dataclasses.replace(
            costs,
            stages=tuple(
                dataclasses.replace(s, gradient_bytes=s.parameter_bytes) for s in costs.stages
            ),
        )
    return costs


def predict(
    measured: CaseMeasurement,
    name: str,
    microbatches: int,
    chunks: int,
    statistic: Statistic = STATISTIC,
) -> tuple[Schedule, PipelineCosts, SimulationResult]:
    """The schedule ``name`` at this M and v, its costs, and the simulator's result."""
    schedule = build(name, measured.case.devices, microbatches, chunks)
    costs = predicted_costs(measured, chunks, statistic)
    return schedule, costs, simulate(schedule, costs)


def unpipelined_s(
    measured: CaseMeasurement,
    microbatches: int,
    fallback_s: float,
    statistic: Statistic = STATISTIC,
) -> float:
    """M x (F + B) of the whole model as one stage, profiled alone as the baseline runs (the
    sum of the pipeline's stage costs, ``fallback_s``, when no solo profile was taken)."""
    solo = measured.solo_samples
    if not solo.get("forward_s") or not solo.get("backward_s"):
        return fallback_s
    return microbatches * (
        estimate(solo["forward_s"], statistic) + estimate(solo["backward_s"], statistic)
    )
