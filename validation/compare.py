"""Predicted against measured: the simulator, fed calibrated costs, predicts each run the
executor measured; this module computes the errors.

Time: the measured step is the span of one ``run_step`` (first action start to last action
end, no optimizer), one per measured round; the prediction is the simulator's iteration time
with each round's calibration (:mod:`validation.predict`), one per round too. Both are reduced
with the same statistic (:data:`validation.estimate.STATISTIC`). Speedup: over the same model
and mini-batch unpipelined on one device (measured: the whole model as one stage; predicted: M
times the whole model's F + B profiled in the same round). Memory: on CPU each rank's
resident-memory rise during a step (measured by the kernel, see
:func:`validation.session.rss_rise`) against the activations the memory model predicts, with
the executor's own stash count beside it; on CUDA ``max_memory_allocated`` against weights,
gradients and activations. Lanes of one machine (the partitioned backends) share one memory:
the whole machine's peak is compared with the most the simulated lanes hold at once
(:func:`~pipesim.engine.memory_over_time.shared_peak_bytes`), each lane's stash with its
device's activation peak. :func:`case_series` hands the per-round values to the bootstrap
(:mod:`validation.uncertainty`) that bounds the aggregates.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from executor.backends import DeviceKind
from pipesim.analysis.bubble import analytic_bubble_fraction
from pipesim.engine.memory_over_time import shared_peak_bytes
from validation.estimate import (
    STATISTIC,
    Noise,
    Statistic,
    estimate,
    relative_uncertainty,
    spread,
)
from validation.predict import RoundPrediction, check_aligned, predict_rounds, round_costs
from validation.schema import CaseMeasurement, Comparison, CrosscheckRecord, Summary
from validation.uncertainty import CaseSeries, Intervals

RunKey = tuple[str, int, int]  # (schedule, M, chunks)


def relative_error(predicted: float, measured: float) -> float:
    """(predicted - measured) / measured."""
    return (predicted - measured) / measured if measured else float("inf")


def _memory_error(predicted: Sequence[float], measured: Sequence[int | None]) -> float | None:
    errors = [abs(relative_error(p, m)) for p, m in zip(predicted, measured, strict=True) if m]
    return max(errors) if errors else None


def case_predictions(measured: CaseMeasurement) -> dict[RunKey, RoundPrediction]:
    """Every measured run predicted once per round (the simulations every statistic and the
    bootstrap share)."""
    check_aligned(measured)
    costs = {chunks: round_costs(measured, chunks) for chunks in measured.isolated_calibration}
    return {
        (run.schedule, run.microbatches, run.chunks): predict_rounds(
            measured, run.schedule, run.microbatches, run.chunks, costs[run.chunks]
        )
        for run in measured.runs
    }


def case_series(
    measured: CaseMeasurement, predictions: dict[RunKey, RoundPrediction]
) -> CaseSeries:
    """The per-round series of every run, for :func:`validation.uncertainty.error_intervals`."""
    runs = measured.runs
    keys = [(r.schedule, r.microbatches, r.chunks) for r in runs]
    return CaseSeries.of(
        [predictions[k].times_s for k in keys],
        [r.step_times_s for r in runs],
        [predictions[k].unpipelined_s for k in keys],
        [measured.baseline_samples[r.microbatches] for r in runs],
    )


def compare_case(
    measured: CaseMeasurement,
    statistic: Statistic = STATISTIC,
    predictions: dict[RunKey, RoundPrediction] | None = None,
) -> list[Comparison]:
    """One record per measured run: prediction, measurement and errors."""
    case = measured.case
    cuda = case.backend.device_kind is DeviceKind.CUDA
    if predictions is None:
        predictions = case_predictions(measured)
    records = []
    for run in measured.runs:
        rounds = predictions[(run.schedule, run.microbatches, run.chunks)]
        # One whole simulated step, of the round whose prediction is the estimate's: memory,
        # bubble.
        schedule = rounds.schedule
        costs, result = rounds.representative(statistic)
        predicted_time = rounds.time_s(statistic)
        measured_time = estimate(run.step_times_s, statistic)
        baseline = estimate(measured.baseline_samples[run.microbatches], statistic)
        predicted_speedup = rounds.speedup(statistic)
        measured_speedup = baseline / measured_time
        predicted_memory = tuple(
            float(d.peak_memory_bytes if cuda else d.peak_activation_bytes)
            for d in result.per_device
        )
        measured_memory = run.peak_allocated_bytes if cuda else run.peak_rss_bytes
        memory_error = _memory_error(predicted_memory, measured_memory)
        predicted_device_peak = None
        if case.backend.partitioned:
            # One memory for every lane: the most they hold together (static terms counted
            # on CUDA, where the measurement includes the weights and gradients).
            predicted_device_peak = shared_peak_bytes(
                [d.memory for d in result.per_device], static=cuda
            )
            memory_error = (
                abs(relative_error(predicted_device_peak, run.device_peak_bytes))
                if run.device_peak_bytes
                else None
            )
        records.append(
            Comparison(
                case=case.name,
                schedule=run.schedule,
                devices=case.devices,
                microbatches=run.microbatches,
                chunks=run.chunks,
                predicted_time=predicted_time,
                measured_time=measured_time,
                measured_time_min=min(run.step_times_s),
                measured_time_max=max(run.step_times_s),
                measured_time_spread=spread(run.step_times_s),
                measured_time_uncertainty=relative_uncertainty(run.step_times_s),
                predicted_time_uncertainty=relative_uncertainty(rounds.times_s),
                measured_wall_time=estimate(run.wall_times_s, statistic),
                time_error=relative_error(predicted_time, measured_time),
                predicted_speedup=predicted_speedup,
                measured_speedup=measured_speedup,
                speedup_error=relative_error(predicted_speedup, measured_speedup),
                predicted_peak_memory_bytes=predicted_memory,
                measured_peak_memory_bytes=measured_memory,
                stash_peak_memory_bytes=run.peak_stash_bytes,
                memory_error=memory_error,
                stash_memory_error=_memory_error(
                    [float(d.peak_activation_bytes) for d in result.per_device],
                    run.peak_stash_bytes,
                )
                or 0.0,
                predicted_bubble_fraction=result.bubble_fraction,
                analytic_bubble_fraction=analytic_bubble_fraction(schedule, costs, 1),
                predicted_device_peak_bytes=predicted_device_peak,
                measured_device_peak_bytes=run.device_peak_bytes,
            )
        )
    return records


def crosscheck_records(
    measured: CaseMeasurement,
    statistic: Statistic = STATISTIC,
    predictions: dict[RunKey, RoundPrediction] | None = None,
) -> list[CrosscheckRecord]:
    """Each cross-checked schedule: both runtimes' step times beside pipesim's prediction of
    that run (from ``predictions`` where it holds the run), and the prediction's error
    against each runtime."""
    known = predictions or {}
    records = []
    for check in measured.crosscheck:
        key = (check.schedule, check.microbatches, check.chunks)
        rounds = known.get(key) or predict_rounds(measured, *key)
        predicted = rounds.time_s(statistic)
        ours = estimate(check.ours_wall_times_s, statistic)
        theirs = estimate(check.torch_wall_times_s, statistic) if check.torch_wall_times_s else None
        records.append(
            CrosscheckRecord(
                schedule=check.schedule,
                torch_class=check.torch_class,
                devices=check.devices,
                microbatches=check.microbatches,
                chunks=check.chunks,
                ours_wall_time=ours,
                torch_wall_time=theirs,
                predicted_time=predicted,
                error_vs_ours=relative_error(predicted, ours),
                error_vs_torch=None if theirs is None else relative_error(predicted, theirs),
                gradient_max_relative_error=check.gradient_max_relative_error,
            )
        )
    return records


def _stats(values: list[float]) -> tuple[float, float, float]:
    if not values:
        return 0.0, 0.0, 0.0
    return statistics.median(values), max(values), statistics.fmean(values)


def aggregate(records: Sequence[Comparison], intervals: Intervals | None = None) -> Summary:
    """Median, max and mean absolute errors of time, speedup and memory, and the noise; with
    ``intervals``, each median and max error's interval (widened to hold the figure itself:
    a bootstrap's percentiles of a maximum can fall short of it)."""
    time = _stats([abs(r.time_error) for r in records])
    speedup = _stats([abs(r.speedup_error) for r in records])
    memory = _stats([abs(r.memory_error) for r in records if r.memory_error is not None])
    noise = Noise.of([r.measured_time_spread for r in records])
    return Summary(
        runs=float(len(records)),
        median_time_error=time[0],
        max_time_error=time[1],
        mean_time_error=time[2],
        median_speedup_error=speedup[0],
        max_speedup_error=speedup[1],
        mean_speedup_error=speedup[2],
        median_memory_error=memory[0],
        max_memory_error=memory[1],
        mean_memory_error=memory[2],
        median_time_spread=noise.median_spread,
        max_time_spread=noise.max_spread,
        **_bounds(time, speedup, intervals),
    )


