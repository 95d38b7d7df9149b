"""Megatron-LM's launch arguments read into run files and written back
(pipesim.config.translate.megatron): the sc21 Table 1 rows translate to the catalogue's models
and the script's layout, a plan's run survives the round trip, every refusal is one line
naming the option, and every option of every fixture is in exactly one table."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipesim.common.checks import SpecError
from pipesim.config.run_file import RunFile
from pipesim.config.translate.megatron import (
    COST_NEUTRAL,
    ERAS,
    MAPPED,
    MEGATRON_RECIPES,
    REFUSED,
    SINCE,
    UNTIL,
    known,
    megatron_args,
    megatron_model,
    megatron_partition,
    megatron_words_from_text,
    padded_vocab,
    parse_options,
    run_from_megatron_args,
)
from pipesim.workload.architecture import Attention, Mlp, Norm, Position, TransformerArchitecture
from pipesim.workload.catalogue import model as catalogue_model
from pipesim.workload.catalogue import resolve_model
from pipesim.workload.moe import LoadBalancing, MixtureOfExperts, MultiLatentAttention

FIXTURES = Path(__file__).parent / "fixtures" / "megatron"
SC21_1_7B = FIXTURES / "sc21_table1_1.7b.txt"
SC21_145_6B = FIXTURES / "sc21_table1_145.6b.txt"
GPT3_175B = FIXTURES / "gpt3_175b_distributed.txt"
LLAMA3_8B = FIXTURES / "llama3_8b_h100_fp8.txt"


def words_of(path: Path) -> list[str]:
    return megatron_words_from_text(path.read_text(), str(path))


def read(path: Path, world_size: int | None, **keywords: object) -> RunFile:
    run, _ = run_from_megatron_args(
        words_of(path),
        hardware="a100",
        world_size=world_size,
        allow_ignored=True,
        **keywords,  # type: ignore[arg-type]
    )
    return run


def architecture_of(run: RunFile) -> TransformerArchitecture:
    assert not isinstance(run.model, str)
    assert run.model.architecture is not None
    return run.model.architecture


def catalogue_architecture(name: str) -> TransformerArchitecture:
    arch = catalogue_model(name).architecture
    assert arch is not None
    return arch


def fields(arch: TransformerArchitecture) -> dict[str, object]:
    return dataclasses.asdict(arch)


# ---------------------------------------------------------------------------------------------
# The sc21 Table 1 rows (examples/sc21/run_table_1.sh at 6985e58)


def test_the_1_7b_row_is_the_catalogue_model_with_megatron_s_own_padding_at_t1() -> None:
    """The script's T = 1 pads GPT-2's 50,257 tokens to 50,304; the paper (and the catalogue)
    count 51,200 for every row. Every other field is the catalogue's."""
    run = read(SC21_1_7B, world_size=4 * 8)  # SBATCH --nodes=4, SRUN 8 tasks a node
    arch = architecture_of(run)
    assert arch.vocab == 50304 == padded_vocab(50257, 128, 1)
    assert not isinstance(run.model, str) and "GPT2BPETokenizer's 50,257" in run.model.description
    assert fields(arch) == fields(catalogue_architecture("megatron-1.7b")) | {"vocab": 50304}
    assert (run.tensor_parallel, run.pipeline_parallel, run.data_parallel) == (1, 1, 32)
    assert (run.microbatch_size, run.batch, run.microbatches) == (16, 512, 1)
    assert (run.schedule, run.chunks, run.partition) == ("1f1b", 1, "26")
    assert run.recompute == "full"  # --activations-checkpoint-method uniform, 1 layer a unit
    assert run.recipe == "megatron-lm-2021"
    assert run.overlap_grad_reduce is True  # DDP=torch
    assert (run.zero, run.sequence_parallel, run.attention, run.blocking_p2p) == (
        0,
        False,
        None,
        None,
    )


def test_the_1_7b_row_padded_as_the_paper_counts_is_the_catalogue_model_exactly() -> None:
    words = [*words_of(SC21_1_7B), "--make-vocab-size-divisible-by", "1024"]
    run, _ = run_from_megatron_args(
        words, hardware="a100", world_size=32, allow_ignored=True, name="megatron-1.7b"
    )
    assert run.model == catalogue_model("megatron-1.7b")


def test_the_145_6b_row_is_the_catalogue_model_and_the_script_s_layout() -> None:
    run = read(SC21_145_6B, world_size=192 * 8, name="megatron-145.6b")
    assert fields(architecture_of(run)) == fields(catalogue_architecture("megatron-145.6b"))
    assert run.model == catalogue_model("megatron-145.6b")
    assert (run.tensor_parallel, run.pipeline_parallel, run.data_parallel) == (8, 8, 24)
    assert (run.microbatch_size, run.batch, run.microbatches) == (2, 2304, 48)
    assert (run.schedule, run.chunks) == ("interleaved-1f1b", 2)  # 80 / (8 x 5)
    assert run.partition == ",".join(["6", *["5"] * 14, "6"])
    assert run.recompute == "full"
    assert (run.recipe, run.overlap_grad_reduce, run.blocking_p2p) == (
        "megatron-lm-2021",
        None,
        None,
    )


def test_the_sc21_rows_round_trip_in_sc21_s_own_option_names() -> None:
    for path, world in ((SC21_1_7B, 32), (SC21_145_6B, 1536)):
        run = read(path, world_size=world)
        assert not isinstance(run.model, str)
        words, unexpressed = megatron_args(run, run.model)
        assert unexpressed == ()
        assert "--activations-checkpoint-method" in words and "--recompute-method" not in words
        back, ignored = run_from_megatron_args(words, hardware="a100", world_size=world)
        assert back == run and ignored == ()


def test_without_the_world_size_nothing_is_inferred() -> None:
    run = read(SC21_145_6B, world_size=None)
    assert (run.data_parallel, run.microbatches) == (None, None)
    assert (run.batch, run.microbatch_size) == (2304, 2)


# ---------------------------------------------------------------------------------------------
# Today's examples (the snapshot d98e8a6)


def test_the_gpt3_example_needs_a_world_its_own_script_does_not_give() -> None:
    with pytest.raises(SpecError) as error:
        read(GPT3_175B, world_size=8)  # the script's GPUS_PER_NODE x NUM_NODES
    message = str(error.value)
    assert "\n" not in message and "world size 8" in message and "= 128" in message
    run = read(GPT3_175B, world_size=1024)
    assert fields(architecture_of(run)) == fields(catalogue_architecture("gpt3-175b"))
    assert run.recipe == "megatron-core-2024"  # --attention-backend: 9dc7fef, 2024-12-07
    assert (run.data_parallel, run.microbatches, run.partition) == (
        8,
        192,
        ",".join(["7", *["6"] * 14, "7"]),
    )
    assert run.attention is None  # auto under Transformer Engine: the recipe's flash
    assert not isinstance(run.model, str)
    assert (run.model.dtype, run.model.gradient_bytes_per_parameter) == ("fp16", 2.0)


def test_cost_neutral_options_are_refused_unless_allowed_and_then_listed() -> None:
    words = words_of(GPT3_175B)
    with pytest.raises(SpecError) as error:
        run_from_megatron_args(words, hardware="a100", world_size=1024)
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith("Megatron-LM arguments: --step-batch-size-schedule ")
    assert "; allow_ignored would list it as ignored" in message
    _, ignored = run_from_megatron_args(words, hardware="a100", world_size=1024, allow_ignored=True)
    listed = {line.split(" ", 1)[0] for line in ignored}
    assert listed == {o for o in parse_options(words) if o in COST_NEUTRAL}
    assert all(": ignored (" in line for line in ignored)


def test_the_llama_example_is_refused_for_what_pipesim_does_not_model() -> None:
    with pytest.raises(SpecError) as error:
        read(LLAMA3_8B, world_size=8)
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith("Megatron-LM arguments: --cross-entropy-loss-fusion: ")
    for option in ("--overlap-param-gather", "--fp8-format", "--fp8-param-gather"):
        assert option in message


