"""Reading a Hugging Face config.json into a pipesim model: the real files of five dense models
and five mixture-of-experts ones give their published parameter counts, Llama 3.1 8B gives the
catalogue's llama3-8b and each MoE file the catalogue's model of it, every key of a file is
accounted for, and whatever cannot be read or modelled is one line naming the file.

The fixtures are the Hub repositories' config.json files, typed key for key; where each was
checked:

* gpt2.json: openai-community/gpt2, as copied into public training scripts (the same 26 keys
  and values in every copy found).
* pythia-1.4b.json: EleutherAI/pythia-1.4b, typed from knowledge of the file; pythia-1b's
  config.json, quoted in a public test, has the same keys and values but for its 8 heads and
  16 layers.
* llama-3.1-8b.json: meta-llama/Llama-3.1-8B, as quoted (llama_3_1_config) in a public
  benchmark's model registry.
* mistral-7b-v0.1.json: mistralai/Mistral-7B-v0.1, as quoted with its URL in several public
  repositories (all identical).
* qwen2.5-7b.json: Qwen/Qwen2.5-7B, typed from knowledge of the file, checked against its
  siblings' (Qwen2.5-0.5B's and -1.5B's config.json, the same keys) and a public training log
  of the loaded Qwen2.5-7B config (its values).
* mixtral-8x7b.json: mistralai/Mixtral-8x7B-v0.1, as quoted in public tests (TensorRT-LLM's
  MIXTRAL_8X7B_CONFIG and others, all identical).
* deepseek-v2-lite.json, deepseek-v3.json: deepseek-ai/DeepSeek-V2-Lite and
  deepseek-ai/DeepSeek-V3, typed from knowledge of the files (their shapes are those of
  arXiv 2405.04434 Appendix B and arXiv 2412.19437 §4.2).
* qwen3-30b-a3b.json, qwen3-235b-a22b.json: Qwen/Qwen3-30B-A3B and Qwen/Qwen3-235B-A22B, typed
  from knowledge of the files (the shapes their model cards tabulate: layers, heads, experts).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import pipesim.files.inputs
from pipesim.common.checks import SpecError
from pipesim.workload import resolve_model
from pipesim.workload.architecture import Attention, Mlp, Norm, Position
from pipesim.workload.catalogue import from_architecture
from pipesim.workload.huggingface import (
    COST_NEUTRAL,
    READ_KEYS,
    accounted_keys,
    default_batch,
    model_from_hf_config,
)
from pipesim.workload.moe import LoadBalancing

FIXTURES = Path(__file__).parent / "fixtures" / "huggingface"
DENSE = ("gpt2", "pythia-1.4b", "llama-3.1-8b", "mistral-7b-v0.1", "qwen2.5-7b")
# each mixture-of-experts fixture and the catalogue's model of it
MOE = {
    "mixtral-8x7b": "mixtral-8x7b",
    "deepseek-v2-lite": "deepseek-v2-lite",
    "deepseek-v3": "deepseek-v3",
    "qwen3-30b-a3b": "qwen3-30b-a3b",
    "qwen3-235b-a22b": "qwen3-235b-a22b",
}


def fixture(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text())
    return loaded


def written(folder: Path, table: dict[str, Any], name: str = "config.json") -> Path:
    path = folder / name
    path.write_text(json.dumps(table))
    return path


# (fixture, sequence, published size, pipesim's exact count). Published: GPT-2 124M (the
# Hub's model card), Pythia 1.4B (1,414,647,808: the Pythia README's table), Llama 3.1 8B
# (8.03B: the Hub's safetensors total), Mistral 7B (7.24B: the same), Qwen2.5 7B (7.61B: its
# model card; 7,615,616,512 in the safetensors, 129,024 above pipesim's: the 28 blocks' QKV
# biases of 4,608, which pipesim's all-or-nothing linear_bias does not count).
PUBLISHED = [
    ("gpt2", None, 124e6, 124_439_808),
    ("pythia-1.4b", None, 1.41e9, 1_414_647_808),
    ("llama-3.1-8b", None, 8.03e9, 8_030_261_248),
    ("mistral-7b-v0.1", 4096, 7.24e9, 7_241_732_096),
    ("qwen2.5-7b", None, 7.61e9, 7_615_616_512 - 28 * 4_608),
    # the published totals of tests/workload/test_moe.py (its sources); the exact counts are
    # pipesim's sums of the files' shapes, the catalogue's
    ("mixtral-8x7b", None, 46.7e9, 46_702_792_704),
    ("deepseek-v2-lite", None, 15.7e9, 15_706_484_224),
    ("deepseek-v3", None, 671e9, 671_026_419_200),
    ("qwen3-30b-a3b", None, 30.5e9, 30_532_122_624),
    ("qwen3-235b-a22b", None, 235e9, 235_093_634_560),
]


@pytest.mark.parametrize(("name", "seq", "published", "exact"), PUBLISHED)
def test_parameter_counts_are_the_published_ones(
    name: str, seq: int | None, published: float, exact: int
) -> None:
    """The count pipesim reports (``pipesim models list``: the layers' parameters, a tied
    output layer's copy once) within 1% of the published size, and equal to the count of the
    real weights less what pipesim cannot represent."""
    built = model_from_hf_config(FIXTURES / f"{name}.json", seq=seq)
    assert abs(built.parameters / published - 1) < 0.01
    assert built.parameters == exact
    assert built.architecture is not None and built.architecture.parameters() == exact


def test_llama_3_1_8b_at_8192_is_the_catalogues_llama3_8b() -> None:
    """Field by field the architecture, and the whole model (layers, precision, optimizer)
    but its name and default batch, which a config.json does not state."""
    mine = model_from_hf_config(FIXTURES / "llama-3.1-8b.json", seq=8192)
    theirs = resolve_model("llama3-8b")
    assert mine.architecture is not None and theirs.architecture is not None
    for spec in dataclasses.fields(theirs.architecture):
        assert getattr(mine.architecture, spec.name) == getattr(theirs.architecture, spec.name), (
            spec.name
        )
    assert dataclasses.replace(mine, name=theirs.name, default_batch=theirs.default_batch) == theirs
    assert (
        mine.master_weight_bytes_per_parameter,
        mine.optimizer_temporary_bytes_per_parameter,
    ) == (
        theirs.master_weight_bytes_per_parameter,
        theirs.optimizer_temporary_bytes_per_parameter,
    )


@pytest.mark.parametrize("name", list(MOE))
def test_a_moe_config_is_the_catalogues_model_of_it(name: str) -> None:
    """At the catalogue's 4,096 tokens the file's architecture is the catalogue's, field by
    field (experts, latent attention, head width, query and key norms), and so are the
    layers."""
    mine = model_from_hf_config(FIXTURES / f"{name}.json", seq=4096)
    theirs = resolve_model(MOE[name])
    assert mine.architecture == theirs.architecture
    assert mine.layers == theirs.layers
    assert mine.expert_parameters == theirs.expert_parameters > 0
    assert mine.active_parameters == theirs.active_parameters


def test_the_moe_keys_are_read() -> None:
    mixtral = model_from_hf_config(FIXTURES / "mixtral-8x7b.json").architecture
    assert mixtral is not None and mixtral.moe is not None
    assert (mixtral.moe.experts, mixtral.moe.top_k, mixtral.moe.expert_ffn) == (8, 2, 14336)
    assert mixtral.moe.load_balancing is LoadBalancing.AUX_LOSS
    v3 = model_from_hf_config(FIXTURES / "deepseek-v3.json", seq=4096)
    arch = v3.architecture
    assert arch is not None and arch.moe is not None and arch.mla is not None
    assert (arch.moe.experts, arch.moe.top_k, arch.moe.shared_experts) == (256, 8, 1)
    assert (arch.moe.first_dense_layers, arch.moe.expert_bias) == (3, True)
    assert arch.moe.load_balancing is LoadBalancing.SEQ_AUX_LOSS
    assert (arch.mla.q_lora_rank, arch.mla.kv_lora_rank, arch.mla.v_head_dim) == (1536, 512, 128)
    assert "num_nextn_predict_layers = 1: the multi-token-prediction module is not built" in (
        v3.description
    )
    assert "quantization_config (fp8): how the checkpoint is stored" in v3.description
    lite = model_from_hf_config(FIXTURES / "deepseek-v2-lite.json").architecture
    assert lite is not None and lite.mla is not None and lite.mla.q_lora_rank is None
    assert lite.moe is not None and not lite.moe.expert_bias
    qwen = model_from_hf_config(FIXTURES / "qwen3-30b-a3b.json").architecture
    assert qwen is not None and qwen.moe is not None
    assert (qwen.head_width, qwen.qk_norm, qwen.moe.expert_ffn) == (128, True, 768)


def test_a_deepseek_config_without_routed_experts_is_dense_with_latent_attention(
    tmp_path: Path,
) -> None:
    table = {**fixture("deepseek-v2-lite"), "n_routed_experts": None}
    arch = model_from_hf_config(written(tmp_path, table), seq=4096).architecture
    assert arch is not None and arch.moe is None and arch.mla is not None
    assert arch.dense_layers == 27


def test_qwen3_dense_leading_blocks_are_read(tmp_path: Path) -> None:
    table = {**fixture("qwen3-30b-a3b"), "mlp_only_layers": [0, 1]}
    arch = model_from_hf_config(written(tmp_path, table), seq=4096).architecture
    assert arch is not None and arch.moe is not None
    assert (arch.moe.first_dense_layers, arch.dense_layers) == (2, 2)


@pytest.mark.parametrize("name", DENSE)
def test_every_model_is_built_as_the_catalogue_builds_one(name: str) -> None:
    """The reader builds its Model itself (it needs nothing of the catalogue); the result is
    what catalogue.from_architecture makes of the same architecture and precision."""
    mine = model_from_hf_config(FIXTURES / f"{name}.json", seq=4096 if "mistral" in name else None)
    assert mine.architecture is not None
    theirs = from_architecture(
        mine.name,
        mine.architecture,
        dtype=mine.dtype,
        default_batch=mine.default_batch,
        description=mine.description,
        weight_bytes=mine.weight_bytes_per_parameter,
        gradient_bytes=4.0,
        master_weight_bytes=mine.master_weight_bytes_per_parameter,
    )
    assert mine == theirs
    assert [layer.work for layer in mine.layers] == [layer.work for layer in theirs.layers]
    assert mine.optimizer_bytes_per_parameter == 8.0
    assert mine.optimizer_temporary_bytes_per_parameter == 4.0


@pytest.mark.parametrize("name", DENSE + tuple(MOE))
def test_every_key_of_a_real_file_is_accounted_for(name: str) -> None:
    table = fixture(name)
    unaccounted = set(table) - accounted_keys(table["model_type"])
    assert not unaccounted
    built = model_from_hf_config(FIXTURES / f"{name}.json", seq=4096 if "mistral" in name else None)
    assert "not read" not in built.description


def test_each_key_is_read_or_cost_neutral_never_both() -> None:
    for family, read in READ_KEYS.items():
        assert not read & COST_NEUTRAL.keys(), family
    assert all(reason.strip() for reason in COST_NEUTRAL.values())


def test_a_key_the_reader_does_not_know_is_named_in_the_description(tmp_path: Path) -> None:
    path = written(tmp_path, {**fixture("llama-3.1-8b"), "frobnication": 3, "zeta": None})
    built = model_from_hf_config(path, seq=8192)
    assert "not read (unknown to pipesim's reader): frobnication, zeta" in built.description


def test_gpt2_is_learned_positions_tied_biased_with_dropout_in_fp32() -> None:
    built = model_from_hf_config(FIXTURES / "gpt2.json")
    arch = built.architecture
    assert arch is not None
    assert (arch.layers, arch.hidden, arch.heads, arch.ffn, arch.seq, arch.vocab) == (
        12,
        768,
        12,
        3072,
        1024,
        50257,
    )
    assert (arch.mlp, arch.norm, arch.position) == (Mlp.GELU, Norm.LAYERNORM, Position.LEARNED)
    assert arch.tied_embeddings and arch.linear_bias and arch.dropout and arch.embedding_dropout
    assert arch.attention is Attention.FLASH
    # no torch_dtype in GPT-2's file: fp32, no master copy, said in the description
    assert (built.dtype, arch.element_bytes, built.weight_bytes_per_parameter) == ("fp32", 4, 4.0)
    assert built.master_weight_bytes_per_parameter == 0.0
    assert "torch_dtype absent: fp32" in built.description


def test_gpt2_dropout_follows_its_probabilities(tmp_path: Path) -> None:
    none = {**fixture("gpt2"), "attn_pdrop": 0.0, "resid_pdrop": 0.0, "embd_pdrop": 0.0}
    arch = model_from_hf_config(written(tmp_path, none)).architecture
    assert arch is not None and not arch.dropout and not arch.embedding_dropout
    one = {**none, "resid_pdrop": 0.1}
    built = model_from_hf_config(written(tmp_path, one))
    assert built.architecture is not None and built.architecture.dropout
    assert "resid_pdrop > 0 without dropout of the attention probabilities" in built.description


def test_gpt2_at_a_shorter_sequence_counts_fewer_positions(tmp_path: Path) -> None:
    """pipesim sizes the learned position table by the sequence trained at: said."""
    full = model_from_hf_config(FIXTURES / "gpt2.json")
    short = model_from_hf_config(FIXTURES / "gpt2.json", seq=512)
    assert full.parameters - short.parameters == 512 * 768
    assert "learned positions counted for the sequence, 512 of n_positions = 1,024" in (
        short.description
    )


def test_pythia_is_rotary_untied_biased_fp16_and_says_parallel_residual() -> None:
    built = model_from_hf_config(FIXTURES / "pythia-1.4b.json")
    arch = built.architecture
    assert arch is not None
    assert (arch.position, arch.norm, arch.mlp) == (Position.ROPE, Norm.LAYERNORM, Mlp.GELU)
    assert not arch.tied_embeddings and arch.linear_bias and not arch.dropout
    assert built.dtype == "fp16" and built.master_weight_bytes_per_parameter == 4.0
    assert "use_parallel_residual: built as a sequential block" in built.description


def test_qwen2_counts_no_linear_bias_and_says_so() -> None:
    built = model_from_hf_config(FIXTURES / "qwen2.5-7b.json")
    arch = built.architecture
    assert arch is not None and not arch.linear_bias
    assert (arch.kv_heads, arch.mlp, arch.norm) == (4, Mlp.SWIGLU, Norm.RMSNORM)
    assert "linear biases: 4,608 of a block's 49,664 present, counted as none" in (
        built.description
    )


@pytest.mark.parametrize(
    ("extra", "linear_bias", "note"),
    [
        ({"attention_bias": True, "mlp_bias": True}, True, False),
        ({"mlp_bias": True}, True, True),  # 2f + h of 2f + 2h + qkv: nearer to all
        ({"attention_bias": True}, False, True),
    ],
)
def test_llama_biases_are_counted_all_or_nothing_by_the_nearer(
    tmp_path: Path, extra: dict[str, bool], linear_bias: bool, note: bool
) -> None:
    built = model_from_hf_config(written(tmp_path, {**fixture("llama-3.1-8b"), **extra}), seq=8192)
    assert built.architecture is not None and built.architecture.linear_bias is linear_bias
    assert ("linear biases:" in built.description) is note


def test_llama_attention_dropout_is_counted_and_said(tmp_path: Path) -> None:
    path = written(tmp_path, {**fixture("llama-3.1-8b"), "attention_dropout": 0.1})
    built = model_from_hf_config(path, seq=8192)
    assert built.architecture is not None and built.architecture.dropout
    assert "attention_dropout > 0 without dropout after the projections" in built.description


def test_a_head_dim_of_hidden_over_heads_is_accepted(tmp_path: Path) -> None:
    path = written(tmp_path, {**fixture("llama-3.1-8b"), "head_dim": 128})
    assert model_from_hf_config(path, seq=8192).parameters == 8_030_261_248


def test_another_head_dim_is_the_heads_width(tmp_path: Path) -> None:
    """Llama 3.1 8B with heads of 96: 32 query heads and 8 key/value heads of 96, the output
    projection from 32·96 back to 4,096; an architecture of its own width, said in the
    description."""
    built = model_from_hf_config(written(tmp_path, _llama(head_dim=96)), seq=8192)
    arch = built.architecture
    assert arch is not None and arch.head_width == 96
    h = 4096

    def attention(d: int) -> int:
        return h * (32 * d + 2 * 8 * d) + 32 * d * h

    assert built.parameters == 8_030_261_248 - 32 * (attention(128) - attention(96))
    assert "32 heads of 96 (8 key/value)" in built.description


def test_a_sliding_window_as_long_as_the_sequence_is_full_attention(tmp_path: Path) -> None:
    assert model_from_hf_config(FIXTURES / "mistral-7b-v0.1.json", seq=4096).parameters > 0
    # Qwen2.5's window is off (use_sliding_window false), whatever its length
    assert model_from_hf_config(FIXTURES / "qwen2.5-7b.json", seq=8192).parameters > 0
    slides = {**fixture("qwen2.5-7b"), "use_sliding_window": True, "max_window_layers": 28}
    assert model_from_hf_config(written(tmp_path, slides), seq=8192).parameters > 0  # no layer


def test_dtype_of_newer_transformers_is_read(tmp_path: Path) -> None:
    table = fixture("pythia-1.4b")
    table["dtype"] = table.pop("torch_dtype")
    assert model_from_hf_config(written(tmp_path, table)).dtype == "fp16"


def test_default_batch_is_4m_tokens_in_a_power_of_two_of_sequences() -> None:
    assert [default_batch(s) for s in (1024, 8192, 131072, 3000, 1 << 23)] == [
        4096,
        512,
        32,
        1024,
        1,
    ]
    assert model_from_hf_config(FIXTURES / "llama-3.1-8b.json").default_batch == 32
    assert model_from_hf_config(FIXTURES / "llama-3.1-8b.json", seq=8192).default_batch == 512


def test_the_name_is_the_file_or_its_folder(tmp_path: Path) -> None:
    folder = tmp_path / "Llama-3.1-8B"
    folder.mkdir()
    path = written(folder, fixture("llama-3.1-8b"))
    assert model_from_hf_config(path, seq=8192).name == "Llama-3.1-8B"
    assert model_from_hf_config(path, seq=8192, name="mine").name == "mine"
    assert model_from_hf_config(FIXTURES / "gpt2.json").name == "gpt2"


def refused(path: Path, **options: Any) -> str:
    """The one-line message of the SpecError reading ``path`` raises, checked to name it."""
    with pytest.raises(SpecError) as caught:
        model_from_hf_config(path, **options)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"Hugging Face config file {str(path)!r}: "), message
    return message


_DROP = object()


def _llama(**changes: Any) -> dict[str, Any]:
    """Llama 3.1 8B's config with ``changes`` (``_DROP``: the key removed)."""
    table = fixture("llama-3.1-8b")
    for key, value in changes.items():
        if value is _DROP:
            del table[key]
        else:
            table[key] = value
    return table


@pytest.mark.parametrize(
    ("table", "message"),
    [
        (
            {**fixture("qwen3-30b-a3b"), "model_type": "qwen2_moe"},
            "mixture-of-experts model_type 'qwen2_moe' is not read yet; pipesim reads the "
            "experts of mixtral, deepseek_v2, deepseek_v3, qwen3_moe configs",
        ),
        (
            _llama(n_routed_experts=256),
            "n_routed_experts = 256: experts in a 'llama' config are not read; pipesim reads "
            "the experts of mixtral",
        ),
        (
            _llama(model_type="bert"),
            "model_type 'bert' is not supported; supported: gpt2, gpt_neox, llama, mistral, "
            "qwen2, mixtral, deepseek_v2, deepseek_v3, qwen3_moe",
        ),
        (_llama(model_type=_DROP), "model_type is required"),
        (
            {**fixture("mixtral-8x7b"), "num_experts_per_tok": 9},
            "num_experts_per_tok = 9 must be at most num_local_experts = 8",
        ),
        (
            {**fixture("mixtral-8x7b"), "num_local_experts": -1},
            "num_local_experts must be an integer from 1 to 16,777,216, got -1",
        ),
        (
            {**fixture("deepseek-v3"), "first_k_dense_replace": 61},
            "first_k_dense_replace leaves no mixture-of-experts block among num_hidden_layers = 61",
        ),
        (
            {**fixture("deepseek-v3"), "n_shared_experts": -1},
            "n_shared_experts must be an integer from 0 to 16,777,216, got -1",
        ),
        (
            {**fixture("deepseek-v3"), "num_key_value_heads": 8},
            "num_key_value_heads = 8 differs from num_attention_heads = 128: latent attention",
        ),
        (
            {**fixture("deepseek-v3"), "topk_method": "magic"},
            "topk_method must be one of greedy, group_limited_greedy, noaux_tc, got 'magic'",
        ),
        (
            {**fixture("deepseek-v2-lite"), "attention_bias": True},
            "attention_bias = true: biases are not modelled in a DeepSeek model's blocks",
        ),
        (
            {**fixture("qwen3-30b-a3b"), "decoder_sparse_step": 2},
            "decoder_sparse_step = 2: Qwen's MoE blocks every 2 blocks from block 1 are not placed",
        ),
        (
            {**fixture("qwen3-30b-a3b"), "mlp_only_layers": [5]},
            "mlp_only_layers = [5]: only leading blocks (0, 1, ...) can keep the dense MLP",
        ),
        (
            {**fixture("qwen3-30b-a3b"), "moe_intermediate_size": 0},
            "moe_intermediate_size must be an integer from 1 to 16,777,216, got 0",
        ),
        (_llama(hidden_size=_DROP), "hidden_size is required"),
        (_llama(hidden_size=None), "hidden_size is required"),
        (
            _llama(num_hidden_layers="32"),
            "num_hidden_layers must be an integer from 1 to 16,777,216, got '32'",
        ),
        (
            _llama(hidden_size=4096.0),
            "hidden_size must be an integer from 1 to 16,777,216, got 4096.0",
        ),
        (_llama(tie_word_embeddings="false"), "tie_word_embeddings must be true or false"),
        (
            _llama(torch_dtype="int8"),
            "torch_dtype must be one of bfloat16, float16, float32, got 'int8'",
        ),
        (_llama(hidden_act="gelu"), "hidden_act must be one of silu, swish, got 'gelu'"),
        (_llama(attention_dropout=2), "attention_dropout must be a number from 0 to 1, got 2"),
        (_llama(num_attention_heads=30), "num_attention_heads = 30 must divide hidden_size"),
        (_llama(num_key_value_heads=5), "num_key_value_heads = 5 must divide"),
        (_llama(max_position_embeddings=_DROP), "max_position_embeddings is required"),
        (
            _llama(num_hidden_layers=200_000),
            "num_hidden_layers = 200,000: beyond the limit of 100,000 layers",
        ),
        (
            fixture("mistral-7b-v0.1"),
            "sliding_window = 4,096 is shorter than the sequence (32,768): pipesim's attention "
            "spans the whole sequence; train on at most 4,096 tokens (seq_length 4096)",
        ),
        (
            {
                **fixture("qwen2.5-7b"),
                "use_sliding_window": True,
                "max_window_layers": 4,
                "sliding_window": 4096,
            },
            "sliding_window = 4,096 is shorter than the sequence (131,072)",
        ),
        (
            {**fixture("gpt2"), "add_cross_attention": True},
            "add_cross_attention = true: the cross-attention of an encoder-decoder",
        ),
        ({**fixture("gpt2"), "n_ctx": 2048}, "n_ctx = 2048 and n_positions = 1024 disagree"),
        ([1, 2], "must be a JSON object, got [1, 2]"),
    ],
)
def test_what_cannot_be_modelled_is_refused_naming_the_file(
    tmp_path: Path, table: Any, message: str
) -> None:
    assert message in refused(written(tmp_path, table))


def test_a_sequence_beyond_gpt2s_positions_is_refused() -> None:
    assert "sequence 2,048 is longer than the 1,024 learned positions (n_positions)" in refused(
        FIXTURES / "gpt2.json", seq=2048
    )


def test_a_bad_sequence_argument_is_refused() -> None:
    with pytest.raises(SpecError, match=r"^seq must be an integer from 1 to 16,777,216, got 0$"):
        model_from_hf_config(FIXTURES / "gpt2.json", seq=0)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"hello", "not valid JSON (Expecting value: line 1 column 1 (char 0))"),
        (
            b'{"model_type": "llama", "rope_theta": NaN}',
            "not valid JSON (NaN is not a JSON number)",
        ),
        (b'{"a": 1, "a": 2}', "not valid JSON (key 'a' appears twice in one object)"),
        (b"[" * 100_000, "not valid JSON (nested too deep)"),
        (b'{"model_type": "\xff"}', "cannot read it (not UTF-8 text: b'\\xff' at byte 16)"),
        (b"{" + b'"n": ' + b"9" * 5000 + b"}", "not valid JSON (Exceeds the limit"),
    ],
)
def test_a_file_that_is_not_json_is_refused_naming_it(
    tmp_path: Path, data: bytes, message: str
) -> None:
    path = tmp_path / "config.json"
    path.write_bytes(data)
    assert message in refused(path)


