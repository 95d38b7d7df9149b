"""``pipesim models show``: a model's architecture and parameter counts, and the model file that
reproduces it; the guide's complete model and hardware files are these commands' output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipesim.workload import resolve_model

from .test_schedule_cli import run

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guide" / "simulating.md"


def test_the_text_states_the_published_size_and_the_stages(
    capsys: pytest.CaptureFixture[str],
) -> None:
    status, out, err = run(capsys, "models", "show", "llama3-8b", "-K", "4")
    assert status == 0, err
    assert "parameters    8.03 B (embedding 525.3 M, blocks 6.98 B, head 525.3 M)" in out
    assert "per stage     2.27 B (9 layers), 1.96 B (9 layers)" in out
    assert out.count('name = "llama3-8b"') == 1  # the model file follows


@pytest.mark.parametrize("name", ["llama3-8b", "megatron-1.7b", "uniform-8", "amoebanet-d-18-256"])
def test_the_printed_model_file_reads_back_to_the_same_model(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str
) -> None:
    status, out, err = run(capsys, "models", "show", name, "--toml")
    assert status == 0, err
    path = tmp_path / "mine.toml"
    path.write_text(out)
    model, again = resolve_model(name), resolve_model(str(path))
    assert again.layers == model.layers and again.architecture == model.architecture
    assert (again.parameters, again.dtype, again.default_batch) == (
        model.parameters,
        model.dtype,
        model.default_batch,
    )


def test_json_stages_hold_every_layer(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys, "models", "show", "gpt3-175b", "-K", "8", "-v", "2", "--json")
    assert status == 0
    shown = json.loads(out)
    model = resolve_model("gpt3-175b")
    assert len(shown["stages"]) == 16
    assert sum(s["layers"] for s in shown["stages"]) == len(model.layers)
    assert sum(s["parameters"] for s in shown["stages"]) == sum(
        layer.parameters for layer in model.layers
    )
    assert shown["parameters"] == model.parameters  # the tied copy counted once in all


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["nope"], "unknown model 'nope'"),
        (["llama3-8b", "-K", "0"], "-K must be an integer >= 1, got 0"),
        (["uniform-8", "--seq-length", "64"], "given as layers, with no sequence to change"),
    ],
)
def test_a_bad_request_is_one_line_exit_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], said: str
) -> None:
    status, out, err = run(capsys, "models", "show", *argv)
    assert (status, out) == (2, "") and err.count("\n") == 1 and said in err, err


@pytest.mark.parametrize(
    ("command", "opening"),
    [
        (["models", "show", "llama3-8b", "--toml"], "# pipesim models show llama3-8b"),
        (["hardware", "show", "h100"], 'name = "h100"'),
    ],
)
def test_the_guides_complete_files_are_the_commands_output(
    capsys: pytest.CaptureFixture[str], command: list[str], opening: str
) -> None:
    status, out, _ = run(capsys, *command)
    assert status == 0
    blocks = GUIDE.read_text().split("```toml\n")[1:]
    shown = [block.split("```")[0] for block in blocks if block.startswith(opening)]
    assert shown == [out], f"regenerate the block in {GUIDE.name} with: pipesim {' '.join(command)}"


def test_a_tied_copy_counts_once_on_a_stage_that_holds_the_embedding_too(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """megatron-1.7b ties its output layer to the word embeddings: on one stage both are one
    copy (1.65 B, the model's count); on two stages the last holds a copy of its own."""
    status, out, _ = run(capsys, "models", "show", "megatron-1.7b", "-K", "1", "--json")
    model = resolve_model("megatron-1.7b")
    assert status == 0 and json.loads(out)["stages"][0]["parameters"] == model.parameters
    status, out, _ = run(capsys, "models", "show", "megatron-1.7b", "-K", "2", "--json")
    two = json.loads(out)["stages"]
    shared = sum(layer.shared_parameters for layer in model.layers)
    assert shared > 0 and sum(s["parameters"] for s in two) == model.parameters + shared
