"""Mixture-of-experts models and multi-head latent attention: the catalogue's counts against the
published ones, the formulas by hand on the real shapes, one tensor-parallel rank's share, the
kernel-level work against the layer totals, model files, and refusals naming the field.

Published counts, and where each is stated:

* Mixtral 8x7B: 46.7B total, 12.9B active (mistral.ai/news/mixtral-of-experts: "46.7B total
  parameters but only uses 12.9B parameters per token").
* Mixtral 8x22B: 141B total, 39B active (mistral.ai/news/mixtral-8x22b: "39B active parameters
  out of 141B").
* DeepSeek-V2-Lite: 15.7B total, 2.4B activated (arXiv 2405.04434, Appendix B; the
  deepseek-ai/DeepSeek-V2-Lite model card).
* DeepSeek-V3: 671B total, 37B activated (arXiv 2412.19437, abstract and §4.2): the main
  model; the Hub checkpoint's 685B adds the 14B multi-token-prediction module, which pipesim
  does not build.
* Qwen3-30B-A3B: 30.5B total, 3.3B activated, 29.9B non-embedding (the Qwen/Qwen3-30B-A3B
  model card).
* Qwen3-235B-A22B: 235B total, 22B activated, 234B non-embedding (the Qwen/Qwen3-235B-A22B
  model card).

Tolerances: a total within 0.5% of the published (rounded) figure; an active count within one
unit of the published figure's last digit (2.4B: 0.1B; 37B: 1B), as a figure rounded to two
significant digits allows. Mistral and Qwen count the embeddings among the active parameters;
DeepSeek's activated counts leave the word embeddings out (a lookup, no matmul): with them
DeepSeek-V2-Lite's would be 2.66B, not 2.4B. No card states an exact count: the exact integers
below are pipesim's sums of the config.json shapes, checked by hand in
:func:`test_deepseek_v3_by_hand` and its neighbours.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipesim.common.checks import SpecError
from pipesim.parallel.config import Parallelism, Recompute
from pipesim.workload import load_model, model
from pipesim.workload.architecture import Attention, TransformerArchitecture
from pipesim.workload.catalogue import FAMILIES, MOE_MODELS, moe_architecture
from pipesim.workload.model import Layer
from pipesim.workload.moe import LoadBalancing, MixtureOfExperts, MultiLatentAttention
from pipesim.workload.sharding import sharded_layers
from pipesim.workload.toml_spec import model_table
from pipesim.workload.transformer import is_block, transformer_block, transformer_layers

# (name, total published, active published, unit of the active figure's last digit, the
# active count as published (True: without the word embeddings), pipesim's total, active)
PUBLISHED = [
    ("mixtral-8x7b", 46.7e9, 12.9e9, 0.1e9, False, 46_702_792_704, 12_879_925_248),
    ("mixtral-8x22b", 141e9, 39e9, 1e9, False, 140_630_071_296, 39_161_468_928),
    ("deepseek-v2-lite", 15.7e9, 2.4e9, 0.1e9, True, 15_706_484_224, 2_661_150_208),
    ("deepseek-v3", 671e9, 37e9, 1e9, True, 671_026_419_200, 37_552_297_472),
    ("qwen3-30b-a3b", 30.5e9, 3.3e9, 0.1e9, False, 30_532_122_624, 3_353_032_704),
    ("qwen3-235b-a22b", 235e9, 22e9, 1e9, False, 235_093_634_560, 22_190_763_520),
]


@pytest.mark.parametrize(
    ("name", "total", "active", "unit", "no_embeddings", "exact", "exact_active"), PUBLISHED
)
def test_catalogue_counts_are_the_published_ones(
    name: str,
    total: float,
    active: float,
    unit: float,
    no_embeddings: bool,
    exact: int,
    exact_active: int,
) -> None:
    built = model(name)
    arch = built.architecture
    assert arch is not None
    assert built.parameters == arch.parameters() == exact
    assert built.active_parameters == arch.active_parameters() == exact_active
    assert abs(exact / total - 1) < 0.005
    counted = exact_active - (arch.vocab * arch.hidden if no_embeddings else 0)
    assert abs(counted - active) <= unit
    assert built.expert_parameters == arch.expert_parameters()


@pytest.mark.parametrize(
    ("name", "non_embedding"), [("qwen3-30b-a3b", 29.9e9), ("qwen3-235b-a22b", 234e9)]
)
def test_qwen3_non_embedding_counts_are_the_model_cards(name: str, non_embedding: float) -> None:
    arch = model(name).architecture
    assert arch is not None
    counted = arch.parameters() - 2 * arch.vocab * arch.hidden
    assert abs(counted - non_embedding) <= (0.1e9 if non_embedding < 100e9 else 1e9)


def test_deepseek_v3_by_hand() -> None:
    """config.json's shapes: h 7168, 128 heads, q rank 1536, kv rank 512, nope 128, rope 64,
    v 128; 3 dense blocks of ffn 18432, 58 MoE blocks of 256 routed experts of 2048 and one
    shared, a 256 x h router with its 256 expert biases; RMSNorms; untied vocabulary 129,280."""
    h, heads, v = 7168, 128, 129280
    attention = (
        h * 1536  # q down
        + 1536 * heads * (128 + 64)  # q up
        + h * (512 + 64)  # kv down, with the shared rotary key
        + 512 * heads * (128 + 128)  # kv up
        + heads * 128 * h  # output projection
        + 1536
        + 512  # the latents' norms
    )
    assert attention == 187_107_328
    expert = 3 * h * 2048
    dense = attention + 3 * h * 18432 + 2 * h
    moe = attention + 256 * expert + expert + 256 * h + 256 + 2 * h
    arch = model("deepseek-v3").architecture
    assert arch is not None
    assert arch.block_parameters() == dense
    assert arch.moe_block_parameters() == moe
    assert arch.parameters() == 3 * dense + 58 * moe + 2 * v * h + h
    assert arch.active_parameters() == arch.parameters() - 58 * (256 - 8) * expert
    assert arch.expert_parameters() == 58 * 256 * expert


def test_deepseek_v2_lite_attention_has_no_query_latent() -> None:
    """q_lora_rank null: the queries are one h x heads·(nope + rope) projection; the
    kv latent's norm is the only latent norm."""
    h, heads = 2048, 16
    arch = model("deepseek-v2-lite").architecture
    assert arch is not None and arch.mla is not None and arch.mla.q_lora_rank is None
    attention = h * heads * 192 + h * 576 + 512 * heads * 256 + heads * 128 * h
    assert arch.attention_matmul_parameters() == attention
    assert arch.attention_norm_parameters() == 512
    assert arch.attention_replicated_parameters() == h * 576