def test_the_llama_example_without_its_refused_options_is_llama3_8b() -> None:
    """NullTokenizer's vocabulary is --vocab-size + 1 (until c9dfe34), padded to 128; the
    attention is the recipe's (flash), not the architecture's."""
    options = parse_options(words_of(LLAMA3_8B))
    words = [w for o, v in options.items() if o not in REFUSED for w in (o, *v)]
    run, ignored = run_from_megatron_args(words, hardware="h100", world_size=8, allow_ignored=True)
    arch = architecture_of(run)
    assert arch.vocab == padded_vocab(128256 + 1, 128, 1) == 128384
    assert fields(arch) == fields(catalogue_architecture("llama3-8b")) | {
        "vocab": 128384,
        "attention": Attention.EAGER,
    }
    assert (run.recipe, run.attention, run.zero, run.overlap_grad_reduce) == (
        "megatron-core-2024",
        None,
        1,
        True,
    )
    assert run.sequence_parallel is False
    assert any(line.startswith("--sequence-parallel: ignored (") for line in ignored)
    assert not isinstance(run.model, str)
    assert run.model.gradient_bytes_per_parameter == 2.0  # --grad-reduce-in-bf16


# ---------------------------------------------------------------------------------------------
# The tables


@pytest.mark.parametrize("path", sorted(FIXTURES.glob("*.txt")), ids=lambda p: p.name)
def test_every_option_of_every_fixture_is_in_exactly_one_table(path: Path) -> None:
    options = parse_options(words_of(path))
    assert options
    for option in options:
        assert sum(option in table for table in (MAPPED, REFUSED, COST_NEUTRAL)) == 1, option


def test_the_tables_are_disjoint_and_the_era_tables_name_known_options() -> None:
    assert not set(MAPPED) & set(REFUSED)
    assert not set(MAPPED) & set(COST_NEUTRAL)
    assert not set(REFUSED) & set(COST_NEUTRAL)
    assert all(known(option) for option in (*SINCE, *UNTIL))
    assert all(re.fullmatch(r"--[A-Za-z0-9-]+", option) for option in (*MAPPED, *REFUSED))
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\d", date) for date, _ in SINCE.values())
    assert tuple(ERAS) == MEGATRON_RECIPES


# ---------------------------------------------------------------------------------------------
# The recipe


def small_line(*extra: str) -> list[str]:
    return [
        "--num-layers",
        "4",
        "--hidden-size",
        "64",
        "--num-attention-heads",
        "4",
        "--seq-length",
        "32",
        "--max-position-embeddings",
        "32",
        "--micro-batch-size",
        "1",
        "--global-batch-size",
        "8",
        *extra,
    ]


def recipe_of(*extra: str, recipe: str | None = None) -> str | None:
    run, _ = run_from_megatron_args(
        small_line(*extra), hardware="a100", world_size=2, recipe=recipe
    )
    return run.recipe


def test_the_recipe_is_the_era_the_newest_option_shows() -> None:
    assert recipe_of() == "megatron-lm-2021"
    assert recipe_of("--activations-checkpoint-method", "uniform") == "megatron-lm-2021"
    assert recipe_of("--recompute-activations") == "megatron-lm-2022"
    assert recipe_of("--use-distributed-optimizer") == "megatron-lm-2022"
    assert recipe_of("--overlap-grad-reduce") == "megatron-core-2024"
    assert recipe_of("--use-flash-attn") == "megatron-core-2024"
    assert recipe_of("--overlap-grad-reduce", recipe="megatron-lm-2021") == "megatron-lm-2021"


def test_a_line_no_megatron_runs_and_a_foreign_recipe_are_refused() -> None:
    with pytest.raises(SpecError, match=r"--DDP-impl \(removed.*--overlap-grad-reduce"):
        recipe_of("--DDP-impl", "torch", "--overlap-grad-reduce")
    with pytest.raises(SpecError, match="recipe must be one of megatron-lm-2021"):
        recipe_of(recipe="torchtitan")


def test_interleaving_overlaps_messages_in_megatron_core_2024_only() -> None:
    line = [
        *("--num-layers", "8", "--pipeline-model-parallel-size", "4"),
        *("--num-layers-per-virtual-pipeline-stage", "1"),
    ]
    for recipe, blocking in (("megatron-lm-2022", None), ("megatron-core-2024", False)):
        run, _ = run_from_megatron_args(
            small_line(*line), hardware="a100", world_size=4, recipe=recipe
        )
        assert (run.schedule, run.chunks) == ("interleaved-1f1b", 2)
        assert run.blocking_p2p is blocking
    run, _ = run_from_megatron_args(
        small_line(*line, "--no-overlap-p2p-communication"), hardware="a100", world_size=4
    )
    assert run.blocking_p2p is None


def test_the_scatter_gather_opt_out_turns_scattering_off_where_the_recipe_scatters() -> None:
    """Megatron-LM before Megatron-Core split each pipeline message over the tensor-parallel
    ranks unless told not to; Megatron-Core kept the option and read it nowhere."""
    line = [*("--tensor-model-parallel-size", "2"), "--no-scatter-gather-tensors-in-pipeline"]
    for recipe in ("megatron-lm-2021", "megatron-lm-2022"):
        run, ignored = run_from_megatron_args(
            small_line(*line), hardware="a100", world_size=2, recipe=recipe
        )
        assert (run.recipe, run.scatter_gather_p2p, ignored) == (recipe, False, ())
    assert recipe_of("--no-scatter-gather-tensors-in-pipeline") == "megatron-lm-2021"
    core = small_line(*line, "--use-flash-attn")
    with pytest.raises(SpecError, match="allow_ignored would list it"):
        run_from_megatron_args(core, hardware="a100", world_size=2)
    run, ignored = run_from_megatron_args(core, hardware="a100", world_size=2, allow_ignored=True)
    assert (run.recipe, run.scatter_gather_p2p) == ("megatron-core-2024", None)
    assert ignored == (
        "--no-scatter-gather-tensors-in-pipeline: ignored (megatron-core-2024 sends whole "
        "tensors: nothing reads the option since the pipeline code moved to megatron/core "
        "(3c92fa9, merged 2023-03-23))",
    )


def test_the_gemm_overlap_is_read_with_sequence_parallelism_and_transformer_engine() -> None:
    """--tp-comm-overlap is Megatron-Core's (so the line is megatron-core-2024's); Megatron
    asserts sequence parallelism beside it, and only Transformer Engine's layers overlap."""
    tensor = ("--tensor-model-parallel-size", "2")
    run, ignored = run_from_megatron_args(
        small_line(*tensor, "--sequence-parallel", "--tp-comm-overlap"),
        hardware="a100",
        world_size=2,
    )
    assert (run.recipe, run.tp_comm_overlap, ignored) == ("megatron-core-2024", True, ())
    for extra in ((*tensor, "--tp-comm-overlap"), ("--sequence-parallel", "--tp-comm-overlap")):
        with pytest.raises(SpecError, match="--tp-comm-overlap needs --sequence-parallel"):
            run_from_megatron_args(small_line(*extra), hardware="a100", world_size=2)
    local = small_line(
        *tensor, "--sequence-parallel", "--tp-comm-overlap", "--transformer-impl", "local"
    )
    run, ignored = run_from_megatron_args(local, hardware="a100", world_size=2, allow_ignored=True)
    assert run.tp_comm_overlap is None
    assert [line.split(": ignored (")[0] for line in ignored] == ["--tp-comm-overlap"]


def test_the_scatter_gather_opt_out_and_the_gemm_overlap_survive_the_round_trip() -> None:
    for recipe, changes, option in (
        (
            "megatron-lm-2021",
            {"scatter_gather_p2p": False},
            "--no-scatter-gather-tensors-in-pipeline",
        ),
        (
            "megatron-lm-2022",
            {"scatter_gather_p2p": False},
            "--no-scatter-gather-tensors-in-pipeline",
        ),
        (
            "megatron-core-2024",
            {"tp_comm_overlap": True, "sequence_parallel": True},
            "--tp-comm-overlap",
        ),
    ):
        run, model = base_run(recipe=recipe, **changes)
        words, unexpressed = megatron_args(run, model)  # type: ignore[arg-type]
        assert unexpressed == () and option in words
        back, ignored = run_from_megatron_args(words, hardware="a100", world_size=16, recipe=recipe)
        assert (back, ignored) == (run, ())


# ---------------------------------------------------------------------------------------------
# Sharded data parallelism: the distributed optimizer, Megatron-FSDP, PyTorch FSDP2

MEGATRON_FSDP = ("--use-megatron-fsdp", "--ckpt-format", "fsdp_dtensor")


