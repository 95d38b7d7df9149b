"""Cross-check against an independent implementation: torch.distributed.pipelining.

Where PyTorch has the same schedule, its per-rank compute order (idle slots dropped, DualPipeV's
overlapped F+B pairs read as F then B) must equal ours. Skipped without torch.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from pipesim.schedules import build, schedule_info, unsupported_reason
from pipesim.schedules.registry import torch_schedules

schedules_module = pytest.importorskip("torch.distributed.pipelining.schedules")


def torch_order(cls: Any, devices: int, microbatches: int, chunks: int) -> list[list[str]]:
    """Run PyTorch's per-rank order computation without building stages or process groups."""
    obj = object.__new__(cls)
    rounds = max(1, microbatches // devices)
    fields = {
        "pp_group_size": devices,
        "n_local_stages": chunks,
        "_n_microbatches": microbatches,
        "_num_stages": devices * chunks,
        "num_stages": devices * chunks,
        "_stages": [None] * chunks,
        "number_of_rounds": rounds,
        "microbatches_per_round": microbatches // rounds,
    }
    for key, value in fields.items():
        setattr(obj, key, value)
    rows = []
    for rank in range(devices):
        obj.rank = rank
        row: list[str] = []
        for action in obj._calculate_single_rank_operations(rank):
            if action is None:
                continue
            parts = action.sub_actions or (action,)
            row.extend(str(part) for part in parts)
        rows.append(row)
    return rows


# The PyTorch class comes from the registry (its one home); the chunk counts compared are this
# test's choice. GPipe and 1F1B are PyTorch's single-stage classes, which build no per-rank
# action list to read back, so they are not compared here.
SINGLE_STAGE = {"gpipe", "1f1b"}
CHUNKS_COMPARED = {
    "looped-bfs": (1, 2, 3),
    "interleaved-1f1b": (2, 3, 4),
    "interleaved-zb": (2, 3),
    "zb-h1": (1,),
    "zbv": (2,),
    "dualpipev": (2,),
}
CASES = [
    (name, schedule_info(name).torch_class, chunks) for name, chunks in CHUNKS_COMPARED.items()
]


@pytest.mark.parametrize(("name", "class_name", "chunk_options"), CASES)
def test_orders_equal_pytorchs(name: str, class_name: str, chunk_options: tuple[int, ...]) -> None:
    cls = getattr(schedules_module, class_name)
    compared = 0
    for devices, microbatches, chunks in itertools.product(
        range(1, 7), range(1, 25), chunk_options
    ):
        if unsupported_reason(name, devices, microbatches, chunks) is not None:
            continue
        ours = [
            [str(a) for a in row]
            for row in build(name, devices, microbatches, chunks).device_actions
        ]
        assert ours == torch_order(cls, devices, microbatches, chunks), (
            devices,
            microbatches,
            chunks,
        )
        compared += 1
    assert compared >= 60


def test_every_multi_stage_schedule_pytorch_has_is_compared() -> None:
    """A schedule given a PyTorch class in the registry cannot escape this comparison."""
    assert set(torch_schedules()) - SINGLE_STAGE == set(CHUNKS_COMPARED)


def test_the_flexible_interleaving_is_pytorchs_wherever_pytorch_runs_the_micro_batches() -> None:
    """interleaved-1f1b-flexible has no PyTorch class (ScheduleInterleaved1F1B refuses M that
    does not split into max(1, M // K) equal rounds); where PyTorch accepts M, its order."""
    cls = schedules_module.ScheduleInterleaved1F1B
    compared = 0
    for devices, microbatches, chunks in itertools.product(range(1, 7), range(1, 25), (2, 3)):
        if microbatches % max(1, microbatches // devices):
            continue
        ours = build("interleaved-1f1b-flexible", devices, microbatches, chunks)
        rows = [[str(a) for a in row] for row in ours.device_actions]
        assert rows == torch_order(cls, devices, microbatches, chunks), (devices, microbatches)
        compared += 1
    assert compared >= 100
