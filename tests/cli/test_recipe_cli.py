"""``--recipe`` and ``pipesim recipes``: the software a prediction assumes, named in every
output, refused in one line where it cannot apply, warned about where it changes nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pipesim.config import DEFAULT_RECIPE, RECIPES

from .test_schedule_cli import run

SIMULATE = ("simulate", "--schedule", "1f1b", "-K", "2", "-M", "4")


def test_the_json_of_a_model_run_names_its_recipe_and_every_choice(
    capsys: pytest.CaptureFixture[str],
) -> None:
    status, out, err = run(capsys, *SIMULATE, "--model", "gpt-1.3b", "--hardware", "a100", "--json")
    assert status == 0 and err == ""
    assert json.loads(out)["recipe"] == DEFAULT_RECIPE.to_json()
    status, out, _ = run(
        capsys,
        *SIMULATE,
        "--model",
        "gpt-1.3b",
        "--hardware",
        "a100",
        "--recipe",
        "megatron-lm-2021",
        "--overlap-grad-reduce",
        "--json",
    )
    result = json.loads(out)
    assert result["recipe"]["name"] == "megatron-lm-2021+overlap_grad_reduce"
    assert result["recipe"]["overlap_grad_reduce"] is True
    assert result["recipe"]["fused_gradient_accumulation"] is False
    assert result["costs"].endswith(", recipe megatron-lm-2021+overlap_grad_reduce")
    status, out, _ = run(capsys, *SIMULATE, "--costs", "1,2", "--json")
    assert status == 0 and json.loads(out)["recipe"] is None


def test_a_recipe_changes_the_prediction(capsys: pytest.CaptureFixture[str]) -> None:
    """Blocking messages and a separate accumulation pass cost time on megatron-1.7b."""
    times = {}
    for name in ("pipesim", "megatron-lm-2021"):
        argv = ("--model", "megatron-1.7b", "--hardware", "a100", "--recipe", name, "--json")
        status, out, _ = run(capsys, *SIMULATE, *argv)
        assert status == 0
        times[name] = json.loads(out)["iteration_time"]
    assert times["megatron-lm-2021"] > times["pipesim"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("--model", "gpt-1.3b", "--hardware", "a100", "--recipe", "nope"), "--recipe must be"),
        (("--costs", "1,2", "--recipe", "torchtitan"), "--recipe goes with --model"),
    ],
)
def test_a_recipe_that_cannot_apply_is_one_line(
    capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], message: str
) -> None:
    status, out, err = run(capsys, *SIMULATE, *argv)
    assert status == 2 and out == ""
    assert err.startswith(f"pipesim: error: {message}") and err.count("\n") == 1


def test_a_recipe_that_changes_nothing_is_warned_about_on_stderr(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ("--model", "uniform-8", "--hardware", "a100", "--recipe", "torchtitan", "--json")
    status, out, err = run(capsys, *SIMULATE, *argv)
    assert status == 0 and json.loads(out)["recipe"]["name"] == "torchtitan"
    lines = err.splitlines()
    assert len(lines) == 2 and all(
        line.startswith("pipesim: warning: recipe torchtitan") for line in lines
    )


def test_a_model_file_that_sets_the_accumulation_is_told_where_it_went(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "mine.toml"
    path.write_text(
        'name = "mine"\ndtype = "bf16"\ndefault_batch = 8\nfused_gradient_accumulation = false\n'
        "[transformer]\nlayers = 2\nhidden = 256\nheads = 4\nseq = 128\nvocab = 1000\n"
    )
    status, out, err = run(capsys, *SIMULATE, "--model", str(path), "--hardware", "a100")
    assert status == 2 and out == "" and err.count("\n") == 1
    assert "fused_gradient_accumulation is the run's software" in err and "--recipe" in err


def test_recipes_list_and_show(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(capsys, "recipes", "list", "--json")
    listed = json.loads(out)
    assert status == 0 and err == "" and [r["name"] for r in listed] == list(RECIPES)
    assert [r["name"] for r in listed if r["default"]] == [DEFAULT_RECIPE.name]
    assert all(
        set(r["sources"]) == set(r) - {"name", "default", "description", "sources"} for r in listed
    )
    status, out, _ = run(capsys, "recipes", "show", "megatron-lm-2021")
    assert status == 0 and "fused_gradient_accumulation = false" in out
    status, out, err = run(capsys, "recipes", "show", "nope")
    assert status == 2 and out == "" and err.startswith("pipesim: error: unknown recipe 'nope'")


def test_a_plan_names_its_recipe(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ("plan", "--model", "uniform-8", "--hardware", "a100", "--devices", "4", "--batch", "16")
    status, out, _ = run(capsys, *argv, "--recipe", "deepspeed-pipe", "--top", "1", "--json")
    report = json.loads(out)
    assert status == 0 and report["recipe"]["name"] == "deepspeed-pipe"
    assert "--recipe deepspeed-pipe" in report["plans"][0]["simulate_command"]


TENSOR = ("--model", "gpt-1.3b", "--hardware", "a100", "--tensor-parallel", "2", "--json")


@pytest.mark.parametrize(
    ("recipe", "flag", "choice"),
    [
        ("pipesim", "--tp-comm-overlap", "tp_comm_overlap"),
        ("megatron-lm-2022", "--tp-comm-overlap", "tp_comm_overlap"),
        ("megatron-core-2024", "--scatter-gather-p2p", "scatter_gather_p2p"),
    ],
)
@pytest.mark.parametrize("command", ["simulate", "sweep"])
def test_a_switch_turns_its_choice_on_and_its_no_form_undoes_it(
    capsys: pytest.CaptureFixture[str], command: str, recipe: str, flag: str, choice: str
) -> None:
    """--tp-comm-overlap and --scatter-gather-p2p turn the recipe's choice on, named in the
    recipe's name, and change the prediction at T = 2; their --no- forms after them undo
    them, as --no-blocking-p2p undoes --blocking-p2p."""
    shape = ("--schedule", "1f1b") if command == "simulate" else ("--schedules", "1f1b")

    # The overlap goes with sequence parallelism (Megatron-Core asserts it; without it pipesim
    # warns); scatter/gather matters only without it.
    sp = ("--sequence-parallel",) if choice == "tp_comm_overlap" else ()

    def result(*extra: str) -> dict[str, Any]:
        argv = (command, *shape, "-K", "2", "-M", "4", *TENSOR, *sp, "--recipe", recipe, *extra)
        status, out, err = run(capsys, *argv)
        assert status == 0 and err == "", err
        found: dict[str, Any] = json.loads(out)
        return found["results"][0] if command == "sweep" else found

    base, on = result(), result(flag)
    assert base["recipe"]["name"] == recipe and base["recipe"][choice] is False
    assert on["recipe"]["name"] == f"{recipe}+{choice}" and on["recipe"][choice] is True
    assert on["iteration_time"] != base["iteration_time"]
    if choice == "tp_comm_overlap":
        assert on["iteration_time"] < base["iteration_time"]
    assert result(flag, "--no-" + flag.removeprefix("--")) == base


@pytest.mark.parametrize(
    ("recipe", "flag", "choice"),
    [
        ("nemo-2024", "--no-tp-comm-overlap", "tp_comm_overlap"),
        ("megatron-lm-2021", "--no-scatter-gather-p2p", "scatter_gather_p2p"),
        ("megatron-lm-2022", "--no-blocking-p2p", "blocking_p2p"),
    ],
)
def test_a_no_form_turns_the_recipe_s_own_true_off(
    capsys: pytest.CaptureFixture[str], recipe: str, flag: str, choice: str
) -> None:
    """The switches are three-state: absent keeps the recipe's choice, --no-X sets it false
    even where the recipe's own is true (a run file's or a translated launch's false reaches
    the simulation); the recipe is renamed for the change."""
    argv = (*SIMULATE, *TENSOR, "--recipe", recipe)
    _, alone, _ = run(capsys, *argv)
    status, out, err = run(capsys, *argv, flag)
    assert status == 0 and err == ""
    changed = json.loads(out)["recipe"]
    assert changed["name"] == f"{recipe}+{choice}" and changed[choice] is False
    assert json.loads(alone)["recipe"][choice] is True
    assert json.loads(out)["iteration_time"] != json.loads(alone)["iteration_time"]


@pytest.mark.parametrize(
    "flag", ["--tp-comm-overlap", "--scatter-gather-p2p", "--no-tp-comm-overlap"]
)
def test_a_switch_goes_with_a_model(capsys: pytest.CaptureFixture[str], flag: str) -> None:
    """Refused in the form typed (not 'got True' or 'got False')."""
    status, out, err = run(capsys, *SIMULATE, "--costs", "1,2", flag)
    assert status == 2 and out == ""
    assert err == f"pipesim: error: {flag} goes with --model, not with --costs\n"
