"""torchtitan job TOML files read into run files and written from them
(pipesim.config.translate.torchtitan), against the configs torchtitan shipped."""

from __future__ import annotations

import ast
import dataclasses
import tomllib
from pathlib import Path

import pytest

from pipesim.common.checks import SpecError
from pipesim.config.run_file import RunFile, parse_run_file, run_file_toml
from pipesim.config.translate import torchtitan
from pipesim.config.translate.torchtitan import (
    CATALOGUE_NAMES,
    COST_NEUTRAL,
    FLAVORS,
    MAPPED,
    REFUSED,
    SCHEDULES,
    WRITTEN_SCHEDULES,
    ffn_width,
    flat_keys,
    flavor_model,
    layer_sac_counts,
    run_from_torchtitan,
    stage_blocks,
    stage_placement,
    torchtitan_toml,
    with_ends,
)
from pipesim.schedules import schedule_info
from pipesim.workload.catalogue import LLAMA_SHAPES, llama
from pipesim.workload.model import Model

FIXTURES = Path(__file__).parent / "fixtures" / "torchtitan"
SHIPPED = ("llama3_8b", "llama3_70b", "llama3_405b", "debug_model")
ALL_FIXTURES = sorted(path.stem for path in FIXTURES.glob("*.toml"))

# A small file every refusal case starts from: one that translates (one H100, debugmodel).
BASE = {
    "model": {"name": "llama3", "flavor": "debugmodel"},
    "training": {"local_batch_size": 8, "seq_len": 2048},
    "parallelism": {"data_parallel_shard_degree": 1},
    "activation_checkpoint": {"mode": "none"},
}


def read(name: str, **kwargs: object) -> tuple[RunFile, tuple[str, ...]]:
    options: dict[str, object] = {"hardware": "h100", "allow_ignored": True, **kwargs}
    return run_from_torchtitan(FIXTURES / f"{name}.toml", **options)  # type: ignore[arg-type]


def written(tmp_path: Path, table: dict[str, dict[str, object]]) -> Path:
    """``table`` as a TOML file (flat sections of plain values, nested lists)."""
    from pipesim.files.toml_writer import toml_text

    path = tmp_path / "job.toml"
    path.write_text(toml_text(table))
    return path


def with_keys(**changes: object) -> dict[str, dict[str, object]]:
    """BASE with ``section__key=value`` changes."""
    table = {section: dict(keys) for section, keys in BASE.items()}
    for dotted, value in changes.items():
        section, key = dotted.split("__")
        table.setdefault(section, {})[key] = value
    return table


# --- the shipped configs -------------------------------------------------------------------------


def test_the_fixtures_are_the_shipped_files_with_their_source_named() -> None:
    for name in SHIPPED:
        first = (FIXTURES / f"{name}.toml").read_text().splitlines()[0]
        assert first == (
            f"# torchtitan/models/llama3/train_configs/{name}.toml at pytorch/torchtitan "
            f"{torchtitan.TORCHTITAN_COMMIT}"
        )


def test_the_shipped_8b_config_is_fsdp_over_the_whole_world() -> None:
    """data_parallel_shard_degree = -1 is the rest of the world: ZeRO-3 over 64 replicas of
    llama3-8b, in bf16 (FSDP's mixed precision), torchtitan's default reshard policy, one
    sequence a replica, op-level selective checkpointing."""
    run, notes = read("llama3_8b", world_size=64)
    assert run == RunFile(
        "llama3-8b",
        "h100",
        batch=64,
        microbatch_size=1,
        optimizer="adam",
        dtype="bf16",
        tensor_parallel=1,
        sequence_parallel=False,
        pipeline_parallel=1,
        data_parallel=64,
        zero=3,
        reshard_after_forward="default",
        recompute="selective",
        schedule="1f1b",
        chunks=1,
        microbatches=1,
        partition="34",
        remat=False,
        recipe="torchtitan",
    )
    assert not any("mixed_precision" in note for note in notes)


def test_the_shipped_70b_config_is_fsdp_beside_tensor_parallelism_in_bf16() -> None:
    """T = 8 leaves 8 of 64 GPUs to the shard degree; under FSDP mixed_precision_param takes
    effect whatever the tensor degree: the catalogue's llama3-70b, bf16."""
    run, notes = read("llama3_70b", world_size=64)
    assert (run.model, run.dtype) == ("llama3-70b", "bf16")
    assert (run.tensor_parallel, run.sequence_parallel, run.pipeline_parallel) == (8, True, 1)
    assert (run.data_parallel, run.zero, run.reshard_after_forward) == (8, 3, "default")
    assert (run.batch, run.microbatch_size, run.microbatches) == (64, 8, 1)
    assert (run.recompute, run.partition) == ("full", "82")
    assert not any("mixed_precision" in note for note in notes)


def test_shipped_405b_is_refused_for_float8_compile_and_async_tp_in_one_line() -> None:
    with pytest.raises(SpecError) as caught:
        read("llama3_405b", world_size=128)
    message = str(caught.value)
    assert "\n" not in message
    for key in ("model.converters", "compile.enable", "parallelism.enable_async_tensor_parallel"):
        assert key in message


