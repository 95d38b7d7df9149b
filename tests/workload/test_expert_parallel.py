"""Expert parallelism (Megatron-Core's ``--expert-model-parallel-size`` with the ``alltoall``
token dispatcher) on one rank's layers: the E/EP experts it holds, the shapes of their grouped
matmuls, the dispatch and combine all-to-alls, by hand on a tiny architecture; and the
properties: EP changes neither the FLOPs per rank nor anything but the routed experts, divides
their parameters by EP exactly, and EP = 1 is the block as before; refusals naming the field.

The tiny architecture (as ``SMALL`` in test_moe.py): s 16, h 64, 4 heads of 16, 2 key/value
heads, E = 4 experts of f_e 32 (SwiGLU: 3 matrices), top-2, one shared expert of 16, e = 2.
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
from pipesim.workload.architecture import Attention, TransformerArchitecture
from pipesim.workload.catalogue import MOE_MODELS, moe_architecture
from pipesim.workload.model import Layer
from pipesim.workload.moe import MixtureOfExperts
from pipesim.workload.sharding import sharded_layers
from pipesim.workload.transformer import transformer_block, transformer_layers
from pipesim.workload.work import CollectiveCall, GroupKind, Matmul, PassWork, Scaled

S, H, E, K, F_E = 16, 64, 4, 2, 32
SMALL = moe_architecture(
    2,
    H,
    4,
    128,
    1000,
    MixtureOfExperts(E, K, F_E, shared_experts=1, shared_expert_ffn=16),
    kv_heads=2,
    seq=S,
    attention=Attention.EAGER,
)
EXPERT = 3 * H * F_E  # one routed expert's weights


def _block(ep: int, tensor: int = 1, sp: bool = False, recompute: str = "none") -> Layer:
    par = Parallelism(
        tensor=tensor,
        sequence_parallel=sp,
        recompute=Recompute.parse(recompute),
        expert=ep,
        data=max(ep, 1),
    )
    return transformer_block("b", SMALL, par, moe=True)


def _expert_matmuls(work: PassWork) -> list[Matmul]:
    return [m for m in work.matmuls if m.name.startswith("expert ")]


def _rows(matmul: Matmul) -> float:
    """An expert matmul's routed rows: M, or K for a weight gradient (summed over them)."""
    return matmul.k if matmul.scaled is Scaled.K else matmul.m


def _all_to_alls(work: PassWork) -> list[CollectiveCall]:
    return [c for c in work.collectives if c.group is GroupKind.EXPERT]


def test_a_rank_holds_e_over_ep_experts_and_everything_else_whole() -> None:
    """EP = 2: the rank's 2 of the 4 experts; the attention, the shared expert, the router
    (E x h: it scores all 4) and the norms as at EP = 1. active: k/E of the rank's experts."""
    one, two = _block(1), _block(2)
    attention = H * (H + 2 * 2 * 16) + H * H
    rest = attention + 3 * H * 16 + 4 * H + 2 * H  # shared expert, router, two norms
    assert one.parameters == rest + 4 * EXPERT
    assert two.parameters == rest + 2 * EXPERT
    assert two.expert_parameters == 2 * EXPERT == one.expert_parameters / 2
    assert two.active_expert_parameters == two.expert_parameters * K / E == EXPERT
    assert one.active_expert_parameters == 2 * EXPERT
    # T = 2 splits each of the rank's experts in two as well
    assert _block(2, tensor=2, sp=True).expert_parameters == EXPERT


