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
