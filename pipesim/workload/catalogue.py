"""Named models: the papers' workloads, by family and size.

``gpipe-transformer-<L>``: GPipe's Transformer-L (arXiv 1811.06965 §3): L blocks of d_model 2048,
feed-forward 8192, 32 heads, sequence 1024, vocabulary 32k, untied input and output embeddings;
12 bytes per parameter (RMSProp, fp32); float32 activations, bfloat16 matmuls (the TPU setup
of the time: Table 1's activation memory per layer matches 32-bit activations); batch 32.
Parameter counts match Table 1 (3 layers: 282M, 13: 786M, 103: 5.3B).

``amoebanet-d-<L>-<D>``: AmoebaNet-D(L, D), see :mod:`pipesim.workload.amoebanet`; batch 128.

``gpt-<size>`` / ``bert-<size>``: PipeDream-2BW's models (arXiv 2006.09503 §5; layer shapes from
msr-fiddle/pipedream scripts/driver_sweep.py): 355m (24 layers, hidden 1024, 16 heads), 1.3b
(24, 2048, 16), 2.2b (32, 2304, 32), 3.8b (32, 3072, 32); sequence 512; vocabulary 50,304 (GPT-2,
padded) or 30,592 (BERT, padded); fp16 with Adam (2 + 2 + 12 bytes per parameter); batch 512.

``zb-<size>``: the zero-bubble paper's models (arXiv 2401.10241 Table 3): 1.5b (22 layers,
hidden 2304, 24 heads), 6.2b (30, 4096, 32), 14.6b (46, 5120, 40), 28.3b (62, 6144, 48);
sequence 1024; vocabulary 50,304 (assumed: the paper does not state it); bf16 with Adam.

``megatron-<size>``: Megatron-LM's GPT models of arXiv 2104.04473 Table 1, 1.7b to 1t (layers,
hidden and heads from its reproduction script examples/sc21/run_table_1.sh; sequence 2048,
vocabulary 51,200, learned positions, tied embeddings; fp16). ``gpt3-175b``: GPT-3 175B
(Brown et al. 2020 Table 2.1) as Megatron-LM trains it. Parameter counts match the published
ones to 0.1B (12lh^2 + 13lh + (V + s)h, plus the final norm).

``llama2-<7b|13b|70b>``, ``llama3-<8b|70b|405b>``: Meta's Llama 2 and Llama 3/3.1 (their
config.json and arXiv 2407.21783 Table 3): RMSNorm, rotary positions, grouped-query attention,
SwiGLU, no biases, untied output layer, flash attention; parameter counts equal the published
ones exactly (6,738,415,616 ... 405,853,388,800).

Mixture-of-experts models (:mod:`pipesim.workload.moe`; shapes from each Hub repository's
config.json), trained as the Llama models are (bf16, fp32 gradients and Adam, flash attention)
at 4,096 tokens, 4M tokens a step but where the run's batch is published; each layer's
parameters count every expert (``Layer.expert_parameters`` the routed ones), its FLOPs each
token's top-k:

* ``mixtral-8x7b``, ``mixtral-8x22b``: Mistral's Mixtral (mistralai/Mixtral-8x7B-v0.1 and
  -8x22B-v0.1): 8 SwiGLU experts, top-2, every block; grouped-query attention. 46.7B total and
  12.9B active, 141B and 39B (mistral.ai's announcements).
* ``deepseek-v2-lite``, ``deepseek-v3``: DeepSeek's (deepseek-ai/DeepSeek-V2-Lite,
  deepseek-ai/DeepSeek-V3): multi-head latent attention; 64 routed experts, top-6, 2 shared,
  the first block dense (15.7B total, 2.4B active: arXiv 2405.04434 Appendix B); 256 routed,
  top-8, 1 shared, 3 dense blocks, aux-loss-free expert bias, batch 15,360 (arXiv 2412.19437
  §4.2). DeepSeek-V3 is the 671B main model: the multi-token-prediction module (14B of the
  685B checkpoint, ``num_nextn_predict_layers``) is left out, as the report's 671B does.
* ``qwen3-30b-a3b``, ``qwen3-235b-a22b``: Qwen3's (Qwen/Qwen3-30B-A3B, Qwen/Qwen3-235B-A22B):
  128 experts, top-8, every block; 128-wide heads (wider than hidden / heads) with query and key
  norms; 30.5B total and 3.3B active, 235B and 22B (their model cards).

``uniform-<L>``: L identical synthetic layers (2 GFLOP per pass and sample, 1M parameters), for
experiments where only the schedule should matter.

Models built from an architecture (every family but AmoebaNet and uniform) can be split by
tensor and sequence parallelism and recomputed layer by layer
(:mod:`pipesim.workload.transformer`); the earlier papers' families keep the reading pipesim has
always made of them (no learned positions, untied output layer), which reproduces their
published memory figures.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pipesim.common.checks import SpecError
from pipesim.common.limits import Limit, check
from pipesim.workload.amoebanet import amoebanet_d
from pipesim.workload.architecture import Attention, Mlp, Norm, Position, TransformerArchitecture
from pipesim.workload.model import Layer, Model
from pipesim.workload.moe import LoadBalancing, MixtureOfExperts, MultiLatentAttention
from pipesim.workload.transformer import TOKEN_BYTES, transformer_layers

_GPT_SHAPES = {
    "355m": (24, 1024, 16),
    "1.3b": (24, 2048, 16),
    "2.2b": (32, 2304, 32),
    "3.8b": (32, 3072, 32),
}
_ZB_SHAPES = {
    "1.5b": (22, 2304, 24, 192),
    "6.2b": (30, 4096, 32, 96),
    "14.6b": (46, 5120, 40, 64),
    "28.3b": (62, 6144, 48, 128),
}
# Megatron-LM's GPT models of arXiv 2104.04473 Table 1 (layers, hidden, heads, batch), as its
# reproduction script examples/sc21/run_table_1.sh states them; sequence 2048, vocabulary
# 51,200, fp16.
MEGATRON_SHAPES = {
    "1.7b": (24, 2304, 24, 512),
    "3.6b": (30, 3072, 32, 512),
    "7.5b": (36, 4096, 32, 512),
    "18.4b": (40, 6144, 48, 1024),
    "39.1b": (48, 8192, 64, 1536),
    "76.1b": (60, 10240, 80, 1792),
    "145.6b": (80, 12288, 96, 2304),
    "310.1b": (96, 16384, 128, 2160),
    "529.6b": (105, 20480, 128, 2520),
    "1t": (128, 25600, 160, 3072),
}
# Llama 2 (Touvron et al. 2023; meta-llama/Llama-2-*-hf config.json) and Llama 3/3.1 (arXiv
# 2407.21783 Table 3; meta-llama/Llama-3.1-* config.json): layers, hidden, heads, key/value
# heads, ffn, vocabulary, sequence, batch (sequences per step: Llama 2 4M tokens, Llama 3 16M).
LLAMA_SHAPES = {
    "llama2-7b": (32, 4096, 32, 32, 11008, 32000, 4096, 1024),
    "llama2-13b": (40, 5120, 40, 40, 13824, 32000, 4096, 1024),
    "llama2-70b": (80, 8192, 64, 8, 28672, 32000, 4096, 1024),
    "llama3-8b": (32, 4096, 32, 8, 14336, 128256, 8192, 2048),
    "llama3-70b": (80, 8192, 64, 8, 28672, 128256, 8192, 2048),
    "llama3-405b": (126, 16384, 128, 8, 53248, 128256, 8192, 2048),
}


def llama_architecture(
    layers: int,
    hidden: int,
    heads: int,
    kv_heads: int,
    ffn: int,
    seq: int,
    vocab: int,
    attention: Attention = Attention.EAGER,
) -> TransformerArchitecture:
    """A Llama block's architecture of this shape: grouped-query attention, SwiGLU, RMSNorm,
    RoPE, untied embeddings, no biases, no dropout."""
    return TransformerArchitecture(
        layers,
        hidden,
        heads,
        ffn,
        seq,
        vocab,
        kv_heads=kv_heads,
        mlp=Mlp.SWIGLU,
        attention=attention,
        norm=Norm.RMSNORM,
        position=Position.ROPE,
        tied_embeddings=False,
        linear_bias=False,
        dropout=False,
        embedding_dropout=False,
    )


MOE_SEQ = 4096  # the catalogue's mixture-of-experts models train at 4,096 tokens


def moe_architecture(
    layers: int,
    hidden: int,
    heads: int,
    ffn: int,
    vocab: int,
    moe: MixtureOfExperts,
    *,
    kv_heads: int | None = None,
    head_width: int | None = None,
    qk_norm: bool = False,
    mla: MultiLatentAttention | None = None,
    seq: int = MOE_SEQ,
    attention: Attention = Attention.FLASH,
) -> TransformerArchitecture:
    """A Llama-style block's architecture (RMSNorm, rotary positions, SwiGLU, untied
    embeddings, no biases, no dropout) with mixture-of-experts blocks and, where given, latent
    attention."""
    return dataclasses.replace(
        llama_architecture(layers, hidden, heads, kv_heads or heads, ffn, seq, vocab, attention),
        head_width=head_width,
        qk_norm=qk_norm,
        moe=moe,
        mla=mla,
    )


# The mixture-of-experts models: each one's architecture as its config.json states it
# (num_hidden_layers, hidden_size, num_attention_heads, intermediate_size, vocab_size,
# num_key_value_heads, head_dim; the experts' and latent attention's keys as moe.py maps
# them), its batch in sequences, and its description.
MOE_MODELS: dict[str, tuple[TransformerArchitecture, int, str]] = {
    "mixtral-8x7b": (
        moe_architecture(32, 4096, 32, 14336, 32000, MixtureOfExperts(8, 2, 14336), kv_heads=8),
        1024,
        "Mixtral 8x7B: 32 layers, hidden 4096, 32 heads (8 key/value), 8 experts of ffn "
        "14336, top-2, vocab 32,000",
    ),
    "mixtral-8x22b": (
        moe_architecture(56, 6144, 48, 16384, 32768, MixtureOfExperts(8, 2, 16384), kv_heads=8),
        1024,
        "Mixtral 8x22B: 56 layers, hidden 6144, 48 heads (8 key/value), 8 experts of ffn "
        "16384, top-2, vocab 32,768",
    ),
    "deepseek-v2-lite": (
        moe_architecture(
            27,
            2048,
            16,
            10944,
            102400,
            MixtureOfExperts(
                64,
                6,
                1408,
                shared_experts=2,
                first_dense_layers=1,
                load_balancing=LoadBalancing.SEQ_AUX_LOSS,
            ),
            mla=MultiLatentAttention(512, 128, 64, 128, q_lora_rank=None),
        ),
        1024,
        "DeepSeek-V2-Lite: 27 layers (the first dense, ffn 10944), hidden 2048, 16 heads of "
        "latent attention (kv rank 512), 64 routed experts of ffn 1408, top-6, 2 shared, "
        "vocab 102,400",
    ),
    "deepseek-v3": (
        moe_architecture(
            61,
            7168,
            128,
            18432,
            129280,
            MixtureOfExperts(
                256,
                8,
                2048,
                shared_experts=1,
                first_dense_layers=3,
                load_balancing=LoadBalancing.SEQ_AUX_LOSS,
                expert_bias=True,
            ),
            mla=MultiLatentAttention(512, 128, 64, 128, q_lora_rank=1536),
        ),
        15360,  # arXiv 2412.19437 §4.2: the batch ramps from 3,072 to 15,360 sequences
        "DeepSeek-V3 (the 671B main model, without its multi-token-prediction module): 61 "
        "layers (the first 3 dense, ffn 18432), hidden 7168, 128 heads of latent attention "
        "(q rank 1536, kv rank 512), 256 routed experts of ffn 2048, top-8, 1 shared, vocab "
        "129,280",
    ),
    "qwen3-30b-a3b": (
        moe_architecture(
            48,
            2048,
            32,
            6144,
            151936,
            MixtureOfExperts(128, 8, 768),
            kv_heads=4,
            head_width=128,
            qk_norm=True,
        ),
        1024,
        "Qwen3-30B-A3B: 48 layers, hidden 2048, 32 heads of 128 (4 key/value), 128 experts "
        "of ffn 768, top-8, vocab 151,936",
    ),
    "qwen3-235b-a22b": (
        moe_architecture(
            94,
            4096,
            64,
            12288,
            151936,
            MixtureOfExperts(128, 8, 1536),
            kv_heads=4,
            head_width=128,
            qk_norm=True,
        ),
        1024,
        "Qwen3-235B-A22B: 94 layers, hidden 4096, 64 heads of 128 (4 key/value), 128 experts "
        "of ffn 1536, top-8, vocab 151,936",
    ),
}


def from_architecture(
    name: str,
    arch: TransformerArchitecture,
    *,
    dtype: str,
    default_batch: int,
    description: str,
    weight_bytes: float = 2.0,
    gradient_bytes: float = 2.0,
    optimizer_bytes: float = 8.0,
    master_weight_bytes: float = 4.0,
    optimizer_temporary_bytes: float = 4.0,
) -> Model:
    """A model whose layers are ``arch``'s (embedding, blocks, output layer) on one device;
    by default trained with Adam (8 bytes of state, 4 of master weights, 4 of temporaries in
    its step: :mod:`pipesim.workload.optimizer`)."""
    return Model(
        name,
        transformer_layers(
            arch,
            gradient_bytes=gradient_bytes,
        ),
        input_bytes=TOKEN_BYTES * arch.seq,
        dtype=dtype,
        weight_bytes_per_parameter=weight_bytes,
        gradient_bytes_per_parameter=gradient_bytes,
        optimizer_bytes_per_parameter=optimizer_bytes,
        default_batch=default_batch,
        description=description,
        master_weight_bytes_per_parameter=master_weight_bytes,
        architecture=arch,
        optimizer_temporary_bytes_per_parameter=optimizer_temporary_bytes,
    )


def _legacy_architecture(
    layers: int, seq: int, hidden: int, ffn: int, heads: int, vocab: int, element_bytes: int = 2
) -> TransformerArchitecture:
    """The architecture of the earlier papers' models as pipesim has always built them: no
    learned positions, untied output layer, no embedding dropout (their published memory
    figures are reproduced from exactly these layers)."""
    return TransformerArchitecture(
        layers,
        hidden,
        heads,
        ffn,
        seq,
        vocab,
        position=Position.NONE,
        tied_embeddings=False,
        embedding_dropout=False,
        fused_output_norm=True,
        element_bytes=element_bytes,
        # GPipe's fp32 activations counted every element, masks too, at 4 bytes (Table 1)
        mask_bytes=element_bytes // 2,
    )


def gpipe_transformer(layers: int) -> Model:
    """GPipe's Transformer-L."""
    arch = _legacy_architecture(layers, 1024, 2048, 8192, 32, 32000, element_bytes=4)
    return from_architecture(
        f"gpipe-transformer-{layers}",
        arch,
        dtype="bf16",
        default_batch=32,
        description=f"GPipe Transformer-{layers}: d_model 2048, ffn 8192, 32 heads, seq 1024",
        weight_bytes=4,
        gradient_bytes=4,
        optimizer_bytes=4,
        master_weight_bytes=0,
    )


