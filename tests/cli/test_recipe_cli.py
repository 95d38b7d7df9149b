"""``--recipe`` and ``pipesim recipes``: the software a prediction assumes, named in every
output, refused in one line where it cannot apply, warned about where it changes nothing."""

from __future__ import annotations

import json
from pathlib import Path

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