def test_async_tensor_parallelism_is_not_read_as_the_gemm_overlap(tmp_path: Path) -> None:
    """torchtitan's async TP is torch.compile's micro-pipelining, which it refuses without
    compile.enable: a recipe's tp_comm_overlap alone would not be that run, so the key stays
    refused, and says why."""
    changes = {"parallelism__enable_async_tensor_parallel": True}
    path = written(tmp_path, with_keys(parallelism__tensor_parallel_degree=2, **changes))
    with pytest.raises(SpecError) as caught:
        run_from_torchtitan(path, hardware="h100", world_size=None)
    message = str(caught.value)
    assert "\n" not in message and "parallelism.enable_async_tensor_parallel" in message
    assert "without compile.enable" in message and "tp_comm_overlap alone" in message


def test_a_shard_degree_of_minus_one_needs_the_world_size() -> None:
    with pytest.raises(SpecError, match=r"data_parallel_shard_degree = -1 .*world_size"):
        read("llama3_8b")


def test_the_cost_neutral_keys_are_refused_unless_allowed() -> None:
    with pytest.raises(SpecError) as caught:
        read("llama3_8b_ddp8", allow_ignored=False)
    assert "job.dump_folder" in str(caught.value) and "allow_ignored ignores them" in str(
        caught.value
    )
    _, notes = read("llama3_8b_ddp8")
    assert "job.dump_folder: ignored (output and logging only)" in notes


def test_the_ddp_variant_of_the_8b_config_translates() -> None:
    """8 replicas of llama3-8b (DDP), one sequence each, op-level selective checkpointing."""
    run, notes = read("llama3_8b_ddp8")
    assert run == RunFile(
        "llama3-8b",
        "h100",
        batch=8,
        microbatch_size=1,
        optimizer="adam",
        dtype="bf16",
        tensor_parallel=1,
        sequence_parallel=False,
        pipeline_parallel=1,
        data_parallel=8,
        zero=0,
        recompute="selective",
        schedule="1f1b",
        chunks=1,
        microbatches=1,
        partition="34",
        remat=False,
        recipe="torchtitan",
    )
    assert any(
        note.startswith("activation_checkpoint.selective_ac_option = 'op'") for note in notes
    )


def test_the_debug_config_on_one_device_is_the_debug_model_inline() -> None:
    """debugmodel (dim 256, 6 layers, 16 heads, vocab 2048) at seq 2048; selective '2' checkpoints
    blocks 2, 4 and 6: 3 blocks, pipesim's recompute 3."""
    run, notes = read("debug_model", world_size=1)
    assert isinstance(run.model, Model) and run.model.architecture is not None
    arch = run.model.architecture
    assert (
        arch.layers,
        arch.hidden,
        arch.heads,
        arch.kv_heads,
        arch.ffn,
        arch.vocab,
        arch.seq,
    ) == (
        6,
        256,
        16,
        16,
        768,
        2048,
        2048,
    )
    assert (run.batch, run.microbatch_size, run.microbatches, run.recompute) == (8, 8, 1, "3")
    assert (run.pipeline_parallel, run.schedule, run.dtype, run.partition) == (
        1,
        "1f1b",
        "bf16",
        "8",
    )
    assert any("stated inline" in note for note in notes)


def test_the_70b_with_tensor_and_pipeline_parallelism_trains_in_fp32() -> None:
    """No FSDP: torchtitan's mixed precision is off; torchtitan's own split of 80 blocks over
    8 stages, the embedding and the output weighing a layer each."""
    run, notes = read("llama3_70b_tp8_pp4")
    assert run.model == flavor_model("70B", 8192, "fp32")
    assert isinstance(run.model, Model) and run.model.weight_bytes_per_parameter == 4
    assert (run.tensor_parallel, run.sequence_parallel, run.pipeline_parallel) == (8, True, 4)
    assert (run.schedule, run.chunks, run.microbatches, run.microbatch_size) == (
        "interleaved-1f1b",
        2,
        8,
        1,
    )
    assert run.partition == "11,11,10,10,10,10,10,10"
    assert (run.dtype, run.recompute, run.batch) == ("fp32", "full", 8)
    assert any(note.startswith("training.mixed_precision_param = 'bfloat16'") for note in notes)


@pytest.mark.parametrize("name", ["llama3_8b_ddp8", "llama3_70b_tp8_pp4", "debug_model"])
def test_a_translated_run_is_a_run_file_that_reads_back_equal(name: str) -> None:
    run, _ = read(name, world_size=1 if name == "debug_model" else None)
    assert parse_run_file(run_file_toml(run)) == run


# --- every key accounted for ----------------------------------------------------------------------


def test_the_tables_do_not_overlap() -> None:
    assert not set(MAPPED) & set(REFUSED)
    assert not set(MAPPED) & set(COST_NEUTRAL)
    assert not set(REFUSED) & set(COST_NEUTRAL)


@pytest.mark.parametrize("name", ALL_FIXTURES)
def test_every_key_of_every_fixture_is_in_exactly_one_table(name: str) -> None:
    keys = flat_keys(tomllib.loads((FIXTURES / f"{name}.toml").read_text()))
    assert keys
    for key in keys:
        assert (key in MAPPED) + (key in REFUSED) + (key in COST_NEUTRAL) == 1, key


def test_the_tables_hold_every_section_of_jobconfig() -> None:
    """JobConfig's sections at the commit (torchtitan/config/job_config.py)."""
    sections = {key.split(".")[0] for key in (*MAPPED, *REFUSED, *COST_NEUTRAL)}
    assert sections == {
        "job",
        "profiling",
        "metrics",
        "model",
        "optimizer",
        "lr_scheduler",
        "training",
        "parallelism",
        "checkpoint",
        "activation_checkpoint",
        "compile",
        "quantize",
        "comm",
        "memory_estimation",
        "fault_tolerance",
        "experimental",
        "validation",
        "debug",
    }


