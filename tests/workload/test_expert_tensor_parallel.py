"""Expert tensor parallelism of its own (ETP = u != T, Megatron-Core's
``--expert-tensor-parallel-size``, "parallel folding") on one rank's MoE block, as Megatron-
Core's alltoall dispatcher runs it: the experts split u ways, u·k·s/t rows each rank computes,
the all-to-alls of the rank's own k·s/t routed copies, the expert-tensor group's all-gather and
reduce-scatter of the dispatched tokens, the block's tensor-parallel pair of the MLP only
for shared experts; by hand on the tiny architecture of test_expert_parallel.py. Properties:
the same FLOPs per rank whatever u, the experts' parameters divided by EP x ETP exactly, ETP =
T the block as before; refusals naming the field.

The tiny architecture (``SMALL``): s 16, h 64, 4 heads of 16, 2 key/value heads, E = 4
experts of f_e 32 (SwiGLU: 3 matrices), top-2, one shared expert of 16, e = 2.
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipesim.common.checks import SpecError
from pipesim.hardware.collectives import Collective
from pipesim.parallel.config import Parallelism, Recompute
from pipesim.workload import model
from pipesim.workload.architecture import TransformerArchitecture
from pipesim.workload.catalogue import MOE_MODELS
from pipesim.workload.model import Layer
from pipesim.workload.moe import MixtureOfExperts
from pipesim.workload.transformer import transformer_block, transformer_layers
from pipesim.workload.work import GroupKind, Matmul, PassWork
from tests.workload.test_expert_parallel import EXPERT, F_E, SMALL, H, K, S

E2 = 2  # bytes per element
# SMALL without its shared expert: the MoE block's MLP then gathers nothing over T when folded
ROUTED_ONLY = dataclasses.replace(SMALL, moe=MixtureOfExperts(4, K, F_E))


def _block(
    tensor: int,
    ep: int,
    etp: int | None,
    data: int = 4,
    arch: TransformerArchitecture = SMALL,
    recompute: str = "none",
) -> Layer:
    par = Parallelism(
        tensor=tensor,
        sequence_parallel=tensor > 1,
        recompute=Recompute.parse(recompute),
        expert=ep,
        data=data,
        expert_tensor=etp,
    )
    return transformer_block("b", arch, par, moe=True)


def _experts(work: PassWork) -> list[Matmul]:
    return [m for m in work.matmuls if m.name.startswith("expert ")]


def _calls(work: PassWork) -> list[tuple[Collective, float, GroupKind]]:
    return [(c.kind, c.bytes_per_sample, c.group) for c in work.collectives]


def test_the_rank_holds_e_over_ep_experts_split_etp_ways() -> None:
    """T = 2: at ETP = 2 a rank of EP = 2 holds 2 experts halved (one expert's weights); at
    ETP = 1 the same 2 whole (two); EP = 4 at ETP = 1 one whole. The rest as before."""
    default, folded, wide = _block(2, 2, None), _block(2, 2, 1), _block(2, 4, 1)
    assert default.expert_parameters == EXPERT
    assert folded.expert_parameters == 2 * EXPERT
    assert wide.expert_parameters == EXPERT
    rest = default.parameters - default.expert_parameters
    assert folded.parameters - folded.expert_parameters == rest
    assert folded.active_expert_parameters == folded.expert_parameters * K / 4


def test_the_expert_matmuls_take_u_k_s_over_t_rows_at_width_f_over_u() -> None:
    """k·s = 32 routed copies a sequence. T = 2, ETP = 1, EP = 2: the rank routes its s/t = 8
    tokens, 16 copies; balanced its 2 experts receive 16 rows, 8 each, at the full width
    (fc1 2·32 wide). T = 1, ETP = 2, EP = 2: 32 copies a rank, gathered over 2 ranks: 64
    rows, 32 for each of 2 experts, at half the width (fc1 32, fc2 16)."""
    folded = _block(2, 2, 1).work
    assert folded is not None
    assert _experts(folded.forward) == [
        Matmul("expert fc1", 8, 2 * F_E, H, 2),
        Matmul("expert fc2", 8, H, F_E, 2),
    ]
    split = _block(1, 2, 2).work
    assert split is not None
    assert _experts(split.forward) == [
        Matmul("expert fc1", 32, F_E, H, 2),
        Matmul("expert fc2", 32, H, F_E / 2, 2),
    ]


def test_the_dispatcher_s_collectives() -> None:
    """T = 1, ETP = 2, EP = 2, in F and I: the dispatch all-to-all of the rank's e·k·s·h =
    4096 bytes, the expert-tensor all-gather of the two ranks' (8192) and its reduce-scatter,
    the combine all-to-all; W none."""
    work = _block(1, 2, 2).work
    assert work is not None
    a2a = (Collective.ALL_TO_ALL, 4096.0, GroupKind.EXPERT)
    gather = (Collective.ALL_GATHER, 8192.0, GroupKind.EXPERT_TENSOR)
    scatter = (Collective.REDUCE_SCATTER, 8192.0, GroupKind.EXPERT_TENSOR)
    assert _calls(work.forward) == [a2a, gather, scatter, a2a]
    assert _calls(work.input_grad) == [a2a, gather, scatter, a2a]
    assert work.weight_grad.collectives == ()
    # ETP = 2 without EP: the gather and reduce-scatter alone
    assert _calls(_block(1, 1, 2).work.forward) == [gather, scatter]  # type: ignore[union-attr]
    # full recomputation re-runs the forward's four inside I: eight there
    full = _block(1, 2, 2, recompute="full").work
    assert full is not None and len(full.input_grad.collectives) == 8


def test_folded_under_t_the_block_gathers_for_the_attention_and_the_shared_experts_only() -> None:
    """T = 2 (sequence-parallel), EP = 2, ETP = 1: the all-to-alls carry the rank's s/t
    tokens' k copies, e·k·s·h/t = 2048 bytes; no expert-tensor collective; the tensor-parallel
    pair of the MLP sub-block stays for the shared expert (a tensor-parallel MLP in Megatron)
    and goes without one."""
    size = float(E2 * S * H)  # the block's gather and reduce-scatter: e·s·h
    attention = [(Collective.ALL_GATHER, size, GroupKind.TENSOR)]
    attention += [(Collective.REDUCE_SCATTER, size, GroupKind.TENSOR)]
    a2a = [(Collective.ALL_TO_ALL, 2048.0, GroupKind.EXPERT)] * 2
    shared = _block(2, 2, 1).work
    routed = _block(2, 2, 1, arch=ROUTED_ONLY).work
    assert shared is not None and routed is not None
    assert _calls(shared.forward) == attention * 2 + a2a
    assert _calls(routed.forward) == attention + a2a
    assert _calls(routed.input_grad) == attention + a2a
    # at ETP = T the MLP's pair stays (it stands for the experts' gather)
    plain = _block(2, 2, None, arch=ROUTED_ONLY).work
    assert plain is not None and _calls(plain.forward) == attention * 2 + a2a


def test_the_rank_s_own_tokens_are_permuted_stashed_and_sorted() -> None:
    """T = 2, EP = 2: at ETP = 1 the rank permutes its 8 tokens' 16 copies (2·e·h·(8 + 16)
    = 6144 bytes moved, against 2·e·h·(16 + 32) = 12288 for the gathered sequence at
    ETP = 2) and sorts its 16 received rows (2·2·e·16·h = 8192, against 16384); it stashes
    the 16 routed rows and 16 outputs combined back (2048 bytes each, against 4096): F
    moves 14336 bytes fewer, the stash is 4096 bytes smaller; the experts' activations and
    FLOPs are the same."""
    default, folded = _block(2, 2, None), _block(2, 2, 1)
    assert default.work is not None and folded.work is not None
    moved = default.work.forward.memory_bytes - folded.work.forward.memory_bytes
    assert moved == 6144 + 8192
    assert default.activation_bytes - folded.activation_bytes == 4096
    for a, b in zip(default.work.passes(), folded.work.passes(), strict=True):
        assert a.flops_per_sample == b.flops_per_sample


def test_uneven_routing_scales_the_folded_rows_and_all_to_alls() -> None:
    """EP = 4, ETP = 1, T = 2, L = 1.5 (one expert a rank): the expert rows (16 balanced) and
    the all-to-alls (2048 bytes) by 1.5."""
    moe = dataclasses.replace(SMALL.moe, max_expert_load=1.5)  # type: ignore[arg-type]
    uneven = _block(2, 4, 1, data=4, arch=dataclasses.replace(SMALL, moe=moe)).work
    assert uneven is not None
    assert [m.m for m in _experts(uneven.forward)] == [24.0, 24.0]
    assert [c.bytes_per_sample for c in uneven.forward.collectives][-2:] == [3072.0, 3072.0]


def test_etp_equal_to_t_is_the_block_as_before() -> None:
    assert _block(2, 2, 2) == _block(2, 2, None)
    assert transformer_layers(
        SMALL, Parallelism(tensor=2, sequence_parallel=True, data=2, expert=2, expert_tensor=2)
    ) == transformer_layers(SMALL, Parallelism(tensor=2, sequence_parallel=True, data=2, expert=2))


def _arch(name: str) -> TransformerArchitecture:
    arch = model(name).architecture
    assert arch is not None
    return dataclasses.replace(arch, seq=256, layers=4)


@settings(max_examples=16, deadline=None)
@given(
    st.sampled_from(list(MOE_MODELS)),
    st.sampled_from([1, 2, 4]),
    st.sampled_from([1, 2, 4, 8]),
    st.sampled_from([1, 2, 4, 8]),
    st.sampled_from(["none", "selective", "full"]),
)
def test_folding_moves_work_between_ranks_not_flops(
    name: str, tensor: int, ep: int, etp: int, recompute: str
) -> None:
    """Layer by layer, ETP = etp against ETP = T (the same T, EP, D): the same FLOPs in every
    pass, the matmuls' too; the same parameters but the routed experts', which are the
    block's E experts over EP x ETP exactly; dense blocks, the embedding and the head
    identical."""
    arch = _arch(name)
    assert arch.moe is not None
    data = ep * etp  # EP x ETP divides T x D
    base = Parallelism(
        tensor=tensor,
        sequence_parallel=tensor > 1,
        recompute=Recompute.parse(recompute),
        expert=ep,
        data=data,
    )
    defaults = transformer_layers(arch, base)
    folded = transformer_layers(arch, dataclasses.replace(base, expert_tensor=etp))
    routed = arch.moe.routed_parameters(arch.hidden)
    for one, other in zip(defaults, folded, strict=True):
        assert one.work is not None and other.work is not None
        if not one.expert_parameters:
            assert one == other
            continue
        for attribute in ("forward_flops", "input_grad_flops", "weight_grad_flops"):
            assert getattr(other, attribute) == getattr(one, attribute), attribute
        assert other.expert_parameters * ep * etp == routed
        assert other.parameters - other.expert_parameters == one.parameters - one.expert_parameters
        for mine, theirs in zip(one.work.passes(), other.work.passes(), strict=True):
            assert theirs.flops_per_sample == pytest.approx(mine.flops_per_sample, rel=1e-12)
            assert [m for m in theirs.matmuls if m not in _experts(theirs)] == [
                m for m in mine.matmuls if m not in _experts(mine)
            ]


def test_etp_on_a_dense_model_is_refused() -> None:
    arch = model("llama3-8b").architecture
    assert arch is not None
    with pytest.raises(SpecError, match=r"^expert_tensor_parallel 1: the model has no experts"):
        transformer_layers(arch, Parallelism(tensor=2, sequence_parallel=True, expert_tensor=1))


def test_etp_must_divide_an_expert_s_width() -> None:
    """f_e = 32: ETP 3 splits no expert evenly (Megatron's divide() asserts the same)."""
    with pytest.raises(
        SpecError, match=r"^expert_tensor_parallel 3 must divide the model's moe.expert_ffn \(32\)"
    ):
        transformer_layers(SMALL, Parallelism(data=3, expert_tensor=3))


def test_the_expert_width_is_checked_against_etp_not_t() -> None:
    """f_e = 20 with T = 8 would not split at ETP = T; folded at ETP = 4 it does."""
    arch = dataclasses.replace(
        SMALL, heads=8, kv_heads=8, moe=MixtureOfExperts(4, K, 20), vocab=1024
    )
    with pytest.raises(SpecError, match=r"tensor_parallel 8 must divide the model's moe.expert"):
        transformer_layers(arch, Parallelism(tensor=8, sequence_parallel=True))
    layers = transformer_layers(
        arch, Parallelism(tensor=8, sequence_parallel=True, expert=2, expert_tensor=4)
    )
    assert layers[1].expert_parameters == 2 * 3 * H * 20 / 4