def _megatron_style(
    name: str,
    layers: int,
    hidden: int,
    heads: int,
    seq: int,
    vocab: int,
    dtype: str,
    batch: int,
    description: str,
) -> Model:
    return from_architecture(
        name,
        _legacy_architecture(layers, seq, hidden, 4 * hidden, heads, vocab),
        dtype=dtype,
        default_batch=batch,
        description=description,
    )


def megatron_gpt(size: str) -> Model:
    """A GPT model of Megatron-LM's Table 1 (arXiv 2104.04473) in the precision its runs used
    (examples/sc21: ``--fp16``, no fp32 gradient accumulation): learned positions, tied
    embeddings, dropout; fp16 weights and gradients, fp32 master weights and Adam (16 bytes
    per parameter); apex's fused Adam allocates nothing while it steps. How those runs'
    software ran it (unfused gradient accumulation, blocking messages) is the recipe
    ``megatron-lm-2021`` (:mod:`pipesim.config.recipes`), not the model's."""
    layers, hidden, heads, batch = MEGATRON_SHAPES[size]
    arch = TransformerArchitecture(layers, hidden, heads, 4 * hidden, 2048, 51200)
    return from_architecture(
        f"megatron-{size}",
        arch,
        dtype="fp16",
        default_batch=batch,
        description=f"Megatron-LM GPT {size.upper()} (arXiv 2104.04473 Table 1): {layers} "
        f"layers, hidden {hidden}, {heads} heads, seq 2048, vocab 51,200",
        optimizer_temporary_bytes=0.0,
    )


