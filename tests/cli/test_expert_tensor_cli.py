"""``--expert-tensor-parallel`` on ``simulate`` and ``sweep`` and a run file's
``expert_tensor_parallel``: the layout's JSON key and label where set, the same run as the
flag, and each refusal one line naming the flag (exit 2, no traceback)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipesim.config.run_file import RunFile, parse_run_file, run_file_toml
from pipesim.workload.catalogue import resolve_model

from .test_schedule_cli import run

BASE = (
    *("simulate", "--schedule", "1f1b", "-K", "2", "-M", "4", "--model", "deepseek-v2-lite"),
    *("--hardware", "h100", "--tensor-parallel", "2", "--sequence-parallel"),
    *("--data-parallel", "4", "--expert-parallel", "4"),
)


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, object]:
    status, out, err = run(capsys, *argv, "--json")
    assert status == 0, err
    payload: dict[str, object] = json.loads(out)
    return payload


def test_the_layout_states_etp_where_it_is_set(capsys: pytest.CaptureFixture[str]) -> None:
    """Unset (or set to T): no key, the step as before; ETP = 1: the key, the label, a
    different step with the same FLOPs."""
    plain = _json(capsys, *BASE)
    same = _json(capsys, *BASE, "--expert-tensor-parallel", "2")
    folded = _json(capsys, *BASE, "--expert-tensor-parallel", "1")
    assert "expert_tensor_parallel" not in plain["layout"]  # type: ignore[operator]
    assert same["iteration_time"] == plain["iteration_time"]
    assert folded["layout"]["expert_tensor_parallel"] == 1  # type: ignore[index]
    assert "EP=4 ETP=1" in folded["costs"]  # type: ignore[operator]
    assert folded["model_flops_per_step"] == plain["model_flops_per_step"]
    assert folded["iteration_time"] != plain["iteration_time"]


def test_a_run_file_s_key_is_the_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A run file stating expert_tensor_parallel = 1 reads back as written and simulates as
    the flag does."""
    stated = RunFile(
        resolve_model("deepseek-v2-lite"),
        "h100",
        tensor_parallel=2,
        sequence_parallel=True,
        pipeline_parallel=2,
        data_parallel=4,
        expert_parallel=4,
        expert_tensor_parallel=1,
        schedule="1f1b",
        microbatches=4,
    )
    text = run_file_toml(stated)
    assert "expert_tensor_parallel = 1" in text
    assert parse_run_file(text) == stated
    path = tmp_path / "run.toml"
    path.write_text(text)
    from_file = _json(capsys, "simulate", "--run", str(path))
    flag = _json(capsys, *BASE, "--expert-tensor-parallel", "1")
    assert from_file["iteration_time"] == flag["iteration_time"]
    assert from_file["layout"] == flag["layout"]


def test_sweep_takes_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(
        capsys,
        "sweep",
        *("--schedules", "1f1b", "-K", "2", "-M", "4", "--model", "deepseek-v2-lite"),
        *("--hardware", "h100", "--tensor-parallel", "2", "--sequence-parallel"),
        *("--data-parallel", "4", "--expert-parallel", "4", "--expert-tensor-parallel", "1"),
        "--json",
    )
    assert status == 0, err
    assert "ETP=1" in out


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            ("--expert-tensor-parallel", "4"),
            "--expert-tensor-parallel 4 x --expert-parallel 4 = 16 must divide --tensor-parallel "
            "x --context-parallel x --data-parallel = 8",
        ),
        (("--expert-tensor-parallel", "0"), "--expert-tensor-parallel must be an integer >= 1"),
        (
            ("--expert-tensor-parallel", "3", "--expert-parallel", "1", "--data-parallel", "3"),
            "--expert-tensor-parallel 3 must divide the model's moe.expert_ffn (1,408)",
        ),
    ],
)
def test_refusals_are_one_line_naming_the_flag(
    capsys: pytest.CaptureFixture[str], extra: tuple[str, ...], message: str
) -> None:
    status, out, err = run(capsys, *BASE, *extra)
    assert status == 2 and out == ""
    assert err.count("\n") == 1 and "Traceback" not in err
    assert message in err, err


def test_etp_without_sequence_parallelism_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [word for word in BASE if word != "--sequence-parallel"]
    status, _, err = run(capsys, *argv, "--expert-tensor-parallel", "1")
    assert status == 2 and err.count("\n") == 1
    assert err.startswith(
        "pipesim: error: --expert-tensor-parallel 1 with --tensor-parallel 2 needs "
    )


def test_etp_on_a_dense_model_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [*BASE[:8], "llama3-8b", *BASE[9:], "--expert-parallel", "1"]
    status, _, err = run(capsys, *argv, "--expert-tensor-parallel", "1")
    assert status == 2 and err.count("\n") == 1
    assert "--expert-tensor-parallel 1: the model has no experts to split" in err