def test_mixtral_and_qwen3_blocks_by_hand() -> None:
    """Mixtral 8x7B: GQA (8 of 32 heads), 8 experts of 3·h·14336, an 8 x h router. Qwen3-30B:
    32 heads of 128 (wider than 2048 / 32), 4 key/value heads, query and key norms of 128
    each, 128 experts of 3·h·768."""
    mixtral = model("mixtral-8x7b").architecture
    assert mixtral is not None
    h = 4096
    attention = h * (h + 2 * 1024) + h * h
    assert mixtral.moe_block_parameters() == attention + 8 * 3 * h * 14336 + 8 * h + 2 * h
    assert mixtral.dense_layers == 0 and mixtral.moe_layers == 32
    qwen = model("qwen3-30b-a3b").architecture
    assert qwen is not None
    h = 2048
    attention = h * (32 * 128 + 2 * 4 * 128) + 32 * 128 * h + 2 * 128
    assert qwen.moe_block_parameters() == attention + 128 * 3 * h * 768 + 128 * h + 2 * h


def test_which_blocks_have_experts() -> None:
    """DeepSeek-V3's first three blocks are dense; a frequency of 2 makes every other block
    from block 0 an MoE block (Megatron-Core's --moe-layer-freq 2, DeepSeek's
    moe_layer_freq)."""
    built = model("deepseek-v3")
    blocks = [layer for layer in built.layers if is_block(layer)]
    assert [layer.expert_parameters > 0 for layer in blocks[:5]] == [False] * 3 + [True] * 2
    assert all(layer.expert_parameters > 0 for layer in blocks[3:])
    every_other = MixtureOfExperts(4, 1, 64, first_dense_layers=1, layer_frequency=2)
    layers = [every_other.is_moe_layer(i) for i in range(6)]
    assert layers == [False, False, True, False, True, False]