def gpt3_175b() -> Model:
    """GPT-3 175B (Brown et al. 2020, Table 2.1) as Megatron-LM trains it: 96 layers, hidden
    12,288, 96 heads, sequence 2048, vocabulary padded to 51,200, batch 1536; bf16 weights,
    fp32 gradients, master weights and Adam (Megatron-Core's 18 bytes per parameter), fused
    Adam."""
    arch = TransformerArchitecture(96, 12288, 96, 4 * 12288, 2048, 51200)
    return from_architecture(
        "gpt3-175b",
        arch,
        dtype="bf16",
        default_batch=1536,
        description="GPT-3 175B: 96 layers, hidden 12288, 96 heads, seq 2048, vocab 51,200",
        gradient_bytes=4,
        optimizer_temporary_bytes=0.0,
    )


def llama(name: str) -> Model:
    """A Llama 2 or Llama 3 model: RMSNorm, rotary positions, grouped-query attention, SwiGLU,
    no biases, no dropout, untied output layer, flash attention; bf16 with fp32 gradients,
    master weights and Adam (PyTorch's multi-tensor AdamW, as torchtitan runs it)."""
    layers, hidden, heads, kv, ffn, vocab, seq, batch = LLAMA_SHAPES[name]
    arch = llama_architecture(layers, hidden, heads, kv, ffn, seq, vocab, Attention.FLASH)
    return from_architecture(
        name,
        arch,
        dtype="bf16",
        default_batch=batch,
        description=f"{name}: {layers} layers, hidden {hidden}, {heads} heads ({kv} key/value), "
        f"ffn {ffn}, vocab {vocab:,}, seq {seq}",
        gradient_bytes=4,
    )


