"""``--run FILE`` on simulate, sweep and plan, ``plan --export`` and ``pipesim run show``: a run
file simulates number for number as the same run stated by flags, flags override it, a plan's
exported run files reproduce its numbers, and bad files are one line naming file and key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipesim.config.run_file import RunFile, run_file_toml
from pipesim.workload import resolve_model

from .test_schedule_cli import run, simulated

HYBRID = """\
model = "megatron-1.7b"
hardware = "a100"

[training]
batch = 512

[parallelism]
tensor_parallel = 2
sequence_parallel = true
pipeline_parallel = 4
data_parallel = 4
recompute = "selective"

[pipeline]
schedule = "interleaved-1f1b"
chunks = 2
microbatches = 32

[recipe]
name = "megatron-lm-2021"
"""
HYBRID_FLAGS = [
    "--model",
    "megatron-1.7b",
    "--hardware",
    "a100",
    "--batch",
    "512",
    "--tensor-parallel",
    "2",
    "--sequence-parallel",
    "-K",
    "4",
    "--data-parallel",
    "4",
    "--recompute",
    "selective",
    "--schedule",
    "interleaved-1f1b",
    "-v",
    "2",
    "-M",
    "32",
    "--recipe",
    "megatron-lm-2021",
]


def _file(tmp_path: Path, text: str, name: str = "run.toml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_a_run_file_simulates_as_the_same_run_stated_by_flags(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    by_file = simulated(capsys, "--run", _file(tmp_path, HYBRID))
    by_flags = simulated(capsys, *HYBRID_FLAGS)
    assert by_file == by_flags


@pytest.mark.parametrize(
    ("override", "same_as"),
    [
        (["--tensor-parallel", "1", "--no-sequence-parallel"], ["--tensor-parallel", "1"]),
        (["-M", "16"], ["-M", "16"]),
        (["--recompute", "none"], ["--recompute", "none"]),
    ],
)
def test_flags_beside_a_run_file_override_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, override: list[str], same_as: list[str]
) -> None:
    """The file's values are the base; a flag given beside it wins (a boolean the file sets is
    turned off by its --no- form)."""
    flags = list(HYBRID_FLAGS)
    if "--tensor-parallel" in same_as:
        flags.remove("--sequence-parallel")
    base = simulated(capsys, *flags, *same_as)
    assert simulated(capsys, "--run", _file(tmp_path, HYBRID), *override) == base
    assert base != simulated(capsys, *HYBRID_FLAGS)


def test_a_sweep_takes_a_run_file_as_the_base_of_its_grid(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = _file(tmp_path, HYBRID)
    status, out, err = run(capsys, "sweep", "--run", path, "-K", "2,4", "--json")
    assert status == 0, err
    rows = json.loads(out)["results"]
    assert [(r["devices"], r["schedule"]) for r in rows] == [
        (2, "interleaved-1f1b"),
        (4, "interleaved-1f1b"),
    ]
    alone = simulated(capsys, "--run", path)
    assert rows[1]["iteration_time"] == alone["iteration_time"]


def test_a_plan_takes_the_world_and_batch_of_a_run_file_and_says_what_it_searches(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    status, out, err = run(capsys, "plan", "--run", _file(tmp_path, HYBRID), "--json", "--top", "1")
    assert status == 0, err
    report = json.loads(out)
    assert (report["cluster_devices"], report["batch"]) == (32, 512)  # T x K x D, the file's batch
    assert err.startswith("pipesim: note: run file ") and err.count("\n") == 1
    assert "parallelism.tensor_parallel" in err and "pipeline.schedule" in err


def test_a_setting_the_command_cannot_take_is_warned_about_not_dropped(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    text = 'model = "megatron-1.7b"\nhardware = "a100"\n[memory]\nfragmentation = 0.1\n'
    status, _, err = run(
        capsys, "plan", "--run", _file(tmp_path, text), "--devices", "8", "--top", "1", "--json"
    )
    assert status == 0
    assert "pipesim: warning: run file" in err and "memory.fragmentation; not read" in err


def test_every_exported_plan_reproduces_with_simulate_run(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out_dir = tmp_path / "plans"
    status, out, err = run(
        capsys,
        "plan",
        "--model",
        "megatron-1.7b",
        "--hardware",
        "a100",
        "--devices",
        "32",
        "--batch",
        "512",
        "--top",
        "3",
        "--export",
        str(out_dir),
        "--json",
    )
    assert status == 0, err
    plans = json.loads(out)["plans"]
    assert sorted(p.name for p in out_dir.iterdir()) == [
        f"plan-{i}.{kind}"
        for i in (1, 2, 3)
        for kind in ("megatron.args", "toml", "torchtitan.toml")
    ]
    for rank, plan in enumerate(plans, start=1):
        again = simulated(capsys, "--run", str(out_dir / f"plan-{rank}.toml"))
        assert again["iteration_time"] == plan["iteration_time"]


def test_an_inline_model_plans_and_its_printed_command_reproduces(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A run file holding its model as a [model] table: the plan's re-simulation command
    reads the same file (the model has no name to pass) and states everything else."""
    text = run_file_toml(RunFile(resolve_model("megatron-1.7b"), "a100", pipeline_parallel=4))
    path = _file(tmp_path, text)
    status, out, err = run(
        capsys, "plan", "--run", path, "--devices", "16", "--batch", "64", "--top", "1", "--json"
    )
    assert status == 0, err
    best = json.loads(out)["plans"][0]
    command = best["simulate_command"].split()
    assert command[:4] == ["pipesim", "simulate", "--run", path] and "--model" not in command
    again = simulated(capsys, *command[2:])
    assert again["iteration_time"] == best["iteration_time"]