# --- the models ----------------------------------------------------------------------------------


@pytest.mark.parametrize("flavor", sorted(CATALOGUE_NAMES))
def test_each_flavor_is_the_catalogue_model_of_its_name(flavor: str) -> None:
    """torchtitan's FFN width (2/3 of 4 dim, times the multiplier, rounded up) is the
    catalogue's 14336, 28672, 53248; the other shape fields agree too."""
    args = FLAVORS[flavor]
    layers, hidden, heads, kv, ffn, vocab, seq, _ = LLAMA_SHAPES[CATALOGUE_NAMES[flavor]]
    assert args.ffn == ffn == {"8B": 14336, "70B": 28672, "405B": 53248}[flavor]
    assert (args.n_layers, args.dim, args.n_heads, args.kv_heads, args.vocab_size) == (
        layers,
        hidden,
        heads,
        kv,
        vocab,
    )
    assert flavor_model(flavor, seq, "bf16") == CATALOGUE_NAMES[flavor]


def test_ffn_width_rounds_as_torchtitan_does() -> None:
    assert ffn_width(256, 256, None) == 768  # int(2 x 1024 / 3) = 682, up to 768
    assert ffn_width(4096, 1024, 1.3) == 14336  # 10922 x 1.3 = 14198, up to 14336


def test_another_seq_len_is_the_catalogue_model_at_that_seq_inline() -> None:
    built = flavor_model("8B", 4096, "bf16")
    assert isinstance(built, Model) and built.architecture is not None
    catalogue = llama("llama3-8b")
    assert built.architecture.seq == 4096
    assert built.parameters == catalogue.parameters
    assert built.layers[1].forward_flops < catalogue.layers[1].forward_flops


# --- the pipeline --------------------------------------------------------------------------------


def test_torchtitans_split_weighs_the_embedding_and_output_as_a_layer() -> None:
    """generate_llm_fqn_per_model_part: 34 effective layers over 4 stages, 9 9 8 8, less one
    block on the first and the last."""
    assert stage_blocks(4, 32) == (8, 9, 8, 7)
    assert with_ends(stage_blocks(4, 32)) == (9, 9, 8, 8)
    assert sum(stage_blocks(12, 126)) == 126


def test_schedule_names_are_pytorchs_class_names_less_the_prefix() -> None:
    for theirs, ours in SCHEDULES.items():
        assert schedule_info(ours).torch_class == f"Schedule{theirs}"
    assert WRITTEN_SCHEDULES["zb-h1"] == "InterleavedZeroBubble"
    assert schedule_info("zb-h1").torch_class == "ScheduleInterleavedZeroBubble"


def test_layer_checkpointing_counts_blocks_per_rank_in_build_order() -> None:
    """Rank 0 builds stages 0 and 4, rank 1 stages 1 and 5...: with 4 blocks a stage and one
    block in 2 checkpointed, every stage gets 2."""
    placement = stage_placement(4, 2, v_style=False)
    assert placement[0] == (0, 4)
    assert layer_sac_counts((4,) * 8, placement, 2) == (2,) * 8
    assert layer_sac_counts((3, 3), stage_placement(1, 2, False), 2) == (1, 2)
    assert stage_placement(4, 2, v_style=True) == ((0, 7), (1, 6), (2, 5), (3, 4))


# --- refusals: one line naming the key -----------------------------------------------------------


def test_the_base_file_of_the_refusal_cases_translates(tmp_path: Path) -> None:
    run, notes = run_from_torchtitan(written(tmp_path, with_keys()), hardware="h100")
    assert run.world_size == 1 and run.recompute == "none"
    assert not any("ignored" in note for note in notes)


