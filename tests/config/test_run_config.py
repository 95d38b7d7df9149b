"""One run's configuration (pipesim.config.run_config): the recipe reaching the layers, the
hardware and the costs; the whole configuration checked when made; what nothing reads, said."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from pipesim.common.checks import SpecError
from pipesim.config import RunConfig
from pipesim.config.recipes import DEEPSPEED_PIPE, MEGATRON_LM_2021, PIPESIM, TORCHTITAN
from pipesim.costs.model_on_hardware import model_on_hardware
from pipesim.hardware import hardware
from pipesim.hardware.toml_spec import hardware_toml, load_hardware
from pipesim.parallel.config import Parallelism
from pipesim.workload import model
from pipesim.workload.architecture import Attention
from pipesim.workload.transformer import transformer_layers


def test_the_default_recipe_trains_a_catalogue_model_as_it_is() -> None:
    gpt = model("megatron-1.7b")
    assert RunConfig(gpt, hardware("a100")).trained_model is gpt


def test_an_unfused_recipe_rebuilds_the_layers_as_its_software_ran_them() -> None:
    """megatron-lm-2021's layers are the architecture's built with the accumulation a pass of
    its own (the reference built directly), and eager attention."""
    gpt = model("megatron-1.7b")
    arch = gpt.architecture
    assert arch is not None
    trained = RunConfig(gpt, hardware("a100"), recipe=MEGATRON_LM_2021).trained_model
    reference = transformer_layers(
        dataclasses.replace(arch, attention=Attention.EAGER),
        gradient_bytes=gpt.gradient_bytes_per_parameter,
        fused_accumulation=False,
    )
    assert trained.layers == reference and not trained.fused_gradient_accumulation
    # a layer compares by its totals; the separate accumulation pass is in its kernels
    assert [layer.work for layer in trained.layers] == [layer.work for layer in reference]
    assert [layer.work for layer in trained.layers] != [layer.work for layer in gpt.layers]


def test_a_recipe_s_attention_reaches_the_architecture_and_the_stash() -> None:
    gpt = model("gpt-1.3b")
    flash = RunConfig(gpt, hardware("a100"), recipe=TORCHTITAN).trained_model
    assert flash.architecture is not None and flash.architecture.attention is Attention.FLASH
    stash = sum(layer.activation_bytes for layer in flash.layers)
    assert stash < sum(layer.activation_bytes for layer in gpt.layers)


def test_a_recipe_s_message_overhead_replaces_the_hardware_s() -> None:
    tpu = hardware("tpu-v3")
    assert tpu.message_overhead_s == 0.0
    transformer = model("gpipe-transformer-48")
    run = RunConfig(transformer, tpu, recipe=MEGATRON_LM_2021)
    assert run.job_hardware.message_overhead_s == 0.24e-3
    assert RunConfig(transformer, tpu).job_hardware is tpu


def test_the_recipe_reaches_the_costs() -> None:
    """Blocking messages occupy the sender; the unfused accumulation slows the weight
    gradients; an overlapped reduce leaves less of it exposed in the optimizer step."""
    gpt, a100 = model("megatron-1.7b"), hardware("a100")
    base = model_on_hardware(RunConfig(gpt, a100), 2, 1, 4)
    old = model_on_hardware(RunConfig(gpt, a100, recipe=MEGATRON_LM_2021), 2, 1, 4)
    assert old.transfers_use_compute and not base.transfers_use_compute
    assert all(
        o.weight_grad_s > b.weight_grad_s for o, b in zip(old.stages, base.stages, strict=True)
    )
    replicas = Parallelism(data=4)
    after = model_on_hardware(RunConfig(gpt, a100, replicas), 2, 1, 4)
    overlapped = RunConfig(gpt, a100, replicas, PIPESIM.with_choices({"overlap_grad_reduce": True}))
    during = model_on_hardware(overlapped, 2, 1, 4)
    assert all(
        d.optimizer_step_s < a.optimizer_step_s
        for d, a in zip(during.stages, after.stages, strict=True)
    )


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"parallelism": Parallelism(tensor=3)}, "tensor_parallel 3 must divide the 8 devices"),
        ({"parallelism": Parallelism(tensor=16)}, "add tensor_across_nodes if"),
        ({"model": dataclasses.replace(model("uniform-8"), dtype="fp7")}, "'fp7'"),
        ({"recipe": "pipesim"}, "run.recipe must be a Recipe"),
    ],
)
def test_a_configuration_is_checked_whole_when_made(
    changes: dict[str, object], message: str
) -> None:
    fields: dict[str, object] = {"model": model("uniform-8"), "hardware": hardware("a100")}
    with pytest.raises(SpecError, match=message):
        RunConfig(**{**fields, **changes})  # type: ignore[arg-type]


def test_a_tensor_group_across_nodes_is_allowed_when_asked() -> None:
    run = RunConfig(
        model("megatron-39.1b"), hardware("a100"), Parallelism(tensor=16), PIPESIM, True
    )
    assert run.parallelism.tensor == 16


def test_efficiency_a_users_file_gives_is_said_to_be_unread_where_nothing_reads_it(
    tmp_path: Path,
) -> None:
    """On a kernel-level accelerator every layer of a catalogue transformer is timed on the
    curve: the costs are the same at any efficiency (so the warning is true), and a file that
    gives one hears so; the catalogue's own entry and a file without it hear nothing."""
    gpt = model("gpt-1.3b")
    path = tmp_path / "mine.toml"
    path.write_text(hardware_toml(hardware("a100")))
    mine = load_hardware(path)
    assert mine.accelerator.efficiency_given
    slower = dataclasses.replace(
        mine, accelerator=dataclasses.replace(mine.accelerator, efficiency=0.05)
    )
    costs = [model_on_hardware(RunConfig(gpt, spec), 2, 1, 4).stages for spec in (mine, slower)]
    assert costs[0] == costs[1]
    (note,) = RunConfig(gpt, mine).unread_fields()
    assert "accelerator.efficiency 0.5 is read by no layer of gpt-1.3b" in note
    assert RunConfig(gpt, hardware("a100")).unread_fields() == ()
    # on the same file, a model given as layers reads it: nothing to say
    assert RunConfig(model("uniform-8"), mine).unread_fields() == ()
    without = tmp_path / "without.toml"
    without.write_text(
        "\n".join(
            line for line in path.read_text().splitlines() if not line.startswith("efficiency")
        )
    )
    bare = load_hardware(without)
    assert bare.accelerator.efficiency is None
    assert RunConfig(gpt, bare).unread_fields() == ()
    with pytest.raises(SpecError, match="gives no efficiency"):
        model_on_hardware(RunConfig(model("uniform-8"), bare), 2, 1, 4)