@pytest.mark.parametrize(
    ("extra", "zero", "reshard"),
    [
        ([], 0, None),
        (["--use-distributed-optimizer"], 1, None),
        ([*MEGATRON_FSDP, "--data-parallel-sharding-strategy", "no_shard"], 0, None),
        ([*MEGATRON_FSDP, "--data-parallel-sharding-strategy", "optim"], 1, None),
        ([*MEGATRON_FSDP, "--data-parallel-sharding-strategy", "optim_grads"], 2, None),
        ([*MEGATRON_FSDP, "--data-parallel-sharding-strategy", "optim_grads_params"], 3, None),
        (  # the distributed optimizer beside Megatron-FSDP is its own: the strategy decides
            [
                "--use-distributed-optimizer",
                *MEGATRON_FSDP,
                *("--data-parallel-sharding-strategy", "optim_grads"),
            ],
            2,
            None,
        ),
        (["--use-custom-fsdp", "--use-distributed-optimizer"], 0, None),  # no_shard, its default
        (
            [
                *("--use-custom-fsdp", "--use-distributed-optimizer"),
                *("--data-parallel-sharding-strategy", "optim"),
            ],
            1,
            None,
        ),
    ],
)
def test_each_sharding_option_is_a_zero_stage(
    extra: list[str], zero: int, reshard: str | None
) -> None:
    run, ignored = run_from_megatron_args(small_line(*extra), hardware="a100", world_size=4)
    assert (run.zero, run.reshard_after_forward, run.data_parallel, ignored) == (
        zero,
        reshard,
        4,
        (),
    )
    if any("fsdp" in word for word in extra):
        assert run.recipe == "megatron-core-2024"  # 892c4c8 and 4dd2f2b are Megatron-Core's


def test_megatron_fsdp_s_default_strategy_is_read_by_the_line_s_date() -> None:
    """no_shard until 3499efe (2026-04-01), optim_grads_params since: a line with an option of
    2026-04-21 (--step-batch-size-schedule, 532ad92) runs today's default; one that nothing
    dates is refused, naming the option to give."""
    dated = small_line(*MEGATRON_FSDP, "--step-batch-size-schedule", "1")
    run, _ = run_from_megatron_args(dated, hardware="a100", world_size=4, allow_ignored=True)
    assert (run.zero, run.recipe) == (3, "megatron-core-2024")
    with pytest.raises(SpecError) as error:
        run_from_megatron_args(small_line(*MEGATRON_FSDP), hardware="a100", world_size=4)
    assert str(error.value) == (
        "Megatron-LM arguments: --use-megatron-fsdp without --data-parallel-sharding-strategy: "
        "its default was no_shard until 3499efe (2026-04-01) and optim_grads_params since, and "
        "no option of this line dates it; give --data-parallel-sharding-strategy"
    )


def test_torch_fsdp2_is_zero_3_where_megatron_runs_it() -> None:
    """Megatron asserts unfused gradient accumulation beside FSDP2, which megatron-core-2024
    fuses: read under the recipe named unfused (megatron-lm-2021), refused otherwise by the
    fusion check. --torch-fsdp2-no-reshard-after-forward keeps the gathered weights."""
    line = small_line(
        "--use-torch-fsdp2",
        "--no-gradient-accumulation-fusion",
        "--untie-embeddings-and-output-weights",
    )
    for extra, reshard in (((), None), (("--torch-fsdp2-no-reshard-after-forward",), "never")):
        run, ignored = run_from_megatron_args(
            [*line, *extra], hardware="a100", world_size=4, recipe="megatron-lm-2021"
        )
        assert (run.zero, run.reshard_after_forward, run.data_parallel, ignored) == (
            3,
            reshard,
            4,
            (),
        )
    with pytest.raises(SpecError, match="--no-gradient-accumulation-fusion under megatron-core"):
        run_from_megatron_args(line, hardware="a100", world_size=4)


def test_sharding_options_without_their_fsdp_are_ignored_and_listed() -> None:
    line = small_line(
        *("--data-parallel-sharding-strategy", "optim"),
        "--torch-fsdp2-no-reshard-after-forward",
        *("--ckpt-format", "torch_dist"),
    )
    with pytest.raises(SpecError, match="allow_ignored would list it"):
        run_from_megatron_args(line, hardware="a100", world_size=4)
    run, ignored = run_from_megatron_args(line, hardware="a100", world_size=4, allow_ignored=True)
    assert run.zero == 0
    assert sorted(note.split(": ignored (")[0] for note in ignored) == [
        "--ckpt-format torch_dist",
        "--data-parallel-sharding-strategy optim",
        "--torch-fsdp2-no-reshard-after-forward",
    ]


FSDP2 = ("--use-torch-fsdp2", "--no-gradient-accumulation-fusion")
UNTIED = "--untie-embeddings-and-output-weights"
STRATEGY_3 = ("--data-parallel-sharding-strategy", "optim_grads_params")
STRATEGY_2 = ("--data-parallel-sharding-strategy", "optim_grads")


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (
            [*FSDP2, UNTIED, "--pipeline-model-parallel-size", "2"],
            "--use-torch-fsdp2 with --pipeline-model-parallel-size 2: '--use-torch-fsdp2 is not "
            "supported with pipeline parallelism' (Megatron-LM asserts it",
        ),
        (
            [*FSDP2, UNTIED, "--use-distributed-optimizer"],
            "--use-torch-fsdp2 beside --use-distributed-optimizer",
        ),
        (
            ["--use-torch-fsdp2", UNTIED],
            "--use-torch-fsdp2 needs --no-gradient-accumulation-fusion",
        ),
        ([*FSDP2], "--use-torch-fsdp2 needs --untie-embeddings-and-output-weights"),
        ([*FSDP2, UNTIED, "--fp16"], "--use-torch-fsdp2 with --fp16"),
        ([*FSDP2, UNTIED, "--ckpt-format", "torch"], "it requires torch_dist or torch_dcp"),
        (
            [*FSDP2, UNTIED, *MEGATRON_FSDP, *STRATEGY_3],
            "--use-torch-fsdp2 beside --use-megatron-fsdp: two FSDP implementations",
        ),
        (
            ["--use-megatron-fsdp", *STRATEGY_3],
            "--use-megatron-fsdp needs --ckpt-format fsdp_dtensor, got the default torch_dist",
        ),
        (
            [*MEGATRON_FSDP, *STRATEGY_3, "--pipeline-model-parallel-size", "2"],
            "--use-megatron-fsdp with --data-parallel-sharding-strategy optim_grads_params and "
            "--pipeline-model-parallel-size 2: Megatron-FSDP reduce-scatters each micro-batch's "
            "gradients inside the pipeline too",
        ),
        (
            [*MEGATRON_FSDP, *STRATEGY_2, "--pipeline-model-parallel-size", "2"],
            "pipesim's pipelined ZeRO-2 holds them whole",
        ),
        (["--use-custom-fsdp"], "--use-custom-fsdp needs --use-distributed-optimizer"),
        (
            ["--use-custom-fsdp", "--use-distributed-optimizer", *STRATEGY_2],
            "--use-custom-fsdp with --data-parallel-sharding-strategy optim_grads needs "
            "--no-gradient-accumulation-fusion",
        ),
        (
            ["--use-custom-fsdp", "--use-distributed-optimizer", *MEGATRON_FSDP, *STRATEGY_3],
            "--use-custom-fsdp (renamed --use-megatron-fsdp in 4dd2f2b, 2025-08-21)",
        ),
        (["--ckpt-format", "fsdp_dtensor"], "--ckpt-format fsdp_dtensor without"),
        ([*MEGATRON_FSDP, "--data-parallel-sharding-strategy", "zero3"], "must be one of"),
    ],
)
def test_each_sharding_refusal_is_one_line(extra: list[str], said: str) -> None:
    with pytest.raises(SpecError) as error:
        run_from_megatron_args(small_line(*extra), hardware="a100", world_size=4)
    message = str(error.value)
    assert "\n" not in message and message.startswith("Megatron-LM arguments: ")
    assert said in message, message


def test_zero_2_and_3_are_written_as_megatron_fsdp_and_read_back() -> None:
    for zero, strategy in ((2, "optim_grads"), (3, "optim_grads_params")):
        run, model = base_run(zero=zero, pipeline_parallel=1, partition="10")
        words, unexpressed = megatron_args(run, model)  # type: ignore[arg-type]
        assert unexpressed == ()
        assert words[-6:] == [
            "--use-distributed-optimizer",
            "--use-megatron-fsdp",
            "--data-parallel-sharding-strategy",
            strategy,
            "--ckpt-format",
            "fsdp_dtensor",
        ]
        assert "--use-mcore-models" not in words  # Megatron-FSDP (2025) dates the line
        back, ignored = run_from_megatron_args(words, hardware="a100", world_size=4)
        assert (back, ignored) == (run, ())