REFUSALS = {
    "expert parallelism beyond the experts' mesh": (
        {"parallelism__expert_parallel_degree": 2},
        "parallelism.expert_parallel_degree = 2: the experts' mesh",
    ),
    "expert tensor parallelism neither 1 nor tp": (
        {
            "parallelism__tensor_parallel_degree": 2,
            "parallelism__data_parallel_shard_degree": 4,
            "parallelism__expert_parallel_degree": 2,
            "parallelism__expert_tensor_parallel_degree": 4,
        },
        "parallelism.expert_tensor_parallel_degree = 4 with tensor_parallel_degree = 2: "
        "'Currently we only support ETP=TP or ETP=1'",
    ),
    "hsdp over the context-parallel ranks": (
        {
            "parallelism__context_parallel_degree": 2,
            "parallelism__data_parallel_replicate_degree": 2,
        },
        "parallelism.data_parallel_replicate_degree = 2 beside "
        "parallelism.data_parallel_shard_degree = 1 and parallelism.context_parallel_degree = 2: "
        "HSDP",
    ),
    "a context-parallel load balancer pipesim lacks": (
        {
            "parallelism__context_parallel_degree": 2,
            "parallelism__context_parallel_load_balancer": "ptrr",
        },
        "parallelism.context_parallel_load_balancer = 'ptrr'",
    ),
    "a rotate method torchtitan lacks": (
        {
            "parallelism__context_parallel_degree": 2,
            "parallelism__context_parallel_rotate_method": "ring",
        },
        "parallelism.context_parallel_rotate_method must be one of allgather, alltoall",
    ),
    "seq not divisible by 2 x cp": (
        {"parallelism__context_parallel_degree": 3},
        "training.seq_len = 2048 must be divisible by tensor_parallel_degree x 2 x "
        "context_parallel_degree = 6",
    ),
    "float8": ({"model__converters": ["float8"]}, "model.converters"),
    "compile": ({"compile__enable": True}, "compile.enable"),
    "async tp": (
        {"parallelism__enable_async_tensor_parallel": True},
        "parallelism.enable_async_tensor_parallel",
    ),
    "hsdp": (
        {
            "parallelism__data_parallel_shard_degree": 2,
            "parallelism__data_parallel_replicate_degree": 2,
        },
        "parallelism.data_parallel_replicate_degree = 2 beside "
        "parallelism.data_parallel_shard_degree = 2: HSDP",
    ),
    "reshard policy": (
        {
            "parallelism__data_parallel_shard_degree": 2,
            "parallelism__fsdp_reshard_after_forward": "sometimes",
        },
        "parallelism.fsdp_reshard_after_forward must be one of default, always, never",
    ),
    "bf16 reduce": (
        {
            "parallelism__data_parallel_shard_degree": 2,
            "training__mixed_precision_reduce": "bfloat16",
        },
        "training.mixed_precision_reduce = 'bfloat16': JobConfig takes 'float32' only",
    ),
    "ddp beside tp": (
        {
            "parallelism__data_parallel_replicate_degree": 2,
            "parallelism__tensor_parallel_degree": 2,
        },
        "parallelism.data_parallel_replicate_degree",
    ),
    "csv schedule": (
        {"parallelism__pipeline_parallel_schedule_csv": "order.csv"},
        "parallelism.pipeline_parallel_schedule_csv",
    ),
    "csv-only class": (
        {
            "parallelism__pipeline_parallel_degree": 2,
            "parallelism__pipeline_parallel_schedule": "PipelineScheduleMulti",
        },
        "parallelism.pipeline_parallel_schedule",
    ),
    "schedule pipesim lacks": (
        {
            "parallelism__pipeline_parallel_degree": 2,
            "parallelism__pipeline_parallel_schedule": "ZeroBubbleV2",
        },
        "parallelism.pipeline_parallel_schedule",
    ),
    "zbv with few micro-batches": (
        {
            "parallelism__pipeline_parallel_degree": 2,
            "parallelism__pipeline_parallel_schedule": "DualPipeV",
            "training__local_batch_size": 2,
        },
        "parallelism.pipeline_parallel_schedule",
    ),
    "accumulation with a pipeline": (
        {"parallelism__pipeline_parallel_degree": 2, "training__global_batch_size": 16},
        "training.global_batch_size",
    ),
    "micro-batch size": (
        {
            "parallelism__pipeline_parallel_degree": 2,
            "parallelism__pipeline_parallel_microbatch_size": 3,
        },
        "parallelism.pipeline_parallel_microbatch_size",
    ),
    "layers per stage": (
        {
            "parallelism__pipeline_parallel_degree": 2,
            "parallelism__pipeline_parallel_schedule": "Interleaved1F1B",
            "parallelism__pipeline_parallel_layers_per_stage": 8,
        },
        "parallelism.pipeline_parallel_layers_per_stage",
    ),
    "modules out of order": (
        {
            "parallelism__pipeline_parallel_degree": 2,
            "parallelism__module_fqns_per_model_part": [
                ["tok_embeddings", "layers.1", "layers.0"],
                ["layers.2", "layers.3", "layers.4", "layers.5", "norm", "output"],
            ],
        },
        "parallelism.module_fqns_per_model_part",
    ),
    "memory budget": (
        {"activation_checkpoint__mode": "memory_budget"},
        "activation_checkpoint.mode",
    ),
    "uneven layer checkpointing": (
        {
            "parallelism__pipeline_parallel_degree": 2,
            "parallelism__pipeline_parallel_schedule": "Interleaved1F1B",
            "activation_checkpoint__mode": "selective",
            "activation_checkpoint__selective_ac_option": "2",
        },
        "activation_checkpoint.selective_ac_option",
    ),
    "bad ac option": (
        {
            "activation_checkpoint__mode": "selective",
            "activation_checkpoint__selective_ac_option": "x",
        },
        "activation_checkpoint.selective_ac_option",
    ),
    "optimizer": ({"optimizer__name": "Muon"}, "optimizer.name"),
    "model family": ({"model__name": "deepseek_v3"}, "model.name"),
    "flex attention": ({"model__flavor": "8B_flex"}, "model.flavor"),
    "unknown flavor": ({"model__flavor": "1B"}, "model.flavor"),
    "full bf16": ({"training__dtype": "bfloat16"}, "training.dtype"),
    "seq not divisible": (
        {"parallelism__tensor_parallel_degree": 4, "training__seq_len": 2044},
        "training.seq_len",
    ),
    "unknown key": ({"training__bogus": 1}, "training.bogus"),
    "wrong type": ({"parallelism__tensor_parallel_degree": "2"}, "tensor_parallel_degree"),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_each_refusal_is_one_line_naming_the_key(tmp_path: Path, case: str) -> None:
    changes, key = REFUSALS[case]
    path = written(tmp_path, with_keys(**changes))
    with pytest.raises(SpecError) as caught:
        run_from_torchtitan(path, hardware="h100", world_size=None)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"torchtitan file {str(path)!r}: ")
    assert key in message, message


