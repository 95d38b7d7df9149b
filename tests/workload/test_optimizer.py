"""Optimizer state, master weights and step temporaries: the table of
pipesim.workload.optimizer, literally."""

from __future__ import annotations

import pytest

from pipesim.common.checks import SpecError
from pipesim.workload import model
from pipesim.workload.optimizer import with_optimizer


@pytest.mark.parametrize(
    ("name", "optimizer", "master", "state", "masters", "temporary"),
    [
        ("gpt-355m", "adam", None, 8.0, 4.0, 4.0),  # fp16 weights: fp32 master weights
        ("gpt-355m", "adam", False, 8.0, 0.0, 4.0),
        ("gpt-355m", "sgd", None, 0.0, 4.0, 0.0),
        ("gpt-355m", "momentum", None, 4.0, 4.0, 0.0),
        ("gpipe-transformer-8", "rmsprop", None, 4.0, 0.0, 4.0),  # fp32: GPipe's 12 in all
        ("gpipe-transformer-8", "adam", None, 8.0, 0.0, 4.0),
        ("gpipe-transformer-8", "adam", True, 8.0, 4.0, 4.0),
        ("gpipe-transformer-8", "6.5", None, 6.5, 0.0, 4.0),  # a number keeps the temporaries
    ],
)
def test_optimizer_bytes(
    name: str, optimizer: str, master: bool | None, state: float, masters: float, temporary: float
) -> None:
    built = with_optimizer(model(name), optimizer, master)
    assert built.optimizer_bytes_per_parameter == state
    assert built.master_weight_bytes_per_parameter == masters
    assert built.optimizer_temporary_bytes_per_parameter == temporary


def test_models_keep_their_own_by_default() -> None:
    gpt = model("gpt-355m")
    assert with_optimizer(gpt, None) is gpt
    assert gpt.optimizer_bytes_per_parameter + gpt.master_weight_bytes_per_parameter == 12.0
    assert with_optimizer(gpt, None, False).master_weight_bytes_per_parameter == 0.0
    assert with_optimizer(gpt, None, False).optimizer_bytes_per_parameter == 8.0
    assert with_optimizer(gpt, "adam").bytes_per_parameter == 16.0  # 2 + 2 + 8 + 4
    assert model("gpipe-transformer-8").bytes_per_parameter == 12.0  # GPipe Table 1


@pytest.mark.parametrize(
    ("optimizer", "master", "message"),
    [
        ("lion", None, "optimizer must be one of sgd, momentum, rmsprop, adam"),
        ("-1", None, "optimizer bytes per parameter must be >= 0"),
        ("12", True, "already includes master weights"),
    ],
)
def test_bad_optimizer(optimizer: str, master: bool | None, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        with_optimizer(model("gpt-355m"), optimizer, master)