@pytest.mark.parametrize("recipe", ["megatron-lm-2021", "megatron-lm-2022"])
def test_zero_3_of_an_older_recipe_is_written_as_megatron_core_s_and_said(recipe: str) -> None:
    """Only Megatron-Core shards weights: the line is megatron-core-2024's, the older recipe's
    eager attention stated (--attention-backend unfused), its scattered messages (and 2021's
    unfused accumulation) named; the layout reads back, zero included."""
    run, model = base_run(recipe=recipe, zero=3, pipeline_parallel=1, partition="10")
    words, unexpressed = megatron_args(run, model)  # type: ignore[arg-type]
    assert unexpressed[0].startswith(
        f"recipe {recipe} with zero 3: Megatron-LM shards gradients and weights only with "
        "Megatron-Core's FSDP (--use-megatron-fsdp, 4dd2f2b, 2025-08-21); these are "
        "megatron-core-2024's arguments"
    )
    assert any(line.startswith("scatter_gather_p2p true") for line in unexpressed)
    assert any("unfused gradient accumulation" in line for line in unexpressed) == (
        recipe == "megatron-lm-2021"
    )
    assert words[-2:] == ["--attention-backend", "unfused"]
    back, ignored = run_from_megatron_args(words, hardware="a100", world_size=4)
    assert ignored == ()
    assert dataclasses.replace(back, attention=None, recipe=recipe) == run
    assert (back.recipe, back.attention, back.zero) == ("megatron-core-2024", "eager", 3)


# ---------------------------------------------------------------------------------------------
# Refusals: one line, naming the option


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (["--pipeline-model-parallel-split-rank", "1"], "--pipeline-model-parallel-split-rank"),
        (["--overlap-param-gather"], "--overlap-param-gather"),
        (["--fp8-format", "hybrid"], "--fp8-format"),
        (["--frobnicate", "3"], "--frobnicate"),
        (["--lr", "0.1"], "--lr"),
        (
            [
                "--recompute-granularity",
                "full",
                "--recompute-method",
                "uniform",
                "--recompute-num-layers",
                "2",
            ],
            "--recompute-num-layers",
        ),
        (["--recompute-granularity", "full"], "--recompute-method"),
        (["--kv-channels", "0"], "--kv-channels"),
        (["--tokenizer-type", "HuggingFaceTokenizer"], "--tokenizer-type"),
        (["--attention-dropout", "0"], "--attention-dropout"),
        (["--fp16", "--bf16"], "--fp16"),
        (["--num-layers", "x"], "--num-layers"),
        (["--fp16", "1"], "--fp16"),
        (["--normalization", "ScaleNorm"], "--normalization"),
        (["--global-batch-size", "7"], "--global-batch-size"),
        (["--max-position-embeddings", "64"], "--max-position-embeddings"),
        (
            ["--no-gradient-accumulation-fusion", "--sequence-parallel"],
            "--no-gradient-accumulation-fusion",
        ),
        (["--data-path", "$DATA"], "$DATA"),
    ],
)
def test_each_refusal_is_one_line_naming_the_option(extra: list[str], named: str) -> None:
    with pytest.raises(SpecError) as error:
        run_from_megatron_args(small_line(*extra), hardware="a100", world_size=2)
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith("Megatron-LM arguments: ")
    assert named in message


def test_a_refused_feature_switched_off_is_accepted() -> None:
    run, _ = run_from_megatron_args(
        small_line(
            "--num-distributed-optimizer-instances",
            "1",
            "--encoder-pipeline-model-parallel-size",
            "0",
        ),
        hardware="a100",
        world_size=2,
    )
    assert run.data_parallel == 2


# ---------------------------------------------------------------------------------------------
# Launch scripts


SCRIPT = """#!/bin/bash
# a launch script: comments, continuations, quotes, a pipe
export CUDA_DEVICE_MAX_CONNECTIONS=1
torchrun --nproc_per_node 8 pretrain_gpt.py \\
    --num-layers 4 --hidden-size 64 \\
    --num-attention-heads 4 # heads
    --seq-length 32 --max-position-embeddings 32
    --micro-batch-size=1 \\
    --data-path 'a b#c' \\
    --global-batch-size 8 2>&1 | tee log.txt
echo done
"""


def test_a_script_s_words_from_the_first_megatron_option_to_the_shell_syntax() -> None:
    assert megatron_words_from_text(SCRIPT, "train.sh") == [
        *("--num-layers", "4", "--hidden-size", "64", "--num-attention-heads", "4"),
        *("--seq-length", "32", "--max-position-embeddings", "32"),
        *("--micro-batch-size=1", "--data-path", "a b#c", "--global-batch-size", "8"),
    ]
    words = megatron_words_from_text("python x.py --foo 1 --num-layers 2 ; echo", "s")
    assert words == ["--foo", "1", "--num-layers", "2"]  # the options start after the .py


def test_a_script_s_variables_and_second_commands_are_refused() -> None:
    with pytest.raises(SpecError) as error:
        megatron_words_from_text("python pretrain_gpt.py --num-layers $LAYERS", "s.sh")
    message = str(error.value)
    assert "\n" not in message and "'$LAYERS'" in message and "expand" in message
    with pytest.raises(SpecError, match="more than one command"):
        megatron_words_from_text("A=(\n--num-layers 2\n)\nB=(\n--hidden-size 4\n)", "s.sh")
    with pytest.raises(SpecError, match="no Megatron-LM option"):
        megatron_words_from_text("echo hello", "s.sh")
    srun = 'CMD="python -u ${MEGATRON_CODE_DIR}/pretrain_gpt.py ${MEGATRON_PARAMS}"'  # SRUN.sh
    with pytest.raises(SpecError, match=r"no Megatron-LM option found; .*MEGATRON_CODE_DIR"):
        megatron_words_from_text(srun, "SRUN.sh")
    with pytest.raises(SpecError, match="line 1"):
        megatron_words_from_text("python p.py --num-layers 'open", "s.sh")


# ---------------------------------------------------------------------------------------------
# Writing: what Megatron cannot express is named


def base_run(**changes: object) -> tuple[RunFile, object]:
    arch = TransformerArchitecture(8, 64, 4, 256, 32, padded_vocab(50257, 128, 2))
    model = megatron_model(arch, dtype="bf16", default_batch=16)
    run = RunFile(
        model,
        "a100",
        batch=16,
        microbatch_size=1,
        tensor_parallel=2,
        sequence_parallel=False,
        pipeline_parallel=4,
        data_parallel=2,
        zero=0,
        recompute="none",
        schedule="1f1b",
        chunks=1,
        microbatches=8,
        partition="3,2,2,3",
        remat=False,
        recipe="megatron-core-2024",
    )
    return dataclasses.replace(run, **changes), model  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"schedule": "zb-h1"}, "schedule zb-h1"),
        ({"schedule": "gpipe"}, "schedule gpipe"),
        ({"partition": "2,3,2,3"}, "partition 2,3,2,3"),
        ({"partition": "balanced"}, "partition balanced"),
        ({"schedule": "interleaved-1f1b", "chunks": 2, "partition": None, "remat": True}, "remat"),
        ({"steps": 3}, "steps = 3"),
        ({"recipe": None}, "recipe pipesim"),
        ({"recipe": "megatron-lm-2021", "sequence_parallel": True}, "--sequence-parallel"),
        ({"recipe": "megatron-lm-2021", "recompute": "selective"}, "recompute selective"),
        ({"recipe": "megatron-lm-2021", "zero": 1}, "--use-distributed-optimizer"),
        ({"blocking_p2p": False}, "blocking_p2p false"),
        (
            {"scatter_gather_p2p": True},
            "scatter_gather_p2p true: Megatron-LM of megatron-core-2024",
        ),
        ({"tp_comm_overlap": True}, "tp_comm_overlap: Megatron-LM asserts --sequence-parallel"),
        (
            {"recipe": "megatron-lm-2022", "tp_comm_overlap": True},
            "tp_comm_overlap: Megatron-LM of megatron-lm-2022 has no --tp-comm-overlap",
        ),
        ({"schedule": "interleaved-1f1b", "chunks": 3, "partition": None}, "3 chunks"),
        ({"zero": 3}, "zero 3 in a pipeline of 4: Megatron-FSDP reduce-scatters every"),
        ({"zero": 2}, "zero 2 in a pipeline of 4"),
        ({"zero": 3}, "reshard_after_forward default: Megatron-FSDP frees each layer's"),
        (
            {
                "zero": 3,
                "pipeline_parallel": 1,
                "partition": "10",
                "reshard_after_forward": "never",
            },
            "reshard_after_forward never: Megatron-FSDP frees each layer's gathered weights",
        ),
        ({"zero": 1, "reshard_after_forward": "always"}, "reshard_after_forward always: FSDP's"),
    ],
)
def test_what_megatron_cannot_express_is_named(changes: dict[str, object], named: str) -> None:
    run, model = base_run(**changes)
    words, unexpressed = megatron_args(run, model)  # type: ignore[arg-type]
    assert any(named in line for line in unexpressed), unexpressed
    assert all("\n" not in line for line in unexpressed)
    assert words[:2] == ["--num-layers", "8"]


