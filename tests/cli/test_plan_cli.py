"""``pipesim plan`` on the command line: JSON, table, figure, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli.main import main

SMALL = ["plan", "--model", "uniform-8", "--hardware", "a100", "--devices", "4", "--batch", "16"]


def test_json_lists_ranked_plans(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*SMALL, "--top", "3", "--json"]) == 0
    captured = capsys.readouterr()
    payload = json.loads(captured.out)
    assert captured.err == ""  # no progress bar under --json
    times = [p["iteration_time"] for p in payload["plans"]]
    assert len(times) == 3 and times == sorted(times)
    assert payload["evaluated"] >= payload["simulated"] >= 3


def test_table_and_figure(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    figure = tmp_path / "plan.png"
    assert main([*SMALL, "--plot", str(figure)]) == 0
    out = capsys.readouterr().out
    assert "re-simulate the best plan:" in out and "pipesim simulate" in out
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--devices", "0"], "--devices must be an integer >= 1, got 0"),
        (["--schedules", "nope"], "unknown schedule 'nope'"),
        (["--optimizer", "lion"], "--optimizer must be one of"),
        (["--plot", "x.pdf"], "--plot 'x.pdf' must end in .png or .svg"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*SMALL, *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_memory_that_fits_nothing_is_explained(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """gpt-3.8b on one V100-16GB: nothing fits; the report (rejected alternatives and why) is
    printed whole, and the exit status (1) and one line on stderr say the search found none."""
    argv = ["plan", "--model", "gpt-3.8b", "--hardware", "v100-16gb-nvlink", "--devices", "1"]
    assert main([*argv, "--batch", "8", "--json"]) == 1
    out, err = capsys.readouterr()
    payload = json.loads(out)
    assert err.count("\n") == 1 and err.startswith("pipesim: failed: no configuration of gpt-3.8b")
    assert payload["plans"] == []
    assert payload["rejected"] and "overflows device 0" in payload["rejected"][0]["reason"]


# --recompute on plan: the first N layers of each stage (Megatron's block method), or ``layers``
# (N chosen per configuration)
@pytest.mark.parametrize(
    ("values", "message"),
    [
        ("most", "--recompute must be none, selective, full, a number of layers per stage or "),
        ("-1", "--recompute must be none, selective, full, a number of layers per stage or "),
        ("200", "--recompute 200: model 'gpt-355m' has 24 transformer blocks; give at most 24"),
        ("none,,", None),
        (",", "--recompute must name at least one value, got ','"),
    ],
)
def test_recompute_values_are_checked_in_one_line(
    values: str, message: str | None, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["plan", "--model", "gpt-355m", "--hardware", "a100", "--devices", "4", "--batch", "16"]
    status = main([*argv, "--recompute", values, "--top", "1", "--json"])
    out, err = capsys.readouterr()
    if message is None:
        assert status == 0 and json.loads(out)["plans"]
        return
    assert status == 2
    assert message in err and err.count("\n") == 1


def test_recompute_layers_on_a_model_given_as_layers_is_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main([*SMALL, "--recompute", "layers"]) == 2
    err = capsys.readouterr().err
    assert "--recompute layers: model 'uniform-8' is given as layers" in err
    assert err.count("\n") == 1


def test_a_plan_recomputing_n_layers_exports_and_reads_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--recompute none,full,4`` and ``layers`` are searched as simulate takes them; a plan
    recomputing the first N blocks of each stage is written as a run file with recompute = N
    and as Megatron-LM's --recompute-granularity full --recompute-method block
    --recompute-num-layers N, which the Megatron translator reads back as the same N."""
    from cli.run_file import read_run_source
    from pipesim.config.run_file import load_run_file

    model = tmp_path / "tiny.toml"
    model.write_text(
        'name = "tiny-transformer"\ndtype = "fp32"\ndefault_batch = 8\n'
        "weight_bytes_per_parameter = 4\ngradient_bytes_per_parameter = 4\n"
        "optimizer_bytes_per_parameter = 8\n[transformer]\nlayers = 8\nhidden = 256\n"
        "heads = 4\nseq = 512\nvocab = 1000\nelement_bytes = 4\n"
    )
    hardware = tmp_path / "hw.toml"
    hardware.write_text(
        'name = "constructed"\n[accelerator]\npeak_flops_per_s = { fp32 = 1e12 }\n'
        "efficiency = 1.0\nmemory_bytes = 230e6\nmemory_bandwidth_bytes_per_s = 1e12\n"
        '[network]\ntopology = "all-to-all"\nbandwidth_bytes_per_s = 1e10\nlatency_s = 1e-6\n'
    )
    argv = ["plan", "--model", str(model), "--hardware", str(hardware), "--devices", "1"]
    argv += ["--batch", "4", "--top", "1", "--json"]
    assert main([*argv, "--recompute", "none,full,4"]) == 0
    assert json.loads(capsys.readouterr().out)["plans"][0]["recompute"] == "4"
    out_dir = tmp_path / "plans"
    assert main([*argv, "--recompute", "none,full,layers", "--export", str(out_dir)]) == 0
    best = json.loads(capsys.readouterr().out)["plans"][0]
    assert (best["recompute"], best["recompute_layers_per_stage"]) == ("4", 4)
    assert "--recompute 4" in best["simulate_command"]
    assert load_run_file(out_dir / "plan-1.toml").recompute == "4"
    assert "recompute = 4\n" in (out_dir / "plan-1.toml").read_text()
    megatron = out_dir / "plan-1.megatron.args"
    lines = megatron.read_text().splitlines()
    assert lines[-3:] == [
        "--recompute-granularity full \\",
        "--recompute-method block \\",
        "--recompute-num-layers 4",
    ]
    found = read_run_source(
        ["--megatron-args", str(megatron), "--hardware", str(hardware), "--allow-ignored"]
    )
    assert found is not None and found[0].recompute == "4"


@pytest.mark.parametrize("recipe", ["nemo-2024", "megatron-core-2024", "deepspeed-pipe"])
def test_a_plan_under_a_recipe_resimulates_to_its_own_time(
    capsys: pytest.CaptureFixture[str], recipe: str
) -> None:
    """Every recipe choice reaches the planner's costs as it reaches simulate's: under
    nemo-2024 the planner timed tensor-parallel collectives unoverlapped, 16-19% slower than
    its own re-simulation command said (found by a hostile pass, 2026-11-27)."""
    flags = ["--model", "gpt-1.3b", "--hardware", "a100", "--recipe", recipe]
    plan = ["plan", *flags, "--devices", "8", "--batch", "16", "--tensor-parallel", "4"]
    assert main([*plan, "--recompute", "none", "--top", "1", "--json"]) == 0
    best = json.loads(capsys.readouterr().out)["plans"][0]
    command = best["simulate_command"].split()
    assert command[:2] == ["pipesim", "simulate"] and "--tensor-parallel" in command
    assert main([*command[1:], "--json"]) == 0
    simulated = json.loads(capsys.readouterr().out)
    assert simulated["iteration_time"] == pytest.approx(best["iteration_time"], rel=1e-9)
