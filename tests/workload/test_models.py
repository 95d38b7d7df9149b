"""Model builders against the papers' published sizes; partitions; TOML models."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from pipesim.common.checks import SpecError
from pipesim.workload import check_partition, even_partition, load_model, model, resolve_model
from pipesim.workload.architecture import TransformerArchitecture
from pipesim.workload.model import Model
from pipesim.workload.transformer import transformer_block


@pytest.mark.parametrize(
    ("layers", "parameters"),
    [(3, 282.2e6), (13, 785.8e6), (103, 5.3e9), (415, 21.0e9), (1663, 83.9e9)],
)
def test_gpipe_transformer_matches_table_1(layers: int, parameters: float) -> None:
    built = model(f"gpipe-transformer-{layers}")
    assert abs(built.parameters - parameters) / parameters < 0.005
    assert built.bytes_per_parameter == 12  # RMSProp, GPipe Table 1


@pytest.mark.parametrize(
    ("name", "parameters"),
    [
        ("amoebanet-d-18-208", 81.5e6),
        ("amoebanet-d-18-416", 319.0e6),
        ("amoebanet-d-18-544", 542.7e6),
        ("amoebanet-d-36-544", 1.06e9),
        ("amoebanet-d-72-512", 1.84e9),
    ],
)
def test_amoebanet_matches_torchgpipes_parameter_counts(name: str, parameters: float) -> None:
    assert abs(model(name).parameters - parameters) / parameters < 0.01


def test_transformer_layer_flops_are_the_zero_bubble_papers() -> None:
    s, h = 1024, 2048
    layer = transformer_block("b", TransformerArchitecture(1, h, 32, 4 * h, s, 1))
    assert layer.forward_flops == s * h * (24 * h + 4 * s)
    assert layer.input_grad_flops == s * h * (24 * h + 8 * s)
    assert layer.weight_grad_flops == s * h * 24 * h
    assert layer.activation_bytes == s * h * 34 + 5 * 32 * s * s  # Korthikanti et al.


def test_unknown_model_lists_families() -> None:
    with pytest.raises(SpecError, match=r"^unknown model 'gpt-9b'; known families, for example: "):
        model("gpt-9b")
    with pytest.raises(SpecError, match="AmoebaNet layers must be a multiple of 3, got 10"):
        model("amoebanet-d-10-128")


def test_even_partition_balances_flops_and_keeps_order() -> None:
    built = model("gpipe-transformer-48")
    ranges = even_partition(built, 8)
    assert next(r.start for r in ranges) == 0 and ranges[-1].stop == len(built.layers)
    assert all(len(r) >= 1 for r in ranges)
    assert all(a.stop == b.start for a, b in itertools.pairwise(ranges))
    costs = [sum(built.layers[i].training_flops for i in r) for r in ranges]
    block = built.layers[1].training_flops
    assert max(costs) <= 7 * block * 1.0001  # the smallest possible bottleneck: 7 blocks
    assert max(costs) - min(costs) <= 2 * block


def test_uniform_layers_split_evenly() -> None:
    assert [len(r) for r in even_partition(model("uniform-12"), 4)] == [3, 3, 3, 3]
    assert sorted(len(r) for r in even_partition(model("uniform-10"), 4)) == [2, 2, 3, 3]


def test_partition_errors() -> None:
    built = model("uniform-6")
    with pytest.raises(
        SpecError, match=r"^stages: 8 stages need at least 8 layers, but model 'uniform-6' has 6$"
    ):
        even_partition(built, 8)
    with pytest.raises(
        SpecError, match=r"^partition covers 5 layers but model 'uniform-6' has 6: 2,3$"
    ):
        check_partition(built, [2, 3], 2)
    with pytest.raises(
        SpecError, match=r"^partition has 3 stage\(s\) but the schedule has 2: 2,2,2$"
    ):
        check_partition(built, [2, 2, 2], 2)
    with pytest.raises(SpecError, match=r"^partition layer counts must be integers >= 1, got 6,0$"):
        check_partition(built, [6, 0], 2)
    assert check_partition(built, [1, 5], 2) == (range(0, 1), range(1, 6))


def test_toml_transformer_model(tmp_path: Path) -> None:
    path = tmp_path / "mine.toml"
    path.write_text(
        'name = "mine"\ndtype = "bf16"\ndefault_batch = 16\n'
        "[transformer]\nlayers = 4\nhidden = 256\nheads = 4\nseq = 128\nvocab = 1000\n"
    )
    built = resolve_model(str(path))
    assert built.name == "mine" and len(built.layers) == 6
    assert (
        built.layers[1].parameters
        == transformer_block("b", TransformerArchitecture(1, 256, 4, 1024, 128, 1)).parameters
    )


MEGATRON_1_7B = """
name = "megatron-1.7b"
dtype = "fp16"
default_batch = 512
weight_bytes_per_parameter = 2
gradient_bytes_per_parameter = 2
optimizer_bytes_per_parameter = 8
master_weight_bytes_per_parameter = 4
optimizer_temporary_bytes_per_parameter = 0