def test_the_all_to_alls_carry_the_routed_tokens() -> None:
    """Dispatch and combine in F, their backwards in I, nothing in W: each rank's buffer is
    e·k·s·h = 2·2·16·64 = 4096 bytes per sample at T = 1; at T = 2 each tensor rank sends its
    half (2048), beside the block's four tensor-parallel collectives."""
    forward, input_grad, weight_grad = _block(2).work.passes()  # type: ignore[union-attr]
    call = CollectiveCall(Collective.ALL_TO_ALL, 2 * K * S * H, group=GroupKind.EXPERT)
    assert forward.collectives == (call, call)
    assert input_grad.collectives == (call, call)
    assert weight_grad.collectives == ()
    forward, input_grad, _ = _block(2, tensor=2, sp=True).work.passes()  # type: ignore[union-attr]
    half = CollectiveCall(Collective.ALL_TO_ALL, 2 * K * S * H / 2, group=GroupKind.EXPERT)
    assert _all_to_alls(forward) == _all_to_alls(input_grad) == [half, half]
    assert len(forward.collectives) == 4 + 2
    # full recomputation re-runs the forward's two inside I: four there
    full = _block(2, recompute="full").work
    assert full is not None and len(_all_to_alls(full.input_grad)) == 4


def test_the_expert_matmuls_group_the_local_experts() -> None:
    """k·s = 32 routed rows per sample: 4 experts of 8 rows at EP = 1, 2 of 16 at EP = 2, 1
    of 32 at EP = 4 (the p ranks' k·s·p tokens over E experts, E/p of them here)."""
    fc1, fc2 = 2 * F_E, F_E  # SwiGLU's gate and up; the down projection's input
    for ep, rows, local in ((1, 8, 4), (2, 16, 2), (4, 32, 1)):
        layer = _block(ep)
        assert layer.work is not None
        forward, input_grad, weight_grad = layer.work.passes()
        assert _expert_matmuls(forward) == [
            Matmul("expert fc1", rows, fc1, H, local),
            Matmul("expert fc2", rows, H, fc2, local),
        ]
        assert _expert_matmuls(input_grad) == [
            Matmul("expert fc2 dgrad", rows, fc2, H, local),
            Matmul("expert fc1 dgrad", rows, H, fc1, local),
        ]
        assert _expert_matmuls(weight_grad) == [
            Matmul("expert fc1 wgrad", H, fc1, rows, local, Scaled.K),
            Matmul("expert fc2 wgrad", fc2, H, rows, local, Scaled.K),
        ]
        assert [m for m in forward.matmuls if m.name == "router"] == [Matmul("router", S, E, H)]


def test_more_than_one_local_expert_sorts_the_received_tokens() -> None:
    """EP = 2 (2 local experts): the received k·s tokens sorted by expert after the dispatch
    and back before the combine, in F and in I: 2 x (read + write) of e·k·s·h = 16384 bytes,
    2 kernels each; EP = 4 (one local expert) sorts nothing."""
    one, two, four = (_block(ep).work for ep in (1, 2, 4))
    assert one is not None and two is not None and four is not None
    sort = 2 * 2 * 2 * K * S * H
    for kind in ("forward", "input_grad"):
        base, sorted_, single = (getattr(w, kind) for w in (one, two, four))
        assert sorted_.memory_bytes == base.memory_bytes + sort
        assert sorted_.kernels == base.kernels + 2
        assert single.memory_bytes == base.memory_bytes and single.kernels == base.kernels
    assert two.weight_grad == dataclasses.replace(one.weight_grad, matmuls=two.weight_grad.matmuls)


def test_the_receive_buffer_is_a_transient_of_f_and_i() -> None:
    """Experts narrower than the hidden state (f_e = 8: fc1's output 2·8 wide): the
    all-to-all's receive buffer (e·k·s·h = 4096 bytes per sample) is the largest thing F and
    I allocate at EP = 2; at EP = 1 the eager scores (e·a·s² = 2048) are F's."""
    narrow = dataclasses.replace(SMALL, moe=MixtureOfExperts(E, K, 8))
    one = transformer_block("b", narrow, moe=True)
    two = transformer_block("b", narrow, Parallelism(expert=2, data=2), moe=True)
    assert one.work is not None and two.work is not None
    assert one.work.forward.transient_bytes == 2 * 4 * S * S
    assert two.work.forward.transient_bytes == 2 * K * S * H
    assert one.work.input_grad.transient_bytes < 2 * K * S * H
    assert two.work.input_grad.transient_bytes == 2 * K * S * H


