"""The bootstrap over rounds: exact without noise, covering the true aggregate error under
one-sided noise, and refusing series that do not pair rounds."""

from __future__ import annotations

import random

import numpy as np
import pytest

from pipesim.errors import PipesimError
from validation.estimate import Statistic
from validation.uncertainty import CaseSeries, error_intervals


def _case(rng: random.Random, runs: int, rounds: int, bias: float, noise: float) -> CaseSeries:
    """Runs of 0.1 s to 0.3 s; the prediction is ``bias`` off the truth; predicted and
    measured rounds each pay an exponential delay of mean ``noise`` (relative), drawn
    independently (the same distribution on both sides)."""
    true = [0.1 + 0.2 * i / max(1, runs - 1) for i in range(runs)]

    def noisy(value: float) -> float:
        return value * (1 + rng.expovariate(1 / noise)) if noise else value

    return CaseSeries.of(
        [[noisy(t * (1 + bias)) for _ in range(rounds)] for t in true],
        [[noisy(t) for _ in range(rounds)] for t in true],
        [[noisy(2 * t) for _ in range(rounds)] for t in true],
        [[noisy(2 * t * (1 + bias)) for _ in range(rounds)] for t in true],
    )


def test_without_noise_the_interval_is_the_error_itself() -> None:
    case = _case(random.Random(0), runs=5, rounds=8, bias=0.03, noise=0.0)
    intervals = error_intervals([case], Statistic.LOW_QUANTILE, replicates=50)
    assert intervals is not None and intervals.confidence == 0.9
    for low, high in (intervals.median_time_error, intervals.max_time_error):
        assert low == pytest.approx(0.03) and high == pytest.approx(0.03)
    # Predicted speedup (2t / t(1+b)) against measured (2t(1+b) / t): off by 1/(1+b)^2 - 1.
    expected = abs(1 / 1.03**2 - 1)
    assert intervals.median_speedup_error == pytest.approx((expected, expected))


def test_the_interval_covers_the_true_median_error_under_one_sided_noise() -> None:
    rng = random.Random(11)
    covered = 0
    trials = 30
    for _ in range(trials):
        cases = [_case(rng, runs=20, rounds=25, bias=0.02, noise=0.05) for _ in range(2)]
        intervals = error_intervals(cases, Statistic.LOW_QUANTILE, replicates=150)
        assert intervals is not None
        low, high = intervals.median_time_error
        assert low <= high
        covered += low <= 0.02 <= high
    assert covered >= 0.75 * trials


def test_more_rounds_narrow_the_interval() -> None:
    rng = random.Random(5)
    few = _case(rng, runs=20, rounds=8, bias=0.02, noise=0.1)
    many = _case(rng, runs=20, rounds=64, bias=0.02, noise=0.1)
    narrow = error_intervals([many], Statistic.LOW_QUANTILE, replicates=200)
    wide = error_intervals([few], Statistic.LOW_QUANTILE, replicates=200)
    assert narrow is not None and wide is not None

    def width(pair: tuple[float, float]) -> float:
        return pair[1] - pair[0]

    assert width(narrow.median_time_error) < width(wide.median_time_error)


def test_series_must_pair_rounds() -> None:
    with pytest.raises(PipesimError, match="measured_s has a run of 2 rounds, expected 3"):
        CaseSeries.of([[1.0] * 3], [[1.0] * 3, [1.0] * 2], [[1.0] * 3], [[1.0] * 3])
    # A prediction from one calibration only stands for every round.
    single = CaseSeries.of([[1.0]], [[1.0, 1.0]], [[2.0]], [[2.0, 2.0]])
    assert single.predicted_s.shape == (1, 2)
    assert error_intervals([], Statistic.MEDIAN) is None


def test_the_bootstrap_reduces_rows_as_estimate_does() -> None:
    # uncertainty.reduce_rows is the row-wise numpy form of validation.estimate.estimate; the two
    # must agree for every statistic, or the intervals would bound another figure.
    from validation.estimate import estimate
    from validation.uncertainty import reduce_rows

    rng = random.Random(2)
    rows = [[rng.uniform(0.1, 0.3) for _ in range(n)] for n in (7, 7, 7)]
    for statistic in Statistic:
        reduced = reduce_rows(np.asarray(rows), statistic)
        assert list(reduced) == pytest.approx([estimate(row, statistic) for row in rows])