[transformer]
layers = 24
hidden = 2304
heads = 24
seq = 2048
vocab = 51200
position = "learned"
tied_embeddings = true
embedding_dropout = true
fused_output_norm = false
"""


def test_a_toml_model_is_the_catalogue_model_it_describes(tmp_path: Path) -> None:
    """Every field the catalogue's megatron-1.7b sets has a TOML key: the file gives the same
    layers (FLOPs, parameters, activations, kernels) and the same memory fields."""
    path = tmp_path / "mine.toml"
    path.write_text(MEGATRON_1_7B)
    mine, theirs = load_model(path), resolve_model("megatron-1.7b")
    assert mine == theirs and mine.architecture == theirs.architecture
    assert [layer.work for layer in mine.layers] == [layer.work for layer in theirs.layers]
    with pytest.raises(SpecError, match=r"fused_gradient_accumulation is the run's software"):
        load_model_text(
            tmp_path,
            MEGATRON_1_7B.replace(
                "\n\n[transformer]", "\nfused_gradient_accumulation = false\n\n[transformer]", 1
            ),
        )


def load_model_text(folder: Path, text: str) -> Model:
    path = folder / "other.toml"
    path.write_text(text)
    return load_model(path)


def test_toml_layers_model(tmp_path: Path) -> None:
    path = tmp_path / "layers.toml"
    path.write_text(
        'dtype = "fp32"\ndefault_batch = 4\ninput_bytes = 100\n'
        '[[layers]]\nname = "a"\nrepeat = 3\nforward_flops = 1e9\ninput_grad_flops = 1e9\n'
        "weight_grad_flops = 1e9\nparameters = 10\nactivation_bytes = 5\noutput_bytes = 1\n"
    )
    built = load_model(path)
    assert built.name == "layers" and len(built.layers) == 3
    assert built.layers[0].weight_grad_activation_bytes == 5


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            'dtype = "bf16"\ndefault_batch = 1\n',
            "model file '{path}': it needs exactly one of a [transformer] table or [[layers]]",
        ),
        (
            'dtype = "bf16"\ndefault_batch = 1\n[transformer]\nlayers = 0\nhidden = 8\nheads = 1\nseq = 4\nvocab = 10\n',
            "transformer.layers must be an integer >= 1, got 0",
        ),
        (
            'dtype = "bf16"\ndefault_batch = 1\n[transformer]\nlayers = 1\nhidden = 8\nheads = 1\nseq = 4\nvocab = 10\nwidth = 3\n',
            "unknown key(s) in transformer: width",
        ),
        (
            'dtype = "bf16"\ndefault_batch = 1\ninput_bytes = 1\nlayers = 3\n',
            "layers must be a non-empty array of tables ([[layers]]), got 3",
        ),
        (
            'dtype = "bf16"\ndefault_batch = 1\ninput_bytes = 1\n[[layers]]\nname = "a"\nforward_flops = -1\n'
            "input_grad_flops = 1\nweight_grad_flops = 1\nparameters = 1\nactivation_bytes = 1\noutput_bytes = 1\n",
            "layers[0].forward_flops must be a number >= 0, got -1",
        ),
    ],
)
def test_toml_model_errors(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(SpecError) as error:
        load_model(path)
    # every error names the file first (a field's error alone left the user to guess which)
    expected = message.format(path=path)
    if not expected.startswith("model file "):
        expected = f"model file {str(path)!r}: {expected}"
    assert str(error.value) == expected