def moe_model(name: str) -> Model:
    """A mixture-of-experts model of :data:`MOE_MODELS`, trained as the Llama models are:
    bf16 with fp32 gradients, master weights and Adam (the mixed precision of Megatron-Core's
    MoE recipes; DeepSeek-V3 itself trained its matmuls in FP8, which pipesim does not
    model)."""
    arch, batch, description = MOE_MODELS[name]
    return from_architecture(
        name,
        arch,
        dtype="bf16",
        default_batch=batch,
        description=f"{name}: {description}, seq {arch.seq}",
        gradient_bytes=4,
    )


def uniform(layers: int) -> Model:
    """``layers`` identical synthetic layers."""
    layer = Layer(
        "uniform",
        forward_flops=2e9,
        input_grad_flops=2e9,
        weight_grad_flops=2e9,
        parameters=1e6,
        activation_bytes=4e6,
        weight_grad_activation_bytes=2e6,
        output_bytes=1e6,
    )
    return Model(
        f"uniform-{layers}",
        (layer,) * layers,
        input_bytes=1e6,
        dtype="fp32",
        weight_bytes_per_parameter=4,
        gradient_bytes_per_parameter=4,
        optimizer_bytes_per_parameter=8,
        default_batch=8,
        description=f"{layers} identical synthetic layers",
    )