def test_an_uneven_end_partition_is_megatron_core_s_first_and_last_stage_counts() -> None:
    run, model = base_run(partition="2,3,3,2")  # 1 + 1 blocks first, 3, 3, 1 + 1 last
    words, unexpressed = megatron_args(run, model)  # type: ignore[arg-type]
    assert unexpressed == ()
    assert words[-4:] == [
        "--decoder-first-pipeline-num-layers",
        "1",
        "--decoder-last-pipeline-num-layers",
        "1",
    ]
    back, _ = run_from_megatron_args(words, hardware="a100", world_size=16, recipe=run.recipe)
    assert back == run


@pytest.mark.parametrize("recipe", ["megatron-lm-2021", "megatron-core-2024", "nemo-2024"])
def test_written_arguments_read_back_as_their_era_without_the_recipe_named(recipe: str) -> None:
    """A reader not told the recipe dates a line by its newest option: a Megatron-Core line of
    options all older than 2023 read back as megatron-lm-2022 (eager attention: out of memory
    where the plan fitted; found by a hostile pass, 2026-11-27). The writer dates it with
    --use-mcore-models; a non-Megatron recipe is written, and read, as megatron-core-2024.
    (A megatron-lm-2022 line without an option of 2022 is 2021's as well: no harmless option
    dates it, and it reads back as 2022 only with the recipe named.)"""
    run, model = base_run(recipe=recipe)
    words, _ = megatron_args(run, model)  # type: ignore[arg-type]
    back, _ = run_from_megatron_args(words, hardware="a100", world_size=16)
    expected = recipe if recipe in MEGATRON_RECIPES else MEGATRON_RECIPES[-1]
    assert back.recipe == expected
    assert ("--use-mcore-models" in words) == (expected == MEGATRON_RECIPES[-1])


def test_two_stages_of_uneven_blocks_have_no_middle_to_split() -> None:
    """P = 2 with first 17 and last 15 blocks: no middle stages and no middle blocks, which
    Megatron-Core accepts ("either ... middle pp stages and layers or none of them"); a plan's
    export wrote it and the reader refused it (found by a hostile pass, 2026-11-27). Middle
    blocks without middle stages, or the reverse, stay refused."""
    assert megatron_partition(32, 2, 1, 17, 15) == (18, 16)
    with pytest.raises(SpecError, match="must split evenly over the other 0 stages"):
        megatron_partition(33, 2, 1, 17, 15)
    with pytest.raises(SpecError, match="must split evenly over the other 1 stages"):
        megatron_partition(32, 3, 1, 17, 15)


def test_a_model_given_as_layers_has_no_megatron_arguments() -> None:
    run, _ = base_run()
    with pytest.raises(SpecError, match="given as layers"):
        megatron_args(run, catalogue_model("uniform-8"))


# ---------------------------------------------------------------------------------------------
# The round trip


