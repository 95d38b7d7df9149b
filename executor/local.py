"""The local backend: every device of a step in this process, in dependency order."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import nn

from executor.clock import Clock
from executor.copies import gradients_before, step_loss, sum_in_process
from executor.runtime import LocalTransport, StepResult, make_runners, timeline_from
from executor.stage import LossFn
from executor.stash import StashMeter
from executor.worker import DeviceRecord, DeviceWorker
from pipesim.schedules import Schedule


def run_local_step(
    schedule: Schedule,
    stages: Sequence[nn.Module],
    xs: Sequence[torch.Tensor],
    ys: Sequence[torch.Tensor],
    loss_fn: LossFn,
    *,
    weights: Mapping[int, Mapping[str, torch.Tensor]] | None = None,
    step: int = 0,
    check_finite: bool = False,
    reduce_copies: bool = True,
) -> StepResult:
    """Every device's actions in one process, in an order that respects each device's list
    and every dependency (stages may sit on different CUDA devices); then, with copies of
    the model and ``reduce_copies``, their gradients summed (:mod:`executor.copies`)."""
    meters = {d: StashMeter() for d in range(schedule.devices)}
    runners = make_runners(schedule, stages, loss_fn, None, weights, meters)
    before = gradients_before(schedule, runners) if reduce_copies else {}
    transport = LocalTransport()
    origin = Clock(torch.device("cpu")).origin_ns
    workers = []
    for device in range(schedule.devices):
        own = {s: r for s, r in runners.items() if schedule.device_of(s) == device}
        clock_device = next(iter(own.values())).device
        record = DeviceRecord(device, Clock(clock_device, origin))
        workers.append(
            DeviceWorker(
                device, schedule, own, transport, record, step, xs, ys, check_finite=check_finite
            )
        )
    for action in schedule.execution_order():
        workers[schedule.device_of(action.stage)].run(action)
    if reduce_copies:
        sum_in_process(schedule, runners, before)
    loss = step_loss(schedule, runners) or 0.0
    timeline = timeline_from([w.record for w in workers], schedule)
    cuda_peaks = tuple(
        torch.cuda.max_memory_allocated(w.record.clock.device)
        if w.record.clock.device.type == "cuda"
        else None
        for w in workers
    )
    return StepResult(
        loss,
        timeline,
        tuple(meters[d].peak_bytes for d in range(schedule.devices)),
        cuda_peaks,
    )
