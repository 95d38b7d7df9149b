"""The layers one device holds of a transformer, under tensor and sequence parallelism, each
recomputation mode and either attention implementation: FLOPs, parameters, stashed
activations, kernels, collectives and transient memory, per sample.

The model is Megatron-LM's GPT block (pre-norm; fused QKV; attention; output projection with
bias, dropout and residual add; norm; MLP) or its Llama variant (RMSNorm, grouped-query
attention, SwiGLU, no biases), with the output layer and its vocabulary-parallel cross
entropy. The notation is Korthikanti et al.'s (arXiv 2205.05198): s sequence, b micro-batch,
h hidden, a heads, t tensor-parallel size; sizes below are per sample (b = 1) with 16-bit
elements (``element_bytes`` e = 2) and 1-byte dropout masks.

Activations one block stashes for its backward (what each operator saves), §4 of 2205.05198:

==========================  =====================  ==================================
saved by                    size                   with sequence parallelism
==========================  =====================  ==================================
norm 1, norm 2 (inputs)     2 · e·s·h              2 · e·s·h / t
QKV and fc1 inputs          2 · e·s·h              2 · e·s·h / t (gathered again)
Q, K, V                     e·s·(h + 2·kv·d) / t   same
softmax output, dropout     (2e + 1)·a·s² / t      same (eager attention only)
mask and output
log-sum-exp (flash)         4·a·s / t              same (flash attention only)
projection input            e·s·h / t              same
MLP activation input,       2 · e·s·f / t          same (SwiGLU: gate and up, then the
fc2 input                                          product: 3 · e·s·f / t)
two dropout masks           2 · s·h                2 · s·h / t
==========================  =====================  ==================================

For GPT (f = 4h, kv = a, e = 2) this is Table 2 of 2205.05198: sbh(10 + 24/t + 5as/(ht)), with
sequence parallelism sbh(34/t + 5as/(ht)); selective recomputation drops the attention core
(the 5as²/t term, or the log-sum-exp with flash) and re-runs it in the backward; full
recomputation stashes the block's input alone (2sbh, /t with sequence parallelism) and re-runs
the whole forward in the backward. The weight gradient needs only the four linear layers'
inputs (6sh + 2sf at t = 1), kept from the input-gradient pass to W.

Pipeline messages: each of the t ranks sends its 1/t of a block's output (Megatron-LM's
scatter/gather optimization; the receiving ranks' all-gather of it is added to the receiving
stage by :func:`pipesim.costs.model_on_hardware.with_gathered_messages`; with sequence
parallelism the output is the sequence's 1/t already and nothing is gathered).

Tensor parallelism splits heads, the MLP's inner width and the vocabulary t ways; each block
all-reduces its activations twice in the forward pass and twice in the input-gradient backward
(sequence parallelism: an all-gather before and a reduce-scatter after each of the two
sub-blocks, the same volume; the all-gathers W repeats for the linears' inputs run under the
input-gradient matmuls, as Megatron-LM overlaps them, and take no time of their own).

A mixture-of-experts block has the mixture's router, routed and shared experts in place of the
MLP, a block under latent attention the latent projections in place of the QKV projection
(:mod:`pipesim.workload.moe_block` says what each computes and stashes); a head width of its
own (``head_dim``) widens the queries, keys, values and the projection's input, ``qk_norm``
adds the heads' query and key norms and stashes their inputs. A dense GPT or Llama block is
built exactly as before them.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

from pipesim.common.checks import SpecError
from pipesim.errors import named
from pipesim.hardware.collectives import Collective
from pipesim.parallel.config import IDENTITY, ContextComm, Parallelism, RecomputeMode
from pipesim.workload import moe_block
from pipesim.workload.architecture import Attention, Mlp, Position, TransformerArchitecture
from pipesim.workload.model import Layer, Model
from pipesim.workload.work import (
    CollectiveCall,
    GroupKind,
    LayerWork,
    Matmul,
    PassWork,
    Scaled,
)

TOKEN_BYTES = 8  # int64 token ids, PyTorch's default
# The attention's products a context-parallel ring of sends runs beside (either attention).
FORWARD_CORE = ("scores", "values", "flash scores", "flash values")
BACKWARD_CORE = (
    "values dgrad",
    "scores dgrad",
    "query dgrad",
    "key dgrad",
    "flash recompute",
    "flash values dgrad",
    "flash scores dgrad",
    "flash query dgrad",
    "flash key dgrad",
)
LOSS_STATISTICS = 3  # fp32 per token: the vocabulary-parallel loss all-reduces max, sum and target


def check_tensor_parallel(arch: TransformerArchitecture, tensor: int, folded: bool = False) -> None:
    """Refuse a tensor-parallel size that does not split the heads, the key/value heads, the
    MLP or the vocabulary evenly (Megatron requires each; the vocabulary is padded to a
    multiple of 128·t in a run, so a catalogue model's vocabulary is already padded); with
    mixture-of-experts blocks the experts' widths too (each expert is split t ways, unless
    ``folded``: split by an expert tensor-parallel size of their own, which
    :func:`pipesim.workload.moe_block.check_expert_parallel` checks), the dense MLP's only
    where some block has one."""
    fields: list[tuple[str, int]] = [("heads", arch.heads)]
    if arch.mla is None:
        fields.append(("kv_heads", arch.key_value_heads))
    if arch.dense_layers:
        fields.append(("ffn", arch.ffn))
    if arch.moe is not None:
        if not folded:
            fields.append(("moe.expert_ffn", arch.moe.expert_ffn))
        if arch.moe.shared_width:
            fields.append(("shared experts' width", arch.moe.shared_width))
    fields.append(("vocab", arch.vocab))
    for field, value in fields:
        if value % tensor:
            raise SpecError(
                f"{named('tensor_parallel')} {tensor} must divide the model's {field} "
                f"({value:,}): "
                "tensor parallelism gives each rank an equal share"
            )


def _has_shared_experts(arch: TransformerArchitecture) -> bool:
    """The architecture's MoE blocks have shared experts."""
    return arch.moe is not None and arch.moe.shared_width > 0