@st.composite
def plans(draw: st.DrawFn) -> tuple[RunFile, int]:
    """A run every Megatron-LM era expresses (its options existing then), and its world."""
    recipe = draw(st.sampled_from(MEGATRON_RECIPES))
    later, core = recipe != MEGATRON_RECIPES[0], recipe == MEGATRON_RECIPES[-1]
    tensor = draw(st.sampled_from([1, 2, 4]))
    pipeline = draw(st.sampled_from([1, 2, 3, 4]))
    chunks = draw(st.sampled_from([2, 3])) if pipeline >= 3 and draw(st.booleans()) else 1
    per_stage = draw(st.integers(1, 3))
    layers = pipeline * chunks * per_stage
    partition = megatron_partition(layers, pipeline, chunks)
    if core and chunks == 1 and pipeline >= 3 and draw(st.booleans()):
        first, last = draw(st.integers(1, 4)), draw(st.integers(1, 4))
        layers = first + last + (pipeline - 2) * per_stage
        partition = megatron_partition(layers, pipeline, 1, first, last)
    heads = tensor * draw(st.sampled_from([1, 2]))
    dtype = draw(st.sampled_from(["fp16", "bf16", "fp32"]))
    vocab = padded_vocab(50257, draw(st.sampled_from([128, 1024])), tensor)
    arch_options: dict[str, object] = {}
    if core:
        vocab = draw(st.sampled_from([vocab, tensor * draw(st.integers(2, 40000))]))
        dropout = draw(st.booleans())
        arch_options = {
            "kv_heads": draw(st.sampled_from([heads, tensor])),
            "mlp": draw(st.sampled_from(list(Mlp))),
            "norm": draw(st.sampled_from(list(Norm))),
            "position": draw(st.sampled_from(list(Position))),
            "tied_embeddings": draw(st.booleans()),
            "linear_bias": draw(st.booleans()),
            "dropout": dropout,
            "embedding_dropout": dropout,
        }
        arch_options |= draw(experts_and_attention(layers, heads, tensor, arch_options["mlp"]))
    arch = TransformerArchitecture(
        layers,
        heads * draw(st.sampled_from([8, 16])),
        heads,
        tensor * draw(st.integers(4, 64)),
        tensor * draw(st.sampled_from([8, 16])),
        vocab,
        element_bytes=4 if dtype == "fp32" else 2,
        **arch_options,  # type: ignore[arg-type]
    )
    gradients = {"fp16": [2.0, 4.0], "bf16": [4.0, 2.0] if core else [4.0], "fp32": [4.0]}
    micro, data = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    # context and expert parallelism: Megatron-Core's (the sequence a multiple of 2 x CP)
    context = draw(st.sampled_from([1, 2])) if core else 1
    experts = arch.moe.experts if arch.moe is not None else 1
    expert = draw(
        st.sampled_from([e for e in (1, 2, 4) if experts % e == 0 and (data * context) % e == 0])
    )
    microbatches = pipeline * draw(st.integers(1, 3))
    batch = micro * microbatches * data
    model = megatron_model(
        arch,
        dtype=dtype,
        default_batch=batch,
        gradient_bytes=draw(st.sampled_from(gradients[dtype])),
        optimizer_bytes=draw(st.sampled_from([8.0, 4.0, 0.0])),
    )
    recomputes = ["none", "full", str(draw(st.integers(1, layers // pipeline)))]
    # ZeRO-2/3 is Megatron-Core's FSDP, read without a pipeline only
    zeros = [0, 1, 2, 3] if core and pipeline == 1 else [0, 1] if later else [0]
    zero = draw(st.sampled_from(zeros))
    # Megatron before Megatron-Core overlaps the reduce with PyTorch's DDP only, which it
    # refuses beside fp32 gradients and the distributed optimizer
    torch_ddp = dtype == "fp32" or (dtype == "fp16" and model.gradient_bytes_per_parameter == 2)
    overlap = core or (torch_ddp and zero == 0)
    sequence_parallel = later and tensor > 1 and draw(st.booleans())
    run = RunFile(
        model,
        "a100",
        batch=batch,
        microbatch_size=micro,
        tensor_parallel=tensor,
        sequence_parallel=sequence_parallel,
        pipeline_parallel=pipeline,
        data_parallel=data,
        zero=zero,
        recompute=draw(st.sampled_from([*recomputes, "selective"] if later else recomputes)),
        schedule="interleaved-1f1b" if chunks > 1 else "1f1b",
        chunks=chunks,
        microbatches=microbatches,
        partition=",".join(map(str, partition)),
        remat=False,
        recipe=recipe,
        overlap_grad_reduce=draw(st.sampled_from([None, True])) if overlap else None,
        attention=draw(st.sampled_from([None, "eager"])) if core else None,
        blocking_p2p=draw(st.sampled_from([None, False])) if core and chunks > 1 else None,
        # the opt-out before Megatron-Core; the GEMM overlap beside sequence parallelism
        scatter_gather_p2p=None if core else draw(st.sampled_from([None, False])),
        tp_comm_overlap=draw(st.sampled_from([None, True])) if core and sequence_parallel else None,
        context_parallel=context if context > 1 else None,
        cp_comm_type=draw(st.sampled_from([None, "p2p", "all-gather"])) if context > 1 else None,
        expert_parallel=expert if expert > 1 else None,
    )
    return run, tensor * pipeline * context * data


@st.composite
def experts_and_attention(
    draw: st.DrawFn, layers: int, heads: int, tensor: int, mlp: object
) -> dict[str, object]:
    """Megatron-Core's architecture options beyond GPT and Llama: experts (their blocks as
    --moe-layer-freq states them: the first MoE block a multiple of the frequency), latent
    attention, or Qwen3's head width and query/key norms."""
    options: dict[str, object] = {}
    latent, mixture = draw(st.booleans()), draw(st.booleans())
    if latent or mixture:
        options["linear_bias"] = False
    if latent:
        options["kv_heads"] = heads
        options["mla"] = MultiLatentAttention(
            draw(st.sampled_from([16, 32])),
            draw(st.sampled_from([8, 16])),
            draw(st.sampled_from([4, 8])),
            draw(st.sampled_from([8, 16])),
            q_lora_rank=draw(st.sampled_from([None, 24])),
        )
    else:
        options["head_width"] = draw(st.sampled_from([None, 24]))
        options["qk_norm"] = draw(st.booleans())
    if mixture:
        experts = draw(st.sampled_from([2, 4, 8]))
        frequency = draw(st.sampled_from([1, 2]))
        balancing = draw(st.sampled_from(list(LoadBalancing)))
        expert_ffn = tensor * draw(st.integers(1, 32))
        options["moe"] = MixtureOfExperts(
            experts,
            draw(st.integers(1, experts)),
            expert_ffn,
            shared_experts=draw(st.sampled_from([0, 1, 2])),
            first_dense_layers=frequency * draw(st.integers(0, (layers - 1) // frequency)),
            layer_frequency=frequency,
            gated=mlp is Mlp.SWIGLU,
            capacity_factor=None
            if balancing is LoadBalancing.SINKHORN
            else draw(st.sampled_from([None, 1.25])),
            load_balancing=balancing,
            expert_bias=draw(st.booleans()),
        )
    return options


@settings(max_examples=60, deadline=None)
@given(plans())
def test_a_plan_s_run_survives_the_megatron_arguments(plan: tuple[RunFile, int]) -> None:
    run, world = plan
    assert not isinstance(run.model, str)
    words, unexpressed = megatron_args(run, run.model)
    assert ("--use-megatron-fsdp" in words) == ((run.zero or 0) >= 2)
    assert unexpressed == ()
    back, ignored = run_from_megatron_args(
        words, hardware=run.hardware, world_size=world, recipe=run.recipe
    )
    assert ignored == ()
    assert back == run


@pytest.mark.parametrize(
    ("extra", "recompute"),
    [
        ([], "none"),
        (["--checkpoint-activations"], "full"),
        (["--activations-checkpoint-method", "uniform"], "full"),
        (
            [
                "--activations-checkpoint-method",
                "block",
                "--activations-checkpoint-num-layers",
                "3",
            ],
            "3",
        ),
        (["--recompute-activations"], "selective"),
        (["--recompute-granularity", "selective"], "selective"),
        (["--recompute-granularity", "full", "--recompute-method", "uniform"], "full"),
        (
            [
                "--recompute-granularity",
                "full",
                "--recompute-method",
                "block",
                "--recompute-num-layers",
                "2",
            ],
            "2",
        ),
    ],
)
def test_recomputation_reads_as_pipesim_s(extra: list[str], recompute: str) -> None:
    run, _ = run_from_megatron_args(small_line(*extra), hardware="a100", world_size=2)
    assert run.recompute == recompute


def test_the_catalogue_1_7b_at_t1_pads_gpt2_s_vocabulary_by_1024() -> None:
    model = catalogue_model("megatron-1.7b")
    run = dataclasses.replace(read(SC21_1_7B, world_size=32), model="megatron-1.7b")
    words, unexpressed = megatron_args(run, model)
    assert unexpressed == ()
    assert words[words.index("--make-vocab-size-divisible-by") + 1] == "1024"


def test_layers_beyond_the_limit_are_refused_before_any_is_built() -> None:
    """--num-layers 10,000,000 built layers for minutes at gigabytes: the one path to a model
    that did not check PIPESIM_MAX_LAYERS."""
    from pipesim.errors import PipesimError

    text = (
        (FIXTURES / "sc21_table1_1.7b.txt")
        .read_text()
        .replace("--num-layers 24", "--num-layers 200000")
    )
    words = megatron_words_from_text(text, "test")
    with pytest.raises(PipesimError, match=r"--num-layers 200,000: beyond the limit of 100,000"):
        run_from_megatron_args(words, hardware="a100", allow_ignored=True, world_size=32)


# ---------------------------------------------------------------------------------------------
# Context and expert parallelism, experts and latent attention

# Megatron-Core's experts on small_line: no biases, SwiGLU experts, the alltoall dispatcher.
MOE = ("--disable-bias-linear", "--swiglu", "--num-experts", "8")
ALLTOALL = ("--moe-token-dispatcher-type", "alltoall")
MLA = ("--disable-bias-linear", "--multi-latent-attention", "--qk-layernorm")


def read_line(*extra: str, world_size: int = 2, **keywords: object) -> RunFile:
    run, _ = run_from_megatron_args(
        small_line(*extra),
        hardware="a100",
        world_size=world_size,
        allow_ignored=True,
        **keywords,  # type: ignore[arg-type]
    )
    return run


def test_context_parallelism_divides_the_world_and_states_its_exchange() -> None:
    """D = world / (T x P x CP); Transformer Engine's all_gather is pipesim's all-gather, its
    p2p (Megatron's default) pipesim's p2p, stated where the line states it; one type given per
    layer is one type."""
    run = read_line("--context-parallel-size", "2", world_size=8)
    assert (run.context_parallel, run.cp_comm_type, run.data_parallel) == (2, None, 4)
    assert run.recipe == "megatron-core-2024"  # --context-parallel-size: 4a6255a, 2023-10-30
    gathered = read_line("--context-parallel-size", "2", "--cp-comm-type", "all_gather")
    assert (gathered.context_parallel, gathered.cp_comm_type) == (2, "all-gather")
    per_layer = read_line("--context-parallel-size", "2", "--cp-comm-type", *["all_gather"] * 4)
    assert per_layer.cp_comm_type == "all-gather"
    assert read_line("--context-parallel-size", "2", "--cp-comm-type", "p2p").cp_comm_type == "p2p"
    _, ignored = run_from_megatron_args(
        small_line("--cp-comm-type", "all_gather"), hardware="a100", allow_ignored=True
    )
    assert any(line.startswith("--cp-comm-type all_gather: ignored (") for line in ignored)


def test_experts_and_their_parallelism_are_read() -> None:
    run = read_line(*MOE, *ALLTOALL, "--expert-model-parallel-size", "2")
    moe = architecture_of(run).moe
    assert run.expert_parallel == 2 and run.context_parallel is None
    # top-2, --ffn-hidden-size's width (SwiGLU's default: 8h/3 in 64s, 128)
    assert moe == MixtureOfExperts(8, 2, 128, gated=True)
    # without EP the allgather dispatcher (the default) is the gather pipesim's block runs
    assert read_line(*MOE).expert_parallel is None


@pytest.mark.parametrize(
    ("extra", "fields_of_moe"),
    [
        (["--moe-layer-freq", "2"], {"layer_frequency": 2}),
        (["--moe-layer-freq", "([0]*1+[1]*3)"], {"first_dense_layers": 1}),
        (["--moe-layer-freq", "[0,0,1,0]"], {"first_dense_layers": 2, "layer_frequency": 2}),
        (["--moe-layer-freq", "[1]+[0,1]*1+[0]"], {"layer_frequency": 2}),
        (
            ["--moe-shared-expert-intermediate-size", "512", "--moe-ffn-hidden-size", "256"],
            {"shared_experts": 2, "expert_ffn": 256},
        ),
        (["--moe-shared-expert-intermediate-size", "100"], {"shared_experts": 1}),
        (["--moe-expert-capacity-factor", "1.25"], {"capacity_factor": 1.25}),
        (["--moe-expert-capacity-factor", "-1"], {}),
        (
            ["--moe-expert-capacity-factor", "1.5", "--moe-pad-expert-input-to-capacity"],
            {"capacity_factor": 1.5, "pad_to_capacity": True},
        ),
        (
            ["--moe-router-load-balancing-type", "seq_aux_loss", "seq_aux_loss"],
            {"load_balancing": LoadBalancing.SEQ_AUX_LOSS},
        ),
        (
            ["--moe-router-score-function", "sigmoid", "--moe-router-enable-expert-bias"],
            {"expert_bias": True},
        ),
        (["--moe-router-topk", "8"], {"top_k": 8}),
    ],
)
def test_each_experts_option_is_the_architecture_s(
    extra: list[str], fields_of_moe: dict[str, object]
) -> None:
    moe = architecture_of(read_line(*MOE, *extra)).moe
    assert moe is not None
    expected = MixtureOfExperts(8, 2, 128) if "100" not in extra else None
    if expected is None:  # 100 is no multiple of the 128-wide experts: one shared expert
        assert (moe.shared_experts, moe.shared_expert_ffn) == (1, 100)
        return
    assert moe == dataclasses.replace(expected, **fields_of_moe)  # type: ignore[arg-type]


def test_padding_to_capacity_needs_a_capacity() -> None:
    """Megatron-Core raises the same (transformer_config.py)."""
    for extra in ([], ["--moe-expert-capacity-factor", "-1"]):
        with pytest.raises(SpecError, match="--moe-pad-expert-input-to-capacity without a"):
            read_line(*MOE, *extra, "--moe-pad-expert-input-to-capacity")


def test_latent_attention_and_head_widths_are_the_architecture_s() -> None:
    arch = architecture_of(read_line(*MLA, "--q-lora-rank", "48", "--kv-lora-rank", "64"))
    assert arch.mla == MultiLatentAttention(64, 128, 64, 128, q_lora_rank=48)
    assert (arch.qk_norm, arch.head_width, arch.key_value_heads) == (False, None, 4)
    qwen = architecture_of(read_line("--kv-channels", "32", "--qk-layernorm"))
    assert (qwen.head_width, qwen.qk_norm) == (32, True)
    assert architecture_of(read_line("--kv-channels", "16")).head_width is None  # 64 / 4


def test_the_experts_options_without_experts_are_ignored_and_listed() -> None:
    _, ignored = run_from_megatron_args(
        small_line("--moe-router-topk", "4", "--q-lora-rank", "8", "--moe-grouped-gemm"),
        hardware="a100",
        world_size=2,
        allow_ignored=True,
    )
    said = {line.split(":")[0] for line in ignored}
    assert said == {"--moe-router-topk 4", "--q-lora-rank 8", "--moe-grouped-gemm"}


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (["--context-parallel-size", "2", "--cp-comm-type", "a2a"], "--cp-comm-type a2a: "),
        (["--context-parallel-size", "2", "--cp-comm-type", "a2a+p2p"], "--cp-comm-type a2a+p2p"),
        (["--context-parallel-size", "2", "--cp-comm-type", "allgather"], "give all_gather"),
        (["--context-parallel-size", "2", "--cp-comm-type", "p2p", "a2a"], "gives 2 types"),
        (
            ["--context-parallel-size", "2", "--cp-comm-type", "p2p", "p2p", "a2a", "a2a"],
            "--cp-comm-type p2p, a2a: a type per layer",
        ),
        (["--context-parallel-size", "3"], "--seq-length 32 with --context-parallel-size 3"),
        (["--context-parallel-size", "4"], "x --context-parallel-size = 4"),
        (
            ["--context-parallel-size", "2", "--transformer-impl", "local"],
            "TEDotProductAttention",
        ),
        (["--hierarchical-context-parallel-sizes", "2", "1"], "--hierarchical-context"),
        (["--expert-model-parallel-size", "2"], "--expert-model-parallel-size 2 without"),
        (["--swiglu", "--num-experts", "8"], "--num-experts without --disable-bias-linear"),
        (["--multi-latent-attention", "--disable-bias-linear"], "without --qk-layernorm"),
        ([*MOE, *ALLTOALL, "--expert-model-parallel-size", "3"], "multiple of expert model"),
        ([*MOE, *ALLTOALL, "--expert-model-parallel-size", "4"], "must divide D x CP = 2"),
        ([*MOE, "--expert-model-parallel-size", "2"], "allgather with --expert-model"),
        ([*MOE, "--moe-token-dispatcher-type", "flex"], "--moe-token-dispatcher-type flex"),
        ([*MOE, "--expert-tensor-parallel-size", "2"], "--expert-tensor-parallel-size 2"),
        ([*MOE, "--moe-router-topk", "9"], "--moe-router-topk 9"),
        ([*MOE, "--moe-layer-freq", "[1,0]"], "Invalid length"),
        ([*MOE, "--moe-layer-freq", "[0,1,0,1]"], "MoE blocks 1, 3"),
        ([*MOE, "--moe-layer-freq", "__import__('os')"], "--moe-layer-freq"),
        ([*MOE, "--moe-layer-freq", "[1]*10**9"], "--moe-layer-freq"),
        ([*MOE, "--moe-layer-freq", "0"], "--moe-layer-freq"),
        ([*MOE, "--moe-router-load-balancing-type", "global_aux_loss"], "global_aux_loss"),
        ([*MOE, "--moe-router-load-balancing-type", "aux_loss", "none"], "several"),
        (
            [
                *MOE,
                "--moe-router-load-balancing-type",
                "sinkhorn",
                "--moe-expert-capacity-factor",
                "1.5",
            ],
            "--moe-expert-capacity-factor with --moe-router-load-balancing-type sinkhorn",
        ),
        ([*MOE, "--moe-router-enable-expert-bias"], "--moe-router-score-function softmax"),
        ([*MOE, "--moe-shared-expert-overlap"], "--moe-shared-expert-overlap"),
        ([*MOE, "--moe-shared-expert-intermediate-size", "0"], "must be > 0"),
        (
            [
                *MOE,
                *ALLTOALL,
                "--expert-model-parallel-size",
                "2",
                "--use-torch-fsdp2",
                "--no-gradient-accumulation-fusion",
                "--untie-embeddings-and-output-weights",
            ],
            "not supported with expert parallelism",
        ),
    ],
)
def test_each_parallelism_and_experts_refusal_is_one_line(extra: list[str], named: str) -> None:
    with pytest.raises(SpecError) as error:
        run_from_megatron_args(small_line(*extra), hardware="a100", world_size=2)
    message = str(error.value)
    assert "\n" not in message and len(message) < 600
    assert message.startswith("Megatron-LM arguments: ")
    assert named in message, message


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (["--context-parallel-size", "2"], "'Context parallelism is not supported in legacy"),
        (list(MOE), "SwitchMLP"),
        (list(MLA), "legacy models have no latent attention"),
    ],
)
def test_megatron_core_s_features_under_a_legacy_recipe_are_refused(
    extra: list[str], said: str
) -> None:
    with pytest.raises(SpecError, match=said):
        run_from_megatron_args(
            small_line(*extra), hardware="a100", world_size=2, recipe="megatron-lm-2022"
        )


def test_the_new_options_are_dated_by_their_first_appearance() -> None:
    """Each read or refused option added after sc21 carries the date it reached main, so a
    line with them reads as Megatron-Core's; a --num-experts of 2022 alone is the legacy
    SwitchMLP's era (refused there)."""
    for option in (
        "--cp-comm-type",
        "--expert-tensor-parallel-size",
        "--moe-router-topk",
        "--moe-ffn-hidden-size",
        "--moe-shared-expert-intermediate-size",
        "--moe-layer-freq",
        "--moe-grouped-gemm",
        "--moe-token-dispatcher-type",
        "--moe-router-load-balancing-type",
        "--moe-aux-loss-coeff",
        "--moe-expert-capacity-factor",
        "--moe-router-enable-expert-bias",
        "--q-lora-rank",
        "--kv-lora-rank",
        "--qk-head-dim",
        "--qk-pos-emb-head-dim",
        "--v-head-dim",
        "--qk-layernorm",
    ):
        assert SINCE[option][0] >= "2023-01-11", option  # megatron-core-2024's era
    assert SINCE["--context-parallel-size"] == ("2023-10-30", "4a6255a")
    assert SINCE["--expert-model-parallel-size"] == ("2023-10-10", "370f3c1")
    assert SINCE["--moe-router-topk"] == ("2024-01-25", "559e82c")
    assert SINCE["--num-experts"] == ("2022-02-24", "53f3efc")
    with pytest.raises(SpecError, match="SwitchMLP"):
        run_from_megatron_args(small_line(*MOE[2:]), hardware="a100", world_size=2)


# The catalogue's mixture-of-experts models as Megatron-LM trains them, with a layout each:
# (T, sequence parallel, P, partition, CP, cp_comm_type, EP, D).
MOE_LAYOUTS = {
    "mixtral-8x7b": (2, True, 2, "17,17", 1, None, 4, 4),
    "deepseek-v2-lite": (1, False, 1, "29", 2, "all-gather", 8, 4),
    "deepseek-v3": (2, True, 4, "16,15,15,17", 2, "p2p", 8, 4),
    "qwen3-30b-a3b": (4, True, 2, "25,25", 4, "all-gather", 16, 4),
}


def moe_run(name: str) -> RunFile:
    """``name``'s architecture (the recipe's attention, not the catalogue's flash) as Megatron
    trains it, laid out as :data:`MOE_LAYOUTS` says."""
    arch = dataclasses.replace(catalogue_architecture(name), attention=Attention.EAGER)
    tensor, sequence, pipeline, partition, context, comm, expert, data = MOE_LAYOUTS[name]
    return RunFile(
        megatron_model(arch, dtype="bf16", default_batch=64),
        "h100",
        batch=64,
        microbatch_size=1,
        tensor_parallel=tensor,
        sequence_parallel=sequence,
        pipeline_parallel=pipeline,
        data_parallel=data,
        zero=1,
        context_parallel=context if context > 1 else None,
        cp_comm_type=comm,
        expert_parallel=expert,
        recompute="selective",
        schedule="1f1b",
        chunks=1,
        microbatches=16,
        partition=partition,
        remat=False,
        recipe="megatron-core-2024",
    )


@pytest.mark.parametrize("name", sorted(MOE_LAYOUTS))
def test_a_catalogue_moe_model_round_trips_with_context_and_expert_parallelism(name: str) -> None:
    """The writer states the experts (and DeepSeek's latent attention, Qwen3's head width and
    norms) with the alltoall dispatcher, CP and EP; the arguments read back to the same run,
    the catalogue's architecture but its attention kernel (the recipe's) and the padded
    vocabulary, which equals the catalogue's here."""
    run = moe_run(name)
    assert not isinstance(run.model, str)
    words, unexpressed = megatron_args(run, run.model)
    assert unexpressed == ()
    assert words[words.index("--moe-token-dispatcher-type") + 1] == "alltoall"
    tensor, _, pipeline, _, context, _, _, data = MOE_LAYOUTS[name]
    back, ignored = run_from_megatron_args(
        words, hardware="h100", world_size=tensor * pipeline * context * data
    )
    assert (back, ignored) == (run, ())
    assert fields(architecture_of(back)) == fields(catalogue_architecture(name)) | {
        "attention": Attention.EAGER
    }


def test_deepseek_v2_lite_s_arguments_are_megatron_s_own_words() -> None:
    run = moe_run("deepseek-v2-lite")
    words, _ = megatron_args(run, run.model)  # type: ignore[arg-type]
    options = parse_options(words)
    assert options["--moe-layer-freq"] == ("([0]*1+[1]*26)",)
    assert options["--moe-shared-expert-intermediate-size"] == ("2816",)  # 2 x 1408
    assert options["--moe-router-load-balancing-type"] == ("seq_aux_loss",)
    assert options["--cp-comm-type"] == ("all_gather",)
    assert "--q-lora-rank" not in options and "--qk-layernorm" in options
    assert "--moe-router-enable-expert-bias" in parse_options(
        megatron_args(moe_run("deepseek-v3"), moe_run("deepseek-v3").model)[0]  # type: ignore[arg-type]
    )


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"expert_parallel": 2}, "expert_parallel 2: the model has no experts"),
        ({"cp_comm_type": "all-gather"}, "cp_comm_type all-gather without context parallelism"),
        ({"context_parallel": 3, "partition": None}, "context_parallel 3: Megatron asserts"),
        (
            {"recipe": "megatron-lm-2022", "context_parallel": 2},
            "recipe megatron-lm-2022 with context_parallel 2: Megatron-LM's legacy models",
        ),
    ],
)
def test_what_megatron_cannot_express_of_cp_and_ep_is_named(
    changes: dict[str, object], named: str
) -> None:
    run, model = base_run(**changes)
    _, unexpressed = megatron_args(run, model)  # type: ignore[arg-type]
    assert any(named in line for line in unexpressed), unexpressed


