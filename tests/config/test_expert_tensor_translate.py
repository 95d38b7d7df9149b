"""``--expert-tensor-parallel-size`` through the framework translators: Megatron-LM's read
into ``expert_tensor_parallel`` (stated where it is not T) and written back, with Megatron's
checks as one-line refusals; torchtitan's ``expert_tensor_parallel_degree`` written as the
run's ETP, or named where torchtitan has no such layout."""

from __future__ import annotations

import dataclasses
import tomllib

import pytest

from pipesim.common.checks import SpecError
from pipesim.config.translate.megatron import megatron_args, parse_options, run_from_megatron_args
from pipesim.config.translate.torchtitan import torchtitan_toml
from tests.config.test_megatron import ALLTOALL, MOE, MOE_LAYOUTS, moe_run, small_line
from tests.config.test_torchtitan import plan_run

FOLDED = (*MOE, *ALLTOALL, "--tensor-model-parallel-size", "2", "--sequence-parallel")


def _read(*extra: str, world_size: int = 8) -> object:
    run, _ = run_from_megatron_args(
        small_line(*extra), hardware="a100", world_size=world_size, allow_ignored=True
    )
    return run


def test_etp_is_read_where_it_is_not_t() -> None:
    """T = 2, world 8 (D = 4): ETP 1 with EP 8 is read (ETP x EP = 8 fills T x D); ETP 2 is
    T, stated as nothing."""
    folded = _read(
        *FOLDED, "--expert-tensor-parallel-size", "1", "--expert-model-parallel-size", "8"
    )
    assert (folded.expert_tensor_parallel, folded.expert_parallel) == (1, 8)  # type: ignore[attr-defined]
    same = _read(*FOLDED, "--expert-tensor-parallel-size", "2", "--expert-model-parallel-size", "4")
    assert same.expert_tensor_parallel is None  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("extra", "world", "said"),
    [
        (
            ("--expert-tensor-parallel-size", "1", "--expert-model-parallel-size", "8"),
            4,
            "--expert-tensor-parallel-size 1 x --expert-model-parallel-size 8 must divide "
            "T x CP x D = 4",
        ),
        (("--expert-tensor-parallel-size", "3"), 8, "is not divisible by 3' (Megatron's divide()"),
    ],
)
def test_megatron_s_checks_of_etp_are_one_line(
    extra: tuple[str, ...], world: int, said: str
) -> None:
    with pytest.raises(SpecError) as error:
        _read(*FOLDED, *extra, world_size=world)
    message = str(error.value)
    assert "\n" not in message and said in message, message


def test_etp_without_sequence_parallelism_quotes_megatron() -> None:
    line = [*MOE, *ALLTOALL, "--tensor-model-parallel-size", "2"]
    with pytest.raises(SpecError, match="without also enabling sequence parallelism"):
        _read(*line, "--expert-tensor-parallel-size", "1")


def test_the_allgather_dispatcher_beside_a_folded_layout_is_refused() -> None:
    line = [*MOE, "--tensor-model-parallel-size", "2", "--sequence-parallel"]
    with pytest.raises(SpecError, match="allgather with --expert-tensor-parallel-size 1"):
        _read(*line, "--expert-tensor-parallel-size", "1", "--expert-model-parallel-size", "2")
    # ETP = EP = 1 exchanges nothing: the allgather dispatcher is the same there
    alone = _read(*line, "--expert-tensor-parallel-size", "1")
    assert alone.expert_tensor_parallel == 1  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", ["mixtral-8x7b", "deepseek-v3"])
def test_a_folded_catalogue_run_round_trips(name: str) -> None:
    """The catalogue runs of test_megatron (T = 2 with sequence parallelism) at ETP = 1: the
    writer states --expert-tensor-parallel-size 1, and the arguments read back to the run."""
    run = dataclasses.replace(moe_run(name), expert_tensor_parallel=1)
    assert not isinstance(run.model, str)
    words, unexpressed = megatron_args(run, run.model)
    assert unexpressed == ()
    assert parse_options(words)["--expert-tensor-parallel-size"] == ("1",)
    tensor, _, pipeline, _, context, _, _, data = MOE_LAYOUTS[name]
    back, ignored = run_from_megatron_args(
        words, hardware="h100", world_size=tensor * pipeline * context * data
    )
    assert (back, ignored) == (run, ())
    plain, _ = megatron_args(moe_run(name), run.model)
    assert "--expert-tensor-parallel-size" not in plain


def test_what_megatron_cannot_run_is_named() -> None:
    """ETP 3 does not divide Mixtral's 14,336-wide experts (a run file states it unchecked)."""
    run = dataclasses.replace(moe_run("mixtral-8x7b"), expert_tensor_parallel=3)
    assert not isinstance(run.model, str)
    _, unexpressed = megatron_args(run, run.model)
    assert any(line.startswith("expert_tensor_parallel 3: ") for line in unexpressed)


def _mixtral(**layout: object) -> object:
    fields: dict[str, object] = {
        "microbatch_size": 1,
        "microbatches": 1,
        "tensor_parallel": 2,
        "sequence_parallel": True,
        "data_parallel": 4,
        "expert_parallel": 8,
        "zero": 3,
        "reshard_after_forward": "default",
        "dtype": "bf16",
        "partition": "34",
    }
    return plan_run("mixtral-8x7b", **{**fields, **layout})


def test_torchtitan_writes_the_run_s_etp() -> None:
    """ETP = 1 is torchtitan's other layout: written, EP over dp_shard x tp = 8."""
    text, lost = torchtitan_toml(_mixtral(expert_tensor_parallel=1))  # type: ignore[arg-type]
    parallelism = tomllib.loads(text)["parallelism"]
    assert parallelism["expert_tensor_parallel_degree"] == 1
    assert parallelism["expert_parallel_degree"] == 8
    assert not any("expert" in line for line in lost), lost


def test_torchtitan_names_an_etp_it_has_not() -> None:
    """torchtitan takes ETP = TP or 1: ETP 2 under T = 4 is named."""
    run = _mixtral(tensor_parallel=4, data_parallel=2, expert_parallel=4, expert_tensor_parallel=2)
    _, lost = torchtitan_toml(run)  # type: ignore[arg-type]
    assert any("'Currently we only support ETP=TP or ETP=1'" in line for line in lost), lost
