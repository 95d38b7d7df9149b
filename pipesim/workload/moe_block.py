"""The mixture-of-experts MLP and the multi-head latent attention of one block on one
tensor-parallel rank: their matmuls, memory-bound bytes, stash and transients per pass, which
:mod:`pipesim.workload.transformer` puts in place of a dense block's MLP and QKV projection.

The notation is the dense block's (s sequence, h hidden, t tensor-parallel size, e bytes of
an element, sizes per sample) with E experts, k of them per token, f_e an expert's inner width,
F_s the shared experts' together, m = 3 matrices per expert (gated) or 2.

Mixture of experts, as Megatron-Core runs it without expert parallelism: every expert's FFN
split t ways (expert tensor parallelism = t, its default), the tokens gathered over the
tensor-parallel group before the experts and reduce-scattered after them (the same volume as a
dense MLP's collectives, which the block keeps); the router (an E x h matrix, whole on every
rank) scores the rank's own tokens. Each sequence sends k·s tokens to the experts, spread
evenly: E grouped matmuls of k·s/E rows (dropless and balanced, whatever the capacity factor
and the load balancing say). What the MoE MLP stashes for its backward:

==========================  ===========================================================
router probabilities        4·s·E (fp32; /t with sequence parallelism)
routed tokens               e·k·s·h: the permuted copies of the tokens, the experts' input
expert activations          m·e·k·s·f_e/t (SwiGLU: gate, up and their product)
expert outputs              e·k·s·h: what the router's probability gradient reads
shared expert activations   m·e·s·F_s/t
==========================  ===========================================================

plus, as the dense MLP, its norm's input and the router's and shared experts' input (the
block's "norm inputs" and "qkv and fc1 inputs"). The weight gradient keeps the routed tokens,
the experts' second matmul's input (e·k·s·f_e/t) and the shared experts' (e·s·F_s/t).

Latent attention (Megatron-Core's MLASelfAttention): the down-projections of the query and of
the key/value latent are whole on every rank (``duplicated``) and run on the rank's tokens
(s/t with sequence parallelism), the up-projections split the heads t ways like a QKV
projection, the output projection is row-parallel as in the dense block. It stashes the
latents' norm inputs (e·s·(q_lora + kv_lora), /t with sequence parallelism) and the
up-projections' inputs (e·s·(q_lora + kv_lora)), beside the queries, keys and values
(e·s·heads·(2·d_qk + d_v)/t) the dense block counts. Its tensor-parallel collectives carry the
latents in place of the hidden state where the up-projections read them: with sequence
parallelism the attention's all-gather (and its backward's reduce-scatter) is of
e·s·(q_lora + kv_lora + d_rope) (DeepSeek-V2-Lite, without a query latent: h in place of
q_lora); without it the backward's all-reduce of the input gradient is of that size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from pipesim.workload.work import Matmul, Scaled

if TYPE_CHECKING:
    from pipesim.workload.moe import MixtureOfExperts, MultiLatentAttention
    from pipesim.workload.transformer import _Sizes

ROUTER_BYTES = 4.0  # the router's scores and probabilities are fp32 (Megatron's router dtype)


@dataclass(frozen=True)
class Part:
    """A sub-block's share of one pass: matmuls, memory-bound and row-reducing bytes, kernels
    besides the matmuls, and the transient it allocates (per sample, or ``fixed``)."""

    matmuls: tuple[Matmul, ...] = ()
    memory_bytes: float = 0.0
    reduction_bytes: float = 0.0
    kernels: int = 0
    transient_bytes: float = 0.0
    fixed_transient_bytes: float = 0.0


def _moe(z: _Sizes) -> MixtureOfExperts:
    moe = z.arch.moe
    if moe is None:  # the block builder asks only for an MoE block
        raise ValueError("a mixture-of-experts block of a dense architecture")
    return moe


def _mla(z: _Sizes) -> MultiLatentAttention:
    mla = z.arch.mla
    if mla is None:
        raise ValueError("latent attention of an architecture without it")
    return mla


# --- the mixture-of-experts MLP -------------------------------------------------------------


def routed_tokens(z: _Sizes) -> float:
    """Tokens the experts compute per sequence: k·s (every rank gathers the whole sequence)."""
    return float(_moe(z).top_k * z.arch.seq)


def expert_fc1_width(z: _Sizes) -> float:
    """An expert's first matmul's output on this rank: (m - 1)·f_e/t."""
    moe = _moe(z)
    return (moe.matrices - 1) * moe.expert_ffn / z.t


def shared_fc1_width(z: _Sizes) -> float:
    """The shared experts' first matmul's output on this rank: (m - 1)·F_s/t."""
    moe = _moe(z)
    return (moe.matrices - 1) * moe.shared_width / z.t


def moe_stash_terms(z: _Sizes) -> dict[str, float]:
    """What the MoE MLP stashes beyond its norm's and its router's input (bytes per
    sample)."""
    moe, e, s, h = _moe(z), z.e, z.arch.seq, z.arch.hidden
    routed = routed_tokens(z)
    terms = {
        "router probabilities": ROUTER_BYTES * z.tokens_local * moe.experts,
        "routed tokens": e * routed * h,
        "expert activations": moe.matrices * e * routed * moe.expert_ffn / z.t,
        "expert outputs": e * routed * h,
    }
    if moe.shared_width:
        terms["shared expert activations"] = moe.matrices * e * s * moe.shared_width / z.t
    return terms


def moe_weight_grad_inputs(z: _Sizes) -> float:
    """What the experts' weight gradients read besides the router's and shared experts'
    input: the routed tokens and the inputs of the experts' second matmuls."""
    moe, e, s, h = _moe(z), z.e, z.arch.seq, z.arch.hidden
    routed = routed_tokens(z)
    return e * routed * h + e * routed * moe.expert_ffn / z.t + e * s * moe.shared_width / z.t