@dataclass(frozen=True)
class _Sizes:
    """Per-sample sizes of one block on one rank (see the module docstring)."""

    arch: TransformerArchitecture
    par: Parallelism
    moe: bool = False  # the block's MLP is the mixture of experts

    @property
    def t(self) -> int:
        return self.par.tensor

    @property
    def e(self) -> float:
        return float(self.arch.element_bytes)

    @property
    def mask(self) -> float:
        """Bytes of a dropout mask element (0 without dropout)."""
        return float(self.arch.mask_bytes) if self.arch.dropout else 0.0

    @property
    def tokens_local(self) -> float:
        """Tokens of the sequence this rank holds outside attention and MLP: s/t with
        sequence parallelism, s without."""
        s = self.arch.seq
        return s / self.t if self.par.sequence_parallel else float(s)

    @property
    def hidden_local(self) -> float:
        """Elements of the residual stream this rank holds per sample: s·h or s·h/t."""
        return self.tokens_local * self.arch.hidden

    @property
    def message_bytes(self) -> float:
        """What one rank sends the next pipeline stage per sample: the block's output, of
        which each of the t ranks sends 1/t (Megatron-LM's scatter/gather of pipeline
        messages, its default; with sequence parallelism the output is 1/t already)."""
        return self.e * self.arch.seq * self.arch.hidden / self.t

    @property
    def qkv_width(self) -> float:
        """The queries', keys' and values' width on this rank: (h + 2·kv·d)/t (the QKV
        projection's output; latent attention's up-projections' with the shared rotary key
        given to every head)."""
        a = self.arch
        return (a.query_width + a.key_width + a.value_width) / self.t

    @property
    def fc1_width(self) -> float:
        """fc1's output width on this rank: f/t (GELU) or 2f/t (SwiGLU's gate and up)."""
        return (self.arch.mlp_matrices - 1) * self.arch.ffn / self.t

    @property
    def heads_local(self) -> float:
        return self.arch.heads / self.t

    @property
    def kv_seq(self) -> int:
        """Keys each of this rank's queries attends to: the whole sequence, s·CP (the
        architecture a context-parallel rank is built with holds its s of the sequence)."""
        return self.arch.seq * self.par.context

    @property
    def scores(self) -> float:
        """Attention score elements on this rank per sample: (a/t)·s·s_kv (s² without context
        parallelism)."""
        return self.heads_local * self.arch.seq * self.kv_seq

    @property
    def kv_bytes(self) -> float:
        """The whole sequence's keys and values on this tensor rank, per sample: what context
        parallelism passes around the CP ranks (e·s_kv·(kv·d_k + kv·d_v)/t)."""
        a = self.arch
        return self.e * self.kv_seq * (a.key_width + a.value_width) / self.t

    def context_collectives(
        self, backward: bool, hidden_by: tuple[str, ...]
    ) -> tuple[CollectiveCall, ...]:
        """Context parallelism's exchange of keys and values (none with CP = 1): a ring of
        sends beside the attention's products ``hidden_by`` (Megatron-Core's ``p2p``: the
        keys and values, and in the backward their gradients too, each rank's block passed
        CP - 1 times), or Llama 3's all-gather before the attention (and in the backward the
        all-gather again and a reduce-scatter of their gradients), which nothing hides."""
        if self.par.context == 1:
            return ()
        size = self.kv_bytes
        if self.par.cp_comm_type is ContextComm.P2P:
            ring = CollectiveCall(
                Collective.SEND_RECV,
                2 * size if backward else size,
                group=GroupKind.CONTEXT,
                hidden_by=hidden_by,
            )
            return (ring,)
        gather = CollectiveCall(Collective.ALL_GATHER, size, group=GroupKind.CONTEXT)
        if not backward:
            return (gather,)
        scatter = CollectiveCall(Collective.REDUCE_SCATTER, size, group=GroupKind.CONTEXT)
        return (gather, scatter)

    @property
    def context_transient(self) -> float:
        """What the exchange holds while the attention runs: the gathered keys and values, or
        the ring's block in flight beside the one computed on (two blocks)."""
        if self.par.context == 1:
            return 0.0
        if self.par.cp_comm_type is ContextComm.P2P:
            return 2 * self.kv_bytes / self.par.context
        return self.kv_bytes

    def activation_terms(self) -> dict[str, float]:
        """The stash of one block without recomputation, term by term (bytes per sample)."""
        a, e, s = self.arch, self.e, self.arch.seq
        terms = {
            "norm inputs": 2 * e * self.hidden_local,
            "qkv and fc1 inputs": 2 * e * self.hidden_local,
            "query, key, value": e * s * self.qkv_width,
            "projection input": e * s * a.output_width / self.t,
            "mlp activations": (3 if a.mlp is Mlp.SWIGLU else 2) * e * s * a.ffn / self.t,
            "dropout masks": 2 * self.mask * self.hidden_local,
        }
        if self.moe:
            del terms["mlp activations"]
            terms.update(moe_block.moe_stash_terms(self))
        if a.mla is not None:
            terms.update(moe_block.mla_stash_terms(self))
        if a.qk_norm:
            terms["query and key norm inputs"] = e * s * (a.query_width + a.key_width) / self.t
        terms.update(self.core_terms())
        return terms

    def core_terms(self) -> dict[str, float]:
        """What the attention core alone stashes (dropped by selective recomputation)."""
        if self.arch.attention is Attention.FLASH:
            return {"attention statistics": 4.0 * self.heads_local * self.arch.seq}
        kept = self.e + (self.mask + self.e if self.arch.dropout else 0.0)
        return {"attention scores": kept * self.scores}

    def mlp_stash(self) -> float:
        """What the MLP sub-block stashes (its norm's input, fc1's input, the activation's
        inputs, fc2's input, its dropout mask): freed before the attention's backward."""
        a, e, s = self.arch, self.e, self.arch.seq
        if self.moe:
            activation = sum(moe_block.moe_stash_terms(self).values())
        else:
            activation = (3 if a.mlp is Mlp.SWIGLU else 2) * e * s * a.ffn / self.t
        return 2 * e * self.hidden_local + activation + self.mask * self.hidden_local

    def weight_grad_keep(self) -> float:
        """What W needs: the four linear layers' inputs (the QKV and fc1 inputs as stashed);
        in an MoE block the router's, the experts' and the shared experts' inputs, under latent
        attention the up-projections' too."""
        a, e, s = self.arch, self.e, self.arch.seq
        # the MLP's second linear's input (an MoE block's: its experts' and router's inputs)
        fc2_input = moe_block.moe_weight_grad_inputs(self) if self.moe else e * s * a.ffn / self.t
        keep = 2 * e * self.hidden_local + e * s * a.output_width / self.t + fc2_input
        if a.mla is not None:
            keep += moe_block.mla_weight_grad_inputs(self)
        return keep

    @property
    def attention_input_bytes(self) -> float:
        """What the attention's column-parallel projections read, which its tensor-parallel
        collectives carry: the hidden state (e·s·h), under latent attention the latents."""
        if self.arch.mla is None:
            return self.e * self.arch.seq * self.arch.hidden
        return self.e * self.arch.seq * moe_block.mla_gathered_width(self)

    @property
    def mlp_gathers(self) -> bool:
        """The MLP sub-block gathers its input over the tensor-parallel group and
        reduce-scatters its output: a dense MLP; an MoE block with its experts split t ways
        (the gather stands for the experts' over the same ranks); folded (ETP != t), only its
        shared experts (Megatron-Core's SharedExpertMLP is a tensor-parallel MLP over the
        attention's group), the routed experts taking the rank's own sequence-parallel tokens
        through the dispatcher (:mod:`pipesim.workload.moe_block`)."""
        return not (self.moe and self.par.folded) or _has_shared_experts(self.arch)

    def block_collectives(self) -> tuple[CollectiveCall, ...]:
        """The two collectives of each sub-block (all-reduce, or all-gather + reduce-scatter);
        the attention's alone where the MLP sub-block gathers nothing (:attr:`mlp_gathers`)."""
        if self.t == 1:
            return ()
        size = self.e * self.arch.seq * self.arch.hidden
        if self.par.sequence_parallel:
            gather = CollectiveCall(Collective.ALL_GATHER, size)
            scatter = CollectiveCall(Collective.REDUCE_SCATTER, size)
            first = gather
            if self.arch.mla is not None:
                first = CollectiveCall(Collective.ALL_GATHER, self.attention_input_bytes)
            if not self.mlp_gathers:
                return (first, scatter)
            return (first, scatter, gather, scatter)
        reduce = CollectiveCall(Collective.ALL_REDUCE, size)
        return (reduce, reduce)


