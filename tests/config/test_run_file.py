"""Run files: what is written reads back equal (hypothesis over every key; inline models of
every catalogue family), and every bad file is one line naming the file and the key."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipesim.common.checks import SpecError
from pipesim.config.run_file import (
    KEYS,
    RunFile,
    load_run_file,
    parse_run_file,
    run_file_toml,
)
from pipesim.workload import resolve_model

CATALOGUE_EXAMPLES = (
    "gpipe-transformer-8",
    "amoebanet-d-18-256",
    "gpt-355m",
    "bert-1.3b",
    "zb-1.5b",
    "megatron-1.7b",
    "gpt3-175b",
    "llama3-8b",
    "llama2-70b",
    "uniform-8",
)

names = st.text(
    st.characters(min_codepoint=32, max_codepoint=0x2FFF), min_size=1, max_size=12
).filter(lambda text: text.isprintable() and text.strip() == text)
counts = st.integers(min_value=1, max_value=4096)
flags = st.booleans()
reals = st.floats(min_value=0, max_value=1e30, allow_nan=False)

run_files = st.builds(
    RunFile,
    model=names,
    hardware=names,
    batch=st.none() | counts,
    microbatch_size=st.none() | counts,
    optimizer=st.none() | st.sampled_from(["adam", "sgd", "12", "4.5"]),
    master_weights=st.none() | flags,
    dtype=st.none() | st.sampled_from(["fp16", "bf16", "fp32"]),
    tensor_parallel=st.none() | counts,
    sequence_parallel=st.none() | flags,
    pipeline_parallel=st.none() | counts,
    data_parallel=st.none() | counts,
    zero=st.none() | st.integers(0, 1),
    recompute=st.none() | st.sampled_from(["none", "selective", "full", "3"]),
    tensor_across_nodes=st.none() | flags,
    schedule=st.none() | names,
    chunks=st.none() | counts,
    microbatches=st.none() | counts,
    partition=st.none()
    | st.sampled_from(["balanced", "memory-aware"])
    | st.lists(counts, min_size=1, max_size=6).map(lambda v: ",".join(map(str, v))),
    remat=st.none() | flags,
    memory_limit=st.none() | counts,
    steps=st.none() | counts,
    recipe=st.none() | names,
    overlap_grad_reduce=st.none() | flags,
    attention=st.none() | st.sampled_from(["eager", "flash"]),
    blocking_p2p=st.none() | flags,
    scatter_gather_p2p=st.none() | flags,
    tp_comm_overlap=st.none() | flags,
    memory_reserve=st.none() | reals,
    fragmentation=st.none() | reals,
)


@given(run_files)
@settings(max_examples=200)
def test_a_written_run_file_reads_back_equal(run: RunFile) -> None:
    assert parse_run_file(run_file_toml(run, header=("a comment",))) == run


@pytest.mark.parametrize("name", CATALOGUE_EXAMPLES)
def test_an_inline_model_of_every_family_reads_back_equal(name: str) -> None:
    """A plan of a model from a file is written with the model inline: the layers, the
    architecture and the precision all come back."""
    model = resolve_model(name)
    run = RunFile(model, "a100", tensor_parallel=1, schedule="1f1b")
    back = parse_run_file(run_file_toml(run))
    assert back == run
    assert isinstance(back.model, type(model))
    assert back.model.architecture == model.architecture
    assert back.model.layers == model.layers


def test_every_key_is_an_attribute_and_a_section_key_once() -> None:
    attributes = [key.attribute for key in KEYS]
    assert len(attributes) == len(set(attributes))
    fields = {f.name for f in dataclasses.fields(RunFile)} - {"model", "hardware", "folder"}
    assert set(attributes) == fields


def test_the_documented_example_reads(tmp_path: Path) -> None:
    """The module docstring's example, as a user would copy it."""
    from pipesim.config import run_file as module

    doc = module.__doc__ or ""
    example = doc.split("shape and schedule, and the software's recipe::")[1].split("Every key")[0]
    text = "\n".join(line[4:] for line in example.splitlines())
    path = tmp_path / "run.toml"
    path.write_text(text)
    run = load_run_file(path)
    assert (run.model, run.hardware, run.tensor_parallel, run.pipeline_parallel) == (
        "gpt3-175b",
        "a100",
        8,
        16,
    )
    assert (run.partition, run.recipe, run.overlap_grad_reduce) == (
        "8,8,8",
        "megatron-lm-2021",
        False,
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('hardware = "a100"\n', "model is required"),
        ('model = "m"\n', "hardware is required"),
        (
            'model = "m"\nhardware = "h"\nbatch = 8\n',
            "unknown key(s) batch: a run file holds model, hardware and the tables",
        ),
        ('model = "m"\nhardware = "h"\n[parallel]\ntensor = 8\n', "unknown key(s) parallel"),
        (
            'model = "m"\nhardware = "h"\n[parallelism]\ntensor = 8\n',
            "unknown key(s) in parallelism: tensor",
        ),
        (
            'model = "m"\nhardware = "h"\n[parallelism]\ntensor_parallel = "8"\n',
            "parallelism.tensor_parallel must be",
        ),
        (
            'model = "m"\nhardware = "h"\n[parallelism]\ntensor_parallel = 0\n',
            "parallelism.tensor_parallel must be",
        ),
        (
            'model = "m"\nhardware = "h"\n[parallelism]\nsequence_parallel = 1\n',
            "parallelism.sequence_parallel must be true or false",
        ),
        ('model = "m"\nhardware = "h"\n[parallelism]\nzero = -1\n', "parallelism.zero must be"),
        ('model = "m"\nhardware = "h"\n[parallelism]\nrecompute = 0\n', "recompute must be"),
        ('model = "m"\nhardware = "h"\n[pipeline]\npartition = []\n', "pipeline.partition"),
        ('model = "m"\nhardware = "h"\n[pipeline]\npartition = [4, 0]\n', "partition[1]"),
        ('model = "m"\nhardware = "h"\n[training]\noptimizer = -4\n', "training.optimizer"),
        ('model = "m"\nhardware = "h"\n[memory]\nfragmentation = -1\n', "memory.fragmentation"),
        ('model = "m"\nhardware = "h"\npipeline = 3\n', "pipeline must be a table"),
        ('model = 3\nhardware = "h"\n', "model must be"),
        ("model = [\n", "not valid TOML"),
        (
            'hardware = "h"\n[model]\nname = "x"\ndtype = "bf16"\ndefault_batch = 8\n',
            "[model] needs exactly one of",
        ),
        (
            'model = "m"\nhardware = "h"\n[recipe]\nscatter_gather_p2p = "no"\n',
            "recipe.scatter_gather_p2p must be true or false",
        ),
        (
            'model = "m"\nhardware = "h"\n[recipe]\ntp_comm_overlap = 1\n',
            "recipe.tp_comm_overlap must be true or false",
        ),
        (
            'model = "m"\nhardware = "h"\n[recipe]\nmessage_overhead_s = 0.001\n',
            "unknown key(s) in recipe: message_overhead_s",
        ),
    ],
)
def test_a_bad_run_file_is_one_line_naming_the_file_and_key(
    tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(SpecError) as caught:
        load_run_file(path)
    said = str(caught.value)
    assert message in said and str(path) in said and "\n" not in said, said


@pytest.mark.parametrize("target", ["folder", "missing"])
def test_an_unreadable_run_file_is_one_line(tmp_path: Path, target: str) -> None:
    path = tmp_path / "there"
    if target == "folder":
        path.mkdir()
    with pytest.raises(SpecError, match="run file"):
        load_run_file(path)


def test_the_recipe_s_choices_read_as_stated(tmp_path: Path) -> None:
    """Every true-or-false choice of a recipe has its key in [recipe], read as written."""
    path = tmp_path / "run.toml"
    path.write_text(
        'model = "m"\nhardware = "h"\n[recipe]\nname = "megatron-lm-2021"\n'
        "blocking_p2p = false\nscatter_gather_p2p = false\ntp_comm_overlap = true\n"
    )
    run = load_run_file(path)
    assert (run.recipe, run.blocking_p2p, run.scatter_gather_p2p, run.tp_comm_overlap) == (
        "megatron-lm-2021",
        False,
        False,
        True,
    )
    assert run.overlap_grad_reduce is None and run.attention is None
    assert parse_run_file(run_file_toml(run)) == run


def test_paths_are_read_beside_the_run_file(tmp_path: Path) -> None:
    (tmp_path / "my-model.toml").write_text("")
    run = RunFile("my-model.toml", "h100", folder=tmp_path)
    assert run.located("my-model.toml") == str(tmp_path / "my-model.toml")
    assert run.located("h100") == "h100"  # a catalogue name stays a name
    assert run.located("absent.toml") == "absent.toml"  # the command then says it is missing
