"""A Hugging Face ``config.json`` read into a pipesim :class:`~pipesim.workload.model.Model`.

A user who has a model's ``config.json`` (nothing is downloaded) gets the model pipesim builds
for it: the file's fields mapped onto a :class:`TransformerArchitecture`, whose layers are built
as the catalogue builds its own (:func:`pipesim.workload.catalogue.from_architecture`), trained
as the catalogue's Llama models are (:func:`pipesim.workload.catalogue.llama`).

The families (``model_type``) and what each reads:

==========  ================================================================================
gpt2        n_layer, n_embd, n_head, n_positions (or n_ctx), vocab_size, n_inner (4 x n_embd
            when absent), activation_function (a GELU), attn_pdrop, resid_pdrop and
            embd_pdrop (dropout where > 0), tie_word_embeddings; LayerNorm, learned
            positions, biases on every linear layer
gpt_neox    num_hidden_layers, hidden_size, num_attention_heads, intermediate_size,
            max_position_embeddings, vocab_size, hidden_act (a GELU), tie_word_embeddings,
            attention_bias, attention_dropout, hidden_dropout, use_parallel_residual;
            LayerNorm, rotary positions, biases
llama,      num_hidden_layers, hidden_size, num_attention_heads, num_key_value_heads
mistral,    (grouped-query attention), intermediate_size, max_position_embeddings,
qwen2       vocab_size, hidden_act (silu: SwiGLU), tie_word_embeddings, attention_dropout;
            Llama's attention_bias and mlp_bias, Mistral's sliding_window, Qwen2's
            use_sliding_window, sliding_window, max_window_layers and layer_types; RMSNorm,
            rotary positions; no linear biases but Qwen2's query/key/value biases
mixtral     Mistral's keys, and the experts (every block): num_local_experts,
            num_experts_per_tok, router_aux_loss_coef; intermediate_size is each expert's
qwen3_moe   Qwen2's keys, attention_bias (false), the query and key norms Qwen3 always has,
            and the experts: num_experts, num_experts_per_tok, moe_intermediate_size,
            decoder_sparse_step (1), mlp_only_layers (none, or the leading blocks),
            router_aux_loss_coef
deepseek_   Llama's keys (num_key_value_heads must be the heads), attention_bias (false),
v2, v3      latent attention (q_lora_rank, null for none; kv_lora_rank, qk_nope_head_dim,
            qk_rope_head_dim, v_head_dim) and the experts (n_routed_experts, null for none;
            n_shared_experts, num_experts_per_tok, moe_intermediate_size,
            first_k_dense_replace, moe_layer_freq, aux_loss_alpha and seq_aux for the load
            balancing, topk_method noaux_tc for the expert bias); num_nextn_predict_layers
            (the multi-token-prediction module, not built) and quantization_config (how the
            checkpoint is stored) named in the description
==========  ================================================================================

Every family reads ``torch_dtype`` (or newer transformers' ``dtype``) for the precision, and
``head_dim`` where a file gives it (the heads' width, hidden / heads when absent; Qwen3's 128
is wider).

Every key of a file is accounted for: read (:data:`READ_KEYS`), ignored because it does not
change what a training step costs (:data:`COST_NEUTRAL`, each with its reason), or, where
pipesim cannot honour it, refused or named in the model's ``description``. A key this reader
does not know is named in the description as not read; nothing is dropped silently.

Refused, each in one line naming the file: a file that cannot be read or is not JSON (a
directory, a named pipe nobody writes, a device, more than ``PIPESIM_MAX_INPUT_BYTES``, not
UTF-8, nested too deep, a number JSON does not have); a mixture-of-experts model of a type
not above (Qwen2-MoE, OLMoE, DBRX...) or experts' keys in a dense family's file; a
``model_type`` not above; a missing or ill-typed key; heads that do not divide the width
without a ``head_dim``; more experts per token than experts; MoE blocks this reader cannot
place (Qwen's ``decoder_sparse_step`` above 1, ``mlp_only_layers`` other than the leading
blocks); biases beside experts or latent attention; a sliding attention window shorter than
the sequence.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pipesim.common.checks import SpecError
from pipesim.common.limits import Limit, check
from pipesim.errors import PipesimError, few, named, shown
from pipesim.files.inputs import decode_text, read_input
from pipesim.workload.architecture import Attention, Mlp, Norm, Position, TransformerArchitecture
from pipesim.workload.model import Model
from pipesim.workload.moe import LoadBalancing, MixtureOfExperts, MultiLatentAttention
from pipesim.workload.transformer import TOKEN_BYTES, transformer_layers

# The mixture-of-experts families this reader reads (the others of MOE_TYPES are refused).
MOE_SUPPORTED = ("mixtral", "deepseek_v2", "deepseek_v3", "qwen3_moe")
SUPPORTED = ("gpt2", "gpt_neox", "llama", "mistral", "qwen2", *MOE_SUPPORTED)

# Mixture-of-experts decoders of transformers (the model_type of each one's configuration_*.py);
# a file of another type is found out by its experts' count (MOE_KEYS).
MOE_TYPES = frozenset(
    {
        "dbrx",
        "deepseek_v2",
        "deepseek_v3",
        "granitemoe",
        "jetmoe",
        "mixtral",
        "olmoe",
        "phimoe",
        "qwen2_moe",
        "qwen3_moe",
    }
)
# The keys that count the experts: Mixtral's num_local_experts, Qwen2-MoE's, Qwen3-MoE's and
# OLMoE's num_experts, DeepSeek-V2/V3's n_routed_experts; num_experts_per_tok, the experts each
# token is routed to, comes with all of them.
MOE_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "num_experts_per_tok")

# The largest width, head count, vocabulary or sequence read: beyond every published model's
# (the longest contexts are about 10M tokens, the widest layers about 10^5), and small enough
# that every parameter and FLOP count computed from them stays far inside a float.
MAX_SIZE = 1 << 24

# HF configs state no batch. The default is the Llama 2 run's 4M tokens per optimizer step
# (arXiv 2307.09288 §2.2, as the catalogue's LLAMA_SHAPES note), in whole sequences, rounded
# down to a power of two so that it splits into any power-of-two count of micro-batches.
DEFAULT_TOKENS_PER_STEP = 1 << 22

# Adam as the catalogue's llama() trains it (PyTorch's multi-tensor AdamW, torchtitan): fp32
# gradients (4 bytes), two fp32 moments (8), the step's fp32 temporaries (4).
GRADIENT_BYTES = 4.0
OPTIMIZER_BYTES = 8.0
OPTIMIZER_TEMPORARY_BYTES = 4.0


@dataclass(frozen=True)
class Precision:
    """What a ``torch_dtype`` means for training: pipesim's compute dtype, the bytes of an
    activation and of a weight, and the fp32 master copy mixed precision keeps (none in fp32)."""

    dtype: str
    element_bytes: int
    weight_bytes: float
    master_weight_bytes: float


PRECISIONS = {
    "bfloat16": Precision("bf16", 2, 2.0, 4.0),
    "float16": Precision("fp16", 2, 2.0, 4.0),
    "float32": Precision("fp32", 4, 4.0, 0.0),
}

# Activations of a two-matrix MLP (transformers' ACT2FN names): pipesim counts the MLP's
# matmuls, the same for every GELU variant, and stashes the activation's input either way.
GELU_NAMES = frozenset(
    {"gelu", "gelu_new", "gelu_fast", "gelu_pytorch_tanh", "gelu_accurate", "quick_gelu"}
)
# SiLU (ACT2FN's "swish" is the same function): the gate of Llama's SwiGLU MLP.
SILU_NAMES = frozenset({"silu", "swish"})

_COMMON_KEYS = (
    "model_type",
    "torch_dtype",
    "dtype",
    "vocab_size",
    "tie_word_embeddings",
    "head_dim",
)
_LLAMA_KEYS = (
    "num_hidden_layers",
    "hidden_size",
    "num_attention_heads",
    "num_key_value_heads",
    "intermediate_size",
    "max_position_embeddings",
    "hidden_act",
    "attention_dropout",
)

# The keys each family reads: they decide the architecture, or are checked (and refused or
# noted) where pipesim cannot honour them.
READ_KEYS: dict[str, frozenset[str]] = {
    "gpt2": frozenset(
        (
            *_COMMON_KEYS,
            "n_layer",
            "n_embd",
            "n_head",
            "n_positions",
            "n_ctx",
            "n_inner",
            "activation_function",
            "attn_pdrop",
            "resid_pdrop",
            "embd_pdrop",
            "add_cross_attention",
            "reorder_and_upcast_attn",
        )
    ),
    "gpt_neox": frozenset(
        (
            *_COMMON_KEYS,
            "num_hidden_layers",
            "hidden_size",
            "num_attention_heads",
            "intermediate_size",
            "max_position_embeddings",
            "hidden_act",
            "attention_bias",
            "attention_dropout",
            "hidden_dropout",
            "use_parallel_residual",
        )
    ),
    "llama": frozenset((*_COMMON_KEYS, *_LLAMA_KEYS, "attention_bias", "mlp_bias")),
    "mistral": frozenset((*_COMMON_KEYS, *_LLAMA_KEYS, "sliding_window")),
    "qwen2": frozenset(
        (
            *_COMMON_KEYS,
            *_LLAMA_KEYS,
            "sliding_window",
            "use_sliding_window",
            "max_window_layers",
            "layer_types",
        )
    ),
    "mixtral": frozenset(
        (
            *_COMMON_KEYS,
            *_LLAMA_KEYS,
            "sliding_window",
            "num_local_experts",
            "num_experts_per_tok",
            "router_aux_loss_coef",
        )
    ),
    "qwen3_moe": frozenset(
        (
            *_COMMON_KEYS,
            *_LLAMA_KEYS,
            "attention_bias",
            "sliding_window",
            "use_sliding_window",
            "max_window_layers",
            "layer_types",
            "num_experts",
            "num_experts_per_tok",
            "moe_intermediate_size",
            "decoder_sparse_step",
            "mlp_only_layers",
            "router_aux_loss_coef",
        )
    ),
}
_DEEPSEEK_KEYS = frozenset(
    (
        *_COMMON_KEYS,
        *_LLAMA_KEYS,
        "attention_bias",
        "q_lora_rank",
        "kv_lora_rank",
        "qk_nope_head_dim",
        "qk_rope_head_dim",
        "v_head_dim",
        "n_routed_experts",
        "n_shared_experts",
        "num_experts_per_tok",
        "moe_intermediate_size",
        "first_k_dense_replace",
        "moe_layer_freq",
        "aux_loss_alpha",
        "seq_aux",
        "topk_method",
        "num_nextn_predict_layers",
        "quantization_config",
    )
)
READ_KEYS["deepseek_v2"] = _DEEPSEEK_KEYS
READ_KEYS["deepseek_v3"] = _DEEPSEEK_KEYS

_TOKEN_IDS = "a token id: no cost"
_EPSILON = "a norm's epsilon: no cost"
_ROTARY = "pipesim counts no FLOPs and no parameters for rotary positions"
_GPT2_HEAD = "GPT2DoubleHeadsModel's classification head, not part of the language model"
_GROUPS = "group-limited routing: which experts a token may reach, not how many it reaches"

# Keys that do not change what a training step costs, whichever family, with why.
COST_NEUTRAL: dict[str, str] = {
    "_name_or_path": "where the file was saved from",
    "architectures": "the model class's name: model_type decides the layers, and pipesim "
    "builds the causal language model",
    "transformers_version": "the version of the library that wrote the file",
    "bos_token_id": _TOKEN_IDS,
    "eos_token_id": _TOKEN_IDS,
    "pad_token_id": _TOKEN_IDS,
    "initializer_range": "how the weights are first drawn: no cost",
    "layer_norm_epsilon": _EPSILON,
    "layer_norm_eps": _EPSILON,
    "rms_norm_eps": _EPSILON,
    "use_cache": "the key/value cache of generation: a training step keeps none",
    "task_specific_params": "settings for generating text",
    "tokenizer_class": "the tokenizer: no cost",
    "classifier_dropout": "dropout in a classification head, not in the language model",
    "rope_theta": f"the base of the rotary frequencies: {_ROTARY}",
    "rotary_emb_base": f"the base of the rotary frequencies: {_ROTARY}",
    "rope_scaling": f"rescales the rotary frequencies for longer contexts: {_ROTARY}",
    "rope_parameters": f"the rotary frequencies (newer transformers' rope_theta and "
    f"rope_scaling): {_ROTARY}",
    "rotary_pct": f"the share of each head's width that is rotated: {_ROTARY}",
    "partial_rotary_factor": f"the share of each head's width that is rotated: {_ROTARY}",
    "use_mrope": f"Qwen2-VL's multimodal rotary positions: {_ROTARY}",
    "pretraining_tp": "Llama's reference slicing of each linear layer in pretraining: the "
    "same matmuls in slices, the same FLOPs",
    "scale_attn_weights": "a scalar multiply of the attention scores: no matmul, no parameters",
    "scale_attn_by_inverse_layer_idx": "a scalar multiply of the attention scores: no "
    "matmul, no parameters",
    "summary_type": _GPT2_HEAD,
    "summary_use_proj": _GPT2_HEAD,
    "summary_activation": _GPT2_HEAD,
    "summary_proj_to_labels": _GPT2_HEAD,
    "summary_first_dropout": _GPT2_HEAD,
    "auto_map": "where the model's own modelling code lives",
    "output_router_logits": "whether the forward returns the router's logits (for the "
    "auxiliary loss): no matmul",
    "router_jitter_noise": "noise multiplied into the router's input in training: "
    "elementwise, no matmul",
    "norm_topk_prob": "whether the top-k routing weights are renormalized: no matmul",
    "scoring_func": "the router's scores by softmax or sigmoid: no matmul",
    "routed_scaling_factor": "a scalar multiply of the routed experts' output: no matmul",
    "n_group": _GROUPS,
    "topk_group": _GROUPS,
    "ep_size": "the expert parallelism of DeepSeek's reference inference code: a run's "
    "layout, not the model's",
}


def accounted_keys(model_type: str) -> frozenset[str]:
    """The keys a ``model_type``'s file may hold that this reader reads or knows to be
    cost-neutral; any other key is named in the model's description."""
    return READ_KEYS[model_type] | COST_NEUTRAL.keys()