def test_moe_of_an_older_recipe_is_written_as_megatron_core_s_and_said() -> None:
    run = dataclasses.replace(moe_run("mixtral-8x7b"), recipe="megatron-lm-2022")
    words, unexpressed = megatron_args(run, run.model)  # type: ignore[arg-type]
    assert unexpressed[0].startswith(
        "recipe megatron-lm-2022 with mixture of experts: Megatron-Core's MoE (--moe-router-topk"
    )
    back, _ = run_from_megatron_args(words, hardware="h100", world_size=32)
    assert back.recipe == "megatron-core-2024" and back.expert_parallel == 4


def test_experts_gated_unlike_the_dense_mlp_are_named() -> None:
    run = moe_run("mixtral-8x7b")
    arch = architecture_of(run)
    assert arch.moe is not None
    gelu = dataclasses.replace(arch, moe=dataclasses.replace(arch.moe, gated=False))
    model = megatron_model(gelu, dtype="bf16", default_batch=64)
    _, unexpressed = megatron_args(dataclasses.replace(run, model=model), model)
    assert any(line.startswith("moe gated false with mlp swiglu") for line in unexpressed)


def test_the_catalogue_moe_model_reads_as_resolved() -> None:
    """The round trip's model is the catalogue's architecture: resolve_model agrees."""
    assert resolve_model("deepseek-v2-lite").architecture == catalogue_architecture(
        "deepseek-v2-lite"
    )