def test_ep_1_is_the_block_as_before() -> None:
    """No expert collective, every expert a group of k·s/E rows, and the layers a data-
    parallel size does not change (EP = 1 builds them without it)."""
    layer = _block(1)
    assert layer.work is not None
    assert all(not _all_to_alls(work) for work in layer.work.passes())
    assert _expert_matmuls(layer.work.forward)[0] == Matmul("expert fc1", 8, 2 * F_E, H, 4)
    plain = transformer_layers(SMALL, Parallelism(tensor=2, sequence_parallel=True))
    wide = transformer_layers(SMALL, Parallelism(tensor=2, sequence_parallel=True, data=8))
    assert plain == wide
    assert [x.work for x in plain] == [x.work for x in wide]


def _arch(name: str) -> TransformerArchitecture:
    arch = model(name).architecture
    assert arch is not None
    return dataclasses.replace(arch, seq=256, layers=4)


@settings(max_examples=12, deadline=None)
@given(
    st.sampled_from(list(MOE_MODELS)),
    st.sampled_from([2, 4, 8]),
    st.sampled_from([(1, False), (2, False), (2, True)]),
    st.sampled_from(["none", "selective", "full"]),
)
def test_ep_moves_the_experts_and_nothing_else(
    name: str, ep: int, tensor_sp: tuple[int, bool], recompute: str
) -> None:
    """Layer by layer, EP = ep against EP = 1: the same FLOPs in every pass (the matmuls'
    too), stash, output and non-expert parameters; the routed experts' parameters exactly
    1/ep; the expert matmuls the same k·s rows in E/ep groups; every other matmul and
    collective the same, the two all-to-alls added to F and I; dense blocks, the embedding
    and the head identical."""
    arch = _arch(name)
    t, sp = tensor_sp
    base = Parallelism(tensor=t, sequence_parallel=sp, recompute=Recompute.parse(recompute))
    ones = transformer_layers(arch, base)
    eps = transformer_layers(arch, dataclasses.replace(base, expert=ep, data=ep))
    assert len(ones) == len(eps)
    for one, other in zip(ones, eps, strict=True):
        assert one.work is not None and other.work is not None
        if not one.expert_parameters:
            assert one == other and one.work == other.work
            continue
        for attribute in (
            "forward_flops",
            "input_grad_flops",
            "weight_grad_flops",
            "recompute_flops",
            "activation_bytes",
            "weight_grad_activation_bytes",
            "output_bytes",
        ):
            assert getattr(other, attribute) == getattr(one, attribute), attribute
        assert other.expert_parameters == one.expert_parameters / ep
        assert other.active_expert_parameters == one.active_expert_parameters / ep
        dense = one.parameters - one.expert_parameters
        assert other.parameters - other.expert_parameters == pytest.approx(dense, rel=1e-12)
        for mine, theirs in zip(one.work.passes(), other.work.passes(), strict=True):
            assert theirs.flops_per_sample == pytest.approx(mine.flops_per_sample, rel=1e-12)
            rest = [m for m in mine.matmuls if m not in _expert_matmuls(mine)]
            assert [m for m in theirs.matmuls if m not in _expert_matmuls(theirs)] == rest
            for a, b in zip(_expert_matmuls(mine), _expert_matmuls(theirs), strict=True):
                assert b.batch == a.batch / ep and _rows(b) == _rows(a) * ep
                assert (b.name, b.n, b.m + b.k - _rows(b)) == (a.name, a.n, a.m + a.k - _rows(a))
            assert [c for c in theirs.collectives if c.group is not GroupKind.EXPERT] == list(
                mine.collectives
            )
        forward, input_grad, weight_grad = other.work.passes()
        assert arch.moe is not None
        a2a = arch.element_bytes * arch.moe.top_k * arch.seq * arch.hidden / t  # e·k·s·h/t
        assert [c.bytes_per_sample for c in _all_to_alls(forward)] == [a2a, a2a]
        assert len(_all_to_alls(input_grad)) == (4 if recompute == "full" else 2)
        assert not _all_to_alls(weight_grad)