def _attention_in_forward(z: _Sizes) -> moe_block.Part:
    """The projections that make the queries, keys and values: the fused QKV projection, or
    latent attention's down- and up-projections; with ``qk_norm``, the heads' query and key
    norms."""
    a, e, s, h = z.arch, z.e, z.arch.seq, z.arch.hidden
    if a.mla is not None:
        return moe_block.mla_forward(z)
    if not a.qk_norm:
        return moe_block.Part((Matmul("qkv", s, z.qkv_width, h),))
    norms = 2 * e * s * (a.query_width + a.key_width) / z.t
    return moe_block.Part((Matmul("qkv", s, z.qkv_width, h),), reduction_bytes=norms, kernels=2)


def _attention_in_input_grad(z: _Sizes) -> moe_block.Part:
    """The backward of :func:`_attention_in_forward` for the input gradient."""
    a, e, s, h = z.arch, z.e, z.arch.seq, z.arch.hidden
    if a.mla is not None:
        return moe_block.mla_input_grad(z)
    if not a.qk_norm:
        return moe_block.Part((Matmul("qkv dgrad", s, h, z.qkv_width),))
    norms = 3 * e * s * (a.query_width + a.key_width) / z.t
    return moe_block.Part(
        (Matmul("qkv dgrad", s, h, z.qkv_width),), reduction_bytes=norms, kernels=2
    )