def test_a_degree_of_minus_one_resolved_to_one_is_no_fsdp(tmp_path: Path) -> None:
    """With only tensor and pipeline parallelism filling the world, -1 is 1: no sharding, and
    float32 (no mixed precision without FSDP). Twice the world leaves 2 to the shard degree:
    ZeRO-3 over 2 replicas, in bf16 (FSDP's mixed precision) with the pipeline."""
    path = written(
        tmp_path,
        with_keys(
            parallelism__data_parallel_shard_degree=-1,
            parallelism__tensor_parallel_degree=2,
            parallelism__pipeline_parallel_degree=2,
        ),
    )
    run, notes = run_from_torchtitan(path, hardware="h100", world_size=4)
    assert (run.tensor_parallel, run.pipeline_parallel, run.data_parallel) == (2, 2, 1)
    assert (run.zero, run.reshard_after_forward, run.dtype) == (0, None, "fp32")
    assert any(note.startswith("training.mixed_precision_param = 'bfloat16'") for note in notes)
    run, notes = run_from_torchtitan(path, hardware="h100", world_size=8)
    assert (run.tensor_parallel, run.pipeline_parallel, run.data_parallel) == (2, 2, 2)
    assert (run.zero, run.reshard_after_forward, run.dtype) == (3, "default", "bf16")
    assert (run.batch, run.microbatches) == (16, 8)  # local 8 a replica, micro-batches of 1
    assert not any("mixed_precision" in note for note in notes)


@pytest.mark.parametrize("policy", ["default", "always", "never"])
def test_fsdps_reshard_policy_is_the_runs(tmp_path: Path, policy: str) -> None:
    path = written(
        tmp_path,
        with_keys(
            parallelism__data_parallel_shard_degree=4,
            parallelism__fsdp_reshard_after_forward=policy,
            training__mixed_precision_param="float32",
            training__mixed_precision_reduce="float32",
        ),
    )
    run, notes = run_from_torchtitan(path, hardware="h100")
    assert (run.data_parallel, run.zero, run.reshard_after_forward) == (4, 3, policy)
    assert run.dtype == "fp32" and run.model == flavor_model("debugmodel", 2048, "fp32")
    assert (run.batch, run.microbatch_size, run.microbatches) == (32, 8, 1)
    assert not any("ignored" in note for note in notes)


def test_fsdps_keys_without_fsdp_are_noted(tmp_path: Path) -> None:
    """A shard degree of 1: the reshard policy does nothing (said), the run states none."""
    path = written(tmp_path, with_keys(parallelism__fsdp_reshard_after_forward="never"))
    run, notes = run_from_torchtitan(path, hardware="h100")
    assert (run.zero, run.reshard_after_forward) == (0, None)
    assert (
        "parallelism.fsdp_reshard_after_forward = 'never': no effect without FSDP (a shard "
        "degree of 1)"
    ) in notes


# --- writing and reading back --------------------------------------------------------------------


def plan_run(model: str | Model, **layout: object) -> RunFile:
    """A run as a plan states it (every layout field), as the reader states it back."""
    fields: dict[str, object] = {
        "optimizer": "adam",
        "zero": 0,
        "remat": False,
        "recipe": "torchtitan",
        "chunks": 1,
        "tensor_parallel": 1,
        "sequence_parallel": False,
        "pipeline_parallel": 1,
        "data_parallel": 1,
        "recompute": "none",
        "schedule": "1f1b",
        **layout,
    }
    size, microbatches, data = (
        fields["microbatch_size"],
        fields["microbatches"],
        fields["data_parallel"],
    )
    fields.setdefault("batch", size * microbatches * data)  # type: ignore[operator]
    return RunFile(model, "h100", **fields)  # type: ignore[arg-type]


