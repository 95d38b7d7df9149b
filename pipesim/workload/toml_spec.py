"""``--model FILE.toml``: a user's own model, validated field by field.

Either a transformer stack::

    name = "my-gpt"
    dtype = "bf16"
    default_batch = 64
    weight_bytes_per_parameter = 2      # optional; 2, 2 and 12 (Adam, mixed precision)
    gradient_bytes_per_parameter = 2
    optimizer_bytes_per_parameter = 12

    [transformer]
    layers = 24
    hidden = 2048
    ffn = 8192                          # optional, default 4 x hidden
    heads = 16
    seq = 2048
    vocab = 50304
    # optional, with their defaults (pipesim's earlier reading of a transformer stack):
    kv_heads = 16                       # grouped-query attention: fewer key/value heads
    mlp = "gelu"                        # or "swiglu"
    attention = "eager"                 # or "flash"
    norm = "layernorm"                  # or "rmsnorm"
    position = "none"                   # or "learned", "rope"
    tied_embeddings = false
    linear_bias = true
    dropout = true
    embedding_dropout = false
    fused_output_norm = true            # false: the final norm's output stashed as well
    element_bytes = 2                   # 4 for fp32 activations
    mask_bytes = 1                      # a dropout mask's element (default element_bytes / 2)
    head_dim = 128                      # each head's width (default hidden / heads)
    qk_norm = false                     # norms of each head's query and key (Qwen3)

    # optional: mixture-of-experts blocks (pipesim.workload.moe); with their defaults
    [transformer.moe]
    experts = 8                         # routed experts
    top_k = 2                           # experts per token
    expert_ffn = 14336                  # an expert's inner width
    shared_experts = 0
    shared_expert_ffn = 14336           # each shared expert's (default expert_ffn)
    first_dense_layers = 0              # leading blocks with the dense MLP of width ffn
    layer_frequency = 1                 # every N-th block an MoE block
    gated = true                        # SwiGLU experts
    capacity_factor = 1.25              # absent: dropless
    pad_to_capacity = false             # every expert computes its capacity (needs one)
    max_expert_load = 1.0               # the busiest expert's tokens over its even share
    load_balancing = "aux_loss"         # or "seq_aux_loss", "sinkhorn", "none"
    expert_bias = false                 # DeepSeek-V3's aux-loss-free bias per expert

    # optional: multi-head latent attention (DeepSeek-V2/V3), instead of kv_heads
    [transformer.mla]
    q_lora_rank = 1536                  # absent: the query is one projection
    kv_lora_rank = 512
    qk_nope_head_dim = 128
    qk_rope_head_dim = 64
    v_head_dim = 128

or explicit layers, each repeated ``repeat`` times::

    input_bytes = 1e6
    [[layers]]
    name = "block"
    repeat = 8
    forward_flops = 2e9                 # per sample
    input_grad_flops = 2e9
    weight_grad_flops = 2e9
    parameters = 1e6
    activation_bytes = 4e6
    weight_grad_activation_bytes = 2e6  # optional, default activation_bytes
    output_bytes = 1e6
    expert_parameters = 0               # optional: the routed experts' part of parameters
    active_expert_parameters = 0        # optional: the part of those a token goes through

``optimizer_bytes_per_parameter`` (default 12) is the optimizer's state with any fp32 master
weights; ``master_weight_bytes_per_parameter`` (default 0) may hold the master weights apart,
so that the memory breakdown shows them as their own term;
``optimizer_temporary_bytes_per_parameter`` (default 0) is what the optimizer's step allocates
on top (PyTorch's foreach Adam: 4 bytes per parameter, :mod:`pipesim.workload.optimizer`).

How the software runs the model (gradient accumulation fused or not, the attention kernel's
choice where the architecture leaves it) is the run's recipe, not the model's
(:mod:`pipesim.config.recipe`): a file that sets ``fused_gradient_accumulation`` is refused
with a word saying where it went.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import Any, TypeVar

from pipesim.common import checks
from pipesim.common.checks import SpecError
from pipesim.common.limits import Limit, check
from pipesim.errors import named, shown
from pipesim.files.toml_reader import Fields, boolean, read_toml, string
from pipesim.workload.architecture import Attention, Mlp, Norm, Position, TransformerArchitecture
from pipesim.workload.model import Layer, Model
from pipesim.workload.moe import LoadBalancing, MixtureOfExperts, MultiLatentAttention
from pipesim.workload.transformer import TOKEN_BYTES, transformer_layers


def load_model(path: str | Path) -> Model:
    """Read a model TOML file into a :class:`Model`; every error names the file."""
    table = read_toml(path, "model")
    try:
        return model_from_table(
            table, "it", default_name=Path(path).stem, description=f"from {path}"
        )
    except SpecError as error:
        raise SpecError(f"model file {str(path)!r}: {error}") from None


def model_from_table(
    table: dict[str, Any],
    where: str,
    *,
    prefix: str = "",
    default_name: str | None = None,
    description: str = "",
) -> Model:
    """A :class:`Model` from a parsed model table (a model file's, or a run file's inline
    ``[model]``, whose fields are then named under ``prefix``); ``where`` names the file in
    messages about the table as a whole."""
    root = Fields(table, prefix)
    name = root.take("name", string, *(() if default_name is None else (default_name,)))
    dtype = root.take("dtype", string)
    if root.has("transformer") == root.has("layers"):
        raise SpecError(f"{where} needs exactly one of a [transformer] table or [[layers]]")
    if root.has("fused_gradient_accumulation"):
        raise SpecError(
            f"{where}: fused_gradient_accumulation is the run's software, not "
            f"the model's: it is a choice of the run's {named('recipe')} (pipesim, the "
            "default, fuses it; megatron-lm-2021 and deepspeed-pipe do not)"
        )
    architecture = None
    if root.has("transformer"):
        architecture = _architecture(root.table("transformer"))
        layers = transformer_layers(
            architecture,
            gradient_bytes=root.take("gradient_bytes_per_parameter", checks.non_negative, 2.0),
        )
        input_bytes = root.take(
            "input_bytes", checks.non_negative, float(TOKEN_BYTES * architecture.seq)
        )
    else:
        entries = root.take("layers", _layer_tables)
        built: list[Layer] = []
        for index, entry in enumerate(entries):
            layer, repeat = _layer(Fields(entry, root.field(f"layers[{index}]")))
            total = len(built) + repeat
            check(
                Limit.LAYERS, total, f"layers[{index}].repeat = {repeat:,}: {total:,} layers in all"
            )
            built.extend([layer] * repeat)
        layers = tuple(built)
        input_bytes = root.take("input_bytes", checks.non_negative)
    model = Model(
        name,
        layers,
        input_bytes=input_bytes,
        dtype=dtype,
        weight_bytes_per_parameter=root.take("weight_bytes_per_parameter", checks.positive, 2.0),
        gradient_bytes_per_parameter=root.take(
            "gradient_bytes_per_parameter", checks.non_negative, 2.0
        ),
        optimizer_bytes_per_parameter=root.take(
            "optimizer_bytes_per_parameter", checks.non_negative, 12.0
        ),
        default_batch=root.take("default_batch", checks.positive_int),
        description=root.take("description", string, description),
        master_weight_bytes_per_parameter=root.take(
            "master_weight_bytes_per_parameter", checks.non_negative, 0.0
        ),
        architecture=architecture,
        optimizer_temporary_bytes_per_parameter=root.take(
            "optimizer_temporary_bytes_per_parameter", checks.non_negative, 0.0
        ),
    )
    root.done()
    return model


def model_table(model: Model) -> dict[str, Any]:
    """``model`` as the table :func:`model_from_table` reads back to an equal model (its
    layers, precision and optimizer state; a transformer by its architecture, every field
    written out). A model whose layers were rebuilt by a run (unfused accumulation,
    recomputation) or carry kernel-level work without an architecture has no such table:
    ``ValueError``."""
    if not model.fused_gradient_accumulation:
        raise ValueError(f"model {model.name!r}: its layers are a run's, not a model file's")
    table: dict[str, Any] = {
        "name": model.name,
        "description": model.description or None,
        "dtype": model.dtype,
        "default_batch": model.default_batch,
        "weight_bytes_per_parameter": model.weight_bytes_per_parameter,
        "gradient_bytes_per_parameter": model.gradient_bytes_per_parameter,
        "optimizer_bytes_per_parameter": model.optimizer_bytes_per_parameter,
        "master_weight_bytes_per_parameter": model.master_weight_bytes_per_parameter,
        "optimizer_temporary_bytes_per_parameter": model.optimizer_temporary_bytes_per_parameter,
    }
    arch = model.architecture
    if arch is not None:
        if model.input_bytes != TOKEN_BYTES * arch.seq:
            table["input_bytes"] = model.input_bytes
        table["transformer"] = arch.to_json()
        return table
    table["input_bytes"] = model.input_bytes
    groups: list[tuple[Layer, int]] = []
    for layer in model.layers:
        if layer.work is not None or layer.recompute_flops or layer.shared_parameters:
            raise ValueError(  # a transformer's layers are written as its architecture
                f"model {model.name!r}: layer {layer.name!r} has more than a model file states"
            )
        if groups and groups[-1][0] == layer:
            groups[-1] = (layer, groups[-1][1] + 1)
        else:
            groups.append((layer, 1))
    table["layers"] = [
        {
            "name": layer.name,
            "repeat": repeat,
            "forward_flops": layer.forward_flops,
            "input_grad_flops": layer.input_grad_flops,
            "weight_grad_flops": layer.weight_grad_flops,
            "parameters": layer.parameters,
            "activation_bytes": layer.activation_bytes,
            "weight_grad_activation_bytes": layer.weight_grad_activation_bytes,
            "output_bytes": layer.output_bytes,
            # only where the layer has experts: a dense layer's table is as it was
            "expert_parameters": layer.expert_parameters or None,
            "active_expert_parameters": layer.active_expert_parameters or None,
        }
        for layer, repeat in groups
    ]
    return table


def _architecture(spec: Fields) -> TransformerArchitecture:
    """The ``[transformer]`` table."""
    hidden = spec.take("hidden", checks.positive_int)
    count = spec.take("layers", checks.positive_int)
    check(Limit.LAYERS, count, f"transformer.layers = {count:,}")
    heads = spec.take("heads", checks.positive_int)
    if hidden % heads and not spec.has("head_dim") and not spec.has("mla"):
        raise SpecError(
            f"transformer.heads = {heads:,} must divide transformer.hidden = {hidden:,} "
            "(each head gets hidden / heads of the width)"
        )
    element_bytes = spec.take("element_bytes", checks.positive_int, 2)
    architecture = TransformerArchitecture(
        count,
        hidden,
        heads,
        spec.take("ffn", checks.positive_int, 4 * hidden),
        spec.take("seq", checks.positive_int),
        spec.take("vocab", checks.positive_int),
        kv_heads=spec.take("kv_heads", checks.positive_int, heads),
        mlp=spec.take("mlp", _choice(Mlp), Mlp.GELU),
        attention=spec.take("attention", _choice(Attention), Attention.EAGER),
        norm=spec.take("norm", _choice(Norm), Norm.LAYERNORM),
        position=spec.take("position", _choice(Position), Position.NONE),
        tied_embeddings=spec.take("tied_embeddings", boolean, False),
        linear_bias=spec.take("linear_bias", boolean, True),
        dropout=spec.take("dropout", boolean, True),
        embedding_dropout=spec.take("embedding_dropout", boolean, False),
        fused_output_norm=spec.take("fused_output_norm", boolean, True),
        element_bytes=element_bytes,
        mask_bytes=spec.take("mask_bytes", checks.positive_int, max(1, element_bytes // 2)),
        head_width=spec.take("head_dim", checks.positive_int, None),
        qk_norm=spec.take("qk_norm", boolean, False),
        moe=_moe(spec.table("moe")) if spec.has("moe") else None,
        mla=_mla(spec.table("mla")) if spec.has("mla") else None,
    )
    spec.done()
    return architecture


def _moe(spec: Fields) -> MixtureOfExperts:
    """The ``[transformer.moe]`` table."""
    moe = MixtureOfExperts(
        experts=spec.take("experts", checks.positive_int),
        top_k=spec.take("top_k", checks.positive_int),
        expert_ffn=spec.take("expert_ffn", checks.positive_int),
        shared_experts=spec.take("shared_experts", checks.non_negative_int, 0),
        shared_expert_ffn=spec.take("shared_expert_ffn", checks.positive_int, None),
        first_dense_layers=spec.take("first_dense_layers", checks.non_negative_int, 0),
        layer_frequency=spec.take("layer_frequency", checks.positive_int, 1),
        gated=spec.take("gated", boolean, True),
        capacity_factor=spec.take("capacity_factor", checks.positive, None),
        pad_to_capacity=spec.take("pad_to_capacity", boolean, False),
        max_expert_load=spec.take("max_expert_load", checks.positive, 1.0),
        load_balancing=spec.take("load_balancing", _choice(LoadBalancing), LoadBalancing.AUX_LOSS),
        expert_bias=spec.take("expert_bias", boolean, False),
    )
    spec.done()
    return moe


def _mla(spec: Fields) -> MultiLatentAttention:
    """The ``[transformer.mla]`` table."""
    mla = MultiLatentAttention(
        kv_lora_rank=spec.take("kv_lora_rank", checks.positive_int),
        qk_nope_head_dim=spec.take("qk_nope_head_dim", checks.positive_int),
        qk_rope_head_dim=spec.take("qk_rope_head_dim", checks.positive_int),
        v_head_dim=spec.take("v_head_dim", checks.positive_int),
        q_lora_rank=spec.take("q_lora_rank", checks.positive_int, None),
    )
    spec.done()
    return mla


EnumT = TypeVar("EnumT", bound=Enum)


def _choice(kind: type[EnumT]) -> Callable[[str, Any], EnumT]:
    """A field that takes one of ``kind``'s values."""

    def read(field: str, value: Any) -> EnumT:
        for member in kind:
            if value == member.value:
                return member
        choices = ", ".join(repr(member.value) for member in kind)
        raise SpecError(f"{field} must be one of {choices}, got {shown(value)}")

    return read


