"""Context parallelism: one rank's share of a block when each sample's sequence is split CP
ways, and the keys and values its attention exchanges; by hand for a tiny block, and as
properties (CP ranks together do exactly the unsplit block's work and stash)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipesim.common.checks import SpecError
from pipesim.hardware.collectives import Collective
from pipesim.parallel.config import ContextComm, Parallelism, Recompute
from pipesim.workload.architecture import Attention, Mlp, Norm, Position, TransformerArchitecture
from pipesim.workload.transformer import transformer_layers
from pipesim.workload.work import GroupKind

# 2 blocks, hidden 64, 4 heads (2 key/value heads of width 16), ffn 128, 256 tokens
LLAMA = TransformerArchitecture(
    2,
    64,
    4,
    128,
    256,
    1024,
    kv_heads=2,
    mlp=Mlp.SWIGLU,
    attention=Attention.FLASH,
    norm=Norm.RMSNORM,
    position=Position.ROPE,
    tied_embeddings=False,
    linear_bias=False,
    dropout=False,
    embedding_dropout=False,
)


def _block(arch: TransformerArchitecture, **fields: object):  # type: ignore[no-untyped-def]
    return transformer_layers(arch, Parallelism(**fields))[1]  # type: ignore[arg-type]


def test_the_ring_passes_the_whole_sequences_keys_and_values() -> None:
    """CP = 2, p2p: the forward's ring carries e·s·(kv·d_k + kv·d_v) = 2 x 256 x (32 + 32)
    bytes per sample (each rank's half, passed once), beside the attention's products; the
    backward's twice that (the gradients travel back)."""
    block = _block(LLAMA, context=2)
    assert block.work is not None
    (forward,) = [c for c in block.work.forward.collectives if c.group is GroupKind.CONTEXT]
    assert (forward.kind, forward.bytes_per_sample) == (Collective.SEND_RECV, 2 * 256 * 64)
    assert "flash scores" in forward.hidden_by
    (backward,) = [c for c in block.work.input_grad.collectives if c.group is GroupKind.CONTEXT]
    assert backward.bytes_per_sample == 2 * 2 * 256 * 64


def test_llama_3s_all_gather_is_not_hidden() -> None:
    block = _block(LLAMA, context=4, cp_comm_type=ContextComm.ALL_GATHER)
    assert block.work is not None
    kinds = [
        (c.kind, c.hidden_by)
        for c in block.work.input_grad.collectives
        if c.group is GroupKind.CONTEXT
    ]
    assert kinds == [(Collective.ALL_GATHER, ()), (Collective.REDUCE_SCATTER, ())]


@given(
    context=st.sampled_from([2, 4]),
    tensor=st.sampled_from([1, 2]),
    sequence_parallel=st.booleans(),
    attention=st.sampled_from(list(Attention)),
    recompute=st.sampled_from(["none", "selective", "full"]),
)
def test_the_cp_ranks_together_do_the_unsplit_blocks_work_and_stash(
    context: int, tensor: int, sequence_parallel: bool, attention: Attention, recompute: str
) -> None:
    """Every per-token term is 1/CP on a rank, and the attention's s x s products and scores
    are (s/CP) x s: CP ranks' FLOPs and stashes add up to the unsplit block's exactly; the
    weights are whole on every rank."""
    arch = dataclasses.replace(LLAMA, attention=attention)
    fields = {
        "tensor": tensor,
        "sequence_parallel": sequence_parallel and tensor > 1,
        "recompute": Recompute.parse(recompute),
    }
    whole = _block(arch, **fields)
    part = _block(arch, context=context, **fields)
    assert part.parameters == whole.parameters
    for name in ("forward_flops", "input_grad_flops", "weight_grad_flops", "activation_bytes"):
        assert getattr(part, name) * context == pytest.approx(getattr(whole, name), rel=1e-12)


def test_a_sequence_that_does_not_split_is_refused() -> None:
    """Megatron-Core cuts the sequence into 2 x CP chunks (load-balanced causal attention)."""
    with pytest.raises(SpecError, match=r"context_parallel 3: the sequence \(256 tokens\)"):
        transformer_layers(LLAMA, Parallelism(context=3))
