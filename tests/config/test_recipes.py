"""The named recipes and a recipe's choices (pipesim.config.recipe, pipesim.config.recipes)."""

from __future__ import annotations

import pytest

from pipesim.common.checks import SpecError
from pipesim.config import CHOICES, DEFAULT_RECIPE, RECIPES, Recipe, named_recipe
from pipesim.config.recipes import MEGATRON_LM_2021, PIPESIM
from pipesim.errors import fields_spelled
from pipesim.workload.architecture import Attention


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_every_choice_of_every_named_recipe_cites_its_source(name: str) -> None:
    chosen = RECIPES[name]
    assert chosen.name == name and chosen.description
    assert set(chosen.sources) == set(CHOICES)
    assert all(len(text) > 20 for text in chosen.sources.values()), chosen.sources


def test_the_default_recipe_is_what_the_simulator_assumed_before_recipes_had_names() -> None:
    """Literal: messages overlap compute, accumulation fused, the reduce after the backward,
    attention and message overhead left to the model and the hardware."""
    assert DEFAULT_RECIPE is PIPESIM
    assert PIPESIM.to_json() == {
        "name": "pipesim",
        "blocking_p2p": False,
        "fused_gradient_accumulation": True,
        "overlap_grad_reduce": False,
        "attention": None,
        "message_overhead_s": None,
        "scatter_gather_p2p": True,
        "tp_comm_overlap": False,
    }


def test_megatron_2021_is_the_sc21_runs_software() -> None:
    assert MEGATRON_LM_2021.to_json() == {
        "name": "megatron-lm-2021",
        "blocking_p2p": True,
        "fused_gradient_accumulation": False,
        "overlap_grad_reduce": False,
        "attention": "eager",
        "message_overhead_s": 0.24e-3,
        "scatter_gather_p2p": True,
        "tp_comm_overlap": False,
    }


def test_an_unknown_recipe_lists_the_known_and_speaks_the_caller_s_words() -> None:
    with pytest.raises(SpecError, match=r"^recipe must be one of pipesim, megatron-lm-2021"):
        named_recipe("megatron-9000")
    with fields_spelled({"recipe": "--recipe"}), pytest.raises(SpecError, match=r"^--recipe "):
        named_recipe("megatron-9000")


def test_changing_a_choice_renames_the_recipe_and_cites_the_change() -> None:
    changed = PIPESIM.with_choices({"overlap_grad_reduce": True}, why="DDP=torch in the script")
    assert changed.name == "pipesim+overlap_grad_reduce" and changed.overlap_grad_reduce
    assert changed.sources["overlap_grad_reduce"] == "DDP=torch in the script"
    assert changed.sources["blocking_p2p"] == PIPESIM.sources["blocking_p2p"]
    assert "(changed: overlap_grad_reduce=true)" in changed.description
    both = MEGATRON_LM_2021.with_choices({"attention": Attention.FLASH, "blocking_p2p": False})
    assert both.name == "megatron-lm-2021+attention+blocking_p2p"


def test_a_change_to_what_a_recipe_already_chooses_is_no_change() -> None:
    assert MEGATRON_LM_2021.with_choices({"blocking_p2p": True}) is MEGATRON_LM_2021
    assert PIPESIM.with_choices({}) is PIPESIM


@pytest.mark.parametrize(
    ("choices", "message"),
    [
        ({"kernel_fusion": True}, "a recipe has no choice 'kernel_fusion'"),
        ({"blocking_p2p": "yes"}, "recipe.blocking_p2p must be true or false"),
        ({"attention": "flash"}, "recipe.attention must be an Attention"),
        ({"message_overhead_s": -1.0}, "recipe.message_overhead_s must be"),
    ],
)
def test_a_bad_choice_is_refused_naming_the_field(choices: dict[str, object], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        PIPESIM.with_choices(choices)


def test_describe_says_every_choice_in_words() -> None:
    assert MEGATRON_LM_2021.describe() == (
        "megatron-lm-2021: blocking P2P, gradient accumulation a pass of its own, gradient "
        "reduce after the backward, eager attention, 0.24 ms per message, messages scattered over "
        "the tensor-parallel ranks, tensor-parallel collectives between the GEMMs"
    )
    assert isinstance(PIPESIM, Recipe) and "attention as the model's" in PIPESIM.describe()


def test_whole_messages_are_t_times_the_scattered_share_and_gather_nothing() -> None:
    """DeepSpeed's pipeline engine, Megatron-Core and torch.distributed.pipelining send the
    whole tensor from every tensor-parallel rank (deepspeed/runtime/pipe/engine.py's
    _exec_send_activations; Megatron-Core since 39b83c7): at T = 4 without sequence
    parallelism a message is 4 times Megatron-LM 2021's scattered share, and no all-gather is
    added to the receiver's forward. With sequence parallelism the message is the sequence's
    1/T either way."""
    from pipesim.config import RunConfig
    from pipesim.costs.model_on_hardware import model_on_hardware
    from pipesim.hardware import hardware
    from pipesim.parallel.config import Parallelism
    from pipesim.workload import model

    def stages(recipe: Recipe, sequence_parallel: bool = False) -> tuple:  # type: ignore[type-arg]
        run = RunConfig(
            model("megatron-1.7b"),
            hardware("a100"),
            Parallelism(tensor=4, sequence_parallel=sequence_parallel),
            recipe,
        )
        return model_on_hardware(run, 2, 1, 1).stages

    whole = MEGATRON_LM_2021.with_choices({"scatter_gather_p2p": False})
    scattered, sent_whole = stages(MEGATRON_LM_2021), stages(whole)
    assert sent_whole[0].output_bytes == 4 * scattered[0].output_bytes > 0
    assert sent_whole[1].forward_s < scattered[1].forward_s  # no all-gather before it
    assert stages(whole, True)[0].output_bytes == stages(MEGATRON_LM_2021, True)[0].output_bytes
    assert RECIPES["deepspeed-pipe"].scatter_gather_p2p is False
    assert RECIPES["megatron-core-2024"].scatter_gather_p2p is False
    assert RECIPES["megatron-lm-2022"].scatter_gather_p2p is True