def _block_forward(z: _Sizes) -> PassWork:
    a, e, s, h = z.arch, z.e, z.arch.seq, z.arch.hidden
    d_qk, d_v = a.score_head_dim, a.value_head_dim
    attention_in = _attention_in_forward(z)
    matmuls = list(attention_in.matmuls)
    reduction = 2 * 2 * e * z.hidden_local  # two norms: read and write
    reduction += attention_in.reduction_bytes
    bias_dropout_add = 2 * (3 * e + z.mask) * z.hidden_local  # two bias-dropout-adds
    random = bias_dropout_add if a.dropout else 0.0  # with dropout, they draw random numbers
    memory = 0.0 if a.dropout else bias_dropout_add
    kernels = 4 + attention_in.kernels
    kv = z.kv_seq
    if a.attention is Attention.EAGER:
        matmuls.append(Matmul("scores", s, kv, d_qk, z.heads_local, Scaled.BATCH))
        matmuls.append(Matmul("values", s, d_v, kv, z.heads_local, Scaled.BATCH))
        reduction += 2 * e * z.scores  # fused scale-mask-softmax
        kernels += 1
        if a.dropout:
            random += (2 * e + z.mask) * z.scores
            kernels += 1
        if a.key_value_heads < a.heads:  # keys and values expanded to every head
            memory += e * s * (a.key_width + a.value_width + 2 * a.query_width) / z.t
            kernels += 2
    else:
        matmuls.append(Matmul("flash scores", s, kv, d_qk, z.heads_local, Scaled.BATCH))
        matmuls.append(Matmul("flash values", s, d_v, kv, z.heads_local, Scaled.BATCH))
        flash = a.query_width + a.output_width + a.key_width + a.value_width
        memory += e * s * flash / z.t + 4 * z.heads_local * s
    matmuls.append(Matmul("proj", s, h, a.output_width / z.t))
    transients = [e * s * h if z.par.sequence_parallel and z.t > 1 else 0.0, z.context_transient]
    if a.attention is Attention.EAGER:
        transients.append(e * z.scores)  # the raw scores before the softmax
    if a.mla is not None:
        transients.append(attention_in.transient_bytes)
    if z.moe:
        mlp = moe_block.moe_forward(z)
        matmuls += mlp.matmuls
        memory += mlp.memory_bytes
        reduction += mlp.reduction_bytes
        kernels += mlp.kernels
        transients.append(mlp.transient_bytes)
    else:
        matmuls.append(Matmul("fc1", s, z.fc1_width, h))
        memory += (3 if a.mlp is Mlp.SWIGLU else 2) * e * s * a.ffn / z.t  # activation function
        kernels += 1
        matmuls.append(Matmul("fc2", s, h, a.ffn / z.t))
        transients.append(e * s * z.fc1_width)  # fc1's output before the activation
    return PassWork(
        tuple(matmuls),
        memory_bytes=memory,
        kernels=kernels,
        collectives=z.block_collectives() + z.context_collectives(False, FORWARD_CORE),
        transient_bytes=max(transients),
        element_bytes=e,
        reduction_bytes=reduction,
        random_bytes=random,
    )


def _block_core_forward(z: _Sizes) -> PassWork:
    """The attention core alone (what selective recomputation re-runs)."""
    a, e, s, kv = z.arch, z.e, z.arch.seq, z.kv_seq
    d_qk, d_v = a.score_head_dim, a.value_head_dim
    matmuls = (
        Matmul("scores", s, kv, d_qk, z.heads_local, Scaled.BATCH),
        Matmul("values", s, d_v, kv, z.heads_local, Scaled.BATCH),
    )
    exchange = z.context_collectives(False, FORWARD_CORE)
    if a.attention is Attention.FLASH:
        flash = a.query_width + a.output_width + a.key_width + a.value_width
        memory = e * s * flash / z.t + 4 * z.heads_local * s
        return PassWork(
            matmuls,
            memory_bytes=memory,
            kernels=0,
            element_bytes=e,
            collectives=exchange,
            transient_bytes=z.context_transient,
        )
    return PassWork(
        matmuls,
        kernels=2 if a.dropout else 1,
        element_bytes=e,
        collectives=exchange,
        transient_bytes=z.context_transient,
        reduction_bytes=2 * e * z.scores,  # the softmax
        random_bytes=(2 * e + z.mask) * z.scores if a.dropout else 0.0,
    )


