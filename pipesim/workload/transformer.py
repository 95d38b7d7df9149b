"""Transformer layers: FLOPs, parameters and activation memory per sample.

FLOPs per layer and sample, sequence s, hidden h, feed-forward f, heads a (multiply-add = 2):
forward 2s(4h^2 + 2hf) + 4s^2h; input gradient the same matmuls plus twice the attention
(2s(4h^2 + 2hf) + 8s^2h); weight gradient 2s(4h^2 + 2hf). With f = 4h these are the zero-bubble
paper's F = sbh(24h + 4s), B = sbh(24h + 8s), W = sbh(24h) (Qi et al., arXiv 2401.10241,
Table 1).

Activation bytes per layer and sample with 16-bit activations and 1-byte dropout masks:
18sh + 4sf + 5as^2, which is Korthikanti et al.'s sbh(34 + 5as/h) at f = 4h ("Reducing
Activation Recomputation in Large Transformer Models", arXiv 2205.05198, §4.1). The weight
gradient needs only the inputs of the four linear layers: 6sh + 2sf bytes. With 32-bit
activations (GPipe's TPU runs kept them in float32) every figure doubles.
"""

from __future__ import annotations

from pipesim.common import checks
from pipesim.workload.model import Layer

ACTIVATION_BYTES = 2  # 16-bit activations
TOKEN_BYTES = 8  # int64 token ids, PyTorch's default


def transformer_layer(
    name: str, seq: int, hidden: int, ffn: int, heads: int, activation_bytes: int = 2
) -> Layer:
    """One pre-LN transformer block (self-attention and MLP); ``activation_bytes`` per
    activation element (2 for 16-bit, 4 for 32-bit)."""
    scale = checks.positive_int("activation_bytes", activation_bytes) / 2
    s = checks.positive_int("seq", seq)
    h = checks.positive_int("hidden", hidden)
    f = checks.positive_int("ffn", ffn)
    a = checks.positive_int("heads", heads)
    matmul = 2 * s * (4 * h * h + 2 * h * f)
    attention = 4 * s * s * h
    return Layer(
        name,
        forward_flops=matmul + attention,
        input_grad_flops=matmul + 2 * attention,
        weight_grad_flops=matmul,
        parameters=4 * h * h + 2 * h * f + 9 * h + f,
        activation_bytes=scale * (18 * s * h + 4 * s * f + 5 * a * s * s),
        weight_grad_activation_bytes=scale * (6 * s * h + 2 * s * f),
        output_bytes=activation_bytes * s * h,
    )


def embedding_layer(
    name: str, seq: int, hidden: int, vocab: int, activation_bytes: int = 2
) -> Layer:
    """Token embedding: a lookup (no matmul FLOPs), V x h parameters, a scatter-add gradient."""
    s, h, v = seq, hidden, vocab
    return Layer(
        name,
        forward_flops=0.0,
        input_grad_flops=0.0,
        weight_grad_flops=2 * s * h,
        parameters=v * h,
        activation_bytes=TOKEN_BYTES * s,
        weight_grad_activation_bytes=TOKEN_BYTES * s,
        output_bytes=activation_bytes * s * h,
    )


def lm_head_layer(name: str, seq: int, hidden: int, vocab: int, activation_bytes: int = 2) -> Layer:
    """Final layer norm, the output projection to the vocabulary and the softmax loss.

    Stashes its input (2sh) and the fp32 logits for the loss gradient (4sV).
    """
    s, h, v = seq, hidden, vocab
    matmul = 2 * s * h * v
    return Layer(
        name,
        forward_flops=matmul,
        input_grad_flops=matmul,
        weight_grad_flops=matmul,
        parameters=v * h + 2 * h,
        activation_bytes=activation_bytes * s * h + 4 * s * v,
        weight_grad_activation_bytes=activation_bytes * s * h,
        output_bytes=4.0,
    )


def transformer_layers(
    layers: int,
    seq: int,
    hidden: int,
    ffn: int,
    heads: int,
    vocab: int,
    activation_bytes: int = ACTIVATION_BYTES,
) -> tuple[Layer, ...]:
    """Embedding, ``layers`` blocks and the output head, in order."""
    checks.positive_int("layers", layers)
    a = activation_bytes
    return (
        embedding_layer("embedding", seq, hidden, vocab, a),
        *(transformer_layer(f"block{i}", seq, hidden, ffn, heads, a) for i in range(layers)),
        lm_head_layer("head", seq, hidden, vocab, a),
    )
