"""pipesim's per-rank peak of a mixture-of-experts stage against PyTorch's trace of one
expert-parallel rank (Megatron-Core's MoE layer with its alltoall dispatcher, balanced routing,
under FakeTensorMode + MemTracker, EP > 1 on a fake process group;
docs/reproductions/moe-memory.md).

Measured (MiB, hidden 256, s 512, top-2 SwiGLU experts of width 512, 2 blocks per stage, b 1,
M 4, K 2, recompute none; torch 2.13 CPU):

==============================  ======  =======  ======
case                            traced  pipesim  error
==============================  ======  =======  ======
E=4, EP=1, first stage          56.932  57.555   +1.1%
E=4, EP=2, last stage           36.471  36.629   +0.4%
E=8 + 1 shared, EP=4, first     57.039  58.602   +2.7%
==============================  ======  =======  ======

The largest error over the whole table (E 4 and 8 + shared, EP 1, 2, 4, first and last
stages) is +2.7%, so the stated bound is 3%, and pipesim is above the trace in every case (the
issue's 5% target is met). Weights and gradients agree to the byte; the traced optimizer has
4 bytes more per parameter tensor (Adam's step counters), nothing else.
"""

from __future__ import annotations

import warnings

import pytest

pytest.importorskip("torch")
import torch.distributed as dist

if not dist.is_available():
    pytest.skip("torch.distributed is not available in this build", allow_module_level=True)
pytest.importorskip(
    "torch.testing._internal.distributed.fake_pg", reason="no fake process group in this torch"
)
pytest.importorskip("torch.distributed._tools.mem_tracker", reason="no MemTracker in this torch")

from validation.memory_trace import error
from validation.memory_trace_moe import MoECase, cases, compare, parameter_tensors

BOUND = 0.03  # the largest measured |error|, 2.7%, rounded up

CHECKED = [
    c for c in cases() if c.name in ("E4 EP=1 first", "E4 EP=2 last", "E8 +shared EP=4 first")
]


@pytest.mark.parametrize("case", CHECKED, ids=[c.name for c in CHECKED])
def test_pipesim_peak_of_an_moe_rank_is_within_the_measured_bound(case: MoECase) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # MemTracker's notes on modules called repeatedly
        traced, predicted = compare(case)
    assert traced.weights == predicted.weights
    assert traced.gradients == predicted.gradients
    # Adam's per-tensor step counters (4 bytes each) are all the traced optimizer has more
    assert traced.optimizer - predicted.optimizer == 4 * parameter_tensors(case)
    assert 0.0 <= error(traced, predicted) <= BOUND


def test_the_checked_cases_exist() -> None:
    assert len(CHECKED) == 3