def _block_input_grad(z: _Sizes, recomputed: float = 0.0, core: float = 0.0) -> PassWork:
    """The input-gradient pass; ``recomputed`` bytes of the layer's activations rebuilt
    before it starts (full recomputation), ``core`` bytes of the attention core's rebuilt
    just before the attention's backward (selective recomputation).

    Its transient follows the order of the backward, each saved tensor freed as soon as the
    operation that saved it is done: the MLP's first, the activation function's input and
    output gradients held where fc2's freed input was (one fc1 output's worth on top of the
    stash); then the attention's, after the MLP and its norm have freed what they stashed: the
    gradients of the dropout's output and of the softmax's (one scores tensor net, the values
    product having freed the dropout output; two without dropout), or FlashAttention's dQ, dK,
    dV."""
    a, e, s, h = z.arch, z.e, z.arch.seq, z.arch.hidden
    d_qk, d_v = a.score_head_dim, a.value_head_dim
    reduction = 2 * 3 * e * z.hidden_local  # two norm backwards: read x and dy, write dx
    memory = 2 * (5 * e + z.mask if a.dropout else 3 * e) * z.hidden_local  # dropout, residual
    kernels = 5
    if z.moe:
        mlp = moe_block.moe_input_grad(z)
        matmuls = list(mlp.matmuls)
        memory += mlp.memory_bytes
        reduction += mlp.reduction_bytes
        kernels += mlp.kernels
        mlp_phase = mlp.transient_bytes
    else:
        matmuls = [
            Matmul("fc2 dgrad", s, a.ffn / z.t, h),
            Matmul("fc1 dgrad", s, h, z.fc1_width),
        ]
        memory += (5 if a.mlp is Mlp.SWIGLU else 3) * e * s * a.ffn / z.t  # activation backward
        mlp_phase = e * s * z.fc1_width
    matmuls.append(Matmul("proj dgrad", s, a.output_width / z.t, h))
    kv = z.kv_seq
    if a.attention is Attention.EAGER:
        matmuls += [
            Matmul("values dgrad", kv, d_v, s, z.heads_local, Scaled.BATCH),
            Matmul("scores dgrad", s, kv, d_v, z.heads_local, Scaled.BATCH),
            Matmul("query dgrad", s, d_qk, kv, z.heads_local, Scaled.BATCH),
            Matmul("key dgrad", kv, d_qk, s, z.heads_local, Scaled.BATCH),
        ]
        reduction += 3 * e * z.scores  # softmax backward
        kernels += 1
        if a.dropout:
            memory += (2 * e + z.mask) * z.scores
            kernels += 1
    else:
        # FlashAttention's backward recomputes the scores, then the four products.
        matmuls += [
            Matmul("flash recompute", s, kv, d_qk, z.heads_local, Scaled.BATCH),
            Matmul("flash values dgrad", kv, d_v, s, z.heads_local, Scaled.BATCH),
            Matmul("flash scores dgrad", s, kv, d_v, z.heads_local, Scaled.BATCH),
            Matmul("flash query dgrad", s, d_qk, kv, z.heads_local, Scaled.BATCH),
            Matmul("flash key dgrad", kv, d_qk, s, z.heads_local, Scaled.BATCH),
        ]
        flash = 2 * (a.query_width + a.output_width) + 2 * (a.key_width + a.value_width)
        memory += e * s * flash / z.t + 4 * z.heads_local * s
    attention_in = _attention_in_input_grad(z)
    matmuls += attention_in.matmuls
    reduction += attention_in.reduction_bytes
    kernels += attention_in.kernels
    if a.attention is Attention.EAGER:
        attention_phase = (1 if a.dropout else 2) * e * z.scores
    else:  # dQ, dK, dV
        attention_phase = e * s * (a.query_width + a.key_width + a.value_width) / z.t
    transients = [
        recomputed + mlp_phase,
        recomputed - z.mlp_stash() + core + attention_phase,
    ]
    if z.par.sequence_parallel and z.t > 1:
        transients.append(recomputed + e * s * h)
    if z.par.context > 1:  # the exchanged keys and values, and their gradients
        transients.append(recomputed - z.mlp_stash() + core + 2 * z.context_transient)
    collectives: tuple[CollectiveCall, ...] = ()
    if z.t > 1:
        size = e * s * h
        latent = z.attention_input_bytes  # the attention's input gradient: e·s·h but for MLA
        if z.par.sequence_parallel:
            collectives = (
                CollectiveCall(Collective.ALL_GATHER, size),
                CollectiveCall(Collective.REDUCE_SCATTER, size),
                CollectiveCall(Collective.ALL_GATHER, size),
                CollectiveCall(Collective.REDUCE_SCATTER, latent),
            )
            if not z.mlp_gathers:  # the MLP sub-block's pair comes first in the backward
                collectives = collectives[2:]
        else:
            collectives = (
                CollectiveCall(Collective.ALL_REDUCE, size),
                CollectiveCall(Collective.ALL_REDUCE, latent),
            )
    return PassWork(
        tuple(matmuls),
        memory_bytes=memory,
        kernels=kernels,
        collectives=collectives + z.context_collectives(True, BACKWARD_CORE),
        transient_bytes=max(0.0, *transients),
        element_bytes=e,
        reduction_bytes=reduction,
    )


def _block_weight_grad(
    z: _Sizes, gradient_bytes: float, parameters: float, fused_accumulation: bool
) -> PassWork:
    a, e, s, h = z.arch, z.e, z.arch.seq, z.arch.hidden
    largest: list[float] = []  # the weight gradients written at once (fixed transients)
    if a.mla is None:
        matmuls = [Matmul("qkv wgrad", h, z.qkv_width, s, 1.0, Scaled.K)]
    else:
        latent = moe_block.mla_weight_grad(z)
        matmuls = list(latent.matmuls)
        largest.append(latent.fixed_transient_bytes)
    matmuls.append(Matmul("proj wgrad", a.output_width / z.t, h, s, 1.0, Scaled.K))
    if z.moe:
        mlp = moe_block.moe_weight_grad(z)
        matmuls += mlp.matmuls
        largest.append(mlp.fixed_transient_bytes)
    else:
        matmuls.append(Matmul("fc1 wgrad", h, z.fc1_width, s, 1.0, Scaled.K))
        matmuls.append(Matmul("fc2 wgrad", a.ffn / z.t, h, s, 1.0, Scaled.K))
    if largest:  # an MoE or latent-attention block
        if a.mla is None:
            largest.append(e * h * z.qkv_width)
        if not z.moe:
            largest.append(e * max(h * z.fc1_width, h * a.ffn / z.t))
        fixed_transient = max(largest)
    else:
        fixed_transient = e * max(h * z.qkv_width, h * z.fc1_width, h * a.ffn / z.t)
    memory = 0.0
    kernels = 0
    if a.linear_bias:  # bias gradients: sums of the output gradients over the tokens (a sum
        # down the columns streams at nearly the triad's bandwidth: 0.89 of it on an H200)
        memory += e * s * (z.qkv_width + h + z.fc1_width + h)
        kernels += 4
    # With sequence parallelism W needs the QKV and fc1 inputs gathered again; Megatron-LM
    # gathers them while the input-gradient matmuls run, so the all-gathers take no time of
    # their own here (the gathered input is a transient of W).
    gathered = e * s * h if z.par.sequence_parallel and z.t > 1 else 0.0
    # Fused (Megatron-LM's gradient-accumulation fusion, its default since 2022), the matmuls
    # add the weight gradients into the gradient buffer themselves; unfused, each is written,
    # read again, added to the buffer and written back.
    accumulation = 0.0 if fused_accumulation else (e + 2 * gradient_bytes) * parameters
    return PassWork(
        tuple(matmuls),
        memory_bytes=memory,
        fixed_memory_bytes=accumulation,
        kernels=kernels + (0 if fused_accumulation else 4),
        transient_bytes=gathered,
        fixed_transient_bytes=fixed_transient,
        element_bytes=e,
    )


