"""Constants that say they were measured equal what the stored measurement gives."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipesim.hardware import hardware

RECORD = Path(__file__).resolve().parents[2] / "docs" / "measurements" / "h200-layers.json"


def test_the_h200_matmul_curve_is_the_stored_records() -> None:
    """The h200 entry's matmul efficiency curve, point by point, from the record's square bf16
    products (rounded to 0.1 TFLOP/s as the catalogue states them) over the bf16 peak. It was
    set from a run that was never stored (179.8 TFLOP/s at 1,024 against the record's 126.8)."""
    record = json.loads(RECORD.read_text())
    accelerator = hardware("h200").accelerator
    peak = accelerator.peak_flops_per_s["bf16"]
    derived = [
        (float(row["flops"]), round(row["flops_per_s"] / 1e12, 1) * 1e12 / peak)
        for row in record["square_matmuls"]
        if row["n"] >= 1024
    ]
    assert len(derived) == len(accelerator.matmul_efficiency) == 8
    for (flops, fraction), (entry_flops, entry_fraction) in zip(
        derived, accelerator.matmul_efficiency, strict=True
    ):
        assert entry_flops == pytest.approx(flops, rel=1e-12)
        assert entry_fraction == pytest.approx(fraction, rel=1e-12)
