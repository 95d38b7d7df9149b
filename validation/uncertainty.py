"""How sure the aggregate errors are: a bootstrap over the measured rounds.

A validation's claim is about aggregates (the median and the largest |error| over every run),
and each run's predicted and measured step times are estimates from a few dozen rounds. Every
round stepped every run and the probes once, so a slow spell of the host touches all runs of a
round together. Resampling whole rounds with replacement (the same rounds for every run of a
case, cases independently), re-estimating every run and re-aggregating gives the spread the
aggregates would have had on another set of rounds, correlations between runs included; its
percentiles are the interval the verdict reads (:func:`validation.runner.conclude`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pipesim.errors import PipesimError
from validation.estimate import LOW_QUANTILE, Statistic

CONFIDENCE = 0.9
REPLICATES = 400


@dataclass(frozen=True)
class CaseSeries:
    """A case's runs, each a row of per-round values (one column per measured round).

    Attributes:
        predicted_s: the simulated step time with each round's calibration.
        measured_s: the measured step time in each round.
        predicted_unpipelined_s: the predicted one-device time of the same mini-batch.
        measured_unpipelined_s: the measured one-device baseline of that M in each round.
    """

    predicted_s: np.ndarray
    measured_s: np.ndarray
    predicted_unpipelined_s: np.ndarray
    measured_unpipelined_s: np.ndarray

    @classmethod
    def of(
        cls,
        predicted_s: Sequence[Sequence[float]],
        measured_s: Sequence[Sequence[float]],
        predicted_unpipelined_s: Sequence[Sequence[float]],
        measured_unpipelined_s: Sequence[Sequence[float]],
    ) -> CaseSeries:
        """From per-run lists, which must all have the same number of rounds (a run predicted
        from one calibration only, a list of one, is repeated for every round)."""
        rounds = max((len(row) for row in measured_s), default=0)
        arrays = []
        for name, rows in (
            ("predicted_s", predicted_s),
            ("measured_s", measured_s),
            ("predicted_unpipelined_s", predicted_unpipelined_s),
            ("measured_unpipelined_s", measured_unpipelined_s),
        ):
            fixed = []
            for row in rows:
                if len(row) == 1:
                    row = list(row) * rounds
                if len(row) != rounds:
                    raise PipesimError(
                        f"uncertainty: {name} has a run of {len(row)} rounds, expected {rounds}"
                    )
                fixed.append(row)
            arrays.append(np.asarray(fixed, dtype=float).reshape(len(fixed), rounds))
        return cls(*arrays)

    @property
    def rounds(self) -> int:
        """Measured rounds (columns)."""
        return int(self.measured_s.shape[1])


def reduce_rows(values: np.ndarray, statistic: Statistic) -> np.ndarray:
    """``statistic`` of each row."""
    if statistic is Statistic.MIN:
        return np.asarray(values.min(axis=1))
    if statistic is Statistic.LOW_QUANTILE:
        return np.asarray(np.quantile(values, LOW_QUANTILE, axis=1))
    if statistic is Statistic.MEDIAN:
        return np.asarray(np.median(values, axis=1))
    return np.asarray(values.mean(axis=1))


def _errors(case: CaseSeries, columns: np.ndarray, statistic: Statistic) -> tuple[np.ndarray, ...]:
    """|time error| and |speedup error| of every run, estimated from ``columns`` only."""
    predicted = reduce_rows(case.predicted_s[:, columns], statistic)
    measured = reduce_rows(case.measured_s[:, columns], statistic)
    predicted_speedup = reduce_rows(case.predicted_unpipelined_s[:, columns], statistic) / predicted
    measured_speedup = reduce_rows(case.measured_unpipelined_s[:, columns], statistic) / measured
    return (
        np.abs(predicted / measured - 1.0),
        np.abs(predicted_speedup / measured_speedup - 1.0),
    )


@dataclass(frozen=True)
class Intervals:
    """``confidence`` intervals (low, high) of the aggregate |errors|."""

    confidence: float
    median_time_error: tuple[float, float]
    max_time_error: tuple[float, float]
    median_speedup_error: tuple[float, float]
    max_speedup_error: tuple[float, float]


def error_intervals(
    cases: Sequence[CaseSeries],
    statistic: Statistic,
    confidence: float = CONFIDENCE,
    replicates: int = REPLICATES,
    seed: int = 0,
) -> Intervals | None:
    """Percentile-bootstrap intervals of the median and max |time| and |speedup| errors over
    every run of ``cases``; None when there is no run. Seeded: the same measurements give the
    same intervals."""
    cases = [c for c in cases if c.measured_s.size]
    if not cases:
        return None
    rng = np.random.default_rng(seed)
    draws = np.empty((replicates, 4))
    for b in range(replicates):
        time_errors, speedup_errors = [], []
        for case in cases:
            columns = rng.integers(0, case.rounds, size=case.rounds)
            time_error, speedup_error = _errors(case, columns, statistic)
            time_errors.append(time_error)
            speedup_errors.append(speedup_error)
        times, speedups = np.concatenate(time_errors), np.concatenate(speedup_errors)
        draws[b] = (np.median(times), times.max(), np.median(speedups), speedups.max())
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(draws, [tail, 1.0 - tail], axis=0)

    def bounds(i: int) -> tuple[float, float]:
        return float(low[i]), float(high[i])

    return Intervals(confidence, bounds(0), bounds(1), bounds(2), bounds(3))
