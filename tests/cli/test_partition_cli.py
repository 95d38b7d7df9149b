"""``pipesim partition`` and ``--partition`` objectives on simulate."""

from __future__ import annotations

import json

import pytest

from cli.main import main


def test_costs_list_literal(capsys: pytest.CaptureFixture[str]) -> None:
    """1..6 into 3 stages: (1+2+3 | 4+5 | 6) = 6, 9, 6 is the least bottleneck, 9."""
    assert main(["partition", "--costs", "1,2,3,4,5,6", "-K", "3", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["partition"] == [3, 2, 1]
    assert [s["layers"] for s in payload["stages"]] == [3, 2, 1]
    assert [s["time"] for s in payload["stages"]] == [6.0, 9.0, 6.0]
    assert payload["bottleneck_time"] == 9.0
    assert set(payload["stages"][0]) >= {"layers", "time", "memory_bytes"}


def test_model_memory_aware_fits(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["partition", "--model", "gpt-3.8b", "--hardware", "v100-16gb-nvlink", "-K", "8"]
    argv += ["--schedule", "1f1b", "-M", "32", "--batch", "32", "--objective", "memory-aware"]
    assert main([*argv, "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert sum(payload["partition"]) == 34
    assert all(s["memory_bytes"] <= 16 * 2**30 for s in payload["stages"])
    assert main(argv) == 0
    assert "bottleneck" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--costs", "1,2", "-K", "2", "--objective", "memory-aware"], "needs --model"),
        (["--costs", "1,x", "-K", "2"], "--costs must be per-layer seconds"),
        (["--costs", "1,2", "-K", "3"], "3 stages need at least 3 layers"),
        (
            [
                "--model",
                "gpt-3.8b",
                "--hardware",
                "v100-16gb-nvlink",
                "-K",
                "8",
                "--schedule",
                "1f1b",
                "-M",
                "8",
                "--batch",
                "512",
                "--objective",
                "memory-aware",
            ],
            "no partition fits memory",
        ),
    ],
)
def test_bad_input(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["partition", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_simulate_takes_partition_objectives(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["simulate", "--model", "gpt-355m", "--hardware", "v100-16gb-nvlink", "--schedule"]
    base += ["1f1b", "-K", "4", "-M", "8", "--batch", "8", "--json"]
    times = {}
    for objective in ("even", "balanced", "memory-aware"):
        assert main([*base, "--partition", objective]) == 0
        times[objective] = json.loads(capsys.readouterr().out)["iteration_time"]
    assert times["balanced"] <= times["even"] * (1 + 1e-9)
    assert main([*base, "--partition", "lopsided"]) == 2
    assert "--partition must be balanced, memory-aware, even" in capsys.readouterr().err


def test_heterogeneous_devices(capsys: pytest.CaptureFixture[str]) -> None:
    """A device twice as fast takes twice the layers; a device with less memory takes fewer."""
    argv = ["partition", "--costs", "1,1,1,1,1,1", "-K", "2", "--device-speeds", "2,1", "--json"]
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["partition"] == [4, 2]
    base = ["partition", "--model", "gpt-355m", "--hardware", "v100-16gb-nvlink", "-K", "2"]
    base += ["--schedule", "1f1b", "-M", "4", "--batch", "4", "--objective", "memory-aware"]
    assert main([*base, "--json"]) == 0
    even = json.loads(capsys.readouterr().out)["stages"]
    small = even[0]["memory_bytes"] * 0.8
    assert main([*base, "--device-memory", f"{small},16e9", "--json"]) == 0
    tight = json.loads(capsys.readouterr().out)["stages"]
    assert tight[0]["layers"] < even[0]["layers"]
    assert tight[0]["memory_bytes"] <= small
    assert main([*base, "--device-speeds", "1"]) == 2
    assert "--device-speeds must be 2 positive numbers" in capsys.readouterr().err


def test_mixed_hardware_one_kind_per_device(capsys: pytest.CaptureFixture[str]) -> None:
    """An H100 beside an A100: the H100's stage takes more of the layers, whichever side."""
    base = ["partition", "--model", "gpt-355m", "-K", "2", "--batch", "8", "--json"]
    assert main([*base, "--hardware", "h100,a100"]) == 0
    fast_first = json.loads(capsys.readouterr().out)["partition"]
    assert main([*base, "--hardware", "a100,h100"]) == 0
    fast_last = json.loads(capsys.readouterr().out)["partition"]
    assert fast_first[0] > fast_first[1] and fast_last[1] > fast_last[0]
    assert main([*base, "--hardware", "h100,a100,a100"]) == 2
    assert "--hardware lists 3 kinds but -K is 2" in capsys.readouterr().err
