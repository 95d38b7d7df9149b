"""``pipesim simulate``, ``pipesim hardware list``, ``pipesim models list``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .test_schedule_cli import run

DESIGN_KEYS = {
    "schedule",
    "devices",
    "microbatches",
    "chunks",
    "iteration_time",
    "bubble_fraction",
    "analytic_bubble_fraction",
    "throughput",
    "oom",
    "per_device",
}
DEVICE_KEYS = {"device", "busy_time", "idle_time", "peak_memory_bytes", "peak_activation_bytes"}


def test_synthetic_json_has_the_design_contract(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(
        capsys, "simulate", "--schedule", "1f1b", "-K", "4", "-M", "8", "--costs", "1,2", "--json"
    )
    assert status == 0 and err == ""
    payload = json.loads(out)
    assert set(payload) >= DESIGN_KEYS
    assert all(set(d) >= DEVICE_KEYS for d in payload["per_device"])
    assert payload["iteration_time"] == 33.0
    assert payload["bubble_fraction"] == payload["analytic_bubble_fraction"] == 3 / 11
    assert payload["oom"] is False and payload["throughput_unit"] == "microbatches/s"


def test_model_on_hardware_prints_a_summary(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(
        capsys,
        "simulate",
        "--schedule",
        "1f1b",
        "-K",
        "8",
        "-M",
        "32",
        "--model",
        "gpipe-transformer-48",
        "--hardware",
        "tpu-v3",
    )
    assert status == 0
    lines = out.splitlines()
    assert lines[0] == "1f1b: K=8 devices, M=32 micro-batches, v=1, update=flush"
    assert lines[2].startswith("  iteration time ")
    assert "samples/s; speedup" in out
    assert out.count("    device ") == 8 and "capacity 16 GiB" in out


def test_trace_and_csv_files(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    trace, table = tmp_path / "t.json", tmp_path / "t.csv"
    status, _, _ = run(
        capsys,
        "simulate",
        "--schedule",
        "zbv",
        "-K",
        "2",
        "-M",
        "4",
        "--costs",
        "1,1,1",
        "--comm",
        "0.1",
        "--trace",
        str(trace),
        "--timeline-csv",
        str(table),
        "--steps",
        "2",
    )
    assert status == 0
    assert json.loads(trace.read_text())["traceEvents"]
    assert table.read_text().startswith("type,device,step,action")


def test_oom_is_reported_in_the_summary(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(
        capsys,
        "simulate",
        "--schedule",
        "gpipe",
        "-K",
        "2",
        "-M",
        "32",
        "--model",
        "gpipe-transformer-48",
        "--hardware",
        "tpu-v3",
    )
    assert status == 0
    assert "OUT OF MEMORY" in out and "out of memory on at least one device" in out


MEMORY_AWARE = ["--model", "uniform-8", "--hardware", "a100", "--partition", "memory-aware"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--costs", "1"], "--costs must be F,B or F,B,W in seconds, e.g. 1,2 or 1,1,1, got '1'"),
        (
            ["--costs", "a,b"],
            "--costs must be F,B or F,B,W in seconds, e.g. 1,2 or 1,1,1, got 'a,b'",
        ),
        (["--costs", "1,-2"], "costs B must be a number >= 0, got -2.0"),
        ([], "give either --costs F,B[,W] or --model NAME with --hardware NAME (not both)"),
        (
            ["--costs", "1,2", "--model", "uniform-8", "--hardware", "a100"],
            "give either --costs F,B[,W] or --model NAME with --hardware NAME (not both)",
        ),
        (["--model", "uniform-8"], "--hardware is required with --model"),
        (
            ["--model", "uniform-8", "--hardware", "tpu-v9"],
            "unknown hardware 'tpu-v9'; choose one of: tpu-v2, tpu-v3, tpu-v4, tpu-v5e, "
            "p100-pcie, v100-nvlink, v100-16gb-nvlink, a100, a100-40gb, h100, h100-pcie, h200, "
            "h800, a100-ib, h100-ib, cpu (or a .toml file)",
        ),
        (
            ["--model", "uniform-2", "--hardware", "a100"],
            "stages: 4 stages need at least 4 layers, but model 'uniform-2' has 2",
        ),
        (
            ["--model", "uniform-8", "--hardware", "a100", "--batch", "6"],
            "--batch 6 must be a positive multiple of the 4 micro-batches",
        ),
        (
            ["--model", "uniform-8", "--hardware", "a100", "--partition", "1,x"],
            "--partition must be balanced, memory-aware, even, blocks or layer counts per stage, "
            "e.g. 3,4,4,3, got '1,x'",
        ),
        (["--costs", "1,2", "--steps", "0"], "--steps must be an integer >= 1, got 0"),
        # Checked before the costs are built: a memory-aware partition walks the steps, and
        # 10**8 of them grew to 24 GB before the actions limit was consulted.
        (
            [*MEMORY_AWARE, "--steps", "0"],
            "--steps must be an integer >= 1, got 0",
        ),
        (
            [*MEMORY_AWARE, "--steps", "100000000"],
            "--steps 100,000,000 x 32 actions: beyond the limit of 1,048,576 actions; "
            "set PIPESIM_MAX_ACTIONS to raise it",
        ),
        (["--costs", "1,2", "--batch", "4"], "--batch goes with --model, not with --costs, got 4"),
        (
            ["--model", "uniform-8", "--hardware", "a100", "--comm", "1"],
            "--comm and --activation-bytes go with --costs, not with --model",
        ),
    ],
)
def test_bad_simulate_input(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    status, out, err = run(capsys, "simulate", "--schedule", "1f1b", "-K", "4", "-M", "4", *argv)
    assert (status, out) == (2, "")
    assert err == f"pipesim: error: {message}\n"


def test_catalogue_listings(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys, "hardware", "list")
    assert status == 0 and out.splitlines()[1].startswith("tpu-v3")
    status, out, _ = run(capsys, "hardware", "list", "--json")
    assert {r["name"] for r in json.loads(out)} >= {"a100", "cpu"}
    status, out, _ = run(capsys, "models", "list")
    assert status == 0 and out.startswith("gpipe-transformer-48")
    status, out, _ = run(capsys, "models", "list", "--json")
    assert json.loads(out)[0]["example_layers"] == 50


def test_hardware_show_writes_a_file_simulate_takes(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A catalogue entry shown as TOML, edited (half the memory), simulates as the entry
    with that change; an unknown name is refused in one line."""
    status, out, _ = run(capsys, "hardware", "show", "a100")
    assert status == 0 and out.startswith('name = "a100"\n')
    path = tmp_path / "half.toml"
    path.write_text(out.replace("memory_bytes = 85899345920.0", "memory_bytes = 42949672960.0"))
    common = [
        "simulate",
        "--schedule",
        "1f1b",
        "-K",
        "4",
        "-M",
        "8",
        "--model",
        "gpt-1.3b",
        "--json",
    ]
    _, catalogue, _ = run(capsys, *common, "--hardware", "a100")
    _, edited, _ = run(capsys, *common, "--hardware", str(path))
    ours, theirs = json.loads(edited), json.loads(catalogue)
    assert ours["iteration_time"] == theirs["iteration_time"]
    assert ours["per_device"][0]["memory_breakdown"] == theirs["per_device"][0]["memory_breakdown"]
    capacities = {d["memory_capacity_bytes"] for d in ours["per_device"]}
    assert capacities == {42949672960} != {d["memory_capacity_bytes"] for d in theirs["per_device"]}
    status, out, err = run(capsys, "hardware", "show", "a1000")
    assert (status, out) == (2, "") and err.startswith("pipesim: error: unknown hardware 'a1000'")


