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
"""

from __future__ import annotations

from pathlib import Path

from pipesim.common import checks
from pipesim.common.checks import SpecError
from pipesim.common.limits import Limit, check
from pipesim.errors import shown
from pipesim.files.toml_reader import Fields, read_toml, string
from pipesim.workload.model import Layer, Model
from pipesim.workload.transformer import TOKEN_BYTES, transformer_layers


def load_model(path: str | Path) -> Model:
    """Read a model TOML file into a :class:`Model`."""
    root = Fields(read_toml(path, "model"), "")
    name = root.take("name", string, Path(path).stem)
    dtype = root.take("dtype", string)
    if root.has("transformer") == root.has("layers"):
        raise SpecError(
            f"model file {str(path)!r} needs exactly one of a [transformer] table or [[layers]]"
        )
    if root.has("transformer"):
        spec = root.table("transformer")
        hidden = spec.take("hidden", checks.positive_int)
        seq = spec.take("seq", checks.positive_int)
        count = spec.take("layers", checks.positive_int)
        check(Limit.LAYERS, count, f"transformer.layers = {count:,}")
        heads = spec.take("heads", checks.positive_int)
        if hidden % heads:
            raise SpecError(
                f"transformer.heads = {heads:,} must divide transformer.hidden = {hidden:,} "
                "(each head gets hidden / heads of the width)"
            )
        layers = transformer_layers(
            count,
            seq=seq,
            hidden=hidden,
            ffn=spec.take("ffn", checks.positive_int, 4 * hidden),
            heads=heads,
            vocab=spec.take("vocab", checks.positive_int),
        )
        spec.done()
        input_bytes = root.take("input_bytes", checks.non_negative, float(TOKEN_BYTES * seq))
    else:
        entries = root.take("layers", _layer_tables)
        built: list[Layer] = []
        for index, entry in enumerate(entries):
            layer, repeat = _layer(Fields(entry, f"layers[{index}]"))
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
        description=root.take("description", string, f"from {path}"),
    )
    root.done()
    return model


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
    )
    fields.done()
    return layer, repeat
