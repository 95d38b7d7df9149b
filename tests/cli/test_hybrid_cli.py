"""``pipesim simulate`` with tensor and sequence parallelism, recomputation and ZeRO: the
JSON breakdown and utilisation, the text summary, and every bad combination refused in one
line (exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .test_schedule_cli import run

BASE = ("simulate", "--schedule", "1f1b", "-K", "4", "-M", "8", "--model", "megatron-39.1b")
HYBRID = (
    "--hardware",
    "a100",
    "--tensor-parallel",
    "8",
    "--sequence-parallel",
    "--recompute",
    "selective",
    "--microbatch-size",
    "2",
    "--data-parallel",
    "2",
    "--zero",
    "1",
)
TERMS = {
    "weights",
    "gradients",
    "optimizer_state",
    "master_weights",
    "activations",
    "transient",
    "fragmentation",
    "runtime_reserve",
}


def test_the_json_gives_every_memory_term_and_the_utilisation(
    capsys: pytest.CaptureFixture[str],
) -> None:
    status, out, err = run(capsys, *BASE, *HYBRID, "--memory-reserve", "1e9", "--json")
    assert status == 0 and err == ""
    payload = json.loads(out)
    assert payload["devices_total"] == 64  # T 8 x K 4 x D 2
    assert 0 < payload["mfu"] <= payload["hfu"] < 1
    assert payload["flops_formula"].startswith("matmul FLOPs of arXiv 2104.04473")
    # the model FLOPs of one step: 72·B·s·l·h^2·(1 + s/(6h) + V/(12lh)), B = 2 x 8 x 2 = 32
    s, layers, h, v = 2048, 48, 8192, 51200
    expected = 72 * 32 * s * layers * h * h * (1 + s / (6 * h) + v / (12 * layers * h))
    assert payload["model_flops_per_step"] == pytest.approx(expected, rel=1e-12)
    for device in payload["per_device"]:
        terms = device["memory_breakdown"]
        assert set(terms) == TERMS
        assert sum(terms.values()) == pytest.approx(device["peak_memory_bytes"], rel=1e-12)
        assert terms["runtime_reserve"] == 1e9
        assert terms["optimizer_state"] + terms["master_weights"] > 0
        assert device["peak_action"] is not None


def test_the_summary_shows_the_heaviest_device_and_the_cluster(
    capsys: pytest.CaptureFixture[str],
) -> None:
    status, out, _ = run(capsys, *BASE, *HYBRID)
    assert status == 0
    assert "utilisation    MFU" in out
    assert "cluster        T=8 x K=4 x D=2 = 64 ranks: 64 x a100: 8 node(s) of 8" in out
    assert "heaviest device" in out and "optimizer state" in out


def test_a_flat_fabric_says_it_is_one(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(
        capsys, *BASE, "--hardware", "v100-nvlink", "--data-parallel", "4", "--batch", "512"
    )
    assert status == 0
    assert "a flat fabric, every pair on the same link (no nodes)" in out


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            ("--hardware", "a100", "--tensor-parallel", "3"),
            "--tensor-parallel 3 must divide the 8 devices of one node of a100",
        ),
        (
            ("--hardware", "a100", "--tensor-parallel", "16"),
            "--tensor-parallel 16 is larger than one node of a100 (8 devices)",
        ),
        (
            ("--hardware", "h100", "--tensor-parallel", "6", "--tensor-across-nodes"),
            "--tensor-parallel 6 must divide the 8 devices of one node of h100",
        ),
        (
            ("--hardware", "tpu-v3", "--tensor-parallel", "3"),
            "--tensor-parallel 3 must divide the model's heads (64)",
        ),
        (
            ("--hardware", "a100", "--sequence-parallel"),
            "--sequence-parallel splits the sequence over the tensor-parallel group",
        ),
        (
            ("--hardware", "a100", "--recompute", "selective", "--remat"),
            "--recompute selective and --remat both recompute",
        ),
        (
            ("--hardware", "a100", "--microbatch-size", "2", "--batch", "100"),
            "--batch 100 and --microbatch-size 2 disagree: 2 x 8 micro-batches is 16",
        ),
        (("--hardware", "a100", "--zero", "4"), "--zero must be 0, 1, 2 or 3, got 4"),
        (
            ("--hardware", "a100", "--zero", "3", "--reshard-after-forward", "sometimes"),
            "--reshard-after-forward must be default, always or never, got 'sometimes'",
        ),
        (("--hardware", "a100", "--fragmentation", "-1"), "--fragmentation must be a number in"),
        (("--hardware", "a100", "--fragmentation", "1.5"), "--fragmentation must be a number in"),
        (
            ("--hardware", "a100", "--tensor-parallel", "8", "--recompute", "13"),
            "--recompute 13: no stage holds more than 12 transformer blocks here",
        ),
        (("--hardware", "a100", "--recompute", "most"), "--recompute must be none, selective"),
        (("--hardware", "a100", "--microbatch-size", "0"), "--microbatch-size must be an integer"),
    ],
)
def test_bad_combinations_are_one_line(
    capsys: pytest.CaptureFixture[str], extra: tuple[str, ...], message: str
) -> None:
    status, out, err = run(capsys, *BASE, *extra)
    assert status == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith(f"pipesim: error: {message}"), err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ("--model", "uniform-8", "--hardware", "a100", "--tensor-parallel", "2"),
            "model 'uniform-8' is given as layers, with no heads or widths to split",
        ),
        (
            ("--model", "uniform-8", "--hardware", "a100", "--attention", "flash"),
            "--attention flash: model 'uniform-8' is given as layers",
        ),
        (("--costs", "1,2", "--tensor-parallel", "2"), "--tensor-parallel goes with --model"),
        (
            ("--model", "uniform-8", "--hardware", "a100", "--partition", "blocks"),
            "--partition blocks splits a transformer's blocks",
        ),
    ],
)
def test_options_that_need_a_transformer_are_refused_otherwise(
    capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], message: str
) -> None:
    status, _, err = run(capsys, "simulate", "--schedule", "1f1b", "-K", "2", "-M", "4", *argv)
    assert status == 2
    assert err.count("\n") == 1 and err.startswith(f"pipesim: error: {message}"), err


def test_full_recomputation_is_refused_with_a_split_backward(
    capsys: pytest.CaptureFixture[str],
) -> None:
    status, _, err = run(
        capsys,
        "simulate",
        "--schedule",
        "zb-h1",
        "-K",
        "4",
        "-M",
        "8",
        "--model",
        "megatron-39.1b",
        "--hardware",
        "a100",
        "--recompute",
        "full",
    )
    assert status == 2
    assert "--recompute full with zb-h1, whose backward is split into I and W" in err


@pytest.mark.parametrize("command", ["simulate", "export"])
def test_a_synthesised_schedule_refuses_full_recomputation(
    capsys: pytest.CaptureFixture[str], command: str
) -> None:
    """A synthesised order splits backwards into I and W, as zb-h1 does: refused alike."""
    head = ("simulate",) if command == "simulate" else ("schedule", "export")
    status, _, err = run(
        capsys,
        *head,
        *("--schedule", "synth", "--memory-limit", "4", "-K", "4", "-M", "8"),
        *("--model", "gpt-1.3b", "--hardware", "a100", "--batch", "32", "--recompute", "full"),
    )
    assert status == 2 and err.count("\n") == 1
    assert "--recompute full with synth, whose backward is split into I and W" in err


def test_sequence_parallelism_needs_a_sequence_that_splits(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """1,023 tokens do not split over 2 ranks: refused by simulate; the planner tries
    sequence parallelism only with the sizes that split the sequence."""
    path = tmp_path / "odd.toml"
    path.write_text(
        'dtype = "bf16"\ndefault_batch = 8\n[transformer]\nlayers = 4\nhidden = 256\n'
        "heads = 4\nseq = 1023\nvocab = 1024\n"
    )
    status, _, err = run(
        capsys,
        *("simulate", "--schedule", "1f1b", "-K", "2", "-M", "2", "--model", str(path)),
        *("--hardware", "a100", "--tensor-parallel", "2", "--sequence-parallel"),
    )
    assert status == 2
    assert "the sequence (1,023 tokens) must split evenly over the tensor-parallel ranks" in err
    status, out, _ = run(
        capsys,
        *("plan", "--model", str(path), "--hardware", "a100", "--devices", "4", "--batch", "8"),
        *("--sequence-parallel", "both", "--json"),
    )
    assert status == 0
    evaluated = json.loads(out)["plans"]
    assert evaluated and not any(p["sequence_parallel"] for p in evaluated)


def test_blocks_is_megatrons_layout(capsys: pytest.CaptureFixture[str]) -> None:
    """48 blocks on 8 stages (interleaved, v = 2): 6 each, the embedding with the first and
    the output layer with the last."""
    status, out, _ = run(
        capsys,
        "simulate",
        "--schedule",
        "interleaved-1f1b",
        "-K",
        "4",
        "-v",
        "2",
        "-M",
        "8",
        "--model",
        "megatron-39.1b",
        "--hardware",
        "a100",
        "--tensor-parallel",
        "8",
        "--partition",
        "blocks",
        "--json",
    )
    assert status == 0
    assert "layers per stage 7,6,6,6,6,6,6,7" in json.loads(out)["costs"]


def test_a_hybrid_runs_speedup_is_named_as_the_pipelines(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """On T x K x D ranks the speedup is over the K stages run one after another, not over one
    device: the text says so; a pipeline alone keeps the plain wording."""
    shape = ["--model", "megatron-1.7b", "--hardware", "a100", "-K", "4", "--schedule", "1f1b"]
    status, out, _ = run(
        capsys,
        "simulate",
        *shape,
        "-M",
        "8",
        "--tensor-parallel",
        "2",
        "--data-parallel",
        "4",
        "--batch",
        "32",
    )
    assert status == 0
    assert (
        "over its 4 pipeline stages run one after another (pipeline speedup; the 32 ranks'" in out
    )
    status, out, _ = run(capsys, "simulate", *shape, "-M", "8")
    assert status == 0 and "x over one device" in out and "pipeline speedup" not in out
    flat = [*shape[:4], "-K", "1", "--schedule", "1f1b", "-M", "4", "--data-parallel", "4"]
    status, out, _ = run(capsys, "simulate", *flat, "--batch", "16")
    assert status == 0
    assert "speedup 1x (no pipeline; the 4 ranks' tensor and data parallelism not counted)" in out


def test_the_result_states_its_layout(capsys: pytest.CaptureFixture[str]) -> None:
    """A model run's JSON carries its dimensions besides the pipeline's; synthetic costs none."""
    status, out, _ = run(
        capsys,
        "simulate",
        "--model",
        "megatron-1.7b",
        "--hardware",
        "a100",
        "-K",
        "2",
        "--schedule",
        "1f1b",
        "-M",
        "4",
        "--tensor-parallel",
        "2",
        "--sequence-parallel",
        "--data-parallel",
        "2",
        "--batch",
        "16",
        "--recompute",
        "full",
        "--zero",
        "1",
        "--json",
    )
    assert status == 0
    assert json.loads(out)["layout"] == {
        "tensor_parallel": 2,
        "sequence_parallel": True,
        "data_parallel": 2,
        "microbatch_size": 2.0,
        "recompute": "full",
        "zero": 1,
        "reshard_after_forward": "default",
        "context_parallel": 1,
        "cp_comm_type": "p2p",
        "expert_parallel": 1,
    }
    status, out, _ = run(
        capsys, "simulate", "--schedule", "1f1b", "-K", "2", "-M", "4", "--costs", "1,2", "--json"
    )
    assert status == 0 and json.loads(out)["layout"] is None


def test_a_balanced_partition_weighs_recomputing_the_first_n_layers(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """--partition balanced with --recompute N (refused until the partitioner weighed each
    stage's recomputed first N blocks): the split it finds is no slower than the even one,
    and here faster (the embedding and the output layer sit on the end stages)."""
    times = {}
    for partition in ("even", "balanced", "memory-aware"):
        args = [
            "simulate",
            "--model",
            "gpt-1.3b",
            "--hardware",
            "a100",
            "--schedule",
            "1f1b",
            "-K",
            "4",
            "-M",
            "8",
            "--recompute",
            "2",
            "--partition",
            partition,
            "--json",
        ]
        status, out, _ = run(capsys, *args)
        assert status == 0
        times[partition] = json.loads(out)["iteration_time"]
    assert times["balanced"] < times["even"]
    assert times["memory-aware"] <= times["even"]


def _peak_and_layout(capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[float, dict]:
    status, out, err = run(
        capsys,
        "simulate",
        *("--model", "megatron-1.7b", "--hardware", "a100", "--schedule", "1f1b"),
        *("-K", "1", "-M", "4", "--data-parallel", "8", "--batch", "32", "--json"),
        *extra,
    )
    assert status == 0, err
    result = json.loads(out)
    return result["per_device"][0]["peak_memory_bytes"], result["layout"]


def test_fsdp_is_stated_on_the_command_line_and_in_a_run_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Without a pipeline each ZeRO stage holds less than the one before; ZeRO-3 with its
    weights kept gathered (never resharded) holds more than resharded; a run file's
    ``reshard_after_forward`` is the flag's."""
    peaks = [_peak_and_layout(capsys, "--zero", str(z))[0] for z in range(4)]
    assert peaks == sorted(peaks, reverse=True) and len(set(peaks)) == 4
    kept, layout = _peak_and_layout(capsys, "--zero", "3", "--reshard-after-forward", "never")
    assert kept > peaks[3]
    assert (layout["zero"], layout["reshard_after_forward"]) == (3, "never")
    run_file = tmp_path / "run.toml"
    run_file.write_text(
        'model = "megatron-1.7b"\nhardware = "a100"\n[training]\nbatch = 32\n'
        "[parallelism]\npipeline_parallel = 1\ndata_parallel = 8\nzero = 3\n"
        'reshard_after_forward = "never"\n[pipeline]\nschedule = "1f1b"\nmicrobatches = 4\n'
    )
    status, out, err = run(capsys, "simulate", "--run", str(run_file), "--json")
    assert status == 0, err
    assert json.loads(out)["per_device"][0]["peak_memory_bytes"] == kept


def test_context_parallelism_is_stated_and_splits_each_samples_work(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """CP = 2 doubles the job's ranks and halves each one's share of every sample: the step
    takes about half as long (the keys' and values' ring hides behind the attention), the
    layout says it, and a bad exchange kind is one line naming the flag."""

    def simulate(*extra: str) -> dict:
        status, out, err = run(
            capsys,
            "simulate",
            *("--model", "llama3-8b", "--hardware", "h100", "--schedule", "1f1b"),
            *("-K", "2", "-M", "4", "--data-parallel", "1", "--batch", "4", "--json"),
            *extra,
        )
        assert status == 0, err
        return json.loads(out)

    whole, split = simulate(), simulate("--context-parallel", "2")
    assert split["layout"]["context_parallel"] == 2
    assert split["iteration_time"] == pytest.approx(whole["iteration_time"] / 2, rel=0.1)
    assert split["iteration_time"] > whole["iteration_time"] / 2
    status, _, err = run(
        capsys,
        "simulate",
        "--model",
        "llama3-8b",
        "--hardware",
        "h100",
        "--schedule",
        "1f1b",
        "-K",
        "2",
        "-M",
        "4",
        "--batch",
        "4",
        "--context-parallel",
        "2",
        "--context-exchange",
        "ring",
    )
    assert status == 2 and "--context-exchange must be p2p or all-gather, got 'ring'" in err