FP32_8B = flavor_model("8B", 8192, "fp32")
FP32_70B = flavor_model("70B", 8192, "fp32")
ROUND_TRIPS = {
    "ddp with accumulation": plan_run(
        "llama3-8b",
        microbatch_size=2,
        microbatches=4,
        data_parallel=8,
        dtype="bf16",
        recompute="full",
        partition="34",
    ),
    "one device at seq 4096": plan_run(
        flavor_model("8B", 4096, "bf16"),
        microbatch_size=1,
        microbatches=2,
        data_parallel=2,
        dtype="bf16",
        recompute="selective",
        partition="34",
    ),
    "one device in fp32": plan_run(
        FP32_8B,
        microbatch_size=1,
        microbatches=2,
        dtype="fp32",
        partition="34",
    ),
    "interleaved, torchtitan's split": plan_run(
        FP32_70B,
        microbatch_size=1,
        microbatches=8,
        tensor_parallel=8,
        sequence_parallel=True,
        pipeline_parallel=4,
        schedule="interleaved-1f1b",
        chunks=2,
        dtype="fp32",
        partition="11,11,10,10,10,10,10,10",
    ),
    "1f1b, an uneven split": plan_run(
        FP32_8B,
        microbatch_size=2,
        microbatches=8,
        pipeline_parallel=4,
        dtype="fp32",
        partition="10,8,8,8",
        recompute="full",
    ),
    "interleaved, three chunks": plan_run(
        FP32_8B,
        microbatch_size=1,
        microbatches=8,
        pipeline_parallel=4,
        schedule="interleaved-1f1b",
        chunks=3,
        dtype="fp32",
        partition=",".join(map(str, with_ends(stage_blocks(12, 32)))),
    ),
    "zbv": plan_run(
        FP32_8B,
        microbatch_size=1,
        microbatches=8,
        pipeline_parallel=2,
        schedule="zbv",
        chunks=2,
        dtype="fp32",
        partition=",".join(map(str, with_ends(stage_blocks(4, 32)))),
    ),
    "zb-h1": plan_run(
        FP32_8B,
        microbatch_size=1,
        microbatches=8,
        pipeline_parallel=4,
        schedule="zb-h1",
        dtype="fp32",
        partition="9,9,8,8",
    ),
    "fsdp with accumulation": plan_run(
        "llama3-8b",
        microbatch_size=2,
        microbatches=4,
        data_parallel=8,
        zero=3,
        reshard_after_forward="default",
        dtype="bf16",
        recompute="full",
        partition="34",
    ),
    "fsdp in bf16 beside tensor and pipeline parallelism": plan_run(
        "llama3-70b",
        microbatch_size=1,
        microbatches=8,
        tensor_parallel=8,
        sequence_parallel=True,
        pipeline_parallel=4,
        schedule="interleaved-1f1b",
        chunks=2,
        data_parallel=2,
        zero=3,
        reshard_after_forward="never",
        dtype="bf16",
        partition="11,11,10,10,10,10,10,10",
    ),
    "context parallelism beside fsdp and tensor parallelism": plan_run(
        "llama3-8b",
        microbatch_size=1,
        microbatches=2,
        tensor_parallel=2,
        sequence_parallel=True,
        data_parallel=2,
        context_parallel=2,
        cp_comm_type="all-gather",
        zero=3,
        reshard_after_forward="default",
        dtype="bf16",
        recompute="full",
        partition="34",
    ),
    "context parallelism alone in a pipeline": plan_run(
        "llama3-70b",
        microbatch_size=1,
        microbatches=8,
        pipeline_parallel=4,
        context_parallel=4,
        cp_comm_type="all-gather",
        zero=3,
        reshard_after_forward="always",
        dtype="bf16",
        partition="21,20,20,21",
    ),
    "layer checkpointing": plan_run(
        FP32_8B,
        microbatch_size=1,
        microbatches=4,
        pipeline_parallel=2,
        tensor_parallel=2,
        sequence_parallel=True,
        schedule="gpipe",
        dtype="fp32",
        partition="17,17",
        recompute="4",
    ),
}


@pytest.mark.parametrize("case", sorted(ROUND_TRIPS))
def test_a_run_written_and_read_back_is_the_same_run(tmp_path: Path, case: str) -> None:
    run = ROUND_TRIPS[case]
    text, lost = torchtitan_toml(run)
    # pipesim's selective (the attention core) is written as torchtitan's op policy, named
    assert [line.split(" (")[0] for line in lost] == (
        ["recompute selective"] if run.recompute == "selective" else []
    ), lost
    path = tmp_path / "job.toml"
    path.write_text(text)
    back, _ = run_from_torchtitan(path, hardware="h100", allow_ignored=True)
    assert back == run


def test_torchtitans_own_split_is_written_as_no_key_and_others_as_modules() -> None:
    own, _ = torchtitan_toml(ROUND_TRIPS["interleaved, torchtitan's split"])
    parallelism = tomllib.loads(own)["parallelism"]
    assert "module_fqns_per_model_part" not in parallelism
    assert parallelism["pipeline_parallel_schedule"] == "Interleaved1F1B"
    uneven, _ = torchtitan_toml(ROUND_TRIPS["1f1b, an uneven split"])
    parts = tomllib.loads(uneven)["parallelism"]["module_fqns_per_model_part"]
    assert parts[0][:2] == ["tok_embeddings", "layers.0"] and len(parts[0]) == 10
    assert parts[-1][-2:] == ["norm", "output"]
    three, _ = torchtitan_toml(ROUND_TRIPS["interleaved, three chunks"])
    assert tomllib.loads(three)["parallelism"]["pipeline_parallel_layers_per_stage"] == 3


def test_zero_3_is_written_as_the_shard_degree_with_the_reshard_policy() -> None:
    text, lost = torchtitan_toml(ROUND_TRIPS["fsdp in bf16 beside tensor and pipeline parallelism"])
    table = tomllib.loads(text)
    assert lost == ()
    assert {
        key: table["parallelism"][key]
        for key in (
            "data_parallel_replicate_degree",
            "data_parallel_shard_degree",
            "fsdp_reshard_after_forward",
            "tensor_parallel_degree",
            "pipeline_parallel_degree",
        )
    } == {
        "data_parallel_replicate_degree": 1,
        "data_parallel_shard_degree": 2,
        "fsdp_reshard_after_forward": "never",
        "tensor_parallel_degree": 8,
        "pipeline_parallel_degree": 4,
    }
    assert table["training"]["mixed_precision_param"] == "bfloat16"


def test_the_written_file_states_what_torchtitan_defaults_differently() -> None:
    text, _ = torchtitan_toml(ROUND_TRIPS["ddp with accumulation"])
    table = tomllib.loads(text)
    assert table["activation_checkpoint"] == {"mode": "full"}
    assert table["training"]["seq_len"] == 8192
    assert table["training"]["local_batch_size"] == 2
    assert table["training"]["global_batch_size"] == 64
    assert table["parallelism"]["data_parallel_shard_degree"] == 1
    assert table["model"] == {"name": "llama3", "flavor": "8B"}