_REQUIRED: Any = object()


class _Keys:
    """A config's keys, read one by one with errors naming the key. JSON null reads as the
    key's absence: transformers writes null for "the default" (GPT-2's n_inner, Mixtral's
    sliding_window)."""

    def __init__(self, table: dict[str, Any]) -> None:
        self.table = table

    def _value(self, key: str, default: Any) -> Any:
        value = self.table.get(key)
        if value is not None:
            return value
        if default is _REQUIRED:
            raise SpecError(f"{key} is required")
        return default

    def has(self, key: str) -> bool:
        """``key`` is there and not null."""
        return self.table.get(key) is not None

    def size(self, key: str, default: int = _REQUIRED) -> int:
        """A count or width: an integer from 1 to :data:`MAX_SIZE`."""
        value = self._value(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_SIZE:
            raise SpecError(f"{key} must be an integer from 1 to {MAX_SIZE:,}, got {shown(value)}")
        return value

    def count(self, key: str, default: int) -> int:
        """A count that may be 0: an integer from 0 to :data:`MAX_SIZE`."""
        value = self._value(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_SIZE:
            raise SpecError(f"{key} must be an integer from 0 to {MAX_SIZE:,}, got {shown(value)}")
        return value

    def number(self, key: str, default: float) -> float:
        """A number >= 0 (a loss coefficient)."""
        value = self._value(key, default)
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise SpecError(f"{key} must be a number >= 0, got {shown(value)}")
        return float(value)

    def probability(self, key: str, default: float) -> float:
        """A dropout probability: a number from 0 to 1."""
        value = self._value(key, default)
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
            raise SpecError(f"{key} must be a number from 0 to 1, got {shown(value)}")
        return float(value)

    def flag(self, key: str, default: bool) -> bool:
        """A JSON true or false."""
        value = self._value(key, default)
        if not isinstance(value, bool):
            raise SpecError(f"{key} must be true or false, got {shown(value)}")
        return value

    def choice(self, key: str, allowed: frozenset[str], default: str = _REQUIRED) -> str:
        """One of ``allowed``."""
        value = self._value(key, default)
        if not isinstance(value, str) or value not in allowed:
            raise SpecError(
                f"{key} must be one of {', '.join(sorted(allowed))}, got {shown(value)}"
            )
        return str(value)


@dataclass
class _Reading:
    """What a family's reader found: the architecture's numbers, the names of the keys that
    gave them (for messages), and notes for the description."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int
    positions: int | None
    mlp: Mlp
    norm: Norm
    position: Position
    tied: bool
    dropout: bool
    embedding_dropout: bool
    # the linear layers' bias parameters one block of this model has (0: none)
    biases: Callable[[TransformerArchitecture], int]
    window: int | None = None
    names: tuple[str, str, str, str] = (
        "num_hidden_layers",
        "hidden_size",
        "num_attention_heads",
        "max_position_embeddings",
    )
    notes: list[str] = field(default_factory=list)
    head_width: int | None = None
    qk_norm: bool = False
    moe: MixtureOfExperts | None = None
    mla: MultiLatentAttention | None = None


def model_from_hf_config(
    path: str | Path, *, name: str | None = None, seq: int | None = None
) -> Model:
    """The :class:`Model` of the Hugging Face ``config.json`` at ``path``.

    ``name``: the model's name (default: the file's name without ``.json``, or its folder's
    name for a file called ``config.json``). ``seq``: the sequence length to train at; by
    default the one the file states (``max_position_embeddings``, GPT-2's ``n_positions``),
    which for long-context models is far beyond what a training run uses (Llama 3.1:
    131,072): a caller that knows the run's sequence length passes it here, as the command
    line is to do with the run's own when it is given one.

    Trained as the catalogue's Llama models: Adam with fp32 gradients, moments and step
    temporaries, and fp32 master weights under a 16-bit ``torch_dtype`` (none in fp32; a file
    without ``torch_dtype`` is read as fp32); flash attention (transformers' default SDPA
    kernel). The default batch is :data:`DEFAULT_TOKENS_PER_STEP` (4M tokens, Llama 2's) in
    whole sequences, rounded down to a power of two (512 sequences of 8,192 tokens).

    Raises :class:`SpecError` in one line naming the file for anything this reader cannot
    read or pipesim cannot model (see the module's docstring).
    """
    if seq is not None and (
        isinstance(seq, bool) or not isinstance(seq, int) or not 1 <= seq <= MAX_SIZE
    ):
        raise SpecError(f"seq must be an integer from 1 to {MAX_SIZE:,}, got {shown(seq)}")
    where = f"Hugging Face config file {str(path)!r}"
    table = read_hf_config(path)
    try:
        return _model(table, path, name, seq)
    except PipesimError as error:  # a size beyond a limit, too: one line naming the file
        raise SpecError(f"{where}: {error}") from None


def read_hf_config(path: str | Path) -> dict[str, Any]:
    """The JSON object of ``path``, read through pipesim's bounded reader; anything that is
    not one (unreadable, too large, not UTF-8, not JSON, nested too deep, NaN or infinity, a
    key twice) is a :class:`SpecError` naming the file."""
    where = f"Hugging Face config file {str(path)!r}"
    try:
        data = read_input(path, "Hugging Face config", SpecError)
    except PipesimError as error:  # beyond PIPESIM_MAX_INPUT_BYTES: a LimitError
        raise SpecError(str(error)) from None
    text = decode_text(data, where, SpecError)
    try:
        table = json.loads(text, parse_constant=_no_constant, object_pairs_hook=_unique_keys)
    except RecursionError:
        raise SpecError(f"{where}: not valid JSON (nested too deep)") from None
    except ValueError as error:
        raise SpecError(f"{where}: not valid JSON ({error})") from None
    if not isinstance(table, dict):
        raise SpecError(f"{where}: must be a JSON object, got {shown(table)}")
    return table


def _no_constant(word: str) -> float:
    """Python's json reads NaN and Infinity, which JSON does not have: refused."""
    raise ValueError(f"{word} is not a JSON number")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose keys are all different (Python's json keeps the last of two)."""
    table: dict[str, Any] = {}
    for key, value in pairs:
        if key in table:
            raise ValueError(f"key {key!r} appears twice in one object")
        table[key] = value
    return table


def _model(table: dict[str, Any], path: str | Path, name: str | None, seq: int | None) -> Model:
    """The model of a parsed config (errors name the key; the caller names the file)."""
    keys = _Keys(table)
    model_type = _model_type(keys)
    reading = _FAMILIES[model_type](keys)
    precision, dtype_note = _precision(keys)
    arch, notes = _architecture(reading, keys, seq, precision)
    unknown = sorted(set(table) - accounted_keys(model_type))
    notes = [*reading.notes, *notes, *([dtype_note] if dtype_note else [])]
    if unknown:
        notes.append(f"not read (unknown to pipesim's reader): {few(unknown)}")
    chosen = name if name is not None else _default_name(Path(path))
    description = (
        f"{chosen}: Hugging Face {model_type} config {str(path)!r}: {arch.layers} layers, "
        f"hidden {arch.hidden}, {arch.heads} heads{_width(arch)} ({arch.key_value_heads} "
        f"key/value), ffn "
        f"{arch.ffn}, vocab {arch.vocab:,}, seq {arch.seq:,}{_experts_described(arch)}"
    )
    # Built as catalogue.from_architecture builds (a test holds the two equal), not through it:
    # this module then needs nothing of the catalogue, which may come to read .json paths
    # through it.
    return Model(
        chosen,
        transformer_layers(arch, gradient_bytes=GRADIENT_BYTES),
        input_bytes=TOKEN_BYTES * arch.seq,
        dtype=precision.dtype,
        weight_bytes_per_parameter=precision.weight_bytes,
        gradient_bytes_per_parameter=GRADIENT_BYTES,
        optimizer_bytes_per_parameter=OPTIMIZER_BYTES,
        default_batch=default_batch(arch.seq),
        description="; ".join([description, *notes]),
        master_weight_bytes_per_parameter=precision.master_weight_bytes,
        architecture=arch,
        optimizer_temporary_bytes_per_parameter=OPTIMIZER_TEMPORARY_BYTES,
    )


def _width(arch: TransformerArchitecture) -> str:
    """The heads' width where it is their own ("" where it is hidden / heads)."""
    return "" if arch.head_width is None else f" of {arch.head_width}"


def _experts_described(arch: TransformerArchitecture) -> str:
    """The latent attention and the experts, for the description ("" for a dense model)."""
    words = ""
    if arch.mla is not None:
        words += f", latent attention (kv rank {arch.mla.kv_lora_rank})"
    moe = arch.moe
    if moe is not None:
        words += f", {moe.experts} experts of ffn {moe.expert_ffn}, top-{moe.top_k}"
        if moe.shared_experts:
            words += f", {moe.shared_experts} shared"
        if arch.dense_layers:
            words += f", {arch.dense_layers} dense block{'s' if arch.dense_layers > 1 else ''}"
    return words


def default_batch(seq: int) -> int:
    """Sequences per step: :data:`DEFAULT_TOKENS_PER_STEP` tokens, rounded down to a power of
    two, at least 1."""
    sequences = DEFAULT_TOKENS_PER_STEP // seq
    return 1 << (sequences.bit_length() - 1) if sequences else 1


def _default_name(path: Path) -> str:
    """The file's name without its suffix; for ``config.json`` (every Hub repository's), the
    folder's name, which is the model's."""
    if path.stem == "config" and path.absolute().parent.name:
        return path.absolute().parent.name
    return path.stem or "config"


def _model_type(keys: _Keys) -> str:
    """The family; a mixture-of-experts model of a type this reader does not read (by its
    type, or by its experts' count in a dense family's file) or an unknown type is
    refused."""
    model_type = keys.table.get("model_type")
    readable = f"pipesim reads the experts of {', '.join(MOE_SUPPORTED)} configs"
    if isinstance(model_type, str) and model_type in MOE_TYPES - set(MOE_SUPPORTED):
        raise SpecError(f"mixture-of-experts model_type {model_type!r} is not read yet; {readable}")
    if model_type not in MOE_SUPPORTED:
        for key in MOE_KEYS:
            if keys.has(key) and keys.table[key] != 0:
                raise SpecError(
                    f"{key} = {shown(keys.table[key])}: experts in a {shown(model_type)} "
                    f"config are not read; {readable}"
                )
    if model_type is None:
        raise SpecError("model_type is required")
    if not isinstance(model_type, str) or model_type not in SUPPORTED:
        raise SpecError(
            f"model_type {shown(model_type)} is not supported; supported: {', '.join(SUPPORTED)}"
        )
    return str(model_type)


def _precision(keys: _Keys) -> tuple[Precision, str | None]:
    """The precision of ``torch_dtype`` (newer transformers write ``dtype``); absent: fp32,
    as the checkpoint's weights are then read, said in the description."""
    given = [key for key in ("torch_dtype", "dtype") if keys.has(key)]
    if len(given) == 2 and keys.table["torch_dtype"] != keys.table["dtype"]:
        raise SpecError(
            f"torch_dtype {shown(keys.table['torch_dtype'])} and dtype "
            f"{shown(keys.table['dtype'])} disagree"
        )
    if not given:
        return PRECISIONS["float32"], "torch_dtype absent: fp32"
    return PRECISIONS[keys.choice(given[0], frozenset(PRECISIONS))], None


def _gpt2(keys: _Keys) -> _Reading:
    """GPT-2 (transformers' GPT2Config; its defaults where a key is absent): LayerNorm,
    learned positions, GELU, biases on every linear layer, tied embeddings."""
    hidden = keys.size("n_embd")
    if keys.flag("add_cross_attention", False):
        raise SpecError(
            "add_cross_attention = true: the cross-attention of an encoder-decoder is not modelled"
        )
    keys.choice("activation_function", GELU_NAMES, "gelu_new")
    heads = keys.size("n_head")
    dropout, note = _dropout(keys, ("attn_pdrop", 0.1), ("resid_pdrop", 0.1))
    reading = _Reading(
        layers=keys.size("n_layer"),
        hidden=hidden,
        heads=heads,
        kv_heads=heads,
        ffn=keys.size("n_inner", 4 * hidden),
        vocab=keys.size("vocab_size"),
        positions=_gpt2_positions(keys),
        mlp=Mlp.GELU,
        norm=Norm.LAYERNORM,
        position=Position.LEARNED,
        tied=keys.flag("tie_word_embeddings", True),
        dropout=dropout,
        embedding_dropout=keys.probability("embd_pdrop", 0.1) > 0,
        biases=lambda arch: arch.block_bias_parameters(),
        names=("n_layer", "n_embd", "n_head", "n_positions"),
        notes=[note] if note else [],
    )
    if keys.flag("reorder_and_upcast_attn", False):
        # Only transformers' eager attention upcasts the scores; pipesim's flash attention
        # stores none.
        reading.notes.append("reorder_and_upcast_attn: the scores' fp32 upcast not modelled")
    return reading


def _gpt2_positions(keys: _Keys) -> int:
    """GPT-2's learned positions: ``n_positions`` (older files' ``n_ctx`` where it is absent;
    the two must agree where both are given)."""
    if not keys.has("n_positions"):
        return keys.size("n_ctx")
    positions = keys.size("n_positions")
    if keys.has("n_ctx") and keys.size("n_ctx") != positions:
        raise SpecError(f"n_ctx = {keys.table['n_ctx']} and n_positions = {positions} disagree")
    return positions


def _gpt_neox(keys: _Keys) -> _Reading:
    """GPT-NeoX and Pythia (transformers' GPTNeoXConfig; its defaults where a key is absent):
    LayerNorm, rotary positions, GELU, biases, untied embeddings.

    ``use_parallel_residual`` (the default) adds the attention and the MLP of a block, each
    on its own norm of the block's input, to the residual in one step. pipesim has no
    parallel block and builds the sequential one: the same matmuls, FLOPs, parameters and
    norms; the description says so."""
    hidden = keys.size("hidden_size")
    heads = keys.size("num_attention_heads")
    keys.choice("hidden_act", GELU_NAMES, "gelu")
    attention_bias = keys.flag("attention_bias", True)
    dropout, note = _dropout(keys, ("attention_dropout", 0.0), ("hidden_dropout", 0.0))
    notes = [note] if note else []
    if keys.flag("use_parallel_residual", True):
        notes.append(
            "use_parallel_residual: built as a sequential block (the same FLOPs and "
            "parameters; pipesim has no parallel one)"
        )

    def biases(arch: TransformerArchitecture) -> int:
        # query/key/value and output projections (when attention_bias), the MLP's two always
        attention = (arch.hidden + 2 * arch.kv_width) + arch.hidden if attention_bias else 0
        return attention + arch.ffn + arch.hidden

    return _Reading(
        layers=keys.size("num_hidden_layers"),
        hidden=hidden,
        heads=heads,
        kv_heads=heads,
        ffn=keys.size("intermediate_size"),
        vocab=keys.size("vocab_size"),
        positions=_optional_size(keys, "max_position_embeddings"),
        mlp=Mlp.GELU,
        norm=Norm.LAYERNORM,
        position=Position.ROPE,
        tied=keys.flag("tie_word_embeddings", False),
        dropout=dropout,
        # GPTNeoXModel's emb_dropout is nn.Dropout(config.hidden_dropout)
        embedding_dropout=keys.probability("hidden_dropout", 0.0) > 0,
        biases=biases,
        notes=notes,
    )


def _llama_like(keys: _Keys, biases: Callable[[TransformerArchitecture], int]) -> _Reading:
    """The Llama-style decoder (LlamaConfig, MistralConfig, Qwen2Config; their defaults where
    a key is absent): RMSNorm, rotary positions, grouped-query attention, SwiGLU, untied
    embeddings, no dropout but the attention's ``attention_dropout``; ``biases`` counts a
    block's linear biases."""
    heads = keys.size("num_attention_heads")
    keys.choice("hidden_act", SILU_NAMES, "silu")
    dropout, note = _dropout(keys, ("attention_dropout", 0.0), None)
    return _Reading(
        layers=keys.size("num_hidden_layers"),
        hidden=keys.size("hidden_size"),
        heads=heads,
        kv_heads=keys.size("num_key_value_heads", heads),
        ffn=keys.size("intermediate_size"),
        vocab=keys.size("vocab_size"),
        positions=_optional_size(keys, "max_position_embeddings"),
        mlp=Mlp.SWIGLU,
        norm=Norm.RMSNORM,
        position=Position.ROPE,
        tied=keys.flag("tie_word_embeddings", False),
        dropout=dropout,
        embedding_dropout=False,
        biases=biases,
        notes=[note] if note else [],
    )


def _llama(keys: _Keys) -> _Reading:
    """Llama: ``attention_bias`` gives the query/key/value and output projections biases,
    ``mlp_bias`` the MLP's three matrices (LlamaAttention, LlamaMLP)."""
    attention_bias = keys.flag("attention_bias", False)
    mlp_bias = keys.flag("mlp_bias", False)

    def biases(arch: TransformerArchitecture) -> int:
        attention = (arch.hidden + 2 * arch.kv_width) + arch.hidden if attention_bias else 0
        return attention + (2 * arch.ffn + arch.hidden if mlp_bias else 0)

    return _llama_like(keys, biases)


def _mistral(keys: _Keys) -> _Reading:
    """Mistral: no linear biases; ``sliding_window`` (null: none) bounds what each token
    attends to."""
    reading = _llama_like(keys, lambda arch: 0)
    reading.window = _optional_size(keys, "sliding_window")
    return reading


def _qwen2(keys: _Keys) -> _Reading:
    """Qwen2 and Qwen2.5: biases on the query, key and value projections only
    (Qwen2Attention); a sliding window only with ``use_sliding_window``, and then on the
    layers from ``max_window_layers`` on (or where newer files' ``layer_types`` say
    ``sliding_attention``).

    pipesim's ``linear_bias`` is all or nothing: all would count the output projection's and
    the MLP's biases too (2·ffn + 2·hidden a block: 45,056 for Qwen2.5-7B), none misses the
    QKV biases (hidden + 2·kv·d: 4,608). None is the smaller error, by some 10x, and both
    are below 0.02% of the parameters (biases are no matmul FLOPs); the description names
    the QKV biases as not counted."""
    reading = _llama_like(keys, lambda arch: arch.hidden + 2 * arch.kv_width)
    if _qwen2_slides(keys, reading.layers):
        reading.window = keys.size("sliding_window", 4096)  # Qwen2Config's default
    return reading


def _qwen2_slides(keys: _Keys, layers: int) -> bool:
    """Whether any Qwen2 layer attends through a sliding window."""
    if keys.has("layer_types"):
        kinds = keys.table["layer_types"]
        allowed = ("full_attention", "sliding_attention")
        if not isinstance(kinds, list) or any(kind not in allowed for kind in kinds):
            raise SpecError(
                f"layer_types must be a list of {' or '.join(allowed)}, got {shown(kinds)}"
            )
        return "sliding_attention" in kinds
    if not keys.flag("use_sliding_window", False):
        return False
    return keys.size("max_window_layers", 28) < layers  # Qwen2Config's default: 28


def _balancing(keys: _Keys, coefficient: str, default: float) -> LoadBalancing:
    """The auxiliary loss where its coefficient is above 0 (Mixtral's and Qwen's
    ``router_aux_loss_coef``)."""
    return LoadBalancing.AUX_LOSS if keys.number(coefficient, default) > 0 else LoadBalancing.NONE


def _experts(
    keys: _Keys, experts_key: str, experts: int, top_k: int, layers: int, first_dense: int = 0
) -> None:
    """Refuse, in the file's key names, more experts per token than experts and dense
    leading blocks that leave no MoE block."""
    if top_k > experts:
        raise SpecError(
            f"num_experts_per_tok = {top_k:,} must be at most {experts_key} = {experts:,}"
        )
    if first_dense >= layers:
        key = "first_k_dense_replace" if keys.has("first_k_dense_replace") else "mlp_only_layers"
        raise SpecError(
            f"{key} leaves no mixture-of-experts block among num_hidden_layers = {layers:,}"
        )


def _no_biases(keys: _Keys, family: str) -> None:
    """Refuse the attention's biases beside experts or latent attention (none of the
    published models of these families has them; pipesim's linear_bias cannot be set
    with experts)."""
    if keys.flag("attention_bias", False):
        raise SpecError(
            f"attention_bias = true: biases are not modelled in a {family} model's blocks"
        )


def _mixtral(keys: _Keys) -> _Reading:
    """Mixtral: Mistral's block with ``num_local_experts`` SwiGLU experts of
    ``intermediate_size`` in every block, each token to ``num_experts_per_tok``
    (MixtralConfig's defaults: 8 and 2)."""
    reading = _mistral(keys)
    experts = keys.size("num_local_experts", 8)
    top_k = keys.size("num_experts_per_tok", 2)
    _experts(keys, "num_local_experts", experts, top_k, reading.layers)
    reading.moe = MixtureOfExperts(
        experts,
        top_k,
        reading.ffn,
        load_balancing=_balancing(keys, "router_aux_loss_coef", 0.001),
    )
    return reading


def _qwen3_moe(keys: _Keys) -> _Reading:
    """Qwen3-MoE (Qwen3MoeConfig's defaults where a key is absent): Qwen2's block without
    biases, with RMS norms of each head's query and key, ``num_experts`` SwiGLU experts of
    ``moe_intermediate_size``, each token to ``num_experts_per_tok``. Its MoE blocks are every
    ``decoder_sparse_step``-th from block ``step - 1`` but the ``mlp_only_layers``: this
    reader places every block (step 1) with leading dense ones, as the published models
    are."""
    _no_biases(keys, "qwen3_moe")
    reading = _llama_like(keys, lambda arch: 0)
    if _qwen2_slides(keys, reading.layers):
        reading.window = keys.size("sliding_window", 4096)
    step = keys.size("decoder_sparse_step", 1)
    if step != 1:
        raise SpecError(
            f"decoder_sparse_step = {step}: Qwen's MoE blocks every {step} blocks from block "
            f"{step - 1} are not placed (pipesim's layer_frequency counts from block 0)"
        )
    dense = _leading_blocks(keys, "mlp_only_layers", reading.layers)
    experts = keys.size("num_experts", 128)
    top_k = keys.size("num_experts_per_tok", 8)
    _experts(keys, "num_experts", experts, top_k, reading.layers, dense)
    reading.qk_norm = True
    reading.moe = MixtureOfExperts(
        experts,
        top_k,
        keys.size("moe_intermediate_size", 768),
        first_dense_layers=dense,
        load_balancing=_balancing(keys, "router_aux_loss_coef", 0.001),
    )
    return reading


def _leading_blocks(keys: _Keys, key: str, layers: int) -> int:
    """How many leading blocks a list of block indices names (0 for none); a list of other
    blocks is refused."""
    value = keys.table.get(key) or []
    if not isinstance(value, list) or value != list(range(len(value))):
        raise SpecError(
            f"{key} = {shown(value)}: only leading blocks (0, 1, ...) can keep the dense MLP"
        )
    return len(value)


def _deepseek(keys: _Keys) -> _Reading:
    """DeepSeek-V2 and -V3 (DeepseekV2Config's and V3's defaults where a key is absent):
    Llama's block with multi-head latent attention, and from ``first_k_dense_replace`` on
    every ``moe_layer_freq``-th block's MLP ``n_routed_experts`` routed experts of
    ``moe_intermediate_size`` and ``n_shared_experts`` shared ones (a null
    ``n_routed_experts``: a dense model). The multi-token-prediction module
    (``num_nextn_predict_layers``) is not built: the description says so."""
    _no_biases(keys, "DeepSeek")
    reading = _llama_like(keys, lambda arch: 0)
    if reading.kv_heads != reading.heads:
        raise SpecError(
            f"num_key_value_heads = {reading.kv_heads:,} differs from num_attention_heads = "
            f"{reading.heads:,}: latent attention gives every head its keys and values"
        )
    reading.mla = MultiLatentAttention(
        kv_lora_rank=keys.size("kv_lora_rank", 512),
        qk_nope_head_dim=keys.size("qk_nope_head_dim", 128),
        qk_rope_head_dim=keys.size("qk_rope_head_dim", 64),
        v_head_dim=keys.size("v_head_dim", 128),
        q_lora_rank=keys.size("q_lora_rank") if keys.has("q_lora_rank") else None,
    )
    mtp = keys.count("num_nextn_predict_layers", 0)
    if mtp:
        reading.notes.append(
            f"num_nextn_predict_layers = {mtp}: the multi-token-prediction module is not built"
        )
    if keys.has("quantization_config"):
        stored = keys.table["quantization_config"]
        method = stored.get("quant_method") if isinstance(stored, dict) else None
        reading.notes.append(
            f"quantization_config ({method or 'given'}): how the checkpoint is stored; "
            "trained at torch_dtype's precision"
        )
    if not keys.has("n_routed_experts"):
        return reading
    experts = keys.size("n_routed_experts")
    top_k = keys.size("num_experts_per_tok")
    dense = keys.count("first_k_dense_replace", 0)
    _experts(keys, "n_routed_experts", experts, top_k, reading.layers, dense)
    alpha = keys.number("aux_loss_alpha", 0.001)
    balancing = LoadBalancing.NONE
    if alpha > 0:
        balancing = (
            LoadBalancing.SEQ_AUX_LOSS if keys.flag("seq_aux", True) else LoadBalancing.AUX_LOSS
        )
    method = keys.choice(
        "topk_method", frozenset({"greedy", "group_limited_greedy", "noaux_tc"}), "greedy"
    )
    reading.moe = MixtureOfExperts(
        experts,
        top_k,
        keys.size("moe_intermediate_size"),
        shared_experts=keys.count("n_shared_experts", 0),
        first_dense_layers=dense,
        layer_frequency=keys.size("moe_layer_freq", 1),
        load_balancing=balancing,
        expert_bias=method == "noaux_tc",
    )
    return reading


_FAMILIES: dict[str, Callable[[_Keys], _Reading]] = {
    "gpt2": _gpt2,
    "gpt_neox": _gpt_neox,
    "llama": _llama,
    "mistral": _mistral,
    "qwen2": _qwen2,
    "mixtral": _mixtral,
    "qwen3_moe": _qwen3_moe,
    "deepseek_v2": _deepseek,
    "deepseek_v3": _deepseek,
}


def _optional_size(keys: _Keys, key: str) -> int | None:
    """A size that may be absent (or null)."""
    return keys.size(key) if keys.has(key) else None


def _dropout(
    keys: _Keys, attention: tuple[str, float], residual: tuple[str, float] | None
) -> tuple[bool, str | None]:
    """pipesim's ``dropout`` (after the attention probabilities and after the projections,
    together) from the file's probabilities of the two (Llama's family has only the first):
    on where either is above 0, with a note where only one is, since pipesim then counts the
    other's masks too."""
    on_attention = keys.probability(*attention) > 0
    on_residual = residual is not None and keys.probability(*residual) > 0
    if on_attention == on_residual:
        return on_attention, None
    if on_attention:
        return True, (
            f"{attention[0]} > 0 without dropout after the projections: counted as pipesim's "
            "dropout, which masks both"
        )
    return True, (
        f"{residual[0] if residual else ''} > 0 without dropout of the attention "
        "probabilities: counted as pipesim's dropout, which masks both"
    )


def _architecture(
    reading: _Reading, keys: _Keys, seq: int | None, precision: Precision
) -> tuple[TransformerArchitecture, list[str]]:
    """The architecture of ``reading`` at sequence ``seq`` (default: the file's), after the
    checks pipesim's architecture makes, in the file's own key names."""
    layers_key = reading.names[0]
    check(Limit.LAYERS, reading.layers, f"{layers_key} = {reading.layers:,}")
    _check_heads(reading, keys)
    notes: list[str] = []
    length = _sequence(reading, seq, notes)
    if reading.window is not None and reading.window < length:
        raise SpecError(
            f"sliding_window = {reading.window:,} is shorter than the sequence ({length:,}): "
            "pipesim's attention spans the whole sequence; train on at most "
            f"{reading.window:,} tokens ({named('seq_length')} {reading.window})"
        )
    arch = TransformerArchitecture(
        reading.layers,
        reading.hidden,
        reading.heads,
        reading.ffn,
        length,
        reading.vocab,
        kv_heads=reading.kv_heads,
        mlp=reading.mlp,
        attention=Attention.FLASH,
        norm=reading.norm,
        position=reading.position,
        tied_embeddings=reading.tied,
        linear_bias=False,
        dropout=reading.dropout,
        embedding_dropout=reading.embedding_dropout,
        element_bytes=precision.element_bytes,
        head_width=reading.head_width,
        qk_norm=reading.qk_norm,
        moe=reading.moe,
        mla=reading.mla,
    )
    if arch.moe is not None or arch.mla is not None:  # their readers refuse biases
        return arch, notes
    full = replace(arch, linear_bias=True)
    linear_bias, note = _linear_bias(reading.biases(full), full)
    notes.extend([note] if note else [])
    return replace(arch, linear_bias=linear_bias), notes


def _check_heads(reading: _Reading, keys: _Keys) -> None:
    """Heads that divide the width (unless ``head_dim`` gives their width, or latent
    attention its own), key/value heads that divide the heads; a ``head_dim`` other than
    hidden / heads is the heads' width (Qwen3's 128)."""
    _, hidden_key, heads_key, _ = reading.names
    given = keys.has("head_dim") and reading.mla is None
    if reading.hidden % reading.heads and not given and reading.mla is None:
        raise SpecError(
            f"{heads_key} = {reading.heads:,} must divide {hidden_key} = {reading.hidden:,} "
            "(without a head_dim, pipesim's heads are hidden / heads wide)"
        )
    if reading.heads % reading.kv_heads:
        raise SpecError(
            f"num_key_value_heads = {reading.kv_heads:,} must divide {heads_key} = "
            f"{reading.heads:,}"
        )
    if given:
        head_dim = keys.size("head_dim")
        if reading.hidden % reading.heads or head_dim != reading.hidden // reading.heads:
            reading.head_width = head_dim


def _sequence(reading: _Reading, seq: int | None, notes: list[str]) -> int:
    """The sequence trained at: ``seq``, or the file's. Learned positions (GPT-2) cannot go
    beyond their table; pipesim sizes that table by the sequence, so a shorter one counts
    fewer position parameters than the file's, which the description says."""
    positions_key = reading.names[3]
    if seq is None:
        if reading.positions is None:
            raise SpecError(f"{positions_key} is required (or give the sequence length)")
        return reading.positions
    if reading.position is Position.LEARNED and reading.positions is not None:
        if seq > reading.positions:
            raise SpecError(
                f"sequence {seq:,} is longer than the {reading.positions:,} learned positions "
                f"({positions_key})"
            )
        if seq < reading.positions:
            notes.append(
                f"learned positions counted for the sequence, {seq:,} of {positions_key} = "
                f"{reading.positions:,}"
            )
    return seq


def _linear_bias(present: int, full: TransformerArchitecture) -> tuple[bool, str | None]:
    """pipesim's all-or-nothing ``linear_bias`` for a block with ``present`` bias parameters
    of the ``full`` architecture's count: all where present, none where absent, otherwise
    whichever is nearer, said in the description."""
    every = full.block_bias_parameters()
    if present in (0, every):
        return present == every, None
    chosen = 2 * present > every
    counted = f"all {every:,}" if chosen else "none"
    return chosen, (
        f"linear biases: {present:,} of a block's {every:,} present, counted as {counted} "
        "(pipesim's linear_bias is all or nothing)"
    )
