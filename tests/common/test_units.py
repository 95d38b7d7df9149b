"""Numbers as people read them: binary byte units with three significant digits."""

from __future__ import annotations

import math

import pytest

from pipesim.common.units import format_bytes


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (512, "512 B"),
        (1536, "1.5 KiB"),
        (12.5 * 2**30, "12.5 GiB"),
        (999.4 * 2**20, "999 MiB"),
        (1000 * 2**20, "1000 MiB"),  # not 1e+03 MiB
        (1023.4 * 2**20, "1023 MiB"),
        (2**30, "1 GiB"),
        (4547 * 2**40, "4547 TiB"),
        (math.inf, "unlimited"),
    ],
)
def test_format_bytes(value: float, text: str) -> None:
    assert format_bytes(value) == text