LOSSES = {
    "bf16 with a pipeline": (
        dict(
            microbatch_size=1,
            microbatches=8,
            pipeline_parallel=4,
            dtype="bf16",
            partition="9,9,8,8",
        ),
        "float32",
    ),
    "ddp beside a pipeline": (
        dict(
            microbatch_size=1,
            microbatches=8,
            pipeline_parallel=4,
            data_parallel=2,
            dtype="bf16",
            partition="9,9,8,8",
        ),
        "one-dimensional",
    ),
    "zero-1": (
        dict(
            microbatch_size=1, microbatches=1, data_parallel=8, zero=1, dtype="bf16", partition="34"
        ),
        "zero 1: torchtitan shards only through FSDP",
    ),
    "zero-2": (
        dict(
            microbatch_size=1, microbatches=1, data_parallel=8, zero=2, dtype="bf16", partition="34"
        ),
        "zero 2: torchtitan shards only through FSDP",
    ),
    "a reshard policy without fsdp": (
        dict(
            microbatch_size=1,
            microbatches=1,
            data_parallel=8,
            reshard_after_forward="never",
            dtype="bf16",
            partition="34",
        ),
        "reshard_after_forward never: FSDP's alone",
    ),
    "a schedule pytorch lacks": (
        dict(
            microbatch_size=1,
            microbatches=8,
            pipeline_parallel=4,
            schedule="zb-h2",
            dtype="bf16",
            partition="9,9,8,8",
        ),
        "schedule zb-h2",
    ),
    "an objective for a partition": (
        dict(
            microbatch_size=1,
            microbatches=8,
            pipeline_parallel=4,
            dtype="bf16",
            partition="balanced",
        ),
        "partition balanced",
    ),
    "remat": (
        dict(
            microbatch_size=1,
            microbatches=8,
            pipeline_parallel=4,
            schedule="gpipe",
            remat=True,
            dtype="bf16",
            partition="9,9,8,8",
        ),
        "remat",
    ),
    "another recipe": (
        dict(
            microbatch_size=1,
            microbatches=1,
            dtype="bf16",
            partition="34",
            recipe="megatron-core-2024",
        ),
        "recipe megatron-core-2024",
    ),
    "the gemm overlap": (
        dict(
            microbatch_size=1,
            microbatches=1,
            tensor_parallel=2,
            sequence_parallel=True,
            dtype="bf16",
            partition="34",
            tp_comm_overlap=True,
        ),
        "tp_comm_overlap True: torchtitan's recipe decides it",
    ),
    "scattered messages": (
        dict(
            microbatch_size=1,
            microbatches=8,
            pipeline_parallel=4,
            dtype="bf16",
            partition="9,9,8,8",
            scatter_gather_p2p=True,
        ),
        "scatter_gather_p2p True: torchtitan's recipe decides it",
    ),
    "context parallelism by p2p": (
        dict(
            microbatch_size=1,
            microbatches=1,
            context_parallel=2,
            zero=3,
            dtype="bf16",
            partition="34",
        ),
        "cp_comm_type p2p: torchtitan's ring attention all-gathers the keys and values",
    ),
    "context parallelism without fsdp": (
        dict(
            microbatch_size=1,
            microbatches=1,
            context_parallel=2,
            cp_comm_type="all-gather",
            zero=1,
            dtype="bf16",
            partition="34",
        ),
        "zero 1 with context_parallel 2: torchtitan applies FSDP over dp_shard x cp",
    ),
    "an exchange without context parallelism": (
        dict(microbatch_size=1, microbatches=1, cp_comm_type="all-gather", partition="34"),
        "cp_comm_type all-gather without context parallelism",
    ),
    "expert parallelism of a dense model": (
        dict(
            microbatch_size=1,
            microbatches=1,
            data_parallel=2,
            expert_parallel=2,
            zero=3,
            dtype="bf16",
            partition="34",
        ),
        "expert_parallel 2: the model has no experts for it to divide",
    ),
    "expert parallelism without fsdp": (
        dict(
            microbatch_size=1,
            microbatches=1,
            data_parallel=4,
            expert_parallel=2,
            dtype="bf16",
            partition="34",
        ),
        "expert_parallel 2: torchtitan's experts' mesh needs it to divide dp_shard x cp = 1",
    ),
    "no sequence parallelism": (
        dict(
            microbatch_size=1,
            microbatches=1,
            tensor_parallel=2,
            sequence_parallel=False,
            dtype="bf16",
            partition="34",
        ),
        "sequence_parallel false",
    ),
}


@pytest.mark.parametrize("case", sorted(LOSSES))
def test_what_torchtitan_cannot_express_is_named(case: str) -> None:
    layout, words = LOSSES[case]
    text, lost = torchtitan_toml(plan_run("llama3-8b", **layout))
    assert any(words in line for line in lost), lost
    assert all(f"# not expressed: {line}" in text for line in lost)
    tomllib.loads(text)  # still a TOML file


def test_a_model_that_is_no_flavor_is_named() -> None:
    text, lost = torchtitan_toml(
        plan_run("gpt3-175b", microbatch_size=1, microbatches=1, dtype="bf16", partition="98")
    )
    assert any("'gpt3-175b' is not a torchtitan llama3 flavor" in line for line in lost)
    assert tomllib.loads(text)["model"]["flavor"] == "gpt3-175b"


def test_an_inline_model_renamed_is_still_its_flavor() -> None:
    renamed = dataclasses.replace(llama("llama3-70b"), name="my-70b")
    text, lost = torchtitan_toml(
        plan_run(renamed, microbatch_size=1, microbatches=1, dtype="bf16", partition="82")
    )
    assert lost == ()
    assert tomllib.loads(text)["model"]["flavor"] == "70B"


