"""Where each rank sits (Megatron's order, context ranks next to the tensor ranks): literal
tables for a small job."""

from __future__ import annotations

from typing import Any

import pytest

from pipesim.common.checks import SpecError
from pipesim.common.sized_memo import SizedMemo
from pipesim.parallel import ranks
from pipesim.parallel.config import Parallelism
from pipesim.parallel.ranks import RankLayout, reduction_group


def test_without_context_parallelism_the_order_is_unchanged() -> None:
    """T = 2, P = 2, D = 2: rank t + 2(p + 2d)."""
    layout = RankLayout(2, 2, 2)
    assert layout.devices == 8
    assert layout.tensor_group(1, 1) == [6, 7]
    assert layout.data_group(1) == [2, 6]


def test_context_ranks_sit_next_to_the_tensor_ranks() -> None:
    """T = 2, C = 2, P = 2, D = 2: rank t + 2(c + 2(p + 2d)); a context group takes one rank
    every T; the data group of a dense layer spans every context rank of every replica; EP = 2
    takes consecutive members of it (the context ranks first), and the ranks holding the same
    experts are every second member."""
    layout = RankLayout(2, 2, 2, context=2, expert=2)
    assert layout.devices == 16
    assert layout.rank(1, 1, 1, 1) == 1 + 2 * (1 + 2 * (1 + 2 * 1))
    assert layout.context_group(0) == [0, 2]
    assert layout.tensor_group(1, context_rank=1) == [6, 7]
    assert layout.data_group(1) == [4, 6, 12, 14]
    assert layout.expert_group(1) == [4, 6]
    assert layout.expert_group(1, index=1) == [12, 14]
    assert layout.expert_data_group(1) == [4, 12]
    assert Parallelism(tensor=2, context=2, expert=2, data=2).layout(2) == layout


def test_expert_parallelism_must_divide_the_replicated_ranks() -> None:
    with pytest.raises(SpecError, match="expert-parallel size 3 must divide"):
        RankLayout(1, 1, 2, context=2, expert=3)
    with pytest.raises(SpecError, match=r"expert_parallel must divide data_parallel x"):
        Parallelism(data=2, context=2, expert=3)


def test_a_remembered_reduction_group_is_the_layout_s_own_and_the_memory_is_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """reduction_group is data_group (or expert_data_group) as a tuple, the same object when
    asked again; past the rank budget the oldest groups are forgotten, never the newest."""
    memo: SizedMemo[Any, Any] = SizedMemo(100)
    monkeypatch.setattr(ranks, "_GROUPS", memo)
    layout = RankLayout(tensor=2, pipeline=4, data=8, context=2, expert=4)
    for device in range(4):
        assert reduction_group(layout, device) == tuple(layout.data_group(device))
        assert reduction_group(layout, device, experts=True) == tuple(
            layout.expert_data_group(device)
        )
    first = reduction_group(layout, 3)
    assert reduction_group(layout, 3) is first
    assert memo.held <= 100
    held = memo.oldest_first()
    assert sum(len(reduction_group(lay, rank, experts)) for lay, experts, rank in held) == memo.held
    big = RankLayout(tensor=1, pipeline=1, data=300)
    assert reduction_group(big, 0) == tuple(range(300))  # alone over the budget: kept alone
    assert memo.oldest_first() == [(big, False, 0)]


def test_a_rank_that_is_not_an_integer_is_refused_before_anything_is_remembered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A float rank (1.0) would have built a group of float ranks under the key of rank 1,
    and every later call for rank 1 would have read it."""
    monkeypatch.setattr(ranks, "_GROUPS", SizedMemo(1_000_000))
    layout = RankLayout(tensor=1, pipeline=2, data=4)
    with pytest.raises(TypeError):
        reduction_group(layout, 1.0)  # type: ignore[arg-type]
    assert reduction_group(layout, 1) == tuple(layout.data_group(1))
    assert all(isinstance(rank, int) for rank in reduction_group(layout, 1))