@dataclass(frozen=True)
class ModelFamily:
    """A pattern of model names and how to build one."""

    pattern: str
    example: str
    summary: str
    build: Callable[[re.Match[str]], Model]
    # The name's group holding its count of repeated layers, checked against PIPESIM_MAX_LAYERS
    # before the model is built (0: the family has fixed sizes).
    layers_group: int = 0


FAMILIES = (
    ModelFamily(
        r"gpipe-transformer-([0-9]+)",
        "gpipe-transformer-48",
        "GPipe's Transformer-L (d_model 2048, ffn 8192, 32 heads, seq 1024, vocab 32k)",
        lambda m: gpipe_transformer(int(m[1])),
        layers_group=1,
    ),
    ModelFamily(
        r"amoebanet-d-([0-9]+)-([0-9]+)",
        "amoebanet-d-18-256",
        "AmoebaNet-D(L, D) approximation, 224x224 input (GPipe, torchgpipe)",
        lambda m: amoebanet_d(int(m[1]), _bounded(m[2], "AmoebaNet filters", MAX_FILTERS)),
        layers_group=1,
    ),
    ModelFamily(
        r"(gpt|bert)-(355m|1\.3b|2\.2b|3\.8b)",
        "gpt-3.8b",
        "PipeDream-2BW's GPT and BERT models (sizes 355m, 1.3b, 2.2b, 3.8b; seq 512)",
        lambda m: _megatron_style(
            m[0],
            *_GPT_SHAPES[m[2]],
            seq=512,
            vocab=50304 if m[1] == "gpt" else 30592,
            dtype="fp16",
            batch=512,
            description=f"PipeDream-2BW {m[1].upper()} {m[2]}: seq 512, fp16, Adam",
        ),
    ),
    ModelFamily(
        r"zb-(1\.5b|6\.2b|14\.6b|28\.3b)",
        "zb-6.2b",
        "the zero-bubble paper's GPT models (1.5b, 6.2b, 14.6b, 28.3b; seq 1024)",
        lambda m: _megatron_style(
            m[0],
            *_ZB_SHAPES[m[1]][:3],
            seq=1024,
            vocab=50304,
            dtype="bf16",
            batch=_ZB_SHAPES[m[1]][3],
            description=f"zero-bubble paper {m[1]} model: seq 1024, bf16, Adam",
        ),
    ),
    ModelFamily(
        r"megatron-(" + "|".join(re.escape(k) for k in MEGATRON_SHAPES) + ")",
        "megatron-145.6b",
        "Megatron-LM's GPT models of arXiv 2104.04473 Table 1 (1.7b to 1t; seq 2048, vocab 51,200)",
        lambda m: megatron_gpt(m[1]),
    ),
    ModelFamily(
        r"gpt3-175b",
        "gpt3-175b",
        "GPT-3 175B (96 layers, hidden 12,288, seq 2048), as Megatron-LM trains it",
        lambda m: gpt3_175b(),
    ),
    ModelFamily(
        "(" + "|".join(re.escape(k) for k in LLAMA_SHAPES) + ")",
        "llama3-70b",
        "Llama 2 (7b, 13b, 70b) and Llama 3 (8b, 70b, 405b): GQA, SwiGLU, RMSNorm, untied",
        lambda m: llama(m[1]),
    ),
    ModelFamily(
        r"(mixtral-8x7b|mixtral-8x22b)",
        "mixtral-8x7b",
        "Mixtral 8x7B and 8x22B: 8 SwiGLU experts, top-2, GQA (mixture of experts)",
        lambda m: moe_model(m[1]),
    ),
    ModelFamily(
        r"(deepseek-v2-lite|deepseek-v3)",
        "deepseek-v3",
        "DeepSeek-V2-Lite and DeepSeek-V3 (671B, no MTP): latent attention, shared and routed "
        "experts",
        lambda m: moe_model(m[1]),
    ),
    ModelFamily(
        r"(qwen3-30b-a3b|qwen3-235b-a22b)",
        "qwen3-30b-a3b",
        "Qwen3-30B-A3B and Qwen3-235B-A22B: 128 experts, top-8, GQA with QK norms",
        lambda m: moe_model(m[1]),
    ),
    ModelFamily(
        r"uniform-([0-9]+)",
        "uniform-16",
        "L identical synthetic layers (2 GFLOP per pass and sample)",
        lambda m: uniform(int(m[1])),
        layers_group=1,
    ),
)


