"""Expert tensor parallelism (Megatron-Core's ``--expert-tensor-parallel-size``, "parallel
folding") in the rank layout: each pipeline device's T x C x D ranks folded as ETP x EP x EDP
(expert-tensor ranks innermost, parallel_state's expert order ``tp-ep-dp-pp``), literal tables
for small jobs; which nodes an all-to-all spans; the checks, naming the field."""

from __future__ import annotations

import pytest

from pipesim.common.checks import SpecError
from pipesim.hardware.network import Link, Network, Topology
from pipesim.parallel.config import Parallelism
from pipesim.parallel.groups import TensorGroup
from pipesim.parallel.ranks import RankLayout


def test_etp_1_under_t_2_folds_ep_over_the_tensor_and_data_ranks() -> None:
    """T = 2, P = 2, D = 4 (rank t + 2(p + 2d)), ETP = 1, EP = 4: device 0's ranks in the
    order t + 2d are 0, 1, 4, 5, 8, 9, 12, 13; EP takes the first four of them (both tensor
    ranks of replicas 0 and 1), EDP = 8 / 4 = 2 ranks hold the same experts, 8 apart."""
    layout = RankLayout(2, 2, 4, expert=4, expert_tensor=1)
    assert [layout.stage_rank(0, i) for i in range(8)] == [0, 1, 4, 5, 8, 9, 12, 13]
    assert layout.expert_data == 2
    assert layout.expert_group(0) == [0, 1, 4, 5]
    assert layout.expert_group(0, index=1) == [8, 9, 12, 13]
    assert layout.expert_data_group(0) == [0, 8]
    assert layout.expert_data_group(0, slot=3) == [5, 13]
    assert layout.expert_tensor_group(0) == [0]
    assert layout.expert_group(1) == [2, 3, 6, 7]  # device 1: the same, 2 ranks on


def test_etp_2_under_t_4_splits_the_tensor_group() -> None:
    """T = 4, P = 1, D = 2, ETP = 2, EP = 2 (EDP = 2): the expert-tensor groups are halves of
    the tensor groups, an EP group takes one rank every 2, an EDP group one every 4."""
    layout = RankLayout(4, 1, 2, expert=2, expert_tensor=2)
    assert layout.tensor_group(0) == [0, 1, 2, 3]
    assert layout.expert_tensor_group(0) == [0, 1]
    assert layout.expert_tensor_group(0, expert_rank=1, index=1) == [6, 7]
    assert layout.expert_group(0) == [0, 2]
    assert layout.expert_group(0, tensor_rank=1, index=1) == [5, 7]
    assert layout.expert_data_group(0) == [0, 4]


def test_context_ranks_fold_with_the_others() -> None:
    """T = 2, C = 2, P = 2, D = 2 (rank t + 2(c + 2(p + 2d))), ETP = 1, EP = 4: device 1's
    first EP group is its 4 tensor x context ranks of replica 0; EDP = 2."""
    layout = RankLayout(2, 2, 2, context=2, expert=4, expert_tensor=1)
    assert layout.expert_group(1) == [4, 5, 6, 7]
    assert layout.expert_data_group(1) == [4, 12]


@pytest.mark.parametrize(("tensor", "context", "data", "expert"), [(2, 1, 4, 2), (2, 2, 2, 4)])
def test_etp_equal_to_t_is_the_layout_without_it(
    tensor: int, context: int, data: int, expert: int
) -> None:
    """ETP = T given is ETP = T unstated: EP takes consecutive members of the data group."""
    plain = RankLayout(tensor, 2, data, context, expert)
    given = RankLayout(tensor, 2, data, context, expert, expert_tensor=tensor)
    for device in range(2):
        for tensor_rank in range(tensor):
            group = plain.data_group(device, tensor_rank)
            assert given.expert_group(device, tensor_rank) == group[:expert]
            assert given.expert_data_group(device, tensor_rank) == group[::expert]
        assert given.expert_tensor_group(device) == plain.tensor_group(device)