def _shared_matmuls(z: _Sizes, kind: str) -> tuple[Matmul, ...]:
    """The shared experts' two matmuls in pass ``kind`` (F, I or W), as one MLP."""
    moe, s, h = _moe(z), z.arch.seq, z.arch.hidden
    if not moe.shared_width:
        return ()
    width, inner = shared_fc1_width(z), moe.shared_width / z.t
    if kind == "F":
        return (Matmul("shared fc1", s, width, h), Matmul("shared fc2", s, h, inner))
    if kind == "I":
        return (Matmul("shared fc2 dgrad", s, inner, h), Matmul("shared fc1 dgrad", s, h, width))
    return (
        Matmul("shared fc1 wgrad", h, width, s, 1.0, Scaled.K),
        Matmul("shared fc2 wgrad", inner, h, s, 1.0, Scaled.K),
    )


def moe_forward(z: _Sizes) -> Part:
    """The router, the tokens' permutation, the experts' grouped matmuls and activation, the
    shared experts, the weighted sum back into the tokens' order."""
    moe, e, s, h = _moe(z), z.e, z.arch.seq, z.arch.hidden
    routed, experts = routed_tokens(z), float(moe.experts)
    rows = routed / experts  # each expert's share
    matmuls = (
        Matmul("router", z.tokens_local, experts, h),
        Matmul("expert fc1", rows, expert_fc1_width(z), h, experts),
        Matmul("expert fc2", rows, h, moe.expert_ffn / z.t, experts),
        *_shared_matmuls(z, "F"),
    )
    activation = moe.matrices * e * (routed * moe.expert_ffn + s * moe.shared_width) / z.t
    permutation = 2 * e * h * (s + routed)  # permute: read s·h, write k·s·h; unpermute back
    return Part(
        matmuls,
        memory_bytes=activation + permutation,
        reduction_bytes=2 * ROUTER_BYTES * z.tokens_local * experts,  # softmax and top-k
        kernels=5 + (1 if moe.shared_width else 0),
        transient_bytes=e * (routed * expert_fc1_width(z) + s * shared_fc1_width(z)),
    )


def moe_input_grad(z: _Sizes) -> Part:
    """The backward of :func:`moe_forward` for the input gradient: the probabilities'
    gradient (the expert outputs read again), the experts' and shared experts' input
    gradients, the router's."""
    moe, e, s, h = _moe(z), z.e, z.arch.seq, z.arch.hidden
    routed, experts = routed_tokens(z), float(moe.experts)
    rows = routed / experts
    matmuls = (
        *_shared_matmuls(z, "I"),
        Matmul("expert fc2 dgrad", rows, moe.expert_ffn / z.t, h, experts),
        Matmul("expert fc1 dgrad", rows, h, expert_fc1_width(z), experts),
        Matmul("router dgrad", z.tokens_local, h, experts),
    )
    backward = 5 if moe.gated else 3
    activation = backward * e * (routed * moe.expert_ffn + s * moe.shared_width) / z.t
    permutation = 2 * e * h * (s + routed) + e * routed * h
    return Part(
        matmuls,
        memory_bytes=activation + permutation,
        reduction_bytes=3 * ROUTER_BYTES * z.tokens_local * experts,
        kernels=5 + (1 if moe.shared_width else 0),
        transient_bytes=e * (routed * expert_fc1_width(z) + s * shared_fc1_width(z)),
    )