@pytest.mark.parametrize("ep", [2, 4])
def test_a_catalogue_model_holds_1_over_ep_of_its_experts(ep: int) -> None:
    """DeepSeek-V2-Lite (64 experts, 26 MoE blocks): one rank's layers at EP = ep hold the
    model's routed experts divided by ep and every other parameter."""
    built = model("deepseek-v2-lite")
    layers = sharded_layers(built, Parallelism(expert=ep, data=ep)).layers
    experts = sum(layer.expert_parameters for layer in layers)
    assert experts == built.expert_parameters / ep
    total = sum(layer.parameters for layer in layers)
    assert total == pytest.approx(built.parameters - built.expert_parameters * (1 - 1 / ep))


def test_expert_parallelism_of_a_dense_model_is_refused() -> None:
    with pytest.raises(
        SpecError, match=r"^expert_parallel 2: the model has no experts to divide \(a dense"
    ):
        transformer_layers(_llama(), Parallelism(expert=2, data=2))


@pytest.mark.parametrize("ep", [3, 8])
def test_ep_must_divide_the_experts(ep: int) -> None:
    with pytest.raises(
        SpecError, match=rf"^expert_parallel {ep} must divide the model's moe.experts \(4\)"
    ):
        transformer_layers(SMALL, Parallelism(expert=ep, data=ep))


def _llama() -> TransformerArchitecture:
    arch = model("llama3-8b").architecture
    assert arch is not None
    return arch


# --- uneven routing: the busiest rank ---------------------------------------------------------


def _uneven(ep: int, **routing: object) -> Layer:
    moe = dataclasses.replace(SMALL.moe, **routing)  # type: ignore[arg-type]
    arch = dataclasses.replace(SMALL, moe=moe)
    return transformer_block("b", arch, Parallelism(expert=ep, data=ep), moe=True)


@pytest.mark.parametrize(
    ("routing", "ep", "load"),
    [
        ({}, 2, 1.0),  # balanced
        ({"max_expert_load": 1.6}, 1, 1.0),  # one rank computes every routed token
        ({"max_expert_load": 1.6}, 4, 1.6),  # one expert per rank: the busiest expert's load
        # 2 experts per rank: 1.6 beside one of the other three sharing 4 - 1.6 = 2.4 evenly
        ({"max_expert_load": 1.6}, 2, (1.6 + 0.8) / 2),
        ({"max_expert_load": 1.6, "capacity_factor": 1.25}, 4, 1.25),  # dropped at capacity
        ({"max_expert_load": 1.1, "capacity_factor": 1.25}, 4, 1.1),
        # one rank: the busiest expert's 0.35 beyond its capacity dropped, not rerouted
        ({"max_expert_load": 1.6, "capacity_factor": 1.25}, 1, (1.25 + 3 * 0.8) / 4),
        # a capacity below the even share drops from every expert, padded or not
        ({"capacity_factor": 0.5}, 2, 0.5),
        ({"max_expert_load": 1.6, "capacity_factor": 0.5}, 4, 0.5),
        # padded: every expert computes its capacity, with or without expert parallelism
        ({"capacity_factor": 1.5, "pad_to_capacity": True}, 1, 1.5),
        ({"capacity_factor": 1.5, "pad_to_capacity": True, "max_expert_load": 2.0}, 4, 1.5),
    ],
)
def test_the_busiest_rank_computes_its_experts_load(
    routing: dict[str, object], ep: int, load: float
) -> None:
    """E = 4, k = 2 (max_expert_load at most E/k = 2): the busiest rank's rows over its even
    share, by hand."""
    moe = dataclasses.replace(SMALL.moe, **routing)  # type: ignore[arg-type]
    assert moe.busiest_rank_load(ep) == pytest.approx(load)


