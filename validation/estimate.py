"""Estimators of a time from repeated measurements on a host that may be busy.

Interference on a shared machine is one-sided: another tenant, a descheduled thread or a cold
cache only ever adds time to the thing measured. It touches the calibration as much as the
measured steps, so a statistic that interference moves (the mean, and on a busy host the
median) inflates predictions and measurements by different amounts and the comparison becomes a
comparison of two noises. A low quantile estimates the undisturbed time: it is moved only when
more than that fraction of the repeats were disturbed. :data:`STATISTIC` is the one statistic
validation uses for every time it estimates (stage times in situ, transfer latency, step times,
the unpipelined baseline, the cross-check); the report explains the choice with data.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from pipesim.errors import PipesimError


class Statistic(Enum):
    """How repeats of one time become one estimate."""

    MIN = "min"
    LOW_QUANTILE = "low-quantile"  # the LOW_QUANTILE-th quantile
    MEDIAN = "median"
    MEAN = "mean"


LOW_QUANTILE = 0.2
STATISTIC = Statistic.LOW_QUANTILE


def quantile(values: Sequence[float], q: float) -> float:
    """The ``q``-quantile of ``values`` by linear interpolation between order statistics
    (q=0: the minimum, q=0.5: the median, q=1: the maximum)."""
    if not values:
        raise PipesimError("quantile: no values")
    if not 0.0 <= q <= 1.0:
        raise PipesimError(f"quantile: q must be in [0, 1], got {q}")
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    below = math.floor(position)
    above = min(below + 1, len(ordered) - 1)
    fraction = position - below
    return ordered[below] + fraction * (ordered[above] - ordered[below])


def estimate(values: Sequence[float], statistic: Statistic = STATISTIC) -> float:
    """One time from repeats of it."""
    if not values:
        raise PipesimError("estimate: no values")
    if statistic is Statistic.MIN:
        return min(values)
    if statistic is Statistic.LOW_QUANTILE:
        return quantile(values, LOW_QUANTILE)
    if statistic is Statistic.MEDIAN:
        return statistics.median(values)
    return statistics.fmean(values)


def order_statistic_interval(
    values: Sequence[float], q: float = LOW_QUANTILE, confidence: float = 0.9
) -> tuple[float, float]:
    """A distribution-free ``confidence`` interval for the ``q``-quantile of the distribution
    ``values`` were drawn from: the order statistics X(r) <= X(s) closest around rank q*n whose
    coverage, P(r <= #{draws below the quantile} < s) under Binomial(n, q), is at least
    ``confidence``. It assumes nothing about the noise's shape, and it shrinks as repeats are
    added; with too few repeats to reach ``confidence`` it is (minimum, maximum)."""
    if not values:
        raise PipesimError("order_statistic_interval: no values")
    if not 0.0 < confidence < 1.0:
        raise PipesimError(
            f"order_statistic_interval: confidence must be in (0, 1), got {confidence}"
        )
    ordered = sorted(values)
    n = len(ordered)
    pmf = [math.comb(n, i) * q**i * (1.0 - q) ** (n - i) for i in range(n + 1)]
    low = high = min(n - 1, max(0, math.floor(q * (n - 1))))
    # Coverage of [X(low+1), X(high+1)] (1-based order statistics) is sum pmf[low+1 .. high].
    covered = 0.0
    while covered < confidence and (low > 0 or high < n - 1):
        # Widen toward the side whose next binomial term adds more coverage.
        grow_low = pmf[low] if low > 0 else -1.0
        grow_high = pmf[high + 1] if high < n - 1 else -1.0
        if grow_low >= grow_high:
            low -= 1
        else:
            high += 1
        covered = sum(pmf[low + 1 : high + 1])
    return ordered[low], ordered[high]


def relative_uncertainty(values: Sequence[float], q: float = LOW_QUANTILE) -> float:
    """Half the width of the 90% :func:`order_statistic_interval` of the ``q``-quantile, over
    the quantile: how far, relatively, the estimate could be off by the repeats' noise alone.
    With too few repeats to reach 90% (fewer than 11 for the 20% quantile) the interval is the
    minimum to the maximum, which covers less; one repeat tells nothing (infinite)."""
    if len(values) < 2:
        return math.inf
    low, high = order_statistic_interval(values, q)
    centre = quantile(values, q)
    return (high - low) / 2.0 / centre if centre > 0 else 0.0


def spread(values: Sequence[float]) -> float:
    """The noise of repeats: (median - minimum) / minimum. Zero for identical repeats; on a
    quiet machine a percent or two; past the error threshold, the repeats cannot tell a
    prediction's error from the host's noise."""
    if not values:
        raise PipesimError("spread: no values")
    low = min(values)
    return (statistics.median(values) - low) / low if low > 0 else 0.0


@dataclass(frozen=True)
class Noise:
    """How noisy a set of runs was: the median and the largest per-run spread."""

    median_spread: float
    max_spread: float

    @classmethod
    def of(cls, spreads: Sequence[float]) -> Noise:
        """From per-run spreads (zero for none)."""
        if not spreads:
            return cls(0.0, 0.0)
        return cls(statistics.median(spreads), max(spreads))