def transformer_block(
    name: str,
    arch: TransformerArchitecture,
    parallelism: Parallelism = IDENTITY,
    *,
    recompute: RecomputeMode | None = None,
    gradient_bytes: float = 2.0,
    fused_accumulation: bool = True,
    moe: bool = False,
) -> Layer:
    """One block on one tensor-parallel rank; ``recompute`` overrides the parallelism's mode
    (a stage recomputes only its first N blocks under ``--recompute N``);
    ``fused_accumulation``: the weight-gradient matmuls add into the gradient buffer;
    ``moe``: a mixture-of-experts block (the architecture's experts in place of its MLP).

    Its parameters are the rank's: the heads' and the experts' matrices split t ways (the
    routed experts' u ways under an expert tensor-parallel size of their own), the
    norms, the router and latent attention's down-projections whole on every rank; of them
    the routed experts' are ``expert_parameters`` (E/EP experts under expert parallelism),
    and the top-k's share of those (k/E) ``active_expert_parameters``. Its FLOPs count the
    router, the top-k routed experts and the shared experts of each token, with or without
    expert parallelism (and the whole-rank projections on the rank's tokens: s/t of them with
    sequence parallelism); expert parallelism adds its all-to-alls to F and I
    (:mod:`pipesim.workload.moe_block`)."""
    check_tensor_parallel(arch, parallelism.tensor, parallelism.folded)
    moe_block.check_expert_parallel(arch, parallelism.expert, parallelism.expert_tensor)
    if moe and arch.moe is None:
        raise SpecError(f"block {name!r}: a mixture-of-experts block of a model without experts")
    z = _Sizes(arch, parallelism, moe)
    mode = parallelism.recompute.mode if recompute is None else recompute
    t, h = parallelism.tensor, arch.hidden
    # the rank's whole copies: latent attention's down-projections, the router (whose FLOPs
    # run on the rank's own tokens), the norms inside the attention
    replicated_matmul = arch.attention_replicated_parameters()
    replicated = replicated_matmul + arch.attention_norm_parameters()
    u = parallelism.expert_tensor_size  # each routed expert split u ways (t unless folded)
    expert_parameters: float = 0
    folded_experts: float = 0  # the routed experts' weights split u ways apart from the t ones
    active_experts = 0
    if moe and arch.moe is not None:
        experts = arch.moe
        expert_parameters = experts.routed_parameters(h) / parallelism.expert  # E/EP experts
        active_experts = experts.top_k * experts.expert_matmul_parameters(h)
        mlp: float = experts.shared_parameters(h)
        if parallelism.folded:
            folded_experts = expert_parameters
        else:
            mlp += expert_parameters
        active_mlp = active_experts + experts.shared_parameters(h)
        replicated_matmul += experts.experts * h
        replicated += experts.router_parameters(h)
    else:
        mlp = active_mlp = arch.mlp_matmul_parameters()
    attention = arch.attention_matmul_parameters() - arch.attention_replicated_parameters()
    sharded = attention + mlp
    biases = arch.block_bias_parameters()
    # Biases of the column-parallel layers are split; the row-parallel ones' (projection,
    # fc2: h each) and the norms' weights are replicated on every rank.
    replicated_biases = 2 * h if arch.linear_bias else 0
    parameters = (
        (sharded + biases - replicated_biases) / t + replicated_biases + 2 * arch.norm_parameters
    ) + replicated
    if folded_experts:
        parameters += folded_experts / u
    matmul_flops = 2 * arch.seq * (attention + active_mlp) / t
    matmul_flops += 2 * z.tokens_local * replicated_matmul
    # a context-parallel rank's queries (s of the sequence) attend to all CP·s keys
    attention_flops = arch.attention_core_forward_flops() * parallelism.context / t
    forward = moe_block.with_all_to_alls(_block_forward(z), z)
    terms = z.activation_terms()
    stash = sum(terms.values())
    recompute_flops = 0.0
    if mode is RecomputeMode.SELECTIVE:
        core = sum(z.core_terms().values())
        stash -= core
        input_grad = _block_core_forward(z).plus(_block_input_grad(z, core=core))
        recompute_flops = attention_flops
    elif mode is RecomputeMode.FULL:
        full_stash = stash
        stash = z.e * z.hidden_local
        input_grad = forward.plus(_block_input_grad(z, recomputed=full_stash))
        recompute_flops = matmul_flops + attention_flops
    else:
        input_grad = _block_input_grad(z)
    input_grad = moe_block.with_all_to_alls(input_grad, z)
    keep = z.weight_grad_keep()
    if mode is RecomputeMode.FULL:
        keep = min(keep, stash)  # full recomputation runs with a full backward (no I/W split)
    weight_grad = _block_weight_grad(z, gradient_bytes, parameters, fused_accumulation)
    work = LayerWork(forward, input_grad, weight_grad)
    return Layer(
        name,
        forward_flops=matmul_flops + attention_flops,
        input_grad_flops=matmul_flops + 2 * attention_flops,
        weight_grad_flops=matmul_flops,
        parameters=parameters,
        activation_bytes=stash,
        weight_grad_activation_bytes=keep,
        output_bytes=z.message_bytes,
        recompute_flops=recompute_flops,
        expert_parameters=expert_parameters / u,
        active_expert_parameters=active_experts / u / parallelism.expert,
        work=work,
    )