def _layer_tables(field: str, value: object) -> list[object]:
    if not isinstance(value, list) or not value:
        raise SpecError(
            f"{field} must be a non-empty array of tables ([[layers]]), got {shown(value)}"
        )
    return value


def _layer(fields: Fields) -> tuple[Layer, int]:
    """One ``[[layers]]`` table: the layer and how many times it repeats (not yet repeated,
    so the total can be checked against the limit first)."""
    repeat = fields.take("repeat", checks.positive_int, 1)
    activation = fields.take("activation_bytes", checks.non_negative)
    layer = Layer(
        fields.take("name", string),
        forward_flops=fields.take("forward_flops", checks.non_negative),
        input_grad_flops=fields.take("input_grad_flops", checks.non_negative),
        weight_grad_flops=fields.take("weight_grad_flops", checks.non_negative),
        parameters=fields.take("parameters", checks.non_negative),
        activation_bytes=activation,
        weight_grad_activation_bytes=fields.take(
            "weight_grad_activation_bytes", checks.non_negative, activation
        ),
        output_bytes=fields.take("output_bytes", checks.non_negative),
        expert_parameters=fields.take("expert_parameters", checks.non_negative, 0.0),
        active_expert_parameters=fields.take("active_expert_parameters", checks.non_negative, 0.0),
    )
    fields.done()
    return layer, repeat
