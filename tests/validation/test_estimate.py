"""The estimators on synthetic timings: a true time plus injected noise, one-sided (a busy
host only adds time) and two-sided; the low quantile recovers the true time within its bound
where the mean and the median do not."""

from __future__ import annotations

import math
import random
import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipesim.errors import PipesimError
from validation.estimate import (
    LOW_QUANTILE,
    Noise,
    Statistic,
    estimate,
    order_statistic_interval,
    quantile,
    relative_uncertainty,
    spread,
)

TRUE_S = 0.1


def test_quantile_interpolates_between_order_statistics() -> None:
    values = [4.0, 1.0, 3.0, 2.0, 5.0]
    assert quantile(values, 0.0) == 1.0
    assert quantile(values, 0.5) == 3.0
    assert quantile(values, 1.0) == 5.0
    assert quantile(values, 0.2) == pytest.approx(1.8)
    assert quantile([7.0], 0.3) == 7.0


def test_each_statistic_on_a_literal_sample() -> None:
    values = [1.0, 2.0, 3.0, 10.0]
    assert estimate(values, Statistic.MIN) == 1.0
    assert estimate(values, Statistic.LOW_QUANTILE) == pytest.approx(1.0 + 3 * LOW_QUANTILE)
    assert estimate(values, Statistic.MEDIAN) == 2.5
    assert estimate(values, Statistic.MEAN) == 4.0


def test_spread_is_median_over_minimum_less_one() -> None:
    assert spread([1.0, 1.0, 1.0]) == 0.0
    assert spread([1.0, 1.1, 1.2, 5.0]) == pytest.approx(0.15)
    assert Noise.of([0.01, 0.03, 0.2]) == Noise(0.03, 0.2)
    assert Noise.of([]) == Noise(0.0, 0.0)


def test_no_values_is_an_error_naming_the_estimator() -> None:
    with pytest.raises(PipesimError, match="estimate: no values"):
        estimate([])
    with pytest.raises(PipesimError, match="q must be in"):
        quantile([1.0], 1.5)


def _one_sided(rng: random.Random, n: int, disturbed: float, jitter: float) -> list[float]:
    """The true time with a little symmetric jitter; a fraction ``disturbed`` of repeats
    also pays an interference delay of 10% to 200%."""
    values = []
    for _ in range(n):
        value = TRUE_S * (1 + rng.uniform(-jitter, jitter))
        if rng.random() < disturbed:
            value += TRUE_S * rng.uniform(0.1, 2.0)
        values.append(value)
    return values


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_low_quantile_recovers_the_true_time_under_one_sided_noise(seed: int) -> None:
    # A busy host: half the repeats disturbed. With 25 repeats the 20% quantile stays among
    # undisturbed repeats unless more than 80% of them were hit, so it is within the jitter.
    rng = random.Random(seed)
    values = _one_sided(rng, 25, disturbed=0.5, jitter=0.01)
    undisturbed = sum(v <= TRUE_S * 1.01 for v in values)
    if undisturbed < 6:  # about 1 in 1000 draws: the bound does not apply
        return
    assert abs(estimate(values) - TRUE_S) <= 0.01 * TRUE_S


def test_mean_and_median_are_biased_by_one_sided_noise() -> None:
    rng = random.Random(7)
    values = _one_sided(rng, 25, disturbed=0.6, jitter=0.01)
    assert estimate(values, Statistic.MEAN) > 1.2 * TRUE_S
    assert estimate(values, Statistic.MEDIAN) > 1.1 * TRUE_S
    assert abs(estimate(values) - TRUE_S) <= 0.01 * TRUE_S


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_two_sided_noise_moves_the_low_quantile_by_at_most_its_width(seed: int) -> None:
    # Symmetric noise of +-3% (a timer's, a frequency's): every estimator stays within it.
    rng = random.Random(seed)
    values = [TRUE_S * (1 + rng.uniform(-0.03, 0.03)) for _ in range(15)]
    for statistic in Statistic:
        assert abs(estimate(values, statistic) - TRUE_S) <= 0.03 * TRUE_S


def test_the_order_statistic_interval_on_literal_samples() -> None:
    # n=9, q=0.2: no pair of order statistics reaches 90% coverage (at most 86.6%, min to max).
    assert order_statistic_interval([float(v) for v in range(9, 0, -1)]) == (1.0, 9.0)
    # n=40, q=0.2: X(4) to X(13) holds the quantile when 4 to 12 of the 40 draws fall below
    # it, probability 0.928 under Binomial(40, 0.2) (X(4) to X(12): 0.884, short of 90%);
    # values are their ranks.
    assert order_statistic_interval([float(v) for v in range(1, 41)]) == (4.0, 13.0)
    assert relative_uncertainty([0.5] * 12) == 0.0
    # One or two repeats: the interval is all there is (min to max), and one tells nothing.
    assert order_statistic_interval([2.0]) == (2.0, 2.0)
    assert order_statistic_interval([3.0, 2.0]) == (2.0, 3.0)
    assert relative_uncertainty([2.0]) == math.inf
    with pytest.raises(PipesimError, match="confidence must be in"):
        order_statistic_interval([1.0], confidence=1.0)


def test_the_order_statistic_interval_covers_the_quantile_and_shrinks_with_repeats() -> None:
    # A 1.0 s time plus exponential noise of mean 0.1 s: the true 20% quantile is
    # 1 - 0.1 ln(0.8).
    truth = 1.0 - 0.1 * math.log(0.8)
    rng = random.Random(3)
    widths: dict[int, list[float]] = {}
    for n in (15, 60):
        covered = 0
        for _ in range(400):
            values = [1.0 + 0.1 * rng.expovariate(1.0) for _ in range(n)]
            low, high = order_statistic_interval(values)
            covered += low <= truth <= high
            widths.setdefault(n, []).append(high - low)
        assert covered / 400 >= 0.85, (n, covered)
    assert statistics.median(widths[60]) < 0.6 * statistics.median(widths[15])
