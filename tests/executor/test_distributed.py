"""The torch.distributed backend over real gloo processes: every schedule at K=2, a few at
K=4, failures that must end with a clear error instead of a hang."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.multiprocessing as mp
from torch import nn

from executor.distributed import READY_DIR_VARIABLE
from executor.watch import DIAGNOSIS_WINDOW_S
from pipesim.schedules import build, schedule_names

from . import distributed_workers as workers
from .reference import assert_close, reference_step

pytestmark = pytest.mark.distributed

# Starting the ranks (spawning, importing torch, the rendezvous) only measures the machine: it
# is bounded generously. What a test measures is bounded from when every rank is ready (in the
# step: see executor.distributed's PIPESIM_READY_DIR), each test's limit raised to hold both.
READY_WITHIN_S = 240.0
# After a failure every rank must end within this: less than the survivors' 60 s wait timeout,
# so one that waited it out instead of learning of the failure is still alive at the bound.
ENDED_WITHIN_S = 45.0


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
        model = workers.case_model(schedule.model_stages, seed)
        x, y = workers.case_batch(microbatches, seed)
        loss, expected = reference_step(model, x, y, nn.MSELoss(), microbatches)
        grads: dict[str, torch.Tensor] = {}
        for rank in range(world):
            payload = torch.load(out / f"{index}-{rank}.pt")
            assert abs(payload["loss"] - loss) <= 1e-10 * abs(loss), name
            assert len(payload["compute"]) == len(schedule.actions())
            assert payload["transfers"] > 0
            grads.update(payload["grads"])
        # Every stage of every copy (DualPipe's two) holds the whole step's gradient of its
        # slice of the model: the copies' gradients are summed across the ranks.
        counts = _layers_per_stage(schedule.model_stages)
        for s in range(schedule.stages):
            model_stage = schedule.model_stage(s)
            layer = sum(counts[:model_stage])
            for local in range(counts[model_stage]):
                for param in ("linear.weight", "linear.bias"):
                    assert_close(grads[f"{s}.{local}.{param}"], expected[f"{layer}.{param}"])
                layer += 1


def _layers_per_stage(stages: int) -> list[int]:
    # split_model spreads stages + 1 layers over the model's stages: the first takes two.
    return [2] + [1] * (stages - 1)


def test_every_schedule_at_two_devices() -> None:
    cases: list[Case] = []
    for seed, name in enumerate(schedule_names()):
        microbatches = 4
        cases.append((name, microbatches, None, seed))
    check_cases(2, cases)


def test_a_few_schedules_at_four_devices() -> None:
    check_cases(
        4,
        [
            ("1f1b", 4, None, 1),
            ("interleaved-1f1b", 8, 2, 2),
            ("zbv", 8, None, 3),
            ("dualpipe", 8, None, 4),
        ],
    )


def run_failing(mode: str, world: int) -> list[dict[str, Any]]:
    """Run ``failing_peer`` on ``world`` ranks; the outcomes that ranks wrote, by rank (a rank
    that died or stalled writes none: the last rank for ``stall``, rank 1 for ``die``).

    Once every rank is in the step (or gone), each but a stalled one must end within
    ``ENDED_WITHIN_S``."""
    out = Path(tempfile.mkdtemp(prefix="pipesim-dist-"))
    ready = out / "ready"
    ready.mkdir()
    try:  # the folder goes whatever happens: a hung rank's assertion included
        with pytest.MonkeyPatch.context() as patch:  # what the spawned ranks inherit
            patch.setenv(READY_DIR_VARIABLE, str(ready))
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
            wait_until_ready(processes, ready)
            started = time.monotonic()
            for process in processes:
                if process is not stalled:
                    process.join(timeout=max(0.0, started + ENDED_WITHIN_S - time.monotonic()))
                    assert not process.is_alive(), (
                        f"a rank hung: alive {ENDED_WITHIN_S:g} s after every rank was ready"
                    )
        finally:
            for process in processes:  # a stalled rank, or any left by a failed assertion
                if process.is_alive():
                    process.kill()
                    process.join(timeout=10)
        written = [out / f"outcome-{rank}.pt" for rank in range(world)]
        return [torch.load(path) for path in written if path.exists()]
    finally:
        shutil.rmtree(out, ignore_errors=True)


def wait_until_ready(processes: Sequence[Any], ready: Path) -> None:
    """Until each rank has written ``ready/ready-<rank>`` (it met the others at the step's
    start) or ended; at most ``READY_WITHIN_S``."""
    deadline = time.monotonic() + READY_WITHIN_S
    waiting = dict(enumerate(processes))
    while waiting:
        for rank, process in list(waiting.items()):
            if (ready / f"ready-{rank}").exists() or not process.is_alive():
                del waiting[rank]
        assert time.monotonic() < deadline, (
            f"ranks {sorted(waiting)} not in the step within {READY_WITHIN_S:g} s of starting"
        )
        time.sleep(0.02)


@pytest.mark.timeout(READY_WITHIN_S + ENDED_WITHIN_S + 60)
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


@pytest.mark.timeout(READY_WITHIN_S + ENDED_WITHIN_S + 60)
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


@pytest.mark.timeout(READY_WITHIN_S + ENDED_WITHIN_S + 60)
def test_a_nan_in_one_stage_stops_every_rank_naming_the_first_bad_action() -> None:
    survivor, failed = run_failing("nan", 2)
    first = "device 1: NaN first appeared in the output of 1F1 (stage 1 forward of micro-batch 1, step 0)"
    assert failed["error"] == "NonFiniteError" and failed["message"] == first
    assert survivor["error"] == "NonFiniteError", survivor
    assert survivor["message"] == f"device 0: the step stopped after a failure on device 1: {first}"


@pytest.mark.timeout(READY_WITHIN_S + ENDED_WITHIN_S + 60)
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


@pytest.mark.timeout(READY_WITHIN_S + 120 + 60)
def test_torchrun_launcher_checks_gradients(tmp_path: Path) -> None:
    """Under torchrun: once both ranks are in their first step, the two steps, the check and
    the teardown take at most 120 s (starting torchrun and its ranks is bounded apart)."""
    torchrun = Path(sys.executable).with_name("torchrun")
    if not torchrun.exists():
        pytest.skip("torchrun is not installed next to this Python")
    ready = tmp_path / "ready"
    ready.mkdir()
    env = {**os.environ, "OMP_NUM_THREADS": "1", READY_DIR_VARIABLE: str(ready)}
    command = [
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
    ]
    stdout, stderr = tmp_path / "out", tmp_path / "err"
    with stdout.open("w") as out, stderr.open("w") as err:
        process = subprocess.Popen(command, stdout=out, stderr=err, env=env)
    try:
        deadline = time.monotonic() + READY_WITHIN_S
        while process.poll() is None and not all(
            (ready / f"ready-{rank}").exists() for rank in range(2)
        ):
            assert time.monotonic() < deadline, f"no step began within {READY_WITHIN_S:g} s"
            time.sleep(0.05)
        returncode = process.wait(timeout=120)
    finally:
        process.kill()
        process.wait()
    output = stdout.read_text()
    assert returncode == 0, output + stderr.read_text()
    assert "gradients match the unpipelined model" in output
