"""One tensor-parallel rank's transformer layers against the published formulas, by hand.

Korthikanti et al. (arXiv 2205.05198) Table 2, bytes per layer for s = sequence, b = 1, h,
a heads, t = tensor-parallel size, 16-bit activations and 1-byte dropout masks:

    no parallelism                          sbh (34 + 5as/h)
    tensor parallel                         sbh (10 + 24/t + 5as/(ht))
    tensor + sequence parallel              sbh (34/t + 5as/(ht))
    tensor parallel + selective             sbh (10 + 24/t)
    tensor + sequence parallel + selective  sbh (34/t)
    full recomputation                      sbh 2 (2/t with sequence parallelism)
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipesim.common.checks import SpecError
from pipesim.parallel.config import Parallelism, Recompute
from pipesim.workload import model
from pipesim.workload.architecture import (
    Attention,
    Mlp,
    Norm,
    Position,
    TransformerArchitecture,
)
from pipesim.workload.transformer import transformer_block, transformer_layers

S, H, A = 2048, 6144, 64  # the 22B model of 2205.05198
GPT = TransformerArchitecture(48, H, A, 4 * H, S, 51200)
SBH = S * H
SCORES = 5 * A * S / H  # 5as/h = 106.67 for these shapes


def _stash(t: int, sp: bool, recompute: str, arch: TransformerArchitecture = GPT) -> float:
    par = Parallelism(tensor=t, sequence_parallel=sp, recompute=Recompute.parse(recompute))
    return transformer_block("b", arch, par).activation_bytes


@pytest.mark.parametrize("t", [1, 2, 8])
def test_table_2_of_korthikanti_et_al_literally(t: int) -> None:
    if t == 1:
        assert _stash(1, False, "none") == pytest.approx(SBH * (34 + SCORES))
    assert _stash(t, False, "none") == pytest.approx(SBH * (10 + 24 / t + SCORES / t))
    assert _stash(t, False, "selective") == pytest.approx(SBH * (10 + 24 / t))
    assert _stash(t, False, "full") == pytest.approx(SBH * 2)
    if t > 1:
        assert _stash(t, True, "none") == pytest.approx(SBH * (34 / t + SCORES / t))
        assert _stash(t, True, "selective") == pytest.approx(SBH * 34 / t)
        assert _stash(t, True, "full") == pytest.approx(SBH * 2 / t)


def test_flash_attention_stores_statistics_not_scores() -> None:
    """sbh(34/t) plus the fp32 log-sum-exp, 4·a·s/t bytes: with t = 8 and sequence
    parallelism, 4·64·2048/8 = 65,536 bytes per layer and sample."""
    flash = dataclasses.replace(GPT, attention=Attention.FLASH)
    assert _stash(8, True, "none", flash) == pytest.approx(SBH * 34 / 8 + 4 * A * S / 8)
    assert _stash(8, True, "selective", flash) == pytest.approx(SBH * 34 / 8)
    assert _stash(1, False, "none", flash) / _stash(1, False, "none") == pytest.approx(
        (34 + 4 * A / H) / (34 + SCORES)
    )  # 0.242: flash stores a quarter of eager's at these shapes


def test_weight_gradient_keeps_the_linear_inputs() -> None:
    """6sh + 2sf at t = 1 (the zero-bubble paper's M_W), 2sh/t + ... with sequence
    parallelism: QKV and fc1 inputs 2·2sh/t, projection input 2sh/t, fc2 input 2sf/t."""
    layer = transformer_block("b", GPT)
    assert layer.weight_grad_activation_bytes == 6 * SBH + 2 * S * 4 * H
    par = Parallelism(tensor=8, sequence_parallel=True)
    keep = transformer_block("b", GPT, par).weight_grad_activation_bytes
    assert keep == pytest.approx((4 * SBH + 2 * SBH + 2 * S * 4 * H) / 8)


def test_flops_and_parameters_per_rank_literally() -> None:
    """F = 24sh^2 + 4s^2h, I = 24sh^2 + 8s^2h, W = 24sh^2 per sample, all over t; the
    attention and MLP weights split t ways, the norms and the row-parallel biases (h each)
    on every rank: 12h^2/t + (3h + 4h)/t + 2h + 4h."""
    layer = transformer_block("b", GPT, Parallelism(tensor=8))
    assert layer.forward_flops == pytest.approx((24 * S * H * H + 4 * S * S * H) / 8)
    assert layer.input_grad_flops == pytest.approx((24 * S * H * H + 8 * S * S * H) / 8)
    assert layer.weight_grad_flops == pytest.approx(24 * S * H * H / 8)
    assert layer.parameters == pytest.approx((12 * H * H + 7 * H) / 8 + 2 * H + 4 * H)
    assert transformer_block("b", GPT).parameters == 12 * H * H + 13 * H


def test_recomputation_adds_its_forward_flops_as_hardware_flops() -> None:
    none = transformer_block("b", GPT)
    selective = transformer_block("b", GPT, Parallelism(recompute=Recompute.parse("selective")))
    full = transformer_block("b", GPT, Parallelism(recompute=Recompute.parse("full")))
    assert none.recompute_flops == 0
    assert selective.recompute_flops == 4 * S * S * H  # the attention core only
    assert full.recompute_flops == none.forward_flops
    assert full.training_flops == none.training_flops  # model FLOPs unchanged


@pytest.mark.parametrize(
    ("name", "parameters"),
    [
        # arXiv 2104.04473 Table 1 (billions, one decimal): 12lh^2 + 13lh + (V + s)h + 2h
        ("megatron-1.7b", 1.7e9),
        ("megatron-3.6b", 3.6e9),
        ("megatron-7.5b", 7.5e9),
        ("megatron-18.4b", 18.4e9),
        ("megatron-39.1b", 39.1e9),
        ("megatron-76.1b", 76.1e9),
        ("megatron-145.6b", 145.6e9),
        ("megatron-310.1b", 310.1e9),
        ("megatron-529.6b", 529.6e9),
        ("megatron-1t", 1008.0e9),
        ("gpt3-175b", 174.6e9),  # 2104.04473 Table 2's count of GPT-3
    ],
)
def test_megatron_models_match_the_published_counts(name: str, parameters: float) -> None:
    assert model(name).parameters == pytest.approx(parameters, abs=0.05e9)


@pytest.mark.parametrize(
    ("name", "parameters"),
    [
        # Hugging Face's counts of the released checkpoints (config.json shapes)
        ("llama2-7b", 6_738_415_616),
        ("llama2-13b", 13_015_864_320),
        ("llama2-70b", 68_976_648_192),
        ("llama3-8b", 8_030_261_248),
        ("llama3-70b", 70_553_706_496),
        ("llama3-405b", 405_853_388_800),
    ],
)
def test_llama_models_match_the_published_counts_exactly(name: str, parameters: int) -> None:
    built = model(name)
    assert built.parameters == parameters
    assert built.architecture is not None and built.architecture.parameters() == parameters


def test_model_flops_are_the_appendix_formula() -> None:
    """2104.04473's appendix without recomputation: 72·B·s·l·h^2·(1 + s/(6h) + V/(12lh)) per
    B sequences; for one sequence of megatron-1.7b."""
    arch = model("megatron-1.7b").architecture
    assert arch is not None
    s, layers, h, v = arch.seq, arch.layers, arch.hidden, arch.vocab
    expected = 72 * s * layers * h * h * (1 + s / (6 * h) + v / (12 * layers * h))
    assert arch.model_flops_per_sequence() == pytest.approx(expected, rel=1e-12)


def test_llama_blocks_count_grouped_query_attention_and_swiglu() -> None:
    """Llama 2 70B: 80 layers, h 8192, 64 heads, 8 key/value heads (d = 128), ffn 28672;
    a block holds h(h + 2·8·128) + h·h attention weights, 3·h·f MLP weights, two RMSNorms."""
    arch = model("llama2-70b").architecture
    assert arch is not None and arch.mlp is Mlp.SWIGLU and arch.norm is Norm.RMSNORM
    h, f = 8192, 28672
    assert arch.block_parameters() == h * (h + 2 * 1024) + h * h + 3 * h * f + 2 * h
    assert arch.position is Position.ROPE and not arch.tied_embeddings


@pytest.mark.parametrize(
    ("t", "message"),
    [
        (3, r"tensor_parallel 3 must divide the model's heads \(64\)"),
        (128, r"tensor_parallel 128 must divide the model's heads \(64\)"),
    ],
)
def test_a_tensor_parallel_size_must_split_the_model_evenly(t: int, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        transformer_layers(GPT, Parallelism(tensor=t))


def test_the_earlier_families_keep_their_layers() -> None:
    """gpt-1.3b as pipesim always built it: 18sh + 4sf + 5as^2 stashed per block and sample,
    the untied head's V·h + 2h parameters, its input and fp32 logits stashed."""
    built = model("gpt-1.3b")
    s, h, v = 512, 2048, 50304
    block, head = built.layers[1], built.layers[-1]
    assert block.activation_bytes == 18 * s * h + 4 * s * 4 * h + 5 * 16 * s * s
    assert head.parameters == v * h + 2 * h and head.shared_parameters == 0
    assert head.activation_bytes == 2 * s * h + 4 * s * v


def test_a_tied_output_layer_is_a_copy_counted_once() -> None:
    built = model("megatron-1.7b")
    head = built.layers[-1]
    assert head.shared_parameters == 51200 * 2304
    assert built.parameters == sum(x.parameters for x in built.layers) - head.shared_parameters


@given(
    st.sampled_from([1, 2, 4, 8]),
    st.booleans(),
    st.sampled_from(["none", "selective", "full"]),
    st.sampled_from(list(Attention)),
)
def test_more_tensor_parallelism_never_holds_more(
    t: int, sp: bool, recompute: str, attention: Attention
) -> None:
    """Doubling T never raises a rank's parameters, stash, FLOPs or messages."""
    arch = dataclasses.replace(GPT, attention=attention)
    sp = sp and t > 1
    one = transformer_block(
        "b", arch, Parallelism(tensor=t, sequence_parallel=sp, recompute=Recompute.parse(recompute))
    )
    two = transformer_block(
        "b",
        arch,
        Parallelism(tensor=2 * t, sequence_parallel=sp, recompute=Recompute.parse(recompute)),
    )
    assert two.parameters < one.parameters
    assert two.activation_bytes <= one.activation_bytes
    assert two.forward_flops < one.forward_flops
    assert two.output_bytes <= one.output_bytes


@pytest.mark.parametrize("attention", list(Attention))
def test_recomputation_never_stashes_more(attention: Attention) -> None:
    arch = dataclasses.replace(GPT, attention=attention)
    stashes = [_stash(8, True, mode, arch) for mode in ("none", "selective", "full")]
    assert stashes == sorted(stashes, reverse=True)
    assert stashes[0] > stashes[2]


def test_memory_bound_bytes_by_kernel_class_literally() -> None:
    """The 22B block at t = 1, per sample (e = 2, 1-byte masks, a·s² = 64·2048² scores): the
    forward's two norms (2·2e·sh) and softmax (2e per score) reduce along rows; its two
    bias-dropout-adds ((3e + 1)·sh each) and the attention dropout ((2e + 1) per score) draw
    random numbers; the GELU (2e·s·4h) streams. The backward's norms (2·3e·sh) and softmax
    (3e per score) reduce; dropout's backward, the residuals and the GELU's backward stream."""
    scores = A * S * S
    layer = transformer_block("b", GPT)
    assert layer.work is not None
    forward, backward, weight = layer.work.passes()
    assert forward.reduction_bytes == pytest.approx(2 * 2 * 2 * SBH + 2 * 2 * scores)
    assert forward.random_bytes == pytest.approx(2 * 7 * SBH + 5 * scores)
    assert forward.memory_bytes == pytest.approx(2 * 2 * S * 4 * H)
    assert backward.reduction_bytes == pytest.approx(2 * 3 * 2 * SBH + 3 * 2 * scores)
    assert backward.random_bytes == 0
    assert backward.memory_bytes == pytest.approx(2 * 11 * SBH + 3 * 2 * S * 4 * H + 5 * scores)
    # the bias gradients are sums down the columns: they stream (0.89 of the triad, measured)
    assert weight.reduction_bytes == 0
    assert weight.memory_bytes == pytest.approx(2 * S * (3 * H + H + 4 * H + H))


def test_without_dropout_nothing_draws_random_numbers() -> None:
    layers = transformer_layers(
        dataclasses.replace(GPT, layers=2, dropout=False, embedding_dropout=False)
    )
    for layer in layers:
        assert layer.work is not None
        assert all(p.random_bytes == 0 for p in layer.work.passes())


def test_a_model_at_another_sequence_length_is_the_same_model_built_at_it() -> None:
    """``at_sequence_length`` equals building the architecture with the sequence changed (the
    catalogue's llama3-8b at 4,096 tokens), is the model itself at its own length, and refuses
    a model given as layers."""
    import dataclasses as dc

    from pipesim.common.checks import SpecError as Refused
    from pipesim.workload import resolve_model
    from pipesim.workload.catalogue import from_architecture
    from pipesim.workload.transformer import at_sequence_length

    model = resolve_model("llama3-8b")
    assert at_sequence_length(model, model.architecture.seq) is model  # type: ignore[union-attr]
    shorter = at_sequence_length(model, 4096)
    arch = dc.replace(model.architecture, seq=4096)
    built = from_architecture(
        "llama3-8b",
        arch,
        dtype="bf16",
        default_batch=model.default_batch,
        description="",
        gradient_bytes=4,
    )
    assert shorter.layers == built.layers and shorter.input_bytes == built.input_bytes
    assert shorter.architecture == arch
    with pytest.raises(Refused, match="seq_length 4096: model 'uniform-8' is given as layers"):
        at_sequence_length(resolve_model("uniform-8"), 4096)
    with pytest.raises(Refused, match="seq_length must be an integer >= 1"):
        at_sequence_length(model, 0)
