"""Copies of the model (DualPipe): their gradients summed at the end of a step.

A schedule whose stages hold C copies of the model (``Schedule.copies``) runs each micro-batch
through one copy, so after its actions each copy's stage holds the gradient of its own
micro-batches only. DualPipe sums the copies' gradients of each model stage across the devices
that hold them before the optimizer step (an all-reduce), so every copy holds the whole step's
gradient and the copies stay identical after the step. Here a step adds to every copy's
``.grad`` the sum over copies of what the step computed (the gradients there before the step
are kept: they are what the caller accumulated).

In one process (the local and concurrent backends) the sum is taken directly; over
torch.distributed every rank joins one all-reduce of a buffer laid out by model stage, each
rank filling the parts of the stages it holds (a simple layout, the whole model's gradients on
every rank: the executor's backends check and measure, they do not optimize this).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import torch
from torch import nn

from executor.stage import StageRunner
from pipesim.schedules import Schedule

Before = dict[int, list[torch.Tensor | None]]


def last_stages(schedule: Schedule) -> list[int]:
    """The stages that compute a loss (each copy's last), in copy order."""
    return [schedule.stages_of_copy(c)[-1] for c in range(schedule.copies)]


def step_loss(schedule: Schedule, runners: Mapping[int, StageRunner]) -> float | None:
    """The step's loss over the losses the given runners computed (None when none of the
    last stages is among them): the micro-batches' scaled losses, copy by copy."""
    found = [s for s in last_stages(schedule) if s in runners]
    if not found:
        return None
    return sum(float(value) for s in found for value in runners[s].losses.values())


def gradients_before(schedule: Schedule, runners: Mapping[int, StageRunner]) -> Before:
    """Each runner's gradients as the step starts (copies only; empty for one copy)."""
    if schedule.copies == 1:
        return {}
    return {
        s: [None if p.grad is None else p.grad.detach().clone() for p in runner.params]
        for s, runner in runners.items()
    }


def _delta(parameter: torch.Tensor, before: torch.Tensor | None) -> torch.Tensor | None:
    """What the step added to ``parameter``'s gradient."""
    if parameter.grad is None:
        return None
    return parameter.grad.detach() if before is None else parameter.grad.detach() - before


def _set(parameter: torch.Tensor, before: torch.Tensor | None, total: torch.Tensor) -> None:
    added = total.to(device=parameter.device, dtype=parameter.dtype)
    parameter.grad = added.clone() if before is None else before + added


def sum_in_process(schedule: Schedule, runners: Mapping[int, StageRunner], before: Before) -> None:
    """Every copy's gradients plus the other copies' (all runners in this process)."""
    if schedule.copies == 1:
        return
    for model_stage in range(schedule.model_stages):
        held = [model_stage + c * schedule.model_stages for c in range(schedule.copies)]
        params = [runners[s].params for s in held]
        for k in range(len(params[0])):
            deltas = [_delta(params[c][k], before[s][k]) for c, s in enumerate(held)]
            present = [d for d in deltas if d is not None]
            if not present:
                continue
            total = present[0].clone()
            for delta in present[1:]:
                total += delta.to(total.device)
            for c, s in enumerate(held):
                _set(params[c][k], before[s][k], total)


def sum_across_ranks(
    schedule: Schedule,
    stages: Sequence[nn.Module],
    runners: Mapping[int, StageRunner],
    before: Before,
    device: torch.device,
    all_reduce: Callable[[torch.Tensor], None],
) -> None:
    """Every copy's gradients plus the other copies', this rank's runners being some of them:
    ``all_reduce`` sums a buffer over every rank in place (each calls it once, whatever it
    holds). The buffer holds, model stage by model stage (sized by ``stages``, copy 0's
    modules), each parameter's flag (1 where a copy computed a gradient) and values."""
    if schedule.copies == 1:
        return
    layout: list[list[int]] = [
        [p.numel() for p in stages[j].parameters() if p.requires_grad]
        for j in range(schedule.model_stages)
    ]
    offsets: list[list[int]] = []
    cursor = 0
    for sizes in layout:
        starts = []
        for size in sizes:
            starts.append(cursor)
            cursor += 1 + size
        offsets.append(starts)
    buffer = torch.zeros(cursor, dtype=torch.float64, device=device)
    for s, runner in runners.items():
        starts = offsets[schedule.model_stage(s)]
        for k, parameter in enumerate(runner.params):
            delta = _delta(parameter, before[s][k])
            if delta is None:
                continue
            start = starts[k]
            buffer[start] += 1.0
            buffer[start + 1 : start + 1 + delta.numel()] += delta.reshape(-1).to(buffer)
    all_reduce(buffer)
    for s, runner in runners.items():
        starts = offsets[schedule.model_stage(s)]
        for k, parameter in enumerate(runner.params):
            start = starts[k]
            if float(buffer[start]) == 0.0:
                continue
            total = buffer[start + 1 : start + 1 + parameter.numel()].reshape(parameter.shape)
            _set(parameter, before[s][k], total)