def moe_weight_grad(z: _Sizes) -> Part:
    """The experts', shared experts' and router's weight gradients; the transient is one
    expert's first matrix (the largest weight gradient written at once)."""
    moe, h = _moe(z), z.arch.hidden
    routed, experts = routed_tokens(z), float(moe.experts)
    rows = routed / experts
    matmuls = (
        Matmul("expert fc1 wgrad", h, expert_fc1_width(z), rows, experts, Scaled.K),
        Matmul("expert fc2 wgrad", moe.expert_ffn / z.t, h, rows, experts, Scaled.K),
        Matmul("router wgrad", h, experts, z.tokens_local, 1.0, Scaled.K),
        *_shared_matmuls(z, "W"),
    )
    largest = max(expert_fc1_width(z), shared_fc1_width(z)) * h
    return Part(matmuls, fixed_transient_bytes=z.e * largest)


# --- multi-head latent attention ------------------------------------------------------------


def mla_gathered_width(z: _Sizes) -> float:
    """What the up-projections read per token: the query latent (the hidden state without
    one) and the key/value latent with the shared rotary key."""
    mla = _mla(z)
    query = mla.q_lora_rank if mla.q_lora_rank is not None else z.arch.hidden
    return float(query + mla.kv_down_width)


def mla_stash_terms(z: _Sizes) -> dict[str, float]:
    """The latents' norm inputs and the up-projections' inputs (bytes per sample)."""
    mla, e, s = _mla(z), z.e, z.arch.seq
    return {
        "latent norm inputs": e * z.tokens_local * mla.latent_width,
        "latent up-projection inputs": e * s * mla.latent_width,
    }


def mla_weight_grad_inputs(z: _Sizes) -> float:
    """The up-projections' inputs (the down-projections read the block's stashed input)."""
    return _mla(z).latent_width * z.e * z.arch.seq


def _query_up_width(z: _Sizes) -> float:
    return z.arch.query_width / z.t


def _kv_up_width(z: _Sizes) -> float:
    mla = _mla(z)
    return z.arch.heads * (mla.qk_nope_head_dim + mla.v_head_dim) / z.t


def mla_forward(z: _Sizes) -> Part:
    """The down-projections (on the rank's tokens), the latents' norms, the up-projections."""
    mla, e, s, h = _mla(z), z.e, z.arch.seq, z.arch.hidden
    local = z.tokens_local
    matmuls: list[Matmul] = []
    if mla.q_lora_rank is None:
        matmuls.append(Matmul("q", s, _query_up_width(z), h))
    else:
        matmuls.append(Matmul("q down", local, mla.q_lora_rank, h))
        matmuls.append(Matmul("q up", s, _query_up_width(z), mla.q_lora_rank))
    matmuls.append(Matmul("kv down", local, mla.kv_down_width, h))
    matmuls.append(Matmul("kv up", s, _kv_up_width(z), mla.kv_lora_rank))
    return Part(
        tuple(matmuls),
        reduction_bytes=2 * e * local * mla.latent_width,  # the latents' norms
        kernels=1 if mla.q_lora_rank is None else 2,
        transient_bytes=e * s * _kv_up_width(z),  # the keys' and values' up-projection
    )


def mla_input_grad(z: _Sizes) -> Part:
    """The up- and down-projections' input gradients and the latents' norm backwards."""
    mla, e, s, h = _mla(z), z.e, z.arch.seq, z.arch.hidden
    local = z.tokens_local
    matmuls = [
        Matmul("kv up dgrad", s, mla.kv_lora_rank, _kv_up_width(z)),
        Matmul("kv down dgrad", local, h, mla.kv_down_width),
    ]
    if mla.q_lora_rank is None:
        matmuls.append(Matmul("q dgrad", s, h, _query_up_width(z)))
    else:
        matmuls.append(Matmul("q up dgrad", s, mla.q_lora_rank, _query_up_width(z)))
        matmuls.append(Matmul("q down dgrad", local, h, mla.q_lora_rank))
    return Part(
        tuple(matmuls),
        reduction_bytes=3 * e * local * mla.latent_width,
        kernels=1 if mla.q_lora_rank is None else 2,
    )


def mla_weight_grad(z: _Sizes) -> Part:
    """The four projections' weight gradients (three without a query latent)."""
    mla, s, h = _mla(z), z.arch.seq, z.arch.hidden
    local = z.tokens_local
    matmuls = []
    if mla.q_lora_rank is None:
        matmuls.append(Matmul("q wgrad", h, _query_up_width(z), s, 1.0, Scaled.K))
    else:
        matmuls.append(Matmul("q down wgrad", h, mla.q_lora_rank, local, 1.0, Scaled.K))
        matmuls.append(Matmul("q up wgrad", mla.q_lora_rank, _query_up_width(z), s, 1.0, Scaled.K))
    matmuls.append(Matmul("kv down wgrad", h, mla.kv_down_width, local, 1.0, Scaled.K))
    matmuls.append(Matmul("kv up wgrad", mla.kv_lora_rank, _kv_up_width(z), s, 1.0, Scaled.K))
    largest = max(matmul.m * matmul.n for matmul in matmuls)
    return Part(tuple(matmuls), fixed_transient_bytes=z.e * largest)