# A small MoE architecture to check the formulas literally: s 16, h 64, 4 heads, 4 experts of
# 32 (top-2), one shared expert of 16, 2 key/value heads, SwiGLU.
SMALL = moe_architecture(
    2,
    64,
    4,
    128,
    1000,
    MixtureOfExperts(4, 2, 32, shared_experts=1, shared_expert_ffn=16),
    kv_heads=2,
    seq=16,
    attention=Attention.EAGER,
)


def test_an_moe_block_counts_its_top_k_experts_flops_and_all_their_parameters() -> None:
    s, h, d = 16, 64, 16
    layer = transformer_block("b", SMALL, moe=True)
    attention = h * (h + 2 * 2 * d) + h * h
    experts = 4 * 3 * h * 32
    active = 2 * 3 * h * 32 + 3 * h * 16 + 4 * h  # top-2, shared, router
    assert layer.parameters == attention + experts + 3 * h * 16 + 4 * h + 2 * h
    assert layer.expert_parameters == experts
    assert layer.active_expert_parameters == 2 * 3 * h * 32
    assert layer.active_parameters == layer.parameters - 2 * 3 * h * 32
    matmuls = 2 * s * (attention + active)
    assert layer.forward_flops == matmuls + 4 * s * s * h
    assert layer.input_grad_flops == matmuls + 8 * s * s * h
    assert layer.weight_grad_flops == matmuls


def test_an_moe_block_stashes_its_routed_tokens_and_experts_activations() -> None:
    """Per sample at t = 1 (e = 2): the dense block's attention terms, the router's fp32
    probabilities (4·s·E), the k·s routed tokens and the experts' outputs (e·k·s·h each),
    the experts' SwiGLU activations (3·e·k·s·f_e) and the shared expert's (3·e·s·F_s)."""
    s, h, e = 16, 64, 2
    layer = transformer_block("b", SMALL, moe=True)
    attention = (
        2 * e * s * h  # norm inputs
        + 2 * e * s * h  # qkv and router inputs
        + e * s * (h + 2 * 2 * 16)  # query, key, value
        + e * s * h  # projection input
        + (e + 0) * 4 * s * s  # the eager scores (no dropout: the softmax output alone)
    )
    moe = 4 * s * 4 + e * 2 * s * h + 3 * e * 2 * s * 32 + e * 2 * s * h + 3 * e * s * 16
    assert layer.activation_bytes == attention + moe
    keep = 2 * e * s * h + e * s * h + e * 2 * s * h + e * 2 * s * 32 + e * s * 16
    assert layer.weight_grad_activation_bytes == keep


def test_model_flops_count_active_experts() -> None:
    """3·(dense blocks' forward + MoE blocks' forward + logits): for DeepSeek-V3 at 4,096
    tokens about 6·(active parameters without the embeddings)·s plus the attention."""
    arch = model("deepseek-v3").architecture
    assert arch is not None
    s = arch.seq
    blocks = 3 * arch.block_forward_flops() + 58 * arch.moe_block_forward_flops()
    assert arch.model_flops_per_sequence() == 3 * (blocks + 2 * s * arch.hidden * arch.vocab)
    matmul = arch.active_parameters() - arch.vocab * arch.hidden - 61 * 2 * arch.hidden
    # the norms and the expert biases are no matmul; the attention's scores and values on top
    core = 61 * 2 * s * s * 128 * (192 + 128)
    norms = 61 * (1536 + 512) + 58 * 256 + arch.hidden
    assert arch.model_flops_per_sequence() == 6 * s * (matmul - norms) + 3 * core


