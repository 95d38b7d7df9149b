"""Prediction round by round, on a hand-made measurement: each round's costs are the means of
that round's probe samples, every run is simulated once per round, and the statistic reduces
the rounds (literal values, computed by hand for GPipe at K=2, M=1: F0, transfer, F1, B1,
transfer, B0)."""

from __future__ import annotations

import dataclasses

import pytest

from executor.backends import DeviceKind
from executor.profile import LinkProfile, StageProfile
from pipesim.errors import PipesimError
from validation.compare import compare_case
from validation.estimate import Statistic
from validation.host import HostLoad
from validation.predict import (
    calibrated_link,
    calibrated_profiles,
    check_aligned,
    predict_rounds,
    round_link,
    round_profiles,
)
from validation.schema import CaseMeasurement, Machine, RunMeasurement
from validation.suites import Case, ModelKind, ModelSpec


def _profile() -> StageProfile:
    """An isolated profile whose times (9 s) must lose to the in-situ ones where those exist;
    no bytes, so a transfer is its latency alone."""
    return StageProfile(9.0, 9.0, 9.0, 9.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)


def _measurement() -> CaseMeasurement:
    case = Case(
        "hand-K2",
        ModelSpec(ModelKind.MLP, width=4, layers=2, microbatch_size=1),
        2,
        (1,),
        ("gpipe",),
        DeviceKind.CPU,
        warmup=0,
        repeats=2,
        crosscheck=False,
    )
    run = RunMeasurement(
        schedule="gpipe",
        devices=2,
        microbatches=1,
        chunks=1,
        step_times_s=(13.0, 13.5),
        wall_times_s=(13.1, 13.6),
        peak_stash_bytes=(0, 0),
        peak_allocated_bytes=(None, None),
        peak_rss_bytes=(None, None),
        timeline=(),
    )
    return CaseMeasurement(
        case=case,
        machine=Machine("test", "test", 2, "3.11", "2.13", 1),
        host=HostLoad(2.0, 2.0, 2, 0.0, 1.0),
        link=LinkProfile(0.05, 1e9, ()),
        isolated_calibration={1: (_profile(), _profile())},
        probes={1: ("1f1b M=6",)},
        in_situ_samples={
            1: (
                {"0/F": (1.0, 3.0), "1/F": (2.0,), "0/B": (4.0,), "1/B": (5.0,)},
                {"0/F": (1.0,), "1/F": (1.0,), "0/B": (2.0,)},  # no 1/B: the isolated 9 s
            )
        },
        latency_samples={1: ((0.1, 0.3), ())},  # round 1 caught none: the ping-pong 0.05 s
        runs=(run,),
        baseline_samples={1: (4.2, 5.0)},
        solo_samples={"forward_s": (1.0, 2.0), "backward_s": (3.0, 3.0)},
        crosscheck=(),
        rounds=2,
    )


def test_each_round_is_costed_from_its_own_probe_means() -> None:
    measured = _measurement()
    first, second = round_profiles(measured, 1, 0), round_profiles(measured, 1, 1)
    assert [(p.forward_s, p.backward_s) for p in first] == [(2.0, 4.0), (2.0, 5.0)]
    assert [(p.forward_s, p.backward_s) for p in second] == [(1.0, 2.0), (1.0, 9.0)]
    assert round_link(measured, 1, 0).latency_s == pytest.approx(0.2)
    assert round_link(measured, 1, 1).latency_s == 0.05


def test_every_run_is_predicted_once_per_round_and_reduced_like_the_measurement() -> None:
    measured = _measurement()
    rounds = predict_rounds(measured, "gpipe", 1, 1)
    # Round 0: 2 + 0.2 + 2 + 5 + 0.2 + 4; round 1: 1 + 0.05 + 1 + 9 + 0.05 + 2.
    assert rounds.times_s == pytest.approx((13.4, 13.1))
    assert rounds.unpipelined_s == (4.0, 5.0)  # M x (solo F + solo B), per round
    # The 20% quantile of two rounds: 13.1 + 0.2 x 0.3.
    assert rounds.time_s() == pytest.approx(13.16)
    assert rounds.speedup(Statistic.MEDIAN) == pytest.approx(4.5 / 13.25)
    assert rounds.representative_round() == 1
    costs, result = rounds.representative()
    assert costs.stages[1].full_backward_s == 9.0 and result.iteration_time_s == pytest.approx(13.1)
    [record] = compare_case(measured)
    assert record.predicted_time == pytest.approx(13.16)
    assert record.measured_time == pytest.approx(13.1)  # 13.0 + 0.2 x 0.5
    assert record.time_error == pytest.approx(13.16 / 13.1 - 1)
    assert record.measured_speedup == pytest.approx(4.36 / 13.1)


def test_the_report_s_calibration_is_the_statistic_over_rounds() -> None:
    measured = _measurement()
    profiles = calibrated_profiles(measured, 1, Statistic.MEDIAN)
    assert (profiles[0].forward_s, profiles[1].backward_s) == (1.5, 7.0)
    assert calibrated_link(measured, 1, Statistic.MEDIAN).latency_s == pytest.approx(0.125)


def test_series_that_do_not_pair_with_the_rounds_are_refused() -> None:
    measured = _measurement()
    check_aligned(measured)
    short = dataclasses.replace(measured, baseline_samples={1: (4.0,)})
    with pytest.raises(PipesimError, match=r"baseline_samples\[1\] has 1 rounds, the case"):
        check_aligned(short)