def embedding_layer(
    arch: TransformerArchitecture,
    parallelism: Parallelism = IDENTITY,
    *,
    gradient_bytes: float = 2.0,
) -> Layer:
    """The vocabulary-parallel word embedding (V/t rows per rank), learned positions, dropout.

    Forward: a lookup of this rank's rows, the all-reduce (reduce-scatter with sequence
    parallelism) that sums the ranks' partial embeddings, the positions added, dropout. It
    stashes the token ids and the dropout mask; its weight gradient scatters the output
    gradient into a dense V/t x h buffer (the embedding-gradient buffer, a transient) added
    to the gradient buffer.
    """
    z = _Sizes(arch, parallelism)
    t, e, s, h = parallelism.tensor, z.e, arch.seq, arch.hidden
    # the whole sequence's learned positions on every rank, context-parallel ones too
    positions = s * parallelism.context * h if arch.position is Position.LEARNED else 0
    rows = arch.vocab * h / t
    parameters = rows + positions
    mask = float(arch.mask_bytes) if arch.embedding_dropout else 0.0
    collectives: tuple[CollectiveCall, ...] = ()
    if t > 1:
        kind = Collective.REDUCE_SCATTER if parallelism.sequence_parallel else Collective.ALL_REDUCE
        collectives = (CollectiveCall(kind, e * s * h),)
    forward = PassWork(
        memory_bytes=e * s * h + (3 * e * z.hidden_local if positions else 0.0),
        random_bytes=(2 * e + mask) * z.hidden_local if mask else 0.0,
        kernels=1 + (1 if positions else 0) + (1 if mask else 0),
        collectives=collectives,
        transient_bytes=e * s * h if t > 1 else 0.0,
    )
    input_grad = PassWork(
        memory_bytes=(2 * e + mask) * z.hidden_local if mask else 0.0,
        kernels=1 if mask else 0,
        collectives=(CollectiveCall(Collective.ALL_GATHER, e * s * h),)
        if parallelism.sequence_parallel and t > 1
        else (),
    )
    weight_grad = PassWork(
        memory_bytes=2 * e * s * h,
        fixed_memory_bytes=(2 * e + 2 * gradient_bytes) * parameters,
        kernels=2,
        fixed_transient_bytes=e * rows,
    )
    return Layer(
        "embedding",
        forward_flops=0.0,
        input_grad_flops=0.0,
        weight_grad_flops=2 * s * h,
        parameters=parameters,
        activation_bytes=TOKEN_BYTES * s + mask * z.hidden_local,
        weight_grad_activation_bytes=TOKEN_BYTES * s,
        output_bytes=z.message_bytes,
        work=LayerWork(forward, input_grad, weight_grad),
    )


def output_layer(
    arch: TransformerArchitecture,
    parallelism: Parallelism = IDENTITY,
    *,
    gradient_bytes: float = 2.0,
    fused_accumulation: bool = True,
) -> Layer:
    """The final norm, the vocabulary-parallel output projection (V/t columns per rank) and the
    cross entropy over fp32 logits.

    It stashes its input, the norm's output (unless the norm is fused into the projection)
    and the fp32 log-probabilities (4·s·V/t, what the loss's backward reads). The loss
    allocates more while it runs, as PyTorch's cross entropy on fp32 logits does: in the
    forward the fp32 copy of the logits beside the log-probabilities it becomes (4·s·V/t on
    top of the stash), in the backward the gradients of the log-probabilities and of the
    logits, both fp32 (8·s·V/t). With tied embeddings its V/t x h weights copy the embedding's
    (``shared_parameters``).
    """
    z = _Sizes(arch, parallelism)
    t, e, s, h, v = parallelism.tensor, z.e, arch.seq, arch.hidden, arch.vocab
    columns = v / t
    projection = h * columns
    parameters = projection + arch.norm_parameters
    logits = s * columns
    gather: tuple[CollectiveCall, ...] = ()
    statistics = CollectiveCall(Collective.ALL_REDUCE, LOSS_STATISTICS * 4.0 * s)
    if t > 1 and parallelism.sequence_parallel:
        gather = (CollectiveCall(Collective.ALL_GATHER, e * s * h),)
    forward = PassWork(
        (Matmul("logits", s, columns, h),),
        reduction_bytes=2 * e * z.hidden_local + (e + 4 * 7) * logits,  # the norm, the loss
        kernels=6,
        collectives=gather + ((statistics,) if t > 1 else ()),
        transient_bytes=max(4.0, e) * logits,
        element_bytes=e,
    )
    backward_collectives: tuple[CollectiveCall, ...] = ()
    if t > 1:
        kind = Collective.REDUCE_SCATTER if parallelism.sequence_parallel else Collective.ALL_REDUCE
        backward_collectives = (CollectiveCall(kind, e * s * h),)
    input_grad = PassWork(
        (Matmul("logits dgrad", s, h, columns),),
        reduction_bytes=(4 * 2 + 4 + e) * logits + 3 * e * z.hidden_local,
        kernels=3,
        collectives=backward_collectives,
        transient_bytes=max(8.0, e) * logits,
        element_bytes=e,
    )
    weight_grad = PassWork(
        (Matmul("logits wgrad", h, columns, s, 1.0, Scaled.K),),
        fixed_memory_bytes=0.0 if fused_accumulation else (e + 2 * gradient_bytes) * parameters,
        collectives=(CollectiveCall(Collective.ALL_GATHER, e * s * h),)
        if t > 1 and parallelism.sequence_parallel
        else (),
        fixed_transient_bytes=e * projection,
        element_bytes=e,
    )
    matmul = 2 * s * projection
    return Layer(
        "head",
        forward_flops=matmul,
        input_grad_flops=matmul,
        weight_grad_flops=matmul,
        parameters=parameters,
        activation_bytes=(1 if arch.fused_output_norm else 2) * e * z.hidden_local + 4 * logits,
        weight_grad_activation_bytes=e * z.hidden_local,
        output_bytes=4.0,
        shared_parameters=projection if arch.tied_embeddings else 0.0,
        work=LayerWork(forward, input_grad, weight_grad),
    )