def test_pipesim_never_imports_torch_here() -> None:
    tree = ast.parse(Path(torchtitan.__file__).read_text())
    imported = {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    } | {
        (node.module or "").split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
    }
    assert "torch" not in imported and "torchtitan" not in imported


# --- context and expert parallelism --------------------------------------------------------------


def test_context_parallelism_is_fsdp_over_dp_shard_x_cp_with_an_all_gather(
    tmp_path: Path,
) -> None:
    """torchtitan's world is dp_replicate x dp_shard x cp x tp x pp; with CP it shards through
    FSDP (fsdp_enabled) over dp_shard x cp, pipesim's ZeRO-3 over D x CP, in FSDP's mixed
    precision; its ring attention all-gathers (PyTorch's default rotater), said in a note. The
    batch is split over dp_shard alone: the CP ranks share their samples."""
    path = written(
        tmp_path,
        with_keys(
            parallelism__data_parallel_shard_degree=-1,
            parallelism__context_parallel_degree=2,
            parallelism__tensor_parallel_degree=2,
        ),
    )
    run, notes = run_from_torchtitan(path, hardware="h100", world_size=16)
    assert (run.tensor_parallel, run.context_parallel, run.data_parallel) == (2, 2, 4)
    assert (run.zero, run.reshard_after_forward, run.dtype) == (3, "default", "bf16")
    assert (run.cp_comm_type, run.expert_parallel) == ("all-gather", None)
    assert (run.batch, run.microbatch_size, run.microbatches) == (32, 8, 1)
    assert any(
        note.startswith("parallelism.context_parallel_degree = 2: PyTorch's ring") for note in notes
    )
    alone, _ = run_from_torchtitan(
        written(tmp_path, with_keys(parallelism__context_parallel_degree=2)), hardware="h100"
    )
    assert (alone.data_parallel, alone.context_parallel, alone.zero) == (1, 2, 3)


def test_the_rotate_method_is_read_by_validation_alone(tmp_path: Path) -> None:
    """At the commit set_rotate_method is reached through validation's context only: alltoall
    leaves training's all-gather as it is (noted), and with validation turns it into the ring
    from the first validation on (refused: two regimes in one run)."""
    keys = {
        "parallelism__context_parallel_degree": 2,
        "parallelism__context_parallel_rotate_method": "alltoall",
    }
    run, notes = run_from_torchtitan(written(tmp_path, with_keys(**keys)), hardware="h100")
    assert run.cp_comm_type == "all-gather"
    assert any("read by validation alone" in note for note in notes)
    path = written(tmp_path, with_keys(**keys, validation__enable=True))
    with pytest.raises(SpecError) as caught:
        run_from_torchtitan(path, hardware="h100", allow_ignored=True)
    message = str(caught.value)
    assert "\n" not in message
    assert (
        "parallelism.context_parallel_rotate_method = 'alltoall' with validation.enable" in message
    )


def test_context_parallel_keys_without_it_and_expert_parallelism_of_llama3_are_noted(
    tmp_path: Path,
) -> None:
    """The rotate method and the load balancer do nothing at CP = 1; EP passes ParallelDims'
    rules (ETP = TP here) but llama3 has no experts: noted, not stated."""
    path = written(
        tmp_path,
        with_keys(
            parallelism__context_parallel_rotate_method="alltoall",
            parallelism__data_parallel_shard_degree=4,
            parallelism__tensor_parallel_degree=2,
            parallelism__expert_parallel_degree=4,
            parallelism__expert_tensor_parallel_degree=2,
        ),
    )
    run, notes = run_from_torchtitan(path, hardware="h100")
    assert (run.context_parallel, run.cp_comm_type, run.expert_parallel) == (None, None, None)
    assert (
        "parallelism.context_parallel_rotate_method: no effect without context parallelism" in notes
    )
    assert any(
        note.startswith("parallelism.expert_parallel_degree = 4: no effect on llama3")
        for note in notes
    )


def test_expert_parallelism_of_an_moe_model_is_written_with_etp_equal_to_tp() -> None:
    """pipesim splits the experts T ways inside their EP groups: torchtitan's etp = tp; the
    model itself, no torchtitan llama3 flavor, is named."""
    run = plan_run(
        "mixtral-8x7b",
        microbatch_size=1,
        microbatches=1,
        tensor_parallel=2,
        sequence_parallel=True,
        data_parallel=4,
        context_parallel=2,
        cp_comm_type="all-gather",
        expert_parallel=8,
        zero=3,
        reshard_after_forward="default",
        dtype="bf16",
        partition="34",
    )
    text, lost = torchtitan_toml(run)
    parallelism = tomllib.loads(text)["parallelism"]
    assert {
        key: parallelism[key]
        for key in (
            "data_parallel_shard_degree",
            "context_parallel_degree",
            "tensor_parallel_degree",
            "expert_parallel_degree",
            "expert_tensor_parallel_degree",
        )
    } == {
        "data_parallel_shard_degree": 4,
        "context_parallel_degree": 2,
        "tensor_parallel_degree": 2,
        "expert_parallel_degree": 8,
        "expert_tensor_parallel_degree": 2,
    }
    assert any("'mixtral-8x7b' is not a torchtitan llama3 flavor" in line for line in lost)
    assert not any("no experts" in line for line in lost)
