"""``pipesim schedule``: list, show, export, check; exit statuses and one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cli.main import main
from pipesim.schedules import build, schedule_names, to_csv


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run the CLI in-process; return (exit status, stdout, stderr)."""
    try:
        status = main(list(argv))
    except SystemExit as exit_:  # argparse errors exit directly
        status = int(exit_.code or 0)
    out, err = capsys.readouterr()
    return status, out, err


def simulated(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, object]:
    """``pipesim simulate ARGV --json`` run in-process; its JSON (the run must succeed)."""
    status, out, err = run(capsys, "simulate", *argv, "--json")
    assert status == 0, err
    result: dict[str, object] = json.loads(out)
    return result


def test_list_names_every_schedule_with_its_paper(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(capsys, "schedule", "list")
    assert status == 0 and err == ""
    lines = out.splitlines()
    assert [line.split()[0] for line in lines] == [*schedule_names(), "synth"]
    assert "arXiv 1811.06965" in lines[0]
    assert "--schedule synth --memory-limit N" in lines[-1]


def test_list_json(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys, "schedule", "list", "--json")
    entries = json.loads(out)
    assert status == 0
    assert [e["name"] for e in entries] == list(schedule_names())
    assert {"summary", "reference", "default_chunks", "supports_remat"} <= set(entries[0])


def test_show_prints_the_grid(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(capsys, "schedule", "show", "--schedule", "gpipe", "-K", "2", "-M", "3")
    assert status == 0 and err == ""
    assert out == (
        "gpipe: K=2 devices, M=3 micro-batches, v=1 chunk(s) per device, update=flush\n"
        "slot        0   1   2   3   4   5   6   7\n"
        "device 0  0F0 0F1 0F2   .   . 0B2 0B1 0B0\n"
        "device 1    . 1F0 1F1 1F2 1B2 1B1 1B0\n"
    )


def test_show_json_has_order_and_slots(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(
        capsys, "schedule", "show", "--schedule", "interleaved-1f1b", "-K", "2", "-M", "4", "--json"
    )
    payload = json.loads(out)
    assert status == 0
    assert payload["schedule"] == "interleaved-1f1b"
    assert (payload["devices"], payload["microbatches"], payload["chunks"]) == (2, 4, 2)
    assert payload["placement"] == [0, 1, 0, 1]
    assert payload["device_actions"][0][:3] == ["0F0", "0F1", "2F0"]
    assert payload["slots"][1][0] is None


def test_export_then_check_round_trips(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out_file = tmp_path / "zbv.csv"
    status, out, _ = run(
        capsys,
        "schedule",
        "export",
        "--schedule",
        "zbv",
        "-K",
        "3",
        "-M",
        "6",
        "--out",
        str(out_file),
    )
    assert status == 0 and out == ""
    assert out_file.read_text() == to_csv(build("zbv", 3, 6))
    status, out, err = run(capsys, "schedule", "check", str(out_file))
    assert status == 0 and err == ""
    assert out == (
        f"{out_file}: valid: K=3 devices, M=6 micro-batches, v=2 chunk(s) per device, "
        "108 actions, no deadlock\n"
    )


def test_export_to_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys, "schedule", "export", "--schedule", "1f1b", "-K", "2", "-M", "2")
    assert status == 0
    assert out == "0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n"


def test_check_json_and_update_rule(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "s.csv"
    path.write_text(to_csv(build("1f1b", 2, 2)))
    status, out, _ = run(capsys, "schedule", "check", str(path), "--json", "--update-rule", "2bw")
    payload = json.loads(out)
    assert status == 0 and payload["valid"] is True and payload["update_rule"] == "2bw"


def test_check_rejects_a_deadlocked_file_with_the_grid(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "bad.csv"
    path.write_text("0F0,0B0,0F1,0B1\n1F1,1B1,1F0,1B0\n")
    status, out, err = run(capsys, "schedule", "check", str(path))
    assert status == 2 and out == ""
    assert err == (
        f"pipesim: error: {path}: deadlock: no device can go on; device 0 waits at step 1 (0B0) "
        "for 1B0 (device 1 step 3); device 1 waits at step 0 (1F1) for 0F1 (device 0 step 2)\n"
        "step          0     1     2     3\n"
        "device 0    0F0 >0B0<   0F1   0B1\n"
        "device 1  >1F1<   1B1   1F0   1B0\n"
    )


def test_show_a_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "s.csv"
    path.write_text(to_csv(build("1f1b", 2, 2)))
    status, out, _ = run(capsys, "schedule", "show", "--schedule-file", str(path))
    assert status == 0 and out.startswith("s.csv: K=2 devices, M=2 micro-batches")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["schedule", "show", "--schedule", "nope", "-K", "2", "-M", "2"],
            "pipesim: error: unknown schedule 'nope'; choose one of: gpipe, 1f1b, "
            "interleaved-1f1b, interleaved-1f1b-flexible, looped-bfs, zb-h1, zb-h2, interleaved-zb, zbv, dualpipev, dualpipe, "
            "pipedream-2bw, pipedream",
        ),
        (
            ["schedule", "show", "--schedule", "zbv", "-K", "2", "-M", "2", "-v", "3"],
            "pipesim: error: zbv: chunks must be 2 (ZB-V places two stages per device in a V), "
            "got 3",
        ),
        (
            ["schedule", "show", "--schedule", "1f1b", "-K", "0", "-M", "2"],
            "pipesim: error: devices must be an integer >= 1, got 0",
        ),
        (
            ["schedule", "show", "--schedule", "1f1b", "-M", "2"],
            "pipesim: error: -K/--devices is required with --schedule 1f1b",
        ),
        (
            ["schedule", "show", "--schedule", "1f1b", "-K", "2"],
            "pipesim: error: -M/--microbatches is required with --schedule 1f1b",
        ),
        (
            ["schedule", "show", "--schedule", "1f1b", "-K", "two", "-M", "2"],
            "pipesim schedule show: error: argument -K/--devices: invalid int value: 'two' "
            "(see pipesim schedule show --help)",
        ),
        (
            ["schedule", "show", "--schedule-file", "x.csv", "-K", "2"],
            "pipesim: error: -K: not used with --schedule-file (the file fixes the shape), got 2",
        ),
        (
            ["schedule", "check", "/nonexistent/s.csv"],
            "pipesim: error: schedule file '/nonexistent/s.csv': cannot read it (No such file or "
            "directory)",
        ),
        (
            [
                "schedule",
                "export",
                "--schedule",
                "1f1b",
                "-K",
                "2",
                "-M",
                "2",
                "--out",
                "/nonexistent/d/s.csv",
            ],
            "pipesim: error: --out: directory '/nonexistent/d' does not exist",
        ),
        (
            [
                "schedule",
                "show",
                "--schedule",
                "gpipe",
                "-K",
                "2",
                "-M",
                "2",
                "--remat",
                "--schedule-file",
                "f",
            ],
            "pipesim schedule show: error: argument --schedule-file: not allowed with argument "
            "--schedule (see pipesim schedule show --help)",
        ),
        (
            ["schedule"],
            "pipesim schedule: error: the following arguments are required: COMMAND (see "
            "pipesim schedule --help)",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    status, out, err = run(capsys, *argv)
    assert status == 2 and out == ""
    assert err == message + "\n"


def test_export_failure_keeps_the_previous_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "s.csv"
    path.write_text("keep me\n")
    status, _, _ = run(
        capsys,
        "schedule",
        "export",
        "--schedule",
        "zbv",
        "-K",
        "2",
        "-M",
        "2",
        "-v",
        "5",
        "--out",
        str(path),
    )
    assert status == 2
    assert path.read_text() == "keep me\n"


def test_console_script_runs_without_torch() -> None:
    """`python -m pipesim` works, and neither it nor the schedule package imports torch."""
    code = (
        "import sys, runpy; sys.argv = ['pipesim', 'schedule', 'show', '--schedule', '1f1b', "
        "'-K', '2', '-M', '2'];\n"
        "try:\n    runpy.run_module('pipesim', run_name='__main__')\n"
        "except SystemExit as e:\n    assert e.code == 0, e.code\n"
        "assert 'torch' not in sys.modules, 'pipesim imported torch'\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert "device 1" in result.stdout


def test_schedule_show_and_export_synthesise_for_the_costs_given(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    synth = ["--schedule", "synth", "--memory-limit", "2", "-K", "4", "-M", "8", "--costs", "1,1,1"]
    status, out, _ = run(capsys, "schedule", "show", *synth)
    assert status == 0
    lines = out.splitlines()
    assert lines[0].startswith("synthesised for at most 2 micro-batch(es) in flight per device")
    assert (
        lines[1] == "synth: K=4 devices, M=8 micro-batches, v=1 chunk(s) per device, update=flush"
    )
    csv_file = tmp_path / "synth.csv"
    status, _, _ = run(capsys, "schedule", "export", *synth, "--out", str(csv_file))
    assert status == 0
    status, out, _ = run(capsys, "schedule", "check", str(csv_file))
    assert status == 0 and "valid: K=4 devices, M=8 micro-batches" in out
    status, _, err = run(
        capsys, "schedule", "show", "--schedule", "1f1b", "-K", "2", "-M", "2", "--costs", "1,1"
    )
    assert status == 2
    assert err == (
        "pipesim: error: --costs goes with --schedule synth here (a schedule's order does not "
        "depend on costs), got '1,1'\n"
    )
    for option, value, shown in (("--comm", "1", "1.0"), ("--hardware", "a100", "'a100'")):
        status, _, err = run(
            capsys, "schedule", "show", "--schedule", "1f1b", "-K", "2", "-M", "2", option, value
        )
        assert status == 2 and err.startswith(f"pipesim: error: {option} goes with --schedule ")
        assert err.endswith(f"got {shown}\n")


def test_a_schedule_with_model_copies_says_each_microbatchs_copy_in_json(
    capsys: pytest.CaptureFixture[str],
) -> None:
    status, out, err = run(
        capsys, "schedule", "show", "--schedule", "dualpipe", "-K", "4", "-M", "8", "--json"
    )
    assert status == 0, err
    document = json.loads(out)
    assert document["copies"] == 2 and document["routes"] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert document["stages"] == 8