def _check_layers(name: str, digits: str) -> None:
    """Refuse a name's layer count beyond ``PIPESIM_MAX_LAYERS`` before a layer is built (a name
    such as ``uniform-100000000`` would otherwise allocate gigabytes, one of 30 digits run for
    ever)."""
    significant = digits.lstrip("0")
    if len(significant) > 18:
        shown = name.replace(digits, f"<{len(significant)} digits>")
        check(Limit.LAYERS, float("inf"), f"model {shown}")
    count = int(digits)
    check(Limit.LAYERS, count, f"model {name}: {count:,} layers")


# AmoebaNet's base filters D: the published models use 208 to 544; far beyond, every size
# computed from D overflows a float.
MAX_FILTERS = 1 << 16


def _bounded(digits: str, field: str, most: int) -> int:
    """``digits`` as an integer of at most ``most``, checked before it is converted (Python
    refuses to convert more than 4,300 digits, and a huge D overflows every size)."""
    significant = digits.lstrip("0")
    if len(significant) > len(str(most)) or int(significant or "0") > most:
        shown = digits if len(digits) <= 20 else f"<{len(significant)} digits>"
        raise SpecError(f"{field} must be at most {most:,}, got {shown}")
    return int(digits)


def model(name: str) -> Model:
    """Build the named model; an unknown name lists the families."""
    for family in FAMILIES:
        match = re.fullmatch(family.pattern, name)
        if match:
            if family.layers_group:
                _check_layers(name, match[family.layers_group])
            return family.build(match)
    examples = ", ".join(f.example for f in FAMILIES)
    raise SpecError(
        f"unknown model {name!r}; known families, for example: {examples} (or a .toml file; "
        "see pipesim models list)"
    )


def resolve_model(name_or_path: str) -> Model:
    """A catalogue name, a path to a model ``.toml`` file, or a path to a Hugging Face
    ``config.json`` (:mod:`pipesim.workload.huggingface`)."""
    suffix = Path(name_or_path).suffix
    if suffix == ".toml":
        from pipesim.workload.toml_spec import load_model

        return load_model(name_or_path)
    if suffix == ".json":
        from pipesim.workload.huggingface import model_from_hf_config

        return model_from_hf_config(name_or_path)
    return model(name_or_path)