def test_a_recipe_s_choices_for_a_model_given_as_layers_are_said_to_change_nothing() -> None:
    layers = model("uniform-8")
    run = RunConfig(layers, hardware("a100"), recipe=TORCHTITAN)
    assert run.trained_model is layers
    notes = run.unread_fields()
    assert len(notes) == 2
    assert "unfused gradient accumulation changes no layer of uniform-8" in notes[0]
    assert "flash attention changes no layer of uniform-8" in notes[1]
    assert len(RunConfig(layers, hardware("a100"), recipe=DEEPSPEED_PIPE).unread_fields()) == 1


def test_a_run_configuration_pickles_to_an_equal_one(tmp_path: Path) -> None:
    """Worker processes receive it pickled: a named recipe's cited sources and a TOML file's
    accelerator (its peaks a read-only mapping) come back equal, and hash alike."""
    import copy
    import pickle

    path = tmp_path / "mine.toml"
    path.write_text(hardware_toml(hardware("h100")))
    run = RunConfig(model("gpt-1.3b"), load_hardware(path), Parallelism(data=2), MEGATRON_LM_2021)
    again = pickle.loads(pickle.dumps(run))
    assert again == run and hash(again) == hash(run)
    assert again.recipe.sources == run.recipe.sources
    assert again.hardware.accelerator.efficiency_given
    assert copy.deepcopy(run) == run


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"sources": None}, "recipe.sources must map choices"),
        ({"sources": {"bogus": "y"}}, "recipe.sources must map choices"),
        ({"description": None}, "recipe.description must be text"),
    ],
)
def test_a_recipe_made_in_python_is_checked(fields: dict[str, object], message: str) -> None:
    from pipesim.config import Recipe

    with pytest.raises(SpecError, match=message):
        Recipe(**{"name": "mine", "description": "mine", **fields})  # type: ignore[arg-type]
    with pytest.raises(SpecError, match="changed choices must map names to values"):
        PIPESIM.with_choices([("blocking_p2p", True)])  # type: ignore[arg-type]
    with pytest.raises(SpecError, match=r"run\.tensor_across_nodes must be true or false"):
        RunConfig(model("uniform-8"), hardware("a100"), tensor_across_nodes="yes")  # type: ignore[arg-type]


def test_the_tensor_parallel_overlap_warns_where_it_cannot_be_what_it_says() -> None:
    """On a model given as layers it changes nothing; under T > 1 without sequence
    parallelism Megatron-Core refuses it (and pipesim's Megatron reader does): both said, once
    each; with sequence parallelism, or at T = 1, nothing to say."""
    from pipesim.config.recipes import NEMO_2024

    layers_run = RunConfig(model("amoebanet-d-18-256"), hardware("a100"), recipe=NEMO_2024)
    layers_note = layers_run.unread_fields()[-1]
    assert "tensor-parallel overlap changes no layer of amoebanet-d-18-256" in layers_note
    gpt = model("megatron-1.7b")
    (note,) = RunConfig(gpt, hardware("a100"), Parallelism(tensor=8), NEMO_2024).unread_fields()
    assert "without sequence parallelism, which Megatron-Core refuses" in note
    with_sp = Parallelism(tensor=8, sequence_parallel=True)
    assert RunConfig(gpt, hardware("a100"), with_sp, NEMO_2024).unread_fields() == ()
    assert RunConfig(gpt, hardware("a100"), recipe=NEMO_2024).unread_fields() == ()
