"""What ``python -m executor`` runs once its options passed: build the model, run the steps,
report.

Every check that can refuse the run happens before the first step: the schedule, the device
(``--device cuda`` needs a CUDA device), the output path of ``--trace``, and the memory the
run would take (:func:`executor.options.check_memory`). Each step draws a progress bar on a
terminal (:mod:`pipesim.common.progress`, rank 0 only, never under ``--json``).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import datetime
import os
import sys
import tempfile
import threading
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from application.command_line import EXIT_CHECK_FAILED
from application.outputs import output_path, write_text_atomically
from executor.backends import Backend, DeviceKind
from executor.errors import BackendError, PeerError, first_line
from executor.models import mlp, transformer
from executor.options import (
    PROG,
    TRANSFORMER_HEADS,
    TRANSFORMER_SEQUENCE,
    RankPlace,
    check_memory,
)
from executor.runtime import StepResult
from executor.split import split_model
from executor.step import run_step
from executor.trainer import PipelineTrainer
from pipesim.common.limits import Limit, check
from pipesim.common.progress import progress
from pipesim.files.strict_json import json_text
from pipesim.schedules import Schedule, build


def run(args: argparse.Namespace, place: RankPlace | None) -> int:
    """The run, alone (``place`` None) or as one rank under torchrun; 0 done, 1 the gradient
    check failed. Bad input raises a ``PipesimError`` before any step ran."""
    distributed = place is not None
    rank = place.rank if place else 0
    device_kind = DeviceKind(args.device)
    devices = place.world_size if place else args.devices
    schedule = build(args.schedule, devices, args.microbatches, args.chunks)
    actions = schedule.action_arrays.actions
    check(Limit.ACTIONS, args.steps * actions, f"--steps {args.steps:,} x {actions:,} actions")
    if args.trace and rank == 0:
        output_path(args.trace, "--trace")
    if device_kind is DeviceKind.CUDA:
        _check_cuda(place.local_rank if place else 0)
    layers = args.layers or schedule.stages
    dtype = torch.float64 if args.check and device_kind is DeviceKind.CPU else torch.float32
    rows = args.microbatch_size * schedule.microbatches
    check_memory(args, layers, rows, torch.empty((), dtype=dtype).element_size())
    if args.threads:
        torch.set_num_threads(args.threads)
    if place is not None:
        if device_kind is DeviceKind.CUDA:
            torch.cuda.set_device(place.local_rank)
        join_process_group(device_kind, place, args.timeout)
    model = (
        mlp(args.width, layers, dtype=dtype)
        if args.model == "mlp"
        else transformer(args.width, TRANSFORMER_HEADS, layers, dtype=dtype)
    )
    # The unpipelined copy --check compares with, taken before the stages share the model.
    reference = copy.deepcopy(model) if args.check else None
    stages = split_model(model, schedule)
    if device_kind is DeviceKind.CUDA:
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
        check_finite=args.check_finite,
    )
    generator = torch.Generator().manual_seed(0)
    shape: tuple[int, ...] = (
        (rows, TRANSFORMER_SEQUENCE, args.width)
        if args.model == "transformer"
        else (rows, args.width)
    )
    status = 0
    results: list[StepResult] = []
    with progress(args.steps, "steps", enabled=rank == 0 and not args.json) as bar:
        for step in range(args.steps):
            x = torch.randn(shape, generator=generator, dtype=dtype)
            y = torch.randn(shape, generator=generator, dtype=dtype)
            if step == 0 and reference is not None:
                status = _check(trainer, stages, reference, x, y, loss_fn, rank)
            results.append(trainer.step(x, y))
            bar.update()
            bar.set_postfix_str(f"loss {results[-1].loss:.4g}")
    if rank == 0:
        _report(args, schedule, devices, results)
    return status


def join_process_group(device_kind: DeviceKind, place: RankPlace, timeout_s: float) -> None:
    """Meet the other ranks at MASTER_ADDR:MASTER_PORT, waiting at most ``timeout_s`` (a rank
    started alone, or whose peers never come, fails in one line instead of waiting for
    torch's default of ten minutes or more). torch's store client retries a refused
    connection after its own timeout, up to three times as long: past ``timeout_s`` and a
    second's grace a timer ends the rank with the same line."""
    where = f"{os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')}"
    failure = (
        f"rank {place.rank} of {place.world_size}: the ranks did not all meet at {where} "
        f"within --timeout {timeout_s:g} s"
    )

    with _stderr_held() as real_stderr:

        def give_up() -> None:
            os.write(real_stderr, f"{PROG}: failed: {failure}\n".encode())
            os._exit(EXIT_CHECK_FAILED)

        timer = threading.Timer(timeout_s + 1.0, give_up)
        timer.daemon = True
        timer.start()
        try:
            dist.init_process_group(
                device_kind.process_group_backend, timeout=datetime.timedelta(seconds=timeout_s)
            )
        except (RuntimeError, ValueError) as error:  # torch's DistStoreError is a RuntimeError
            raise PeerError(f"{failure} ({first_line(error)[:200]})") from None
        finally:
            timer.cancel()


@contextlib.contextmanager
def _stderr_held() -> Iterator[int]:
    """Hold what is written to file descriptor 2 (torch's C++ logging included) while the
    block runs, and yield a descriptor of the real stderr. A block that ends well gets the
    held text written out after it; one that fails drops it: a store client that times out
    logs a 20-line C++ stack whose reason the rank's one line already quotes."""
    sys.stderr.flush()
    real = os.dup(2)
    with tempfile.TemporaryFile() as held:  # unlinked at once: nothing left behind
        os.dup2(held.fileno(), 2)
        failed = False
        try:
            yield real
        except BaseException:
            failed = True
            raise
        finally:
            sys.stderr.flush()
            os.dup2(real, 2)
            os.close(real)
            if not failed:
                held.seek(0)
                text = held.read()
                if text:
                    os.write(2, text)


def _check_cuda(local: int) -> None:
    if not torch.cuda.is_available():
        raise BackendError(
            "--device cuda: no CUDA device is available here (torch.cuda.is_available() is "
            "False); use --device cpu"
        )
    if local >= torch.cuda.device_count():
        raise BackendError(
            f"--device cuda: local rank {local} has no GPU of its own (this host has "
            f"{torch.cuda.device_count()}); start at most that many processes per node"
        )


def _check(
    trainer: PipelineTrainer,
    stages: list[nn.Module],
    reference: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    loss_fn: nn.Module,
    rank: int,
) -> int:
    """Gradients of one pipelined step against the unpipelined model's (no update);
    ``reference`` is used up (its gradients are filled)."""
    result = run_step(
        trainer.schedule,
        stages,
        x.clone(),
        y.clone(),
        loss_fn,
        trainer.backend,
        timeout_s=trainer.timeout_s,
        check_finite=trainer.check_finite,
    )
    expected_model = reference
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


def _report(
    args: argparse.Namespace, schedule: Schedule, devices: int, results: list[StepResult]
) -> None:
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
        sys.stdout.write(json_text(rows, indent=2) + "\n")
    else:
        for row in rows:
            sys.stdout.write(
                f"{schedule.name} K={devices} step {row['step']}: loss {row['loss']:.6g}, "
                f"time {row['step_time_s'] * 1e3:.2f} ms\n"
            )
    if args.trace:
        from pipesim.export import chrome_trace

        last = results[-1].timeline
        trace = chrome_trace(
            last.compute, last.transfers, devices, title=f"executor {schedule.name}"
        )
        write_text_atomically(args.trace, json_text(trace), field="--trace")
