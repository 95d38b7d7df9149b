"""Optimizer state bytes: the table of pipesim.workload.optimizer, literally."""

from __future__ import annotations

import pytest

from pipesim.common.checks import SpecError
from pipesim.workload import model
from pipesim.workload.optimizer import optimizer_bytes, with_optimizer


@pytest.mark.parametrize(
    ("name", "optimizer", "master", "expected"),
    [
        ("gpt-355m", "adam", None, 12.0),  # fp16 weights: fp32 master weights by default
        ("gpt-355m", "adam", False, 8.0),
        ("gpt-355m", "sgd", None, 4.0),
        ("gpt-355m", "momentum", None, 8.0),
        ("gpipe-transformer-8", "rmsprop", None, 4.0),  # fp32 weights: GPipe's 12 in all
        ("gpipe-transformer-8", "adam", None, 8.0),
        ("gpipe-transformer-8", "adam", True, 12.0),
        ("gpipe-transformer-8", "6.5", None, 6.5),
    ],
)
def test_optimizer_bytes(name: str, optimizer: str, master: bool | None, expected: float) -> None:
    assert optimizer_bytes(model(name), optimizer, master) == expected


def test_models_keep_their_own_by_default() -> None:
    gpt = model("gpt-355m")
    assert with_optimizer(gpt, None) is gpt
    assert with_optimizer(gpt, None, False).optimizer_bytes_per_parameter == 8.0
    assert with_optimizer(gpt, "adam").bytes_per_parameter == 16.0  # 2 + 2 + 12


@pytest.mark.parametrize(
    ("optimizer", "master", "message"),
    [
        ("lion", None, "--optimizer must be one of sgd, momentum, rmsprop, adam"),
        ("-1", None, "--optimizer bytes per parameter must be >= 0"),
        ("12", True, "already includes master weights"),
    ],
)
def test_bad_optimizer(optimizer: str, master: bool | None, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        optimizer_bytes(model("gpt-355m"), optimizer, master)
