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

Expert parallelism (EP = p, Megatron-Core's ``--expert-model-parallel-size`` with its
``alltoall`` token dispatcher): each rank of the p-rank expert group holds E/p of the experts
(their FFNs still split t ways); the router, the shared experts and everything else stay whole.
Each rank permutes the routed copies of its own tokens and an all-to-all over the expert group
sends each expert's to the rank holding it (dispatch); after the experts an all-to-all sends
them back (combine). Each rank's buffer is e·k·s·h/t bytes per sample: the rank's 1/t of the
k·s routed tokens (its s/t sequence-parallel tokens; without sequence parallelism the tensor
ranks hold the same tokens and each sends 1/t of them); the input-gradient pass runs the two in
reverse, the same sizes; neither overlaps the compute (Megatron-Core's default). With balanced
routing each rank's experts receive the k·s·p/E tokens each that the p ranks send them: E/p
grouped matmuls of k·s·p/E rows, the same k·s rows and FLOPs per rank as without EP, so the
stash above is unchanged. What EP adds besides: the all-to-all's receive buffer (e·k·s·h/t, a
transient of F and I) and the sort of the received tokens by local expert and its inverse
(Megatron-Core's ``sort_chunks_by_idxs``, with more than one local expert: k·s·h read and
written each, in F and in I). The routing probabilities' all-to-all beside the tokens (4 bytes
per routed token, 2/h of the tokens' bytes) is left out. Routing is balanced and dropless
unless the model says otherwise (below); which tokens a capacity drops is not modelled.

