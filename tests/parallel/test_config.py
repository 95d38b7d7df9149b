"""The parallel configuration and Megatron's rank order."""

from __future__ import annotations

import pytest

from pipesim.common.checks import SpecError
from pipesim.parallel import Parallelism, RankLayout, Recompute, RecomputeMode, ReshardPolicy
from pipesim.parallel.config import ContextComm


@pytest.mark.parametrize(
    ("text", "mode", "layers", "label"),
    [
        ("none", RecomputeMode.NONE, None, "none"),
        ("Selective", RecomputeMode.SELECTIVE, None, "selective"),
        ("full", RecomputeMode.FULL, None, "full"),
        ("3", RecomputeMode.FULL, 3, "3"),
        ("0", RecomputeMode.NONE, None, "none"),
    ],
)
def test_recompute_reads_megatrons_settings(
    text: str, mode: RecomputeMode, layers: int | None, label: str
) -> None:
    parsed = Recompute.parse(text)
    assert (parsed.mode, parsed.layers_per_stage, parsed.label) == (mode, layers, label)


def test_recompute_n_covers_the_first_n_blocks_of_a_stage() -> None:
    assert Recompute.parse("2").full_layers(5) == 2
    assert Recompute.parse("8").full_layers(5) == 5
    assert Recompute.parse("full").full_layers(5) == 5
    assert Recompute.parse("selective").full_layers(5) == 0


@pytest.mark.parametrize("text", ["some", "-1", "1.5", "٣", "9" * 12])
def test_a_bad_recompute_is_named(text: str) -> None:
    with pytest.raises(SpecError, match=r"^recompute must be none, selective, full or a number"):
        Recompute.parse(text)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"tensor": 0}, "tensor_parallel must be an integer >= 1, got 0"),
        ({"zero": 4}, "zero must be 0, 1, 2 or 3, got 4"),
        ({"zero": True}, "zero must be 0, 1, 2 or 3, got True"),
        ({"reshard_after_forward": "never"}, "reshard_after_forward must be default, always"),
        (
            {"reshard_after_forward": ReshardPolicy.NEVER, "zero": 1},
            "reshard_after_forward never frees gathered weights, which only ZeRO-3",
        ),
        (
            {"cp_comm_type": ContextComm.ALL_GATHER},
            "cp_comm_type all-gather is how context-parallel ranks exchange",
        ),
        ({"sequence_parallel": True}, "sequence_parallel splits the sequence"),
        ({"data": -4}, "data_parallel must be an integer >= 1, got -4"),
    ],
)
def test_bad_configurations_are_refused(fields: dict[str, object], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        Parallelism(**fields)  # type: ignore[arg-type]


def test_the_label_says_every_dimension() -> None:
    par = Parallelism(8, True, Recompute.parse("selective"), 1, 4)
    assert par.label() == "T=8 SP recompute=selective ZeRO-1 D=4"
    assert Parallelism().is_identity and Parallelism(data=8).is_identity
    assert not Parallelism(tensor=2).is_identity


def test_ranks_are_tensor_then_pipeline_then_data() -> None:
    """T = 2, K = 3, D = 2: rank t + 2(p + 3d)."""
    layout = RankLayout(2, 3, 2)
    assert layout.devices == 12
    assert layout.tensor_group(1) == [2, 3]
    assert layout.tensor_group(2, 1) == [10, 11]
    assert layout.data_group(1) == [2, 8]
    assert layout.data_group(0, 1) == [1, 7]