# ---------------------------------------------------------------------------------------------
# Activation offloading


def test_cpu_offloading_of_n_layers_is_activation_offloading_and_written_back() -> None:
    """--cpu-offloading-num-layers 2 (3106714, 2025-10-21): the first 2 blocks' stash on the
    host; 0 is none; written back as it was read."""
    run = read_line("--cpu-offloading-num-layers", "2")
    assert run.offload_activations == 2
    assert read_line("--cpu-offloading-num-layers", "0").offload_activations is None
    # arguments.py turns CPU offloading on for N > 0 only: a negative N is none
    assert read_line("--cpu-offloading-num-layers", "-2").offload_activations is None
    written, model = base_run(offload_activations=3, pipeline_parallel=1, partition="10")
    words, unexpressed = megatron_args(written, model)  # type: ignore[arg-type]
    assert unexpressed == ()
    assert words[words.index("--cpu-offloading-num-layers") + 1] == "3"
    back, ignored = run_from_megatron_args(words, hardware="a100", world_size=4)
    assert (back, ignored) == (written, ())


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (["--cpu-offloading-num-layers", "4"], "'CPU offloading can be done only for layers less"),
        (
            ["--cpu-offloading-num-layers", "1", "--pipeline-model-parallel-size", "2"],
            "'Currently there is no support for Pipeline parallelism with CPU offloading'",
        ),
        (
            ["--cpu-offloading-num-layers", "1", "--recompute-granularity", "selective"],
            "'CPU offloading does not work when activation recomputation is enabled'",
        ),
        (
            ["--cpu-offloading-num-layers", "1", "--recompute-activations"],
            "'CPU offloading does not work when activation recomputation is enabled'",
        ),
    ],
)
def test_cpu_offloading_is_refused_where_megatron_refuses_it(extra: list[str], said: str) -> None:
    with pytest.raises(SpecError) as error:
        read_line(*extra)
    assert said in str(error.value) and "(Megatron-Core raises it)" in str(error.value)


def test_activation_offloading_megatron_cannot_run_is_said_not_written() -> None:
    run, model = base_run(offload_activations=2)  # a pipeline of 4 stages
    words, unexpressed = megatron_args(run, model)  # type: ignore[arg-type]
    assert "--cpu-offloading-num-layers" not in words
    assert any(
        line.startswith("offload_activations 2") and "with a pipeline" in line
        for line in unexpressed
    ), unexpressed
