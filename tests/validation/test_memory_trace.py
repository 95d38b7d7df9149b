"""pipesim's stage memory against PyTorch's accounting (FakeTensorMode + MemTracker) of the
same GPT stages: static terms exactly, the peak within 5% on small shapes, for each attention
implementation, recomputation mode and pipeline position."""

from __future__ import annotations

import warnings

import pytest

pytest.importorskip("torch")

from pipesim.workload.architecture import Attention, TransformerArchitecture
from validation.memory_trace import TraceCase, compare

SMALL = [
    TraceCase(
        f"{attention.value} {recompute} device {device}",
        TransformerArchitecture(6, 256, 4, 1024, 128, 1000, attention=attention),
        recompute,
        3,
        device,
        2,
        2,
        4,
    )
    for attention in Attention
    for recompute in ("none", "selective", "full")
    for device in (0, 1, 2)
]


@pytest.mark.parametrize("case", SMALL, ids=[c.name for c in SMALL])
def test_a_traced_stage_peaks_where_pipesim_says(case: TraceCase) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # MemTracker's notes on modules called repeatedly
        traced, predicted = compare(case)
    assert predicted.weights == traced.weights
    assert predicted.gradients == traced.gradients
    # Adam's per-tensor step counters (4 bytes each) are all the traced optimizer has more
    assert 0 <= traced.optimizer - predicted.optimizer <= 4 * 64
    assert predicted.peak == pytest.approx(traced.peak, rel=0.05)
