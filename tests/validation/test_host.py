"""The host's load over a measurement, from literal readings."""

from __future__ import annotations

import pytest

from pipesim.errors import PipesimError
from validation.host import HostLoad, HostSample, host_load, sample_host


def test_load_and_steal_between_readings() -> None:
    samples = [
        HostSample(10.0, 1.5, 100, 10_000),
        HostSample(11.0, 2.5, 110, 10_500),
        HostSample(12.0, 2.0, 150, 11_000),
    ]
    load = host_load(samples)
    assert load.load_1min == pytest.approx(2.0)
    assert load.load_1min_max == 2.5
    assert load.steal_fraction == pytest.approx(50 / 1000)
    assert load.duration_s == 2.0
    assert HostLoad.from_json(load.to_json()) == load


def test_steal_is_none_where_the_kernel_does_not_show_it() -> None:
    load = host_load([HostSample(0.0, 0.5, None, None), HostSample(1.0, 0.5, None, None)])
    assert load.steal_fraction is None
    assert "steal not visible" in load.describe()


def test_a_busy_host_has_more_runnable_work_than_cores() -> None:
    assert HostLoad(3.0, 3.5, 2, None, 1.0).busy
    assert not HostLoad(1.9, 2.0, 2, 0.0, 1.0).busy


def test_a_reading_of_this_host() -> None:
    sample = sample_host()
    assert sample.load_1min >= 0.0
    with pytest.raises(PipesimError, match="no readings"):
        host_load([])


def test_an_old_record_without_a_field_is_refused_by_name() -> None:
    data = HostLoad(1.0, 1.0, 2, None, 1.0).to_json()
    del data["load_1min_max"]
    with pytest.raises(PipesimError, match="host: field 'load_1min_max' is missing"):
        HostLoad.from_json(data)