@pytest.mark.parametrize("name", list(MOE_MODELS))
@pytest.mark.parametrize(
    ("t", "sp", "recompute"),
    [(1, False, "none"), (2, False, "selective"), (4, True, "none"), (4, True, "full")],
)
def test_kernel_work_adds_up_to_the_layer_totals(
    name: str, t: int, sp: bool, recompute: str
) -> None:
    """The matmuls of each pass sum to the layer's FLOPs (eager attention: the flash
    backward's recomputed scores are hardware FLOPs beyond them), on every rank."""
    arch = dataclasses.replace(_arch(name), attention=Attention.EAGER, seq=256, layers=4)
    par = Parallelism(tensor=t, sequence_parallel=sp, recompute=Recompute.parse(recompute))
    for layer in transformer_layers(arch, par)[1:-1]:
        assert layer.work is not None
        forward, backward, weight = layer.work.passes()
        assert forward.flops_per_sample == pytest.approx(layer.forward_flops, rel=1e-12)
        assert backward.flops_per_sample == pytest.approx(
            layer.input_grad_flops + layer.recompute_flops, rel=1e-12
        )
        assert weight.flops_per_sample == pytest.approx(layer.weight_grad_flops, rel=1e-12)


def test_tensor_parallelism_splits_the_experts_and_the_heads() -> None:
    """T = 8 on a DeepSeek-V3 MoE block: the experts, the up-projections and the output
    projection split 8 ways; the router, the down-projections and every norm whole."""
    arch = model("deepseek-v3").architecture
    assert arch is not None
    h = 7168
    one = transformer_block("b", arch, moe=True)
    eight = transformer_block("b", arch, Parallelism(tensor=8, sequence_parallel=True), moe=True)
    whole = h * (1536 + 576) + 1536 + 512 + 256 * h + 256 + 2 * h
    assert eight.parameters == pytest.approx((one.parameters - whole) / 8 + whole, rel=1e-12)
    assert eight.expert_parameters == one.expert_parameters / 8
    assert eight.active_expert_parameters == one.active_expert_parameters / 8
    # the rank's whole down-projections and router run on its s/8 tokens
    s = arch.seq
    split = 2 * s * (arch.attention_matmul_parameters() - h * (1536 + 576))
    split += 2 * s * (8 * 3 * h * 2048 + 3 * h * 2048)
    replicated = 2 * (s / 8) * (h * (1536 + 576) + 256 * h)
    assert eight.weight_grad_flops == pytest.approx(split / 8 + replicated, rel=1e-12)
    layers = sharded_layers(model("deepseek-v3"), Parallelism(tensor=8, sequence_parallel=True))
    assert len(layers.layers) == 63


@given(
    st.sampled_from(list(MOE_MODELS)),
    st.sampled_from([1, 2]),
    st.booleans(),
    st.sampled_from(["none", "selective", "full"]),
)
def test_more_tensor_parallelism_never_holds_more_of_an_moe_block(
    name: str, t: int, sp: bool, recompute: str
) -> None:
    arch = dataclasses.replace(_arch(name), seq=512)
    sp = sp and t > 1
    blocks = []
    for size in (t, 2 * t):
        par = Parallelism(tensor=size, sequence_parallel=sp, recompute=Recompute.parse(recompute))
        blocks.append(transformer_block("b", arch, par, moe=True))
    one, two = blocks
    assert two.parameters < one.parameters
    assert two.expert_parameters < one.expert_parameters
    assert two.activation_bytes <= one.activation_bytes
    assert two.forward_flops < one.forward_flops


def test_a_tensor_parallel_size_must_split_the_experts() -> None:
    odd = dataclasses.replace(
        SMALL, moe=MixtureOfExperts(4, 2, 31, shared_experts=1, shared_expert_ffn=16)
    )
    with pytest.raises(
        SpecError, match=r"^tensor_parallel 2 must divide the model's moe.expert_ffn \(31\)"
    ):
        transformer_layers(odd, Parallelism(tensor=2))
    shared = dataclasses.replace(
        SMALL, moe=MixtureOfExperts(4, 2, 32, shared_experts=3, shared_expert_ffn=5)
    )
    with pytest.raises(SpecError, match=r"must divide the model's shared experts' width \(15\)"):
        transformer_layers(shared, Parallelism(tensor=2))