def test_a_directory_or_a_missing_file_is_refused(tmp_path: Path) -> None:
    assert "cannot read it (Is a directory)" in refused(tmp_path)
    assert "cannot read it (No such file or directory)" in refused(tmp_path / "none.json")


def test_a_file_beyond_the_input_limit_is_a_spec_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PIPESIM_MAX_INPUT_BYTES", "1000")
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**fixture("llama-3.1-8b"), "padding": "x" * 2000}))
    assert "more than 1,000 bytes" in refused(path)


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="a /dev/zero device")
def test_an_endless_device_is_read_up_to_the_limit_and_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PIPESIM_MAX_INPUT_BYTES", "1000")
    assert "more than 1,000 bytes" in refused(Path("/dev/zero"))


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
def test_a_named_pipe_nobody_writes_is_refused_after_the_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pipesim.files.inputs, "PIPE_OPEN_WAIT_S", 0.3)
    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)
    assert "cannot read it (a named pipe that no program opened for writing in 0.3 s)" in (
        refused(fifo)
    )


def test_the_reader_imports_neither_torch_nor_transformers() -> None:
    code = (
        "import sys, pipesim.workload.huggingface as h\n"
        "h.model_from_hf_config(sys.argv[1])\n"
        "assert not {'torch', 'transformers'} & set(sys.modules), 'imported'\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(FIXTURES / "gpt2.json")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