def _bounds(
    time: tuple[float, float, float],
    speedup: tuple[float, float, float],
    intervals: Intervals | None,
) -> dict[str, float]:
    """The Summary's interval fields: the figure itself when there is no interval."""
    figures = {
        "median_time_error": time[0],
        "max_time_error": time[1],
        "median_speedup_error": speedup[0],
        "max_speedup_error": speedup[1],
    }
    fields: dict[str, float] = {"confidence": 0.0 if intervals is None else intervals.confidence}
    for name, figure in figures.items():
        low, high = (figure, figure) if intervals is None else getattr(intervals, name)
        fields[f"{name}_low"] = min(low, figure)
        fields[f"{name}_high"] = max(high, figure)
    return fields


def breaches(summary: Summary, max_median: float, max_any: float) -> list[str]:
    """Which thresholds the time and speedup errors exceed (empty when within); a summary of
    no run at all breaches: nothing measured proves nothing."""
    if summary.runs == 0:
        return ["no run was measured"]
    found = []
    for name in ("time", "speedup"):
        median = getattr(summary, f"median_{name}_error")
        worst = getattr(summary, f"max_{name}_error")
        if median > max_median:
            found.append(f"median {name} error {median:.1%} > {max_median:.1%}")
        if worst > max_any:
            found.append(f"max {name} error {worst:.1%} > {max_any:.1%}")
    return found