def transformer_layers(
    arch: TransformerArchitecture,
    parallelism: Parallelism = IDENTITY,
    *,
    gradient_bytes: float = 2.0,
    recompute: RecomputeMode | None = None,
    fused_accumulation: bool = True,
) -> tuple[Layer, ...]:
    """Embedding, ``arch.layers`` blocks and the output layer, on one tensor-parallel rank;
    ``recompute`` overrides the blocks' recomputation mode; ``fused_accumulation`` says the
    weight-gradient matmuls add into the gradient buffer themselves. The layers read T,
    sequence parallelism and recomputation only: a planner asking for the same ones under
    other data-parallel settings gets the same (immutable) layers back from a cache."""
    check_tensor_parallel(arch, parallelism.tensor, parallelism.folded)
    if parallelism.sequence_parallel and arch.seq % parallelism.tensor:
        raise SpecError(
            f"{named('sequence_parallel')} with {named('tensor_parallel')} "
            f"{parallelism.tensor}: the sequence "
            f"({arch.seq:,} tokens) must split evenly over the tensor-parallel ranks"
        )
    context = parallelism.context
    if context > 1:
        split = 2 * context * (parallelism.tensor if parallelism.sequence_parallel else 1)
        if arch.seq % split:
            raise SpecError(
                f"{named('context_parallel')} {context}: the sequence ({arch.seq:,} tokens) "
                f"must split into {split} equal chunks (2 x CP, load-balanced for the causal "
                "mask as Megatron-Core splits it"
                + (", on 1/T of them with sequence parallelism)" if split > 2 * context else ")")
            )
        # each rank holds 1/CP of every sample's tokens; its queries attend to all the keys
        arch = dataclasses.replace(arch, seq=arch.seq // context)
    rank = dataclasses.replace(
        IDENTITY,
        tensor=parallelism.tensor,
        sequence_parallel=parallelism.sequence_parallel,
        recompute=parallelism.recompute,
        context=context,
        cp_comm_type=parallelism.cp_comm_type,
        expert=parallelism.expert,
        expert_tensor=parallelism.expert_tensor,
        # the experts' layout folds over T x CP x D (EP divides D x CP at ETP = T)
        data=parallelism.data if parallelism.experts_apart else 1,
    )
    return _rank_layers(arch, rank, gradient_bytes, recompute, fused_accumulation)


def at_sequence_length(model: Model, seq: int) -> Model:
    """``model`` trained on sequences of ``seq`` tokens (a run's choice, as Megatron-LM's
    ``--seq-length`` and torchtitan's ``training.seq_len`` make it): a transformer's layers and
    input rebuilt from its architecture with the sequence changed. pipesim sizes a learned
    position table by the sequence, so such a model's parameter count follows ``seq``. A model
    given as layers has no sequence to change: :class:`SpecError` naming ``seq_length``."""
    checks_positive = seq if isinstance(seq, int) and not isinstance(seq, bool) else 0
    if checks_positive < 1:
        raise SpecError(f"{named('seq_length')} must be an integer >= 1, got {seq!r}")
    arch = model.architecture
    if arch is None:
        raise SpecError(
            f"{named('seq_length')} {seq}: model {model.name!r} is given as layers, with no "
            "sequence to change"
        )
    if arch.seq == seq:
        return model
    return with_architecture(model, dataclasses.replace(arch, seq=seq))


def with_architecture(
    model: Model, arch: TransformerArchitecture, *, fused_accumulation: bool | None = None
) -> Model:
    """``model`` with its layers rebuilt from ``arch`` (a recipe's attention, a run's sequence)
    and the gradient accumulation ``fused_accumulation`` (None: as the model was built); its
    input follows the sequence where that changed (a file's own ``input_bytes`` stays
    otherwise)."""
    fused = model.fused_gradient_accumulation if fused_accumulation is None else fused_accumulation
    built = model.architecture
    same_input = built is not None and built.seq == arch.seq
    return dataclasses.replace(
        model,
        layers=transformer_layers(
            arch, gradient_bytes=model.gradient_bytes_per_parameter, fused_accumulation=fused
        ),
        input_bytes=model.input_bytes if same_input else TOKEN_BYTES * arch.seq,
        architecture=arch,
        fused_gradient_accumulation=fused,
    )


@functools.lru_cache(maxsize=64)
def _rank_layers(
    arch: TransformerArchitecture,
    parallelism: Parallelism,
    gradient_bytes: float,
    recompute: RecomputeMode | None,
    fused_accumulation: bool,
) -> tuple[Layer, ...]:
    """:func:`transformer_layers`, built: a dense block and an MoE block built once each
    (where the architecture has blocks of the kind) and named per place."""

    def built(moe: bool) -> Layer:
        return transformer_block(
            "block",
            arch,
            parallelism,
            recompute=recompute,
            gradient_bytes=gradient_bytes,
            fused_accumulation=fused_accumulation,
            moe=moe,
        )

    kinds = {moe: built(moe) for moe in {arch.is_moe_layer(i) for i in range(arch.layers)}}
    blocks = tuple(
        dataclasses.replace(kinds[arch.is_moe_layer(i)], name=f"block{i}")
        for i in range(arch.layers)
    )
    return (
        embedding_layer(arch, parallelism, gradient_bytes=gradient_bytes),
        *blocks,
        output_layer(
            arch,
            parallelism,
            gradient_bytes=gradient_bytes,
            fused_accumulation=fused_accumulation,
        ),
    )


def is_block(layer: Layer) -> bool:
    """True for a transformer block (not the embedding or the output layer)."""
    return layer.name.startswith("block")


__all__ = [
    "TOKEN_BYTES",
    "check_tensor_parallel",
    "embedding_layer",
    "is_block",
    "output_layer",
    "transformer_block",
    "transformer_layers",
]