SYNTH = ["simulate", "--schedule", "synth", "-K", "4", "-M", "8", "--costs", "1,1,1"]


def test_a_synthesised_schedule_is_simulated_and_says_what_won(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    status, out, _ = run(capsys, *SYNTH, "--memory-limit", "2")
    assert status == 0
    assert out.startswith(
        "synthesised for at most 2 micro-batch(es) in flight per device: "
        "greedy-I-first-eager-W won (41 s; next: "
    )
    assert "synth: K=4 devices, M=8 micro-batches, v=1" in out and "iteration time 41 s" in out
    status, out, _ = run(capsys, *SYNTH, "--memory-limit", "4", "--json")
    assert status == 0 and json.loads(out)["schedule"] == "synth"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ([], "--schedule synth needs --memory-limit N (micro-batches)"),
        (["--memory-limit", "0"], "--memory-limit must be an integer >= 1, got 0"),
        (
            ["--memory-limit", "2", "--placement", "v", "-v", "3"],
            "-v/--chunks: --placement v holds 2 stages per device, got 3",
        ),
        (
            ["--memory-limit", "1", "-v", "2"],
            "--memory-limit must be >= 2 with 2 stages per device (a device holds every stage "
            "of a micro-batch it has at once), got 1",
        ),
        (["--memory-limit", "2", "--remat"], "--remat: --schedule synth splits backwards"),
        (
            ["--memory-limit", "2", "--memory-limit-bytes", "5"],
            "--memory-limit-bytes 5: give --memory-limit or --memory-limit-bytes, not both",
        ),
        (["--memory-limit-bytes", "0"], "--memory-limit-bytes must be a finite number > 0, got 0"),
        (
            ["--memory-limit-bytes", "inf"],
            "--memory-limit-bytes must be a finite number > 0, got inf",
        ),
        (
            ["--memory-limit-bytes", "7", "--activation-bytes", "8"],
            "--memory-limit-bytes must be >= 8 (8 B: a device holds every stage of a micro-batch "
            "it has at once), got 7",
        ),
        (
            ["--memory-limit", "2", "--update-rule", "async"],
            "--update-rule async: only for --schedule-file; --schedule synth flushes",
        ),
        (
            ["--memory-limit", "2", "-M", "100000000"],
            "synth K=4 M=100,000,000 v=1: 1,200,000,000 actions: beyond the limit of 1,048,576",
        ),
    ],
)
def test_synthesis_options_are_checked(
    capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    status, out, err = run(capsys, *SYNTH, *extra)
    assert status == 2 and out == ""
    assert err.startswith(f"pipesim: error: {message}") and err.count("\n") == 1


def test_a_v_shaped_synthesis_is_simulated(capsys: pytest.CaptureFixture[str]) -> None:
    """At 1F1B's memory (2K pairs of half-size stages) in a V, ZB-V's order is the best found
    for F=I=W=1 on K=4, M=8; V-Min's building block keeps within K pairs."""
    status, out, _ = run(capsys, *SYNTH, "--memory-limit", "8", "--placement", "v")
    assert status == 0
    assert out.startswith(
        "synthesised for at most 8 (stage, micro-batch) pairs in flight per device: zbv won"
    )
    assert "synth: K=4 devices, M=8 micro-batches, v=2" in out
    status, out, _ = run(capsys, *SYNTH, "--memory-limit", "4", "--placement", "v", "--json")
    assert status == 0
    assert json.loads(out)["iteration_time"] <= 29.5  # V-Min's order, or better


def test_a_byte_limit_is_kept_in_the_simulated_memory(capsys: pytest.CaptureFixture[str]) -> None:
    """8 bytes a micro-batch (W keeping all): 16 bytes is two micro-batches in flight, 41 s
    as with --memory-limit 2, and the simulated activations peak at 16 bytes."""
    status, out, _ = run(
        capsys, *SYNTH, "--activation-bytes", "8", "--memory-limit-bytes", "16", "--json"
    )
    assert status == 0
    result = json.loads(out)
    assert result["iteration_time"] == 41.0
    assert max(d["peak_activation_bytes"] for d in result["per_device"]) == 16.0
    status, out, _ = run(capsys, *SYNTH, "--activation-bytes", "8", "--memory-limit-bytes", "16")
    assert out.startswith("synthesised for at most 16 B of activations per device: ")


def test_a_placement_without_synthesis_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    status, _, err = run(
        capsys, "simulate", "--schedule", "zbv", "-K", "2", "-M", "4", "--costs", "1,1,1",
        "--placement", "v",
    )  # fmt: skip
    assert status == 2
    assert err == "pipesim: error: --placement goes with --schedule synth, got v\n"


def test_a_memory_limit_without_synthesis_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    status, _, err = run(
        capsys, "simulate", "--schedule", "1f1b", "-K", "2", "-M", "2", "--costs", "1,2",
        "--memory-limit", "3",
    )  # fmt: skip
    assert status == 2
    assert err == "pipesim: error: --memory-limit goes with --schedule synth, got 3\n"
