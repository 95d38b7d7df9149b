"""What ``pipesim`` prints when its streams fail, and that nothing else reaches stderr.

* Standard output that cannot be written (``/dev/full``, a closed descriptor) is one line,
  ``pipesim: failed: cannot write the output: REASON``, exit 1, never a traceback (nor
  Python's "Exception ignored" at exit); a reader that went away is exit 0 and silent.
* A model of absurd costs (1e300 FLOPs) refused by ``plan`` is the refusal's line alone,
  without numpy's overflow warnings above it.
* ``--partition`` takes ASCII digits only, as ``--recompute`` does.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from .test_schedule_cli import run

ROOT = Path(__file__).resolve().parents[2]
FULL = Path("/dev/full")
needs_dev_full = pytest.mark.skipif(not FULL.exists(), reason="no /dev/full here")

SHOW = ["hardware", "show", "a100"]
SWEEP_JSON = ["sweep", "--schedules", "1f1b", "-K", "2", "-M", "4", "--costs", "1,1", "--json"]
PLAN_JSON = ["plan", "--model", "uniform-8", "--hardware", "a100", "--devices", "4"]
PLAN_JSON += ["--batch", "16", "--json"]


def _pipesim(argv: list[str], **streams: object) -> subprocess.CompletedProcess[str]:
    done: subprocess.CompletedProcess[str] = subprocess.run(
        [sys.executable, "-m", "cli", *argv],
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
        timeout=120,
        check=False,
        **streams,  # type: ignore[call-overload]
    )
    return done


@needs_dev_full
@pytest.mark.parametrize("argv", [SHOW, SWEEP_JSON, PLAN_JSON], ids=["show", "sweep", "plan"])
def test_a_full_disk_on_stdout_is_one_line_and_exit_1(argv: list[str]) -> None:
    with FULL.open("w") as full:
        done = _pipesim(argv, stdout=full)
    assert done.stderr == "pipesim: failed: cannot write the output: No space left on device\n"
    assert done.returncode == 1


@needs_dev_full
def test_the_layer_timing_report_on_a_full_disk_is_one_line_and_exit_1() -> None:
    """The GPU records' reader, a module of its own, prints through the same guard."""
    pytest.importorskip("torch")
    with FULL.open("w") as full:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "validation.layer_timing",
                "--report",
                str(ROOT / "docs" / "measurements" / "h200-layers.json"),
            ],
            cwd=ROOT,
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            check=False,
        )
    assert done.stderr == (
        "python -m validation.layer_timing: failed: cannot write the output: "
        "No space left on device\n"
    )
    assert done.returncode == 1


def test_a_closed_stdout_is_one_line_and_exit_1() -> None:
    done = _pipesim(SHOW, preexec_fn=lambda: os.close(1))
    assert done.stderr == "pipesim: failed: cannot write the output: Bad file descriptor\n"
    assert done.returncode == 1


def test_a_reader_that_went_away_is_exit_0_and_silent() -> None:
    with subprocess.Popen(
        [sys.executable, "-m", "cli", *SHOW],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as process:
        assert process.stdout is not None
        process.stdout.close()  # before the command writes: its write gets EPIPE
        _, err = process.communicate(timeout=120)
    assert (process.returncode, err) == (0, "")


def test_a_failed_write_in_process_is_reported_and_the_stream_restored(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The handler itself, in-process: a stdout whose writes fail with EIO."""
    from cli.main import main

    class Failing:
        def write(self, text: str) -> int:
            raise OSError(5, "Input/output error")

        def flush(self) -> None:
            pass

    failing = Failing()
    monkeypatch.setattr(sys, "stdout", failing)
    assert main(SHOW) == 1
    assert (
        capsys.readouterr().err == "pipesim: failed: cannot write the output: Input/output error\n"
    )


LAYERS_MODEL = """
name = "absurd"
dtype = "bf16"
default_batch = 16
input_bytes = 1e6
[[layers]]
name = "block"
repeat = 8
forward_flops = {flops}
input_grad_flops = {flops}
weight_grad_flops = {flops}
parameters = 1e6
activation_bytes = 4e6
output_bytes = 1e6
"""


@pytest.mark.parametrize(
    ("flops", "refusal"),
    [
        ("1e307", "pipesim: error: model_flops_per_microbatch must be a number >= 0, got inf\n"),
        ("1e300", None),  # huge but finite: plans, no warning lines either
    ],
)
def test_plan_of_absurd_flops_prints_no_overflow_warnings(
    tmp_path: Path, flops: str, refusal: str | None
) -> None:
    model = tmp_path / "absurd.toml"
    model.write_text(LAYERS_MODEL.format(flops=flops))
    argv = ["plan", "--model", str(model), "--hardware", "a100", "--devices", "4"]
    done = _pipesim([*argv, "--batch", "16"], stdout=subprocess.DEVNULL)
    assert "Warning" not in done.stderr
    if refusal is None:
        assert (done.returncode, done.stderr) == (0, "")
    else:
        assert (done.returncode, done.stderr) == (2, refusal)


@pytest.mark.parametrize("partition", ["６,２", "4_0,4", "4,,4", "+", "9" * 5000])
def test_partition_counts_are_ascii_digits(
    capsys: pytest.CaptureFixture[str], partition: str
) -> None:
    argv = ["simulate", "--schedule", "1f1b", "-K", "2", "-M", "4", "--model", "uniform-8"]
    status, out, err = run(capsys, *argv, "--hardware", "a100", f"--partition={partition}")
    assert status == 2 and out == ""
    assert err.startswith("pipesim: error: --partition must be balanced, memory-aware, even, ")
    assert err.count("\n") == 1


def test_partition_counts_in_ascii_still_run(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", "--schedule", "1f1b", "-K", "2", "-M", "4", "--model", "uniform-8"]
    status, _, err = run(capsys, *argv, "--hardware", "a100", "--partition", " 4,4")
    assert (status, err) == (0, "")


@pytest.mark.parametrize(
    "argv",
    [
        ["simulate", "--schedule", "1f1b", "-K", "４", "-M", "4", "--costs", "1,2"],
        ["simulate", "--schedule", "1f1b", "-K", "4", "-M", "4", "--costs", "1,2", "--comm", "٠.٥"],
        ["sweep", "--schedules", "1f1b", "-K", "２,4", "-M", "4", "--costs", "1,2"],
    ],
    ids=["fullwidth-int", "arabic-indic-float", "fullwidth-list"],
)
def test_numbers_take_ascii_digits_only(
    capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    """Python's int() and float() read every script's digits; pipesim's options do not (as
    --partition and --recompute already did not)."""
    status, out, err = run(capsys, *argv)
    assert (status, out) == (2, "") and err.count("\n") == 1, err