def test_folding_keeps_an_all_to_all_on_fewer_nodes() -> None:
    """8 GPUs a node, T = 2, P = 4, D = 8, EP = 8: with the experts split T ways the EP group
    takes one tensor rank of 8 replicas, 8 nodes apart; at ETP = 1 both tensor ranks of 4
    replicas, 4 nodes (Megatron's folding keeps EP on the nearer ranks)."""
    per_node = 8
    default = RankLayout(2, 4, 8, expert=8)
    folded = RankLayout(2, 4, 8, expert=8, expert_tensor=1)
    assert default.expert_group(0) == [0, 8, 16, 24, 32, 40, 48, 56]
    assert folded.expert_group(0) == [0, 1, 8, 9, 16, 17, 24, 25]
    assert len({r // per_node for r in default.expert_group(0)}) == 8
    assert len({r // per_node for r in folded.expert_group(0)}) == 4


def test_the_groups_of_a_folded_layout() -> None:
    """TensorGroup.of gives the expert-tensor group where it is not the tensor group."""
    network = Network(16, Topology.ALL_TO_ALL, Link("l", 1e9, 0.0))
    group = TensorGroup.of(network, RankLayout(4, 1, 4, expert=4, expert_tensor=2))
    assert group is not None
    assert group.expert_tensor_ranks == (0, 1)
    assert group.expert_ranks == (0, 2, 4, 6)
    plain = TensorGroup.of(network, RankLayout(4, 1, 4, expert=2))
    assert plain is not None and plain.expert_tensor_ranks == ()
    # T = 1, ETP = 2 and nothing else: a group for the experts' collectives alone
    alone = TensorGroup.of(network, RankLayout(1, 1, 4, expert_tensor=2))
    assert alone is not None and alone.expert_tensor_ranks == (0, 1)
    assert TensorGroup.of(network, RankLayout(2, 1, 4, expert_tensor=1)) is not None


def test_parallelism_sizes_and_label() -> None:
    par = Parallelism(tensor=2, sequence_parallel=True, data=8, expert=8, expert_tensor=1)
    assert (par.expert_tensor_size, par.expert_data, par.folded) == (1, 2, True)
    assert par.label() == "T=2 SP EP=8 ETP=1 D=8"
    assert par.layout(4) == RankLayout(2, 4, 8, expert=8, expert_tensor=1)
    assert not par.is_identity
    # ETP = T is stored as unset: one value, one label
    same = Parallelism(tensor=2, sequence_parallel=True, data=8, expert=8, expert_tensor=2)
    assert same == Parallelism(tensor=2, sequence_parallel=True, data=8, expert=8)
    assert same.expert_tensor is None and same.label() == "T=2 SP EP=8 D=8"
    assert (same.expert_data, same.folded) == (1, False)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"expert_tensor": 0}, r"^expert_tensor_parallel must be an integer >= 1, got 0$"),
        (
            {"tensor": 2, "sequence_parallel": True, "data": 4, "expert": 3, "expert_tensor": 1},
            r"^expert_tensor_parallel 1 x expert_parallel 3 = 3 must divide tensor_parallel x "
            r"context_parallel x data_parallel = 8 \(Megatron-Core's parallel_state",
        ),
        (
            {"tensor": 1, "data": 2, "expert": 2, "expert_tensor": 2},
            r"^expert_tensor_parallel 2 x expert_parallel 2 = 4 must divide",
        ),
        (
            {"tensor": 2, "data": 2, "expert_tensor": 1},
            r"^expert_tensor_parallel 1 with tensor_parallel 2 needs sequence_parallel: "
            r"Megatron-Core's MoELayer raises",
        ),
    ],
)
def test_refusals_name_the_field(fields: dict[str, object], message: str) -> None:
    with pytest.raises(SpecError, match=message) as error:
        Parallelism(**fields)  # type: ignore[arg-type]
    assert "\n" not in str(error.value)


def test_the_layout_refuses_groups_that_do_not_fill_a_device() -> None:
    """ETP x EP must divide T x C x D (T = 2, D = 2: 4 ranks a device)."""
    with pytest.raises(SpecError, match=r"size 1 x expert-parallel size 3 must divide tensor x "):
        RankLayout(2, 1, 2, expert=3, expert_tensor=1)
    with pytest.raises(SpecError, match=r"size 4 x expert-parallel size 2 must divide .* = 4$"):
        RankLayout(2, 1, 2, expert=2, expert_tensor=4)
