"""Process bodies for the distributed tests (importable, so torch.multiprocessing can spawn
them). Each writes what it computed, or the error it raised, to a file the test reads."""

from __future__ import annotations

import datetime
import os
import signal
import traceback
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from executor import Backend, run_step, split_model
from executor.models import mlp
from executor.teardown import end_rank
from pipesim.schedules import build

WIDTH = 4


def case_batch(microbatches: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(2 * microbatches, WIDTH, generator=generator, dtype=torch.float64)
    return x, torch.randn(2 * microbatches, WIDTH, generator=generator, dtype=torch.float64)


def case_model(stages: int, seed: int) -> nn.Sequential:
    return mlp(WIDTH, stages + 1, dtype=torch.float64, seed=seed)


def _init(rank: int, world: int, init_file: str, timeout_s: float) -> None:
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo",
        init_method=f"file://{init_file}",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=timeout_s),
    )


def gradient_cases(
    rank: int,
    world: int,
    init_file: str,
    out_dir: str,
    cases: list[tuple[str, int, int | None, int]],
) -> None:
    """Run each (schedule, M, chunks, seed) case and save this rank's stage gradients."""
    _init(rank, world, init_file, 60.0)
    try:
        for index, (name, microbatches, chunks, seed) in enumerate(cases):
            schedule = build(name, world, microbatches, chunks)
            model = case_model(schedule.model_stages, seed)
            stages = split_model(model, schedule)
            x, y = case_batch(microbatches, seed)
            result = run_step(
                schedule, stages, x, y, nn.MSELoss(), backend="distributed", timeout_s=30.0
            )
            grads = {
                f"{s}.{n}": p.grad.clone()
                for s in schedule.stages_on(rank)
                for n, p in stages[s].named_parameters()
                if p.grad is not None
            }
            payload: dict[str, Any] = {
                "loss": result.loss,
                "grads": grads,
                "compute": [
                    (r.device, str(r.action), r.start_s, r.end_s) for r in result.timeline.compute
                ],
                "transfers": len(result.timeline.transfers),
                "stash": result.peak_stash_bytes,
            }
            torch.save(payload, Path(out_dir) / f"{index}-{rank}.pt")
    except BaseException:
        dist.destroy_process_group()
        raise
    end_rank(0)


def failing_peer(rank: int, world: int, init_file: str, out_dir: str, mode: str) -> None:
    """One rank fails and every rank records what it saw.

    ``raise``: rank 1's stage raises; ``die``: rank 1 exits mid-step; ``nan``: rank 1's stage
    returns NaN for micro-batch 1; ``stall``: the last rank stops itself (SIGSTOP) in its
    first forward. The wait timeout is long for the first three (a survivor must learn of the
    failure, not time out) and short for ``stall`` (timing out is the only way to learn)."""
    _init(rank, world, init_file, 60.0)
    schedule = build("1f1b", world, 4)
    model = case_model(schedule.stages, 0)
    stages = split_model(model, schedule)
    layer: nn.Module = stages[rank][0]  # type: ignore[index]
    if rank == 1 and mode == "raise":
        layer.register_forward_hook(_explode)
    if rank == 1 and mode == "die":
        layer.register_forward_hook(lambda *_: os._exit(3))
    if rank == 1 and mode == "nan":
        calls = iter(range(1000))
        layer.register_forward_hook(
            lambda _m, _i, output: output * float("nan") if next(calls) == 1 else None
        )
    if rank == world - 1 and mode == "stall":
        layer.register_forward_hook(lambda *_: os.kill(os.getpid(), signal.SIGSTOP))
    x, y = case_batch(4, 0)
    timeout_s = 3.0 if mode == "stall" else 60.0
    outcome: dict[str, Any]
    try:
        run_step(
            schedule,
            stages,
            x,
            y,
            nn.MSELoss(),
            backend=Backend.DISTRIBUTED,
            timeout_s=timeout_s,
            check_finite=True,
        )
        outcome = {"error": None}
    except Exception as error:
        outcome = {
            "error": type(error).__name__,
            "message": str(error),
            "trace": traceback.format_exc(),
        }
    torch.save(outcome, Path(out_dir) / f"outcome-{rank}.pt")
    os._exit(0)  # skip the process-group teardown a dead peer would hang


def _explode(*_: object) -> None:
    raise ValueError("deliberate failure in stage 1")