def test_uneven_routing_scales_the_busiest_ranks_experts_and_all_to_alls_only() -> None:
    """EP = 4, L = 1.5: the rank's expert rows (32 balanced), its all-to-alls and their
    receive buffer, its routed-token and expert-activation stash by 1.5; the attention, the
    router, the shared expert and the expert outputs combined back as balanced."""
    balanced, uneven = _block(4), _uneven(4, max_expert_load=1.5)
    assert balanced.work is not None and uneven.work is not None
    for even, loaded in zip(balanced.work.passes(), uneven.work.passes(), strict=True):
        for a, b in zip(even.matmuls, loaded.matmuls, strict=True):
            scale = 1.5 if a.name.startswith("expert ") else 1.0
            assert _rows(b) == pytest.approx(scale * _rows(a)), a.name
        for a, b in zip(_all_to_alls(even), _all_to_alls(loaded), strict=True):
            assert b.bytes_per_sample == pytest.approx(1.5 * a.bytes_per_sample)
    # the stash grows by half the routed tokens (e·k·s·h = 4096 B) and half the experts'
    # SwiGLU activations (3·e·k·s·f_e = 6144 B), nothing else
    assert uneven.activation_bytes - balanced.activation_bytes == pytest.approx(0.5 * 10240)
    # and the weight gradient keeps half the routed tokens and fc2's inputs (e·k·s·f_e) more
    extra = 0.5 * (4096 + 2 * K * S * F_E)
    grads = uneven.weight_grad_activation_bytes - balanced.weight_grad_activation_bytes
    assert grads == pytest.approx(extra)


@pytest.mark.parametrize(
    ("routing", "message"),
    [
        ({"max_expert_load": 0.9}, "transformer.moe.max_expert_load must be between 1"),
        ({"max_expert_load": 2.5}, "experts / top_k = 2"),
        ({"max_expert_load": float("nan")}, "transformer.moe.max_expert_load must be a number"),
        ({"pad_to_capacity": True}, "transformer.moe.pad_to_capacity needs"),
        ({"pad_to_capacity": 1}, "transformer.moe.pad_to_capacity must be true or false"),
    ],
)
def test_routing_refusals_name_the_field(routing: dict[str, object], message: str) -> None:
    with pytest.raises(SpecError, match=message.replace("(", r"\(")):
        dataclasses.replace(SMALL.moe, **routing)  # type: ignore[arg-type]


def test_padding_to_capacity_scales_the_permuted_rows_and_the_combined_outputs() -> None:
    """EP = 4, c = 1.5 padded: the permutation writes and the combine reads E·c·k·s/E rows,
    so the expert outputs' stash grows by half too, beside the received tokens and the
    experts' activations (e·k·s·h = 4096, 3·e·k·s·f_e = 6144, e·k·s·h = 4096 bytes)."""
    balanced = _block(4)
    padded = _uneven(4, capacity_factor=1.5, pad_to_capacity=True)
    grown = padded.activation_bytes - balanced.activation_bytes
    assert grown == pytest.approx(0.5 * (4096 + 6144 + 4096))
    assert padded.work is not None and balanced.work is not None
    assert padded.work.forward.memory_bytes > balanced.work.forward.memory_bytes


@given(
    st.floats(1.0, 2.0),
    st.one_of(st.none(), st.floats(0.25, 3.0)),
    st.sampled_from([1, 2, 4]),
)
def test_the_busiest_rank_never_computes_less_than_a_padded_one_or_more_than_its_capacity(
    load: float, capacity: float | None, ep: int
) -> None:
    moe = dataclasses.replace(SMALL.moe, max_expert_load=load, capacity_factor=capacity)  # type: ignore[arg-type]
    share = moe.busiest_rank_load(ep)
    if capacity is not None:
        padded = dataclasses.replace(moe, pad_to_capacity=True).busiest_rank_load(ep)
        assert share <= padded + 1e-12 and padded == capacity
    else:
        assert share >= 1.0 - 1e-12  # nothing dropped: the busiest rank holds its share
    assert share <= load + 1e-12