def test_run_show_states_the_parameters_layout_and_recipe(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    status, out, err = run(capsys, "run", "show", _file(tmp_path, HYBRID), "--json")
    assert status == 0, err
    shown = json.loads(out)
    model = resolve_model("megatron-1.7b")
    total = sum(layer.parameters - layer.shared_parameters for layer in model.layers)
    assert shown["model"]["parameters"] == total
    assert 0.45 < shown["model"]["parameters_per_tensor_rank"] / total < 0.6  # T=2, tied copy
    assert shown["layout"]["world_size"] == 32
    assert len(shown["pipeline"]["partition"]) == 8 and sum(shown["pipeline"]["partition"]) == 26
    assert shown["recipe"].startswith("megatron-lm-2021")
    status, text, _ = run(capsys, "run", "show", _file(tmp_path, HYBRID))
    assert status == 0 and "parameters 1.65 B in all" in text and "T=2 SP x K=4 (v=2)" in text


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ('model = "megatron-1.7b"\nhardware = "a100"\n[parallelism]\ntensor = 2\n', "tensor"),
        ('model = "megatron-1.7b"\n', "hardware is required"),
        ('model = "megatron-1.7b"\nhardware = "a100"\n[pipeline]\nchunks = 0\n', "chunks"),
    ],
)
def test_a_bad_run_file_is_one_line_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str, said: str
) -> None:
    path = _file(tmp_path, text)
    for command in (["simulate"], ["sweep"], ["plan"], ["run", "show"]):
        arguments = [*command, path] if command == ["run", "show"] else [*command, "--run", path]
        status, out, err = run(capsys, *arguments)
        assert (status, out) == (2, ""), (command, err)
        assert err.startswith("pipesim: error: run file ") and err.count("\n") == 1
        assert said in err


def test_the_guides_run_file_reads_and_shows(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The run file docs/guide/run-files.md shows, every key of it, as a user would copy it."""
    guide = Path(__file__).resolve().parents[2] / "docs" / "guide" / "run-files.md"
    example = guide.read_text().split("```toml\n")[1].split("```")[0]
    path = _file(tmp_path, example)
    status, out, err = run(capsys, "run", "show", path, "--json")
    assert status == 0, err
    shown = json.loads(out)
    assert shown["layout"]["world_size"] == 1024 and shown["recipe"].startswith("megatron-lm-2022")
    assert simulated(capsys, "--run", path)["iteration_time"] > 0


@pytest.mark.parametrize(
    ("key", "flag"),
    [("tp_comm_overlap", "--tp-comm-overlap"), ("scatter_gather_p2p", "--scatter-gather-p2p")],
)
def test_a_run_file_s_recipe_switch_is_its_flag_and_its_no_form_undoes_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, key: str, flag: str
) -> None:
    """[recipe] tp_comm_overlap and scatter_gather_p2p, as blocking_p2p: the file's true is
    the flag, and the flag's --no- form beside the file turns it off again."""
    # The overlap goes with sequence parallelism (Megatron-Core asserts it); scatter/gather
    # matters only without it.
    sequence_parallel = key == "tp_comm_overlap"
    core = HYBRID.replace("megatron-lm-2021", "megatron-core-2024")
    if not sequence_parallel:
        core = core.replace("sequence_parallel = true", "sequence_parallel = false")
    flags = [
        "megatron-core-2024" if word == "megatron-lm-2021" else word
        for word in HYBRID_FLAGS
        if sequence_parallel or word != "--sequence-parallel"
    ]
    path = _file(tmp_path, core + f"{key} = true\n")
    by_file = simulated(capsys, "--run", path)
    assert by_file == simulated(capsys, *flags, flag)
    assert by_file["recipe"]["name"] == f"megatron-core-2024+{key}"  # type: ignore[index]
    undone = simulated(capsys, "--run", path, "--no-" + flag.removeprefix("--"))
    assert undone == simulated(capsys, *flags)
    status, out, err = run(capsys, "run", "show", path)
    assert status == 0 and err == ""
    shown = {
        "tp_comm_overlap": "collectives overlapping the GEMMs",
        "scatter_gather_p2p": "messages scattered",
    }
    assert shown[key] in out.split("recipe     ")[1]


def test_a_run_file_s_false_under_a_recipe_s_own_true_turns_the_choice_off(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A file's false is its flag's --no- form, and a switch is three-state (absent keeps the
    recipe's choice): megatron-lm-2021's own blocking messages and scatter/gather are turned
    off, as the flags would, with nothing on stderr. (The switches only turned choices on
    until 2026-11-27, so a translated Megatron-Core launch's blocking_p2p = false was dropped.)"""
    path = _file(tmp_path, HYBRID + "scatter_gather_p2p = false\nblocking_p2p = false\n")
    status, out, err = run(capsys, "simulate", "--run", path, "--json")
    assert status == 0 and err == ""
    by_file = json.loads(out)
    assert by_file == simulated(
        capsys, *HYBRID_FLAGS, "--no-blocking-p2p", "--no-scatter-gather-p2p"
    )
    recipe = by_file["recipe"]
    assert recipe["name"] == "megatron-lm-2021+blocking_p2p+scatter_gather_p2p"
    assert recipe["blocking_p2p"] is False and recipe["scatter_gather_p2p"] is False
    assert by_file != simulated(capsys, *HYBRID_FLAGS)
    status, text, err = run(capsys, "run", "show", path)
    assert status == 0 and err == "" and "not applied" not in text
