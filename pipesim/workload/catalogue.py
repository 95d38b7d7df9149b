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

``uniform-<L>``: L identical synthetic layers (2 GFLOP per pass and sample, 1M parameters), for
experiments where only the schedule should matter.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pipesim.common.checks import SpecError
from pipesim.common.limits import Limit, check
from pipesim.workload.amoebanet import amoebanet_d
from pipesim.workload.model import Layer, Model
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


def gpipe_transformer(layers: int) -> Model:
    """GPipe's Transformer-L."""
    return Model(
        f"gpipe-transformer-{layers}",
        transformer_layers(
            layers, seq=1024, hidden=2048, ffn=8192, heads=32, vocab=32000, activation_bytes=4
        ),
        input_bytes=TOKEN_BYTES * 1024,
        dtype="bf16",
        weight_bytes_per_parameter=4,
        gradient_bytes_per_parameter=4,
        optimizer_bytes_per_parameter=4,
        default_batch=32,
        description=f"GPipe Transformer-{layers}: d_model 2048, ffn 8192, 32 heads, seq 1024",
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
    return Model(
        name,
        transformer_layers(
            layers, seq=seq, hidden=hidden, ffn=4 * hidden, heads=heads, vocab=vocab
        ),
        input_bytes=TOKEN_BYTES * seq,
        dtype=dtype,
        weight_bytes_per_parameter=2,
        gradient_bytes_per_parameter=2,
        optimizer_bytes_per_parameter=12,
        default_batch=batch,
        description=description,
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
    """A catalogue name, or a path to a ``.toml`` file."""
    if Path(name_or_path).suffix == ".toml":
        from pipesim.workload.toml_spec import load_model

        return load_model(name_or_path)
    return model(name_or_path)