def test_a_dense_model_has_no_experts() -> None:
    built = model("llama3-8b")
    assert built.expert_parameters == 0
    assert built.active_parameters == built.parameters
    assert all(layer.expert_parameters == 0 for layer in built.layers)
    with pytest.raises(SpecError, match="a mixture-of-experts block of a model without experts"):
        transformer_block("b", built.architecture, moe=True)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", list(MOE_MODELS))
def test_a_model_file_reproduces_each_moe_model(tmp_path: Path, name: str) -> None:
    from pipesim.files.toml_writer import toml_text

    built = model(name)
    path = tmp_path / f"{name}.toml"
    path.write_text(toml_text(model_table(built)))
    again = load_model(path)
    assert again == built and again.architecture == built.architecture
    assert [layer.work for layer in again.layers] == [layer.work for layer in built.layers]


def test_the_catalogue_lists_the_moe_families() -> None:
    examples = {family.example for family in FAMILIES}
    assert {"mixtral-8x7b", "deepseek-v3", "qwen3-30b-a3b"} <= examples
    assert model("deepseek-v3").default_batch == 15360
    assert "multi-token-prediction module" in model("deepseek-v3").description


def _arch(name: str) -> TransformerArchitecture:
    arch = model(name).architecture
    assert arch is not None
    return arch


def _moe(**changes: object) -> MixtureOfExperts:
    fields: dict[str, object] = {"experts": 8, "top_k": 2, "expert_ffn": 64}
    fields.update(changes)
    return MixtureOfExperts(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"top_k": 9}, "transformer.moe.top_k = 9 must be at most transformer.moe.experts = 8"),
        ({"experts": 0}, "transformer.moe.experts must be an integer >= 1, got 0"),
        ({"top_k": 0}, "transformer.moe.top_k must be an integer >= 1, got 0"),
        ({"expert_ffn": -64}, "transformer.moe.expert_ffn must be an integer >= 1, got -64"),
        ({"shared_experts": -1}, "transformer.moe.shared_experts must be an integer >= 0, got -1"),
        (
            {"shared_expert_ffn": 0},
            "transformer.moe.shared_expert_ffn must be an integer >= 1, got 0",
        ),
        (
            {"first_dense_layers": -2},
            "transformer.moe.first_dense_layers must be an integer >= 0, got -2",
        ),
        ({"layer_frequency": 0}, "transformer.moe.layer_frequency must be an integer >= 1, got 0"),
        ({"capacity_factor": 0.0}, "transformer.moe.capacity_factor must be a number > 0, got 0.0"),
        ({"gated": 1}, "transformer.moe.gated must be true or false, got 1"),
        ({"load_balancing": "aux"}, "transformer.moe.load_balancing must be one of aux_loss"),
    ],
)
def test_bad_moe_fields_are_refused_naming_them(changes: dict[str, object], message: str) -> None:
    with pytest.raises(SpecError) as caught:
        _moe(**changes)
    assert message in str(caught.value)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"kv_lora_rank": 0}, "transformer.mla.kv_lora_rank must be an integer >= 1, got 0"),
        ({"q_lora_rank": -1}, "transformer.mla.q_lora_rank must be an integer >= 1, got -1"),
        ({"v_head_dim": 1.5}, "transformer.mla.v_head_dim must be an integer >= 1, got 1.5"),
    ],
)
def test_bad_latent_attention_fields_are_refused_naming_them(
    changes: dict[str, object], message: str
) -> None:
    fields: dict[str, object] = {
        "kv_lora_rank": 512,
        "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "v_head_dim": 128,
    }
    fields.update(changes)
    with pytest.raises(SpecError) as caught:
        MultiLatentAttention(**fields)  # type: ignore[arg-type]
    assert message in str(caught.value)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"moe": MixtureOfExperts(8, 2, 64, first_dense_layers=2)},
            "transformer.moe.first_dense_layers = 2 leaves no mixture-of-experts block among "
            "transformer.layers = 2",
        ),
        ({"linear_bias": True}, "transformer.linear_bias with transformer.moe"),
        (
            {"mla": MultiLatentAttention(64, 16, 8, 16)},
            "transformer.kv_heads = 2 with transformer.mla",
        ),
        ({"head_width": 0}, "transformer.head_dim must be an integer >= 1, got 0"),
        ({"moe": "experts"}, "transformer.moe must be a MixtureOfExperts, got 'experts'"),
    ],
)
def test_an_architecture_refuses_what_it_cannot_build(
    changes: dict[str, object], message: str
) -> None:
    with pytest.raises(SpecError) as caught:
        dataclasses.replace(SMALL, **changes)  # type: ignore[arg-type]
    assert message in str(caught.value)


