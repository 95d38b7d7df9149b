"""``python -m executor``: every refusal one line before any step runs, failures one line with
exit 1, Ctrl-C exit 130, no torch a one-line hint, progress only on a terminal."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from executor import PeerError
from executor.__main__ import main
from executor.options import DEFAULT_MAX_MEMORY_GIB, MemoryEstimate, estimate_memory

BASE = ["--schedule", "1f1b", "-M", "2", "--steps", "1"]


def run_main(
    args: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> tuple[int, str, list[str]]:
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    status = main(args)
    captured = capsys.readouterr()
    return status, captured.out, captured.err.splitlines()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--timeout", "-1"], "argument --timeout: expected a finite number > 0, got '-1'"),
        (["--timeout", "nan"], "argument --timeout: expected a finite number > 0, got 'nan'"),
        (["--timeout", "inf"], "argument --timeout: expected a finite number > 0, got 'inf'"),
        (["--trace", "/nonexistent/t.json"], "--trace: directory '/nonexistent' does not exist"),
        (
            ["--width", "1000000"],
            "--width 1000000 with 2 layers and 8 rows per step needs about 2.98e+04 GiB per "
            "process (model, reference copy and gradients 2.98e+04 GiB, activations 0.119 GiB), "
            "over the limit of 16 GiB; raise it with --max-memory-gib",
        ),
        (["--layers", "10000000"], "--width 64 with 10000000 layers and 8 rows per step needs"),
        (
            ["--model", "transformer", "--width", "30"],
            "--width 30: the transformer's 4 attention heads must divide it; use a multiple of 4",
        ),
        (["--threads", "100000"], "--threads 100000: more than the "),  # torch would segfault
        (
            ["--steps", str(10**18)],
            "--steps 1,000,000,000,000,000,000 x 8 actions: beyond the limit of 1,048,576 "
            "actions; set PIPESIM_MAX_ACTIONS to raise it",
        ),
    ],
)
def test_bad_input_is_one_line_before_any_step(
    extra: list[str],
    message: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    status, out, err = run_main(BASE + extra, capsys, monkeypatch)
    assert status == 2
    assert out == ""  # no step ran, nothing was reported
    assert len(err) == 1 and err[0].startswith("python -m executor: error: ")
    assert message in err[0]


TORCHRUN = {"WORLD_SIZE": "2", "RANK": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"WORLD_SIZE": "two"}, "WORLD_SIZE must be a whole number from 1 to 1024, got 'two'"),
        ({"WORLD_SIZE": "0"}, "WORLD_SIZE must be a whole number from 1 to 1024, got '0'"),
        ({"RANK": "2"}, "RANK must be a whole number from 0 to 1, got '2'"),
        ({"RANK": None}, "RANK must be a whole number from 0 to 1, got None"),
        ({"LOCAL_RANK": "-1"}, "LOCAL_RANK must be a whole number from 0 to 1, got '-1'"),
        ({"MASTER_ADDR": None}, "MASTER_ADDR is not set: with WORLD_SIZE=2 the ranks meet at"),
        ({"MASTER_PORT": "http"}, "MASTER_PORT must be a whole number from 1 to 65535, got"),
    ],
)
def test_a_broken_torchrun_environment_is_one_line(
    change: dict[str, str | None], message: str
) -> None:
    # In a process of its own: a rank under torchrun leaves with os._exit.
    env = {**os.environ, **TORCHRUN, **change}
    if "LOCAL_RANK" not in change:
        env.pop("LOCAL_RANK", None)  # a stale one from the caller's shell
    done = subprocess.run(
        [sys.executable, "-m", "executor", *BASE],
        env={name: value for name, value in env.items() if value is not None},
        capture_output=True,
        text=True,
        timeout=60,
    )
    err = done.stderr.splitlines()
    assert done.returncode == 2 and done.stdout == ""
    assert len(err) == 1 and err[0].startswith("python -m executor: error: ") and message in err[0]


@pytest.mark.parametrize("rank", ["0", "1"])  # the store's server, and a client of none
def test_a_rank_whose_peers_never_come_fails_within_its_timeout(rank: str) -> None:
    env = {**os.environ, **TORCHRUN, "RANK": rank, "MASTER_PORT": str(29_000 + os.getpid() % 900)}
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "executor", *BASE, "--timeout", "2"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1 and time.monotonic() - started < 30
    assert done.stderr.splitlines()[-1].startswith(
        f"python -m executor: failed: rank {rank} of 2: the ranks did not all meet at 127.0.0.1:"
    )
    assert len(done.stderr.splitlines()) == 1, done.stderr  # torch's C++ log held back
    assert "within --timeout 2 s" in done.stderr


def test_cuda_without_a_gpu_is_refused(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    status, out, err = run_main([*BASE, "--device", "cuda"], capsys, monkeypatch)
    assert (status, out) == (2, "")
    assert err == [
        "python -m executor: error: --device cuda: no CUDA device is available here "
        "(torch.cuda.is_available() is False); use --device cpu"
    ]


def test_the_memory_limit_can_be_raised(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    estimate = estimate_memory("mlp", 2048, 2, 8, 4)
    assert 0.1 * 2**30 < estimate.total_bytes < 2**30  # so 0.1 GiB refuses and 1 GiB runs
    refused, _, _ = run_main(
        [*BASE, "--width", "2048", "--max-memory-gib", "0.1"], capsys, monkeypatch
    )
    ran, out, err = run_main(
        [*BASE, "--width", "2048", "--max-memory-gib", "1"], capsys, monkeypatch
    )
    assert (refused, ran, err) == (2, 0, [])
    assert out.startswith("1f1b K=2 step 0: loss ")


def test_memory_estimate_of_a_tiny_model_by_hand() -> None:
    # Two layers of 4x4 weights and 4 biases, float32: 2·20·4 bytes; an MLP layer saves its
    # input and its ReLU output: 2 tensors of 8 rows x 4, per layer.
    assert estimate_memory("mlp", 4, 2, 8, 4) == MemoryEstimate(160, 2 * 2 * 8 * 4 * 4)
    # A transformer block: 12·h² + 13·h parameters.
    assert estimate_memory("transformer", 8, 1, 1, 4).parameter_bytes == (12 * 64 + 13 * 8) * 4
    assert DEFAULT_MAX_MEMORY_GIB == 16


def test_a_run_failure_is_one_line_with_exit_1(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def lost_peer(*_: object) -> None:
        raise PeerError("device 0: waiting for 1B0->0B0 (step 0) from device 1 failed")

    monkeypatch.setattr("executor.trainer.PipelineTrainer.step", lost_peer)
    status, out, err = run_main(BASE, capsys, monkeypatch)
    assert (status, out) == (1, "")
    assert err == [
        "python -m executor: failed: device 0: waiting for 1B0->0B0 (step 0) from device 1 failed"
    ]


def test_a_trace_is_written_and_progress_is_quiet_off_a_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PIPESIM_PROGRESS", raising=False)
    trace = tmp_path / "t.json"
    status, out, err = run_main([*BASE, "--trace", str(trace)], capsys, monkeypatch)
    assert (status, err) == (0, [])  # stderr is not a terminal here: no bar
    assert len(out.splitlines()) == 1
    events = json.loads(trace.read_text())["traceEvents"]
    assert any(e.get("name") == "0F0" for e in events)


def test_progress_is_drawn_when_wanted(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PIPESIM_PROGRESS", "1")
    status, out, err = run_main([*BASE, "--steps", "2"], capsys, monkeypatch)
    assert status == 0 and len(out.splitlines()) == 2
    assert "steps" in "\n".join(err)  # tqdm's bar, on stderr; stdout keeps the rows


def python_m_executor(code_before: str, args: list[str]) -> list[str]:
    """``python -m executor args`` after ``code_before`` ran in the same interpreter."""
    run = "import runpy; runpy.run_module('executor', run_name='__main__')"
    return [sys.executable, "-c", f"{code_before}; sys.argv = ['executor', *{args!r}]; {run}"]


def test_without_torch_one_line_names_the_extra() -> None:
    command = python_m_executor("import sys; sys.modules['torch'] = None", BASE)
    env = {k: v for k, v in os.environ.items() if k != "WORLD_SIZE"}
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=120, env=env, check=False
    )
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "python -m executor: error: PyTorch is not installed; the executor needs it: install "
        "the executor extra (pip install 'pipesim[executor]')"
    ]


@pytest.mark.parametrize(
    ("stop", "said"),
    [(signal.SIGINT, "Ctrl-C"), (signal.SIGTERM, "SIGTERM"), (signal.SIGHUP, "SIGHUP")],
)
def test_ctrl_c_and_stop_signals_exit_130_with_one_line(
    stop: signal.Signals, said: str, tmp_path: Path
) -> None:
    errors = tmp_path / "stderr"
    env = {k: v for k, v in os.environ.items() if k != "WORLD_SIZE"}
    env.update(PIPESIM_PROGRESS="1", OMP_NUM_THREADS="1")
    with errors.open("w") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "executor", *BASE[:-1], "100000"],
            stdout=subprocess.DEVNULL,
            stderr=sink,
            env=env,
        )
        try:
            for _ in range(600):  # until the bar shows the steps are under way
                if "steps" in errors.read_text() or process.poll() is not None:
                    break
                time.sleep(0.1)
            process.send_signal(stop)
            status = process.wait(timeout=60)
        finally:
            process.kill()
    text = errors.read_text()
    assert status == 130, text
    assert "Traceback" not in text
    assert text.rstrip("\n").splitlines()[-1].split("\r")[-1] == (
        f"python -m executor: interrupted: stopped by {said}"
    )


def test_ctrl_c_during_a_finalizer_is_not_lost(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Python drops a KeyboardInterrupt raised inside a weakref finalizer (torch frees tensors
    through them); seen here: a run that went on for minutes after Ctrl-C. The interrupt is
    raised again until it ends the run with 130."""
    import weakref

    import executor.launcher

    def run(args: object, place: object) -> int:
        class Freed:
            pass

        freed = Freed()
        weakref.finalize(freed, lambda: os.kill(os.getpid(), signal.SIGINT))
        del freed  # the SIGINT lands inside the finalizer, where Python ignores it
        for _ in range(500):  # a run that goes on (5 s) unless the interrupt comes again
            time.sleep(0.01)
        return 0

    monkeypatch.setattr(executor.launcher, "run", run)
    reported: list[object] = []  # what would print "Exception ignored in: ..." and a traceback
    monkeypatch.setattr(sys, "unraisablehook", reported.append)
    status, _, err = run_main(BASE, capsys, monkeypatch)
    assert status == 130, err
    assert err == ["python -m executor: interrupted: stopped by Ctrl-C"]
    assert reported == []
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
