"""Requests whose work has no bound, and requests that would be answered with exit 0 while
meaning nothing, are refused before any work: one line naming the field or the limit, exit 2
(bad input) or 1 (the search found nothing), never a traceback (issue 24's hostile cases)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import cli.main

from .test_refusals_cli import one_line
from .test_schedule_cli import run

SLOW_LINK = """name = "slow"
[accelerator]
peak_flops_per_s = { bf16 = 1e12, fp16 = 1e12, fp32 = 1e12 }
efficiency = 1.0
memory_bytes = 80e9
memory_bandwidth_bytes_per_s = 1e12
[network]
topology = "all-to-all"
bandwidth_bytes_per_s = 1e-300
latency_s = 1e-6
"""
MODEL = ["--model", "gpt-3.8b", "--hardware", "a100"]
SIMULATE = ["simulate", "--schedule", "1f1b", "-K", "4", "-M", "8"]
SWEEP = ["sweep", "--schedules", "1f1b", "-K", "4", "-M", "8"]

CASES = [
    (
        ["partition", "--costs", "1,2,3", "-K", "1000000000"],
        "-K 1,000,000,000: beyond the limit of 1,024 devices; set PIPESIM_MAX_DEVICES",
    ),
    (
        ["partition", "--costs", "1,2,3", "-K", "1", "-v", "1000000000"],
        "-v 1,000,000,000: beyond the limit of 64 chunks per device",
    ),
    (
        [*SIMULATE, *MODEL, "--batch", "8000000000", "--data-parallel", "1000000000"],
        "-K 4 x --data-parallel 1,000,000,000: 4,000,000,000 devices: beyond the limit of "
        "65,536 devices in the cluster; set PIPESIM_MAX_CLUSTER_DEVICES",
    ),
    (
        [*SIMULATE, "--costs", "1,1", "--data-parallel", "4"],
        "--data-parallel goes with --model, not with --costs, got 4",
    ),
    (
        [*SWEEP, "--costs", "1,2", "--data-parallel", "10000000"],
        "--data-parallel goes with --model, not with --costs, got 10000000",
    ),
    (
        ["plan", *MODEL, "--devices", str(10**18), "--batch", "512"],
        "--devices 1,000,000,000,000,000,000: beyond the limit of 65,536 devices in the cluster",
    ),
    (
        ["plan", *MODEL, "--devices", "8", "--batch", "512", "--chunks", "2,1000000"],
        "--chunks 1,000,000: beyond the limit of 64 chunks per device; set PIPESIM_MAX_CHUNKS",
    ),
    (
        ["plan", *MODEL, "--devices", "8", "--batch", "512", "--schedules", ",,"],
        "--schedules must name at least one schedule, got ',,'",
    ),
    (
        ["sweep", "--schedules", "dualpipev", "-K", "3", "-M", "3", "--costs", "1,2"],
        "every point of the sweep was skipped (1); the first: microbatches must be >= 2 x "
        "devices = 6",
    ),
    (
        ["partition", "--costs", "1,2,3", "-K", "2", "--device-speeds", "1e-308,1"],
        "--device-speeds must be 2 positive numbers between 1e-06 and 1e+06 (one per device), "
        "got '1e-308,1'",
    ),
    # A catalogue name's layer count is a size like any other: checked before a layer is built.
    (
        [*SIMULATE, "--model", "uniform-100000000", "--hardware", "a100"],
        "model uniform-100000000: 100,000,000 layers: beyond the limit of 100,000 layers; set "
        "PIPESIM_MAX_LAYERS",
    ),
    (
        [*SIMULATE, "--model", "uniform-200000", "--hardware", "a100"],
        "model uniform-200000: 200,000 layers: beyond the limit of 100,000 layers",
    ),
    (
        [*SIMULATE, "--model", "gpipe-transformer-" + "9" * 30, "--hardware", "a100"],
        "model gpipe-transformer-<30 digits>: beyond the limit of 100,000 layers",
    ),
    (
        ["plan", "--model", "amoebanet-d-3000000-256", "--hardware", "a100", "--devices", "4"],
        "model amoebanet-d-3000000-256: 3,000,000 layers: beyond the limit of 100,000 layers",
    ),
    (
        [*SIMULATE, "--model", "amoebanet-d-18-" + "9" * 400, "--hardware", "a100"],
        "AmoebaNet filters must be at most 65,536, got <400 digits>",  # was an OverflowError
    ),
    (
        [*SIMULATE, "--model", "uniform-\u0661\u0666", "--hardware", "a100"],
        "unknown model 'uniform-\u0661\u0666'",  # Arabic-Indic 16: not a layer count
    ),
    (
        ["plan", "--model", "uniform-10000", "--hardware", "a100", "--devices", "4"],
        "partition of 10,000 layers into 2 stages: 200,040,002 table cells: beyond the limit",
    ),
    # A zero given is refused, never read as the option left out.
    (
        ["partition", "-K", "2", "-v", "0", "--costs", "1,2,3,4"],
        "-v/--chunks must be an integer >= 1, got 0",
    ),
    (
        ["partition", "-K", "2", "-v", "0", *MODEL],
        "-v/--chunks must be an integer >= 1, got 0",
    ),
    (
        ["partition", "-K", "2", "-M", "0", *MODEL],
        "-M/--microbatches must be an integer >= 1, got 0",
    ),
    (
        ["partition", "-K", "2", "--costs", "0,0"],
        "--costs: every layer takes 0 s, nothing to balance, got '0,0'",
    ),
]


@pytest.mark.parametrize(("argv", "message"), CASES, ids=[" ".join(a)[:60] for a, _ in CASES])
def test_unbounded_or_meaningless_requests_are_refused_first(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    status, _, err = run(capsys, *argv)
    assert status == 2
    assert one_line(err).startswith(f"pipesim: error: {message}"), err


def test_a_limit_set_to_nonsense_is_refused_by_every_command(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """PIPESIM_MAX_LAYERS=0 is refused even by commands that never read a layer count."""
    monkeypatch.setenv("PIPESIM_MAX_LAYERS", "0")
    for argv in (
        ["plan", *MODEL, "--devices", "8", "--batch", "64"],
        ["schedule", "show", "--schedule", "1f1b", "-K", "2", "-M", "2"],
    ):
        status, out, err = run(capsys, *argv)
        assert status == 2 and out == ""
        assert (
            one_line(err) == "pipesim: error: PIPESIM_MAX_LAYERS must be an integer >= 1, got '0'"
        )


def test_an_out_path_ending_in_a_slash_is_a_folder_not_a_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = f"{tmp_path}/new.csv/"
    status, _, err = run(capsys, "schedule", "export", "--schedule", "1f1b", "-K", "2", "-M", "2")
    assert status == 0
    status, _, err = run(
        capsys, "schedule", "export", "--schedule", "1f1b", "-K", "2", "-M", "2", "--out", out
    )
    assert status == 2 and list(tmp_path.iterdir()) == []
    assert one_line(err) == (
        f"pipesim: error: --out {out!r} ends in a slash: it names a folder, not a file"
    )


def test_a_title_longer_than_a_figure_holds_is_refused_before_drawing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    saved = tmp_path / "run.json"
    status, _, _ = run(
        capsys, "simulate", "--schedule", "1f1b", "-K", "2", "-M", "2", "--costs", "1,2",
        "--save", str(saved),
    )  # fmt: skip
    assert status == 0
    figure = tmp_path / "t.png"
    status, _, err = run(
        capsys, "plot", "timeline", str(saved), "--out", str(figure), "--title", "x" * 100_000
    )
    assert status == 2 and not figure.exists()
    assert (
        one_line(err) == "pipesim: error: --title has 100,000 characters; at most 300 fit a figure"
    )


def test_a_title_matplotlib_cannot_parse_is_refused_in_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Text between two $ is mathtext: a bad expression in --title is refused before drawing,
    one in a saved file (a schedule's name) when drawn, one line either way; \\$ and a
    valid expression draw."""
    saved = tmp_path / "run.json"
    status, _, _ = run(
        capsys, "simulate", "--schedule", "1f1b", "-K", "2", "-M", "2", "--costs", "1,2",
        "--save", str(saved),
    )  # fmt: skip
    figure = tmp_path / "t.png"
    plot = ["plot", "timeline", str(saved), "--out", str(figure)]
    status, _, err = run(capsys, *plot, "--title", r"$\undefinedmacro$")
    assert status == 2 and not figure.exists()
    assert one_line(err).startswith(
        r"pipesim: error: --title is not valid mathtext (Unknown symbol: \undefinedmacro"
    )
    status, _, err = run(capsys, *plot, "--title", r"cost \$5, $\alpha$ = 2")
    assert status == 0 and figure.exists(), err
    edited = json.loads(saved.read_text())
    edited["result"]["schedule"] = "$x^$"
    saved.write_text(json.dumps(edited))
    figure.unlink()
    status, _, err = run(capsys, *plot)
    assert status == 2 and not figure.exists()
    assert one_line(err).startswith("pipesim: error: a text of the figure is not valid mathtext")


def test_a_link_too_slow_to_be_meant_is_refused_where_it_is_stated(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    hardware = tmp_path / "slow.toml"
    hardware.write_text(SLOW_LINK)
    for argv in (
        ["simulate", "--schedule", "1f1b", "-K", "4", "-M", "8", "--model", "gpt-3.8b"],
        ["plan", "--model", "gpt-3.8b", "--devices", "8", "--batch", "64"],
    ):
        status, _, err = run(capsys, *argv, "--hardware", str(hardware))
        assert status == 2
        assert one_line(err).startswith(
            "pipesim: error: network.bandwidth_bytes_per_s must be a number >= 1 (per second), "
            "got 1e-300"
        )


def test_running_out_of_memory_is_one_line_exit_1(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A limit raised beyond the machine (PIPESIM_MAX_ACTIONS=10**20) ends in one line."""

    def exhausted() -> None:
        raise MemoryError

    monkeypatch.setattr(cli.main, "check_environment", exhausted)
    status, _, err = run(capsys, "schedule", "show", "--schedule", "1f1b", "-K", "2", "-M", "2")
    assert status == 1
    assert one_line(err).startswith("pipesim: failed: out of memory")
