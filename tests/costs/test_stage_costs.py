"""StageCosts' unchecked constructors give what the checked ones give."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipesim.common.checks import SpecError
from pipesim.costs.pipeline_costs import StageCosts

_amount = st.floats(0.0, 1e12, allow_nan=False)


@st.composite
def stage_costs(draw: st.DrawFn) -> StageCosts:
    stash = draw(_amount)
    return StageCosts(
        draw(_amount),
        draw(_amount),
        draw(_amount),
        activation_bytes=stash,
        weight_grad_activation_bytes=stash * draw(st.sampled_from([0.0, 0.5, 1.0])),
        parameter_bytes=draw(_amount),
        optimizer_step_s=draw(_amount),
        forward_comm_s=draw(_amount),
    )


@given(stage_costs(), _amount)
def test_a_new_optimizer_step_is_the_checked_replace(stage: StageCosts, seconds: float) -> None:
    changed = stage.with_optimizer_step_s(seconds)
    expected = dataclasses.replace(stage, optimizer_step_s=seconds)
    assert changed == expected and hash(changed) == hash(expected)
    assert stage.optimizer_step_s != seconds or changed == stage


@pytest.mark.parametrize("seconds", [-1.0, math.nan, math.inf])
def test_a_new_optimizer_step_is_checked(seconds: float) -> None:
    with pytest.raises(SpecError, match="optimizer_step_s"):
        StageCosts(1.0, 1.0, 1.0).with_optimizer_step_s(seconds)
