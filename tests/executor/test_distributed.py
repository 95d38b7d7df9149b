"""The torch.distributed backend over real gloo processes: every schedule at K=2, a few at
K=4, failures that must end with a clear error instead of a hang."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.multiprocessing as mp
from torch import nn

from executor.watch import DIAGNOSIS_WINDOW_S
from pipesim.schedules import build, schedule_names

from . import distributed_workers as workers
from .reference import assert_close, reference_step

pytestmark = pytest.mark.distributed


Case = tuple[str, int, int | None, int]


def spawn(function: Callable[..., None], world: int, *args: object) -> Path:
    out = Path(tempfile.mkdtemp(prefix="pipesim-dist-"))
    init_file = out / "init"
    mp.spawn(  # type: ignore[attr-defined, no-untyped-call]
        function, args=(world, str(init_file), str(out), *args), nprocs=world, join=True
    )
    return out


def check_cases(world: int, cases: list[Case]) -> None:
    out = spawn(workers.gradient_cases, world, cases)
    try:
        _compare(out, world, cases)
    finally:
        shutil.rmtree(out, ignore_errors=True)  # never leave /tmp/pipesim-dist-* behind


def _compare(out: Path, world: int, cases: list[Case]) -> None:
    for index, (name, microbatches, chunks, seed) in enumerate(cases):
        schedule = build(name, world, microbatches, chunks)
        model = workers.case_model(schedule.stages, seed)
        x, y = workers.case_batch(microbatches, seed)
        loss, expected = reference_step(model, x, y, nn.MSELoss(), microbatches)
        grads: dict[str, torch.Tensor] = {}
        for rank in range(world):
            payload = torch.load(out / f"{index}-{rank}.pt")
            assert abs(payload["loss"] - loss) <= 1e-10 * abs(loss), name
            assert len(payload["compute"]) == len(schedule.actions())
            assert payload["transfers"] > 0
            grads.update(payload["grads"])
        layer = 0
        for s, count in enumerate(_layers_per_stage(schedule.stages)):
            for local in range(count):
                for param in ("linear.weight", "linear.bias"):
                    assert_close(grads[f"{s}.{local}.{param}"], expected[f"{layer}.{param}"])
                layer += 1


def _layers_per_stage(stages: int) -> list[int]:
    # split_model spreads stages + 1 layers: the first stage takes the extra one.
    return [2] + [1] * (stages - 1)


def test_every_schedule_at_two_devices() -> None:
    cases: list[Case] = []
    for seed, name in enumerate(schedule_names()):
        microbatches = 4
        cases.append((name, microbatches, None, seed))
    check_cases(2, cases)


def test_a_few_schedules_at_four_devices() -> None:
    check_cases(4, [("1f1b", 4, None, 1), ("interleaved-1f1b", 8, 2, 2), ("zbv", 8, None, 3)])


def run_failing(mode: str, world: int) -> list[dict[str, Any]]:
    """Run ``failing_peer`` on ``world`` ranks; the outcomes that ranks wrote, by rank (a rank
    that died or stalled writes none: the last rank for ``stall``, rank 1 for ``die``)."""
    # The join bound is a hang guard, not a measurement: a survivor that waited out its 60 s
    # timeout instead of learning of the failure would still be alive at the bound.
    out = Path(tempfile.mkdtemp(prefix="pipesim-dist-"))
    try:  # the folder goes whatever happens: a hung rank's assertion included
        context = mp.start_processes(  # type: ignore[attr-defined, no-untyped-call]
            workers.failing_peer,
            args=(world, str(out / "init"), str(out), mode),
            nprocs=world,
            join=False,
            start_method="spawn",
        )
        processes = list(context.processes)
        stalled = processes[-1] if mode == "stall" else None
        try:
            for process in processes:
                if process is not stalled:
                    process.join(timeout=45)
                    assert not process.is_alive(), "a rank hung"
        finally:
            if stalled is not None:
                stalled.kill()
                stalled.join(timeout=10)
        written = [out / f"outcome-{rank}.pt" for rank in range(world)]
        return [torch.load(path) for path in written if path.exists()]
    finally:
        shutil.rmtree(out, ignore_errors=True)


def test_a_stage_that_raises_ends_every_rank_with_its_message() -> None:
    survivor, failed = run_failing("raise", 2)
    cause = (
        "stage 1 forward of micro-batch 0 failed on an input of shape (2, 4): ValueError: "
        "deliberate failure in stage 1"
    )
    assert failed["error"] == "StageError" and failed["message"] == cause
    assert survivor["error"] == "PeerError", survivor
    assert survivor["message"] == (
        f"device 0: the step stopped after a failure on device 1: {cause}"
    )


def test_a_rank_that_died_is_named_by_the_survivor() -> None:
    (survivor,) = run_failing("die", 2)
    assert survivor["error"] == "PeerError", survivor
    message = survivor["message"]
    assert message.startswith("device 0: ") and "from device 1 failed" in message
    assert message.endswith(
        "the peer may have died or stalled: device 1 stopped responding "
        f"(no heartbeat for {DIAGNOSIS_WINDOW_S:g} s)"
    )
    assert "timed out" not in message.lower()  # learned from the closed connection, not a timeout


def test_a_nan_in_one_stage_stops_every_rank_naming_the_first_bad_action() -> None:
    survivor, failed = run_failing("nan", 2)
    first = "device 1: NaN first appeared in the output of 1F1 (stage 1 forward of micro-batch 1, step 0)"
    assert failed["error"] == "NonFiniteError" and failed["message"] == first
    assert survivor["error"] == "NonFiniteError", survivor
    assert survivor["message"] == f"device 0: the step stopped after a failure on device 1: {first}"


def test_a_stalled_rank_is_named_by_every_other_rank() -> None:
    """Device 2 stops (SIGSTOP) in its first forward. Device 1 waits on it; device 0 waits on
    device 1, which is alive but blocked: both must name device 2, and neither device 1."""
    outcomes = run_failing("stall", 3)
    for rank, outcome in enumerate(outcomes):
        assert outcome["error"] == "PeerError", (rank, outcome)
        message = outcome["message"]
        assert message.startswith(f"device {rank}: "), message
        assert "device 2 stopped responding" in message, message
        assert "device 1 stopped" not in message and "devices 1" not in message, message


def test_torchrun_launcher_checks_gradients() -> None:
    torchrun = Path(sys.executable).with_name("torchrun")
    if not torchrun.exists():
        pytest.skip("torchrun is not installed next to this Python")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [
            str(torchrun),
            "--standalone",
            "--nproc-per-node",
            "2",
            "-m",
            "executor",
            "--schedule",
            "zb-h1",
            "-M",
            "4",
            "--steps",
            "2",
            "--check",
        ],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "gradients match the unpipelined model" in result.stdout