def test_a_layers_expert_parameters_are_part_of_its_parameters() -> None:
    common = {
        "forward_flops": 1.0,
        "input_grad_flops": 1.0,
        "weight_grad_flops": 1.0,
        "activation_bytes": 1.0,
        "weight_grad_activation_bytes": 1.0,
        "output_bytes": 1.0,
    }
    with pytest.raises(SpecError, match=r"expert_parameters \(20\) must not exceed parameters"):
        Layer("x", parameters=10.0, expert_parameters=20.0, **common)  # type: ignore[arg-type]
    with pytest.raises(SpecError, match=r"active_expert_parameters \(8\) must not exceed"):
        Layer(
            "x",
            parameters=10.0,
            expert_parameters=4.0,
            active_expert_parameters=8.0,
            **common,  # type: ignore[arg-type]
        )


MOE_FILE = """
name = "tiny-moe"
dtype = "bf16"
default_batch = 8

[transformer]
layers = 2
hidden = 64
heads = 4
kv_heads = 2
ffn = 128
seq = 16
vocab = 1000
mlp = "swiglu"
attention = "eager"
norm = "rmsnorm"
position = "rope"
linear_bias = false
dropout = false
fused_output_norm = false

[transformer.moe]
experts = 4
top_k = 2
expert_ffn = 32
shared_experts = 1
shared_expert_ffn = 16
"""


def test_a_model_file_states_the_experts(tmp_path: Path) -> None:
    path = tmp_path / "tiny.toml"
    path.write_text(MOE_FILE)
    built = load_model(path)
    assert built.architecture == SMALL
    assert built.expert_parameters == 2 * 4 * 3 * 64 * 32


@pytest.mark.parametrize(
    ("line", "bad", "message"),
    [
        ("top_k = 2", "top_k = 5", "transformer.moe.top_k = 5 must be at most"),
        ("experts = 4", "experts = 0", "transformer.moe.experts must be an integer >= 1, got 0"),
        ("expert_ffn = 32", "expert_ffn = -32", "transformer.moe.expert_ffn must be an integer"),
        ("top_k = 2", "top_k = 2\nwidth = 3", "unknown key(s) in transformer.moe: width"),
        (
            "shared_experts = 1",
            'shared_experts = 1\nload_balancing = "lots"',
            "transformer.moe.load_balancing must be one of 'aux_loss'",
        ),
    ],
)
def test_a_model_files_bad_experts_are_refused_naming_the_field(
    tmp_path: Path, line: str, bad: str, message: str
) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(MOE_FILE.replace(line, bad, 1))
    with pytest.raises(SpecError) as caught:
        load_model(path)
    assert str(caught.value).startswith(f"model file {str(path)!r}: ")
    assert message in str(caught.value)


def test_load_balancing_and_capacity_are_stated_not_priced() -> None:
    """The capacity factor and the load-balancing loss are fields for the cost model to
    come: the layers route k·s tokens evenly whatever they say."""
    capped = dataclasses.replace(
        SMALL,
        moe=dataclasses.replace(
            SMALL.moe,  # type: ignore[arg-type]
            capacity_factor=1.25,
            load_balancing=LoadBalancing.SEQ_AUX_LOSS,
        ),
    )
    assert transformer_block("b", capped, moe=True) == transformer_block("b", SMALL, moe=True)
