"""``python -m executor``: run a schedule for real, locally or under torchrun.

Under ``torchrun --nproc-per-node K -m executor ...`` each rank runs its device over
torch.distributed (gloo on CPU, NCCL with ``--device cuda``; torchrun also reaches many hosts).
Without torchrun it runs all K devices in this process (``-K``). ``--check`` compares the first
step's gradients with the unpipelined model's (exit 1 if they differ).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from executor.backends import Backend
from executor.models import mlp, transformer
from executor.runtime import StepResult
from executor.split import split_model
from executor.teardown import end_rank
from executor.trainer import PipelineTrainer
from pipesim.cli.parsing import ArgumentParser, positive_int
from pipesim.errors import PipesimError
from pipesim.schedules import build


def _parser() -> ArgumentParser:
    parser = ArgumentParser(
        prog="python -m executor",
        description="Run a pipesim schedule on PyTorch and report per-step loss and time.",
    )
    parser.add_argument("--schedule", required=True, metavar="NAME")
    parser.add_argument(
        "-K",
        "--devices",
        type=positive_int,
        default=2,
        metavar="N",
        help="devices when not under torchrun (default 2)",
    )
    parser.add_argument("-M", "--microbatches", type=positive_int, required=True, metavar="N")
    parser.add_argument("-v", "--chunks", type=positive_int, metavar="N")
    parser.add_argument("--model", choices=["mlp", "transformer"], default="mlp")
    parser.add_argument("--width", type=positive_int, default=64, metavar="N")
    parser.add_argument(
        "--layers", type=positive_int, metavar="N", help="layers (default: one per stage)"
    )
    parser.add_argument("--microbatch-size", type=positive_int, default=4, metavar="N")
    parser.add_argument("--steps", type=positive_int, default=3, metavar="N")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument(
        "--threads", type=positive_int, metavar="N", help="torch threads per process"
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=60.0,
        metavar="S",
        help="seconds to wait for a peer before failing (default 60)",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="compare the first step's gradients with the unpipelined model",
    )
    parser.add_argument("--trace", metavar="FILE", help="Chrome/Perfetto trace of the last step")
    parser.add_argument("--json", action="store_true", help="print per-step results as JSON")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run; 0 done, 1 the gradient check failed, 2 bad input."""
    args = _parser().parse_args(argv)
    try:
        return _run(args)
    except PipesimError as error:
        sys.stderr.write(f"python -m executor: error: {error}\n")
        return 2


def _run(args: argparse.Namespace) -> int:
    if args.threads:
        torch.set_num_threads(args.threads)
    distributed = "WORLD_SIZE" in os.environ
    if distributed:
        backend = "nccl" if args.device == "cuda" else "gloo"
        if args.device == "cuda":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group(backend)
    devices = dist.get_world_size() if distributed else args.devices
    rank = dist.get_rank() if distributed else 0
    schedule = build(args.schedule, devices, args.microbatches, args.chunks)
    layers = args.layers or schedule.stages
    dtype = torch.float64 if args.check and args.device == "cpu" else torch.float32
    model = (
        mlp(args.width, layers, dtype=dtype)
        if args.model == "mlp"
        else transformer(args.width, 4, layers, dtype=dtype)
    )
    reference = copy.deepcopy(model)
    stages = split_model(model, schedule)
    if args.device == "cuda":
        for s, stage in enumerate(stages):
            target = torch.cuda.current_device() if distributed else schedule.device_of(s)
            stage.to(f"cuda:{target % max(1, torch.cuda.device_count())}")
    loss_fn = nn.MSELoss()
    trainer = PipelineTrainer(
        schedule,
        stages,
        loss_fn,
        backend=Backend.DISTRIBUTED if distributed else Backend.LOCAL,
        timeout_s=args.timeout,
    )
    generator = torch.Generator().manual_seed(0)
    rows = args.microbatch_size * schedule.microbatches
    shape: tuple[int, ...] = (
        (rows, 16, args.width) if args.model == "transformer" else (rows, args.width)
    )
    status = 0
    results: list[StepResult] = []
    for step in range(args.steps):
        x = torch.randn(shape, generator=generator, dtype=dtype)
        y = torch.randn(shape, generator=generator, dtype=dtype)
        if step == 0 and args.check:
            status = _check(trainer, stages, reference, x, y, loss_fn, rank)
        results.append(trainer.step(x, y))
    if rank == 0:
        _report(args, schedule.name, devices, results)
    if distributed:
        end_rank(status)
    return status


def _check(
    trainer: PipelineTrainer,
    stages: list[nn.Module],
    reference: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    loss_fn: nn.Module,
    rank: int,
) -> int:
    """Gradients of one pipelined step against the unpipelined model's (no update)."""
    from executor.step import run_step

    result = run_step(
        trainer.schedule,
        stages,
        x.clone(),
        y.clone(),
        loss_fn,
        trainer.backend,
        timeout_s=trainer.timeout_s,
    )
    expected_model = copy.deepcopy(reference)
    total = 0.0
    for xm, ym in zip(
        x.chunk(trainer.schedule.microbatches), y.chunk(trainer.schedule.microbatches), strict=True
    ):
        loss = loss_fn(expected_model(xm), ym) / trainer.schedule.microbatches
        loss.backward()
        total += float(loss.detach())
    owned = set(trainer.owned)
    errors = []
    flat = [p for stage in stages for p in stage.parameters()]
    owners = [s for s, stage in enumerate(stages) for _ in stage.parameters()]
    for param, owner, wanted in zip(flat, owners, expected_model.parameters(), strict=True):
        target = wanted.grad
        if owner in owned and param.grad is not None and target is not None:
            scale = max(float(target.abs().max()), 1e-30)
            errors.append(float((param.grad - target.to(param.grad.device)).abs().max()) / scale)
        param.grad = None
    worst = max(errors, default=0.0)
    if dist.is_initialized():
        gathered: list[float | None] = [None] * dist.get_world_size()
        dist.all_gather_object(gathered, worst)
        worst = max(v for v in gathered if v is not None)
    tolerance = 1e-10 if x.dtype == torch.float64 else 1e-4
    ok = worst <= tolerance and abs(result.loss - total) <= tolerance * max(1.0, abs(total))
    if rank == 0:
        verdict = "gradients match the unpipelined model" if ok else "GRADIENTS DIFFER"
        sys.stdout.write(
            f"check: {verdict} (max relative error {worst:.3g}, tolerance {tolerance:g})\n"
        )
    return 0 if ok else 1


def _report(args: argparse.Namespace, name: str, devices: int, results: list[StepResult]) -> None:
    rows: list[dict[str, Any]] = [
        {
            "step": i,
            "loss": r.loss,
            "step_time_s": r.timeline.step_time_s(i),
            "peak_stash_bytes": list(r.peak_stash_bytes),
        }
        for i, r in enumerate(results)
    ]
    if args.json:
        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
    else:
        for row in rows:
            sys.stdout.write(
                f"{name} K={devices} step {row['step']}: loss {row['loss']:.6g}, "
                f"time {row['step_time_s'] * 1e3:.2f} ms\n"
            )
    if args.trace:
        from pipesim.export import chrome_trace, write_chrome_trace

        last = results[-1].timeline
        write_chrome_trace(
            chrome_trace(last.compute, last.transfers, devices, title=f"executor {name}"),
            args.trace,
        )


if __name__ == "__main__":
    sys.exit(main())