Expert tensor parallelism of its own (ETP = u != t, Megatron-Core's
``--expert-tensor-parallel-size``, "parallel folding", arXiv 2504.14960; with t > 1 it needs
sequence parallelism, as Megatron-Core's MoELayer does in training): the MoE layer's ranks are
folded as u x p x EDP over the stage's t x CP x D (:mod:`pipesim.parallel.ranks`), each expert
split u ways, and the block is costed as Megatron-Core's ``MoEAlltoAllTokenDispatcher`` runs
it (its steps: permute, A2A(EP), AG(ETP), sort; sort, RS(ETP), A2A(EP), unpermute). Each rank
routes its own s/t sequence-parallel tokens (s at t = 1): it permutes k·s/t copies
(2·e·h·(s/t + k·s/t) moved each way) and stashes their combined outputs (e·k·s·h/t); the
dispatch and combine all-to-alls carry e·k·s·h/t per rank (with p > 1); with u > 1 the
expert-tensor group all-gathers the dispatched tokens before the experts and reduce-scatters
their outputs after them, e·u·k·s·h/t each (``GroupKind.EXPERT_TENSOR``), and the experts
compute u·k·s/t rows at width f_e/u: 2·m·h·f_e·k·s/t FLOPs per rank, as at u = t. The block's
tensor-parallel gather and reduce-scatter of the MLP sub-block go with the shared experts
(Megatron's SharedExpertMLP is a tensor-parallel MLP over the attention's group): without
shared experts the MoE block keeps only the attention's pair. At u = t the block is costed as
above, unchanged: there the block's gather of the sequence's tokens (e·s·h) stands for the
dispatcher's gather of the routed copies (e·k·s·h), which is what the ``allgather`` dispatcher
moves without EP but k times less than the ``alltoall`` dispatcher does with EP.

Uneven routing (the model's ``max_expert_load`` L, its capacity c, its padding): the busiest
expert-parallel rank computes r = :meth:`~pipesim.workload.moe.MixtureOfExperts.busiest_rank_load`
times the balanced rows, and every rank waits for it at the combine; pipesim costs that rank:
its experts' matmuls, activations and stash ("routed tokens", "expert activations") and its
all-to-all receive buffer scale by r, and the all-to-alls carry r times the bytes (the busiest
rank receives them). Its own tokens (the permutation, the expert outputs combined back, the
router) do not, but for padding: then the permutation writes and the combine reads c·k·s rows
(every expert's capacity). Without expert parallelism and a capacity r = 1 (one rank computes
every routed token, however uneven); a capacity that drops tokens makes it less.

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

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from pipesim.common.checks import SpecError
from pipesim.errors import named
from pipesim.hardware.collectives import Collective
from pipesim.workload.work import CollectiveCall, GroupKind, Matmul, PassWork, Scaled

if TYPE_CHECKING:
    from pipesim.parallel.config import Parallelism
    from pipesim.workload.architecture import TransformerArchitecture
    from pipesim.workload.moe import MixtureOfExperts, MultiLatentAttention


class _Sizes(Protocol):
    """What this module reads of a block's per-sample sizes on one rank
    (:mod:`pipesim.workload.transformer`'s ``_Sizes``, which imports this module)."""

    @property
    def arch(self) -> TransformerArchitecture: ...

    @property
    def par(self) -> Parallelism: ...

    @property
    def moe(self) -> bool: ...

    @property
    def e(self) -> float: ...

    @property
    def t(self) -> int: ...

    @property
    def tokens_local(self) -> float: ...


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


def expert_tensor(z: _Sizes) -> int:
    """u = ETP: the ranks each routed expert is split over (t unless folded)."""
    return z.par.expert_tensor_size


def own_tokens(z: _Sizes) -> float:
    """The tokens of a sequence a rank routes: s at ETP = t (the tensor-parallel group's
    tokens gathered before the experts, the block's gather), folded its own s/t
    sequence-parallel tokens (s at t = 1), as Megatron-Core's alltoall dispatcher permutes
    them."""
    return z.tokens_local if z.par.folded else float(z.arch.seq)


def routed_tokens(z: _Sizes) -> float:
    """The routed copies of the rank's tokens: k·s at ETP = t, k·s/t folded; what a rank
    permutes and gets back."""
    return _moe(z).top_k * own_tokens(z)


def permuted_tokens(z: _Sizes) -> float:
    """The rows the rank's permutation writes and its combine reads back: its routed copies,
    or padded to the capacity E·c·k·s/E = c·k·s of them (Megatron-Core's drop-and-pad
    ``permute``: ``num_out_tokens = capacity x num_experts``)."""
    moe = _moe(z)
    if moe.pad_to_capacity and moe.capacity_factor is not None:
        return routed_tokens(z) * moe.capacity_factor
    return routed_tokens(z)


def expert_tokens(z: _Sizes) -> float:
    """The rows this rank's experts compute per sequence, on the busiest rank: u·k·s/t
    balanced (k·s at u = t: with expert parallelism its E/p experts get k·s/t of each of the
    p ranks' k·s/t·p, then the expert-tensor group's u ranks' gathered), times
    :meth:`~pipesim.workload.moe.MixtureOfExperts.busiest_rank_load` where the routing is
    uneven or padded to a capacity."""
    moe = _moe(z)
    balanced = expert_tensor(z) * moe.top_k * z.arch.seq / z.t
    return balanced * moe.busiest_rank_load(z.par.expert)


# --- expert parallelism ---------------------------------------------------------------------


def check_expert_parallel(
    arch: TransformerArchitecture, expert: int, expert_tensor: int | None = None
) -> None:
    """Refuse an expert-parallel size for a model without experts, or one that does not
    divide the routed experts (Megatron-Core requires num_experts % EP == 0); and an expert
    tensor-parallel size of its own (``expert_tensor``, None: T) for a model without experts,
    or one that does not divide an expert's width (Megatron's ``divide``: the expert linears'
    output size must be divisible by the expert-tensor group's size)."""
    if expert_tensor is not None:
        _check_expert_tensor(arch, expert_tensor)
    if expert == 1:
        return
    if arch.moe is None:
        raise SpecError(
            f"{named('expert_parallel')} {expert}: the model has no experts to divide (a dense "
            "model); expert parallelism needs a mixture-of-experts model"
        )
    if arch.moe.experts % expert:
        raise SpecError(
            f"{named('expert_parallel')} {expert} must divide the model's moe.experts "
            f"({arch.moe.experts:,}): each expert-parallel rank holds an equal share of them"
        )


def _check_expert_tensor(arch: TransformerArchitecture, expert_tensor: int) -> None:
    """:func:`check_expert_parallel`'s part for ETP."""
    if arch.moe is None:
        raise SpecError(
            f"{named('expert_tensor_parallel')} {expert_tensor}: the model has no experts to "
            "split (a dense model); expert tensor parallelism needs a mixture-of-experts model"
        )
    if arch.moe.expert_ffn % expert_tensor:
        raise SpecError(
            f"{named('expert_tensor_parallel')} {expert_tensor} must divide the model's "
            f"moe.expert_ffn ({arch.moe.expert_ffn:,}): each expert-tensor rank holds an equal "
            "share of every expert"
        )


def local_experts(z: _Sizes) -> float:
    """The routed experts this rank holds: E/p (all E without expert parallelism)."""
    return float(_moe(z).experts) / z.par.expert


def expert_rows(z: _Sizes) -> float:
    """Each local expert's rows per sequence, balanced: k·s·p/E (k·s/E without EP); the
    busiest rank's mean where the routing is uneven."""
    return expert_tokens(z) / local_experts(z)


def dispatch_bytes(z: _Sizes) -> float:
    """One rank's all-to-all buffer per sample, dispatch or combine, on the busiest rank:
    e·k·s·h/t balanced (what it receives sets its time and its receive buffer; folded, its
    1/u of the rows the expert-tensor group then gathers)."""
    return z.e * expert_tokens(z) * z.arch.hidden / expert_tensor(z)


def gathered_bytes(z: _Sizes) -> float:
    """Folded with u > 1: the dispatched tokens the expert-tensor group all-gathers before
    the experts and reduce-scatters after them, e·u·k·s·h/t per sample (the experts' input,
    the busiest rank's)."""
    return z.e * expert_tokens(z) * z.arch.hidden


def _exchanges_tokens(z: _Sizes) -> bool:
    """The MoE block's experts get tokens from other ranks through the dispatcher: expert
    parallelism, or folded with u > 1 (at ETP = t without EP the block's tensor-parallel
    gather hands them the sequence)."""
    if not z.moe:
        return False
    return z.par.expert > 1 or (z.par.folded and expert_tensor(z) > 1)


def _sorts_local_experts(z: _Sizes) -> bool:
    """Tokens from other ranks and more than one local expert: the received tokens are
    sorted by expert after the dispatch and back before the combine."""
    return _exchanges_tokens(z) and local_experts(z) > 1


def expert_all_to_alls(z: _Sizes) -> tuple[CollectiveCall, ...]:
    """The dispatcher's collectives of an MoE block's F (or their backwards in I, the same
    sizes): the dispatch all-to-all over the expert-parallel group, folded with u > 1 the
    all-gather of the dispatched tokens over the expert-tensor group and their
    reduce-scatter after the experts, the combine all-to-all (Megatron-Core's
    MoEAlltoAllTokenDispatcher: A2A(EP), AG(ETP); RS(ETP), A2A(EP)); none without EP and
    with the experts split t ways."""
    if not z.moe:
        return ()
    exchange: tuple[CollectiveCall, ...] = ()
    if z.par.expert > 1:
        exchange = (
            CollectiveCall(Collective.ALL_TO_ALL, dispatch_bytes(z), group=GroupKind.EXPERT),
        )
    if not (z.par.folded and expert_tensor(z) > 1):
        return exchange + exchange
    gathered = gathered_bytes(z)
    gather = CollectiveCall(Collective.ALL_GATHER, gathered, group=GroupKind.EXPERT_TENSOR)
    scatter = CollectiveCall(Collective.REDUCE_SCATTER, gathered, group=GroupKind.EXPERT_TENSOR)
    return (*exchange, gather, scatter, *exchange)


def with_all_to_alls(work: PassWork, z: _Sizes) -> PassWork:
    """``work`` (an MoE block's F or I) waiting for its dispatcher's collectives (the same
    ``work`` without expert parallelism and with the experts split t ways)."""
    calls = expert_all_to_alls(z)
    if not calls:
        return work
    return dataclasses.replace(work, collectives=work.collectives + calls)


def _expert_parallel_extras(z: _Sizes) -> tuple[float, int, float]:
    """(memory bytes, kernels, transient) the dispatcher adds to F and to I: the sort by
    local expert and back (the expert rows read and written each), the all-to-all's receive
    buffer (with EP; folded, the gathered tokens are the experts' stashed input)."""
    if not _exchanges_tokens(z):
        return 0.0, 0, 0.0
    sort = 2 * 2 * z.e * expert_tokens(z) * z.arch.hidden if _sorts_local_experts(z) else 0.0
    received = dispatch_bytes(z) if z.par.expert > 1 else 0.0
    return sort, 2 if sort else 0, received


def expert_width(z: _Sizes) -> float:
    """An expert's inner width on this rank: f_e/u."""
    return _moe(z).expert_ffn / expert_tensor(z)


def _ffn_over_t(z: _Sizes) -> float:
    """f_e·t/u: an expert's width in the block's per-t byte formulas (x/t of it is the
    rank's f_e/u share; exactly f_e at u = t, so those formulas keep their numbers)."""
    return _moe(z).expert_ffn * z.t / expert_tensor(z)


def expert_fc1_width(z: _Sizes) -> float:
    """An expert's first matmul's output on this rank: (m - 1)·f_e/u."""
    return (_moe(z).matrices - 1) * expert_width(z)


def shared_fc1_width(z: _Sizes) -> float:
    """The shared experts' first matmul's output on this rank: (m - 1)·F_s/t."""
    moe = _moe(z)
    return (moe.matrices - 1) * moe.shared_width / z.t


def moe_stash_terms(z: _Sizes) -> dict[str, float]:
    """What the MoE MLP stashes beyond its norm's and its router's input (bytes per
    sample)."""
    moe, e, s, h = _moe(z), z.e, z.arch.seq, z.arch.hidden
    rows = expert_tokens(z)
    terms = {
        "router probabilities": ROUTER_BYTES * z.tokens_local * moe.experts,
        "routed tokens": e * rows * h,
        "expert activations": moe.matrices * e * rows * _ffn_over_t(z) / z.t,
        "expert outputs": e * permuted_tokens(z) * h,  # combined back: the rank's own
    }
    if moe.shared_width:
        terms["shared expert activations"] = moe.matrices * e * s * moe.shared_width / z.t
    return terms


def moe_weight_grad_inputs(z: _Sizes) -> float:
    """What the experts' weight gradients read besides the router's and shared experts'
    input: the routed tokens and the inputs of the experts' second matmuls."""
    moe, e, s, h = _moe(z), z.e, z.arch.seq, z.arch.hidden
    rows = expert_tokens(z)
    return e * rows * h + e * rows * _ffn_over_t(z) / z.t + e * s * moe.shared_width / z.t


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
    experts = float(moe.experts)
    rows, local = expert_rows(z), local_experts(z)  # each local expert's share
    matmuls = (
        Matmul("router", z.tokens_local, experts, h),
        Matmul("expert fc1", rows, expert_fc1_width(z), h, local),
        Matmul("expert fc2", rows, h, expert_width(z), local),
        *_shared_matmuls(z, "F"),
    )
    computed = expert_tokens(z)
    activation = moe.matrices * e * (computed * _ffn_over_t(z) + s * moe.shared_width) / z.t
    own = own_tokens(z)
    permuted = permuted_tokens(z)
    permutation = 2 * e * h * (own + permuted)  # permute: read s·h, write k·s·h; unpermute back
    sort, sorts, received = _expert_parallel_extras(z)
    transient = e * (computed * expert_fc1_width(z) + s * shared_fc1_width(z))
    return Part(
        matmuls,
        memory_bytes=activation + permutation + sort,
        reduction_bytes=2 * ROUTER_BYTES * z.tokens_local * experts,  # softmax and top-k
        kernels=5 + (1 if moe.shared_width else 0) + sorts,
        transient_bytes=max(transient, received),
    )


def moe_input_grad(z: _Sizes) -> Part:
    """The backward of :func:`moe_forward` for the input gradient: the probabilities'
    gradient (the expert outputs read again), the experts' and shared experts' input
    gradients, the router's."""
    moe, e, s, h = _moe(z), z.e, z.arch.seq, z.arch.hidden
    experts = float(moe.experts)
    rows, local = expert_rows(z), local_experts(z)
    matmuls = (
        *_shared_matmuls(z, "I"),
        Matmul("expert fc2 dgrad", rows, expert_width(z), h, local),
        Matmul("expert fc1 dgrad", rows, h, expert_fc1_width(z), local),
        Matmul("router dgrad", z.tokens_local, h, experts),
    )
    backward = 5 if moe.gated else 3
    computed = expert_tokens(z)
    activation = backward * e * (computed * _ffn_over_t(z) + s * moe.shared_width) / z.t
    permuted = permuted_tokens(z)
    permutation = 2 * e * h * (own_tokens(z) + permuted) + e * permuted * h
    sort, sorts, received = _expert_parallel_extras(z)
    transient = e * (computed * expert_fc1_width(z) + s * shared_fc1_width(z))
    return Part(
        matmuls,
        memory_bytes=activation + permutation + sort,
        reduction_bytes=3 * ROUTER_BYTES * z.tokens_local * experts,
        kernels=5 + (1 if moe.shared_width else 0) + sorts,
        transient_bytes=max(transient, received),
    )


def moe_weight_grad(z: _Sizes) -> Part:
    """The experts', shared experts' and router's weight gradients; the transient is one
    expert's first matrix (the largest weight gradient written at once)."""
    moe, h = _moe(z), z.arch.hidden
    experts = float(moe.experts)
    rows, local = expert_rows(z), local_experts(z)
    matmuls = (
        Matmul("expert fc1 wgrad", h, expert_fc1_width(z), rows, local, Scaled.K),
        Matmul("expert fc2 wgrad", expert_width(z), h, rows, local, Scaled.K),
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
