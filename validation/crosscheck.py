"""An independent runtime: torch.distributed.pipelining runs the same schedule on the same split.

Where PyTorch has the schedule (the registry's ``torch_class``: GPipe, 1F1B, interleaved 1F1B,
looped BFS, interleaved zero bubble, ZB-V, DualPipeV; ZB-H1 is its interleaved zero bubble with
one stage per rank), both runtimes train one step from the same weights on the same data: their
gradients must agree, and their wall-clock step times are measured here for
:mod:`validation.compare` to set beside the prediction.
"""

from __future__ import annotations

import time
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from executor import StepState, run_step, split_model
from pipesim.schedules import build, schedule_info, unsupported_reason
from pipesim.schedules.registry import torch_schedules
from validation.schema import CrosscheckMeasurement
from validation.suites import Case
from validation.workload import LOSS, make_batch, make_model

SINGLE_STAGE = {"ScheduleGPipe", "Schedule1F1B"}


def crosscheck(case: Case, rank: int, device: torch.device) -> list[CrosscheckMeasurement]:
    """Run each schedule PyTorch has at one M on both runtimes (all ranks call this), with the
    registry's default chunk count."""
    microbatches = _pick_microbatches(case)
    classes = torch_schedules()
    records = []
    for name in case.schedules:
        if name not in classes:
            continue
        class_name, chunks = classes[name], schedule_info(name).default_chunks
        if unsupported_reason(name, case.devices, microbatches, chunks) is not None:
            continue
        schedule = build(name, case.devices, microbatches, chunks)
        x, y = make_batch(case.model, microbatches, device)

        ours_model = make_model(case.model, device)
        ours = split_model(ours_model, schedule)
        ours_times = []
        state = StepState()
        for round_ in range(case.warmup + case.repeats):
            ours_model.zero_grad(set_to_none=False)
            dist.barrier()
            began = time.perf_counter()
            run_step(schedule, ours, x, y, LOSS, backend="distributed", step=round_, state=state)
            if round_ >= case.warmup:
                ours_times.append(time.perf_counter() - began)
        ours_model.zero_grad(set_to_none=True)
        run_step(schedule, ours, x, y, LOSS, backend="distributed")

        theirs_model = make_model(case.model, device)
        theirs = split_model(theirs_model, schedule)
        torch_times = _torch_steps(class_name, schedule, theirs, x, y, LOSS, rank, device, case)
        theirs_model.zero_grad(set_to_none=True)
        _torch_steps(class_name, schedule, theirs, x, y, LOSS, rank, device, case, rounds=1)

        worst = 0.0
        for s in schedule.stages_on(rank):
            for mine, other in zip(ours[s].parameters(), theirs[s].parameters(), strict=True):
                if mine.grad is None or other.grad is None:
                    continue
                scale = max(float(other.grad.abs().max()), 1e-30)
                worst = max(worst, float((mine.grad - other.grad).abs().max()) / scale)
        gathered: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(gathered, worst)
        records.append(
            CrosscheckMeasurement(
                schedule=name,
                torch_class=class_name,
                devices=case.devices,
                microbatches=microbatches,
                chunks=chunks,
                ours_wall_times_s=tuple(ours_times),
                torch_wall_times_s=tuple(torch_times),
                gradient_max_relative_error=max(gathered),
            )
        )
    return records


def _pick_microbatches(case: Case) -> int:
    """A middle micro-batch count of the case (PyTorch's V schedules want M >= 2K)."""
    candidates = [m for m in case.microbatches if m >= 2 * case.devices]
    return min(candidates) if candidates else max(case.microbatches)


def _torch_steps(
    class_name: str,
    schedule: Any,
    stages: list[nn.Module],
    x: torch.Tensor,
    y: torch.Tensor,
    loss_fn: nn.Module,
    rank: int,
    device: torch.device,
    case: Case,
    rounds: int | None = None,
) -> list[float]:
    """Build PyTorch's schedule for this rank's stages and time ``rounds`` steps."""
    from torch.distributed import pipelining

    mine = list(schedule.stages_on(rank))
    wrapped = [pipelining.PipelineStage(stages[s], s, schedule.stages, device) for s in mine]
    cls = getattr(pipelining, class_name)
    runner = cls(
        wrapped[0] if class_name in SINGLE_STAGE else wrapped,
        n_microbatches=schedule.microbatches,
        loss_fn=loss_fn,
    )
    times = []
    total = case.warmup + case.repeats if rounds is None else rounds
    for round_ in range(total):
        for s in mine:
            stages[s].zero_grad(set_to_none=False)
        dist.barrier()
        began = time.perf_counter()
        kwargs: dict[str, Any] = {}
        if schedule.stages - 1 in mine:
            kwargs = {"target": y, "losses": []}
        args = (x,) if 0 in mine else ()
        runner.step(*args, **kwargs)
        if rounds is None and round_ >= case.warmup:
            times.append(time.perf_counter() - began)
    return times
