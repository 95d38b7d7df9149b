"""``run_step``: one training step of a schedule, dispatched to a backend.

The backends live in :mod:`executor.local`, :mod:`executor.concurrent` and
:mod:`executor.distributed`; what they share
(the result, the state kept across steps, the stage runners) in :mod:`executor.runtime`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import nn

from executor.backends import Backend, parse_backend
from executor.concurrent import run_concurrent_step
from executor.distributed import run_distributed_step
from executor.errors import BackendError
from executor.lanes import Lanes
from executor.local import run_local_step
from executor.runtime import StepResult, StepState, check_stages
from executor.split import split_microbatches
from executor.stage import LossFn
from pipesim.schedules import Schedule


def run_step(
    schedule: Schedule,
    stages: Sequence[nn.Module],
    inputs: torch.Tensor,
    targets: torch.Tensor,
    loss_fn: LossFn,
    backend: Backend | str = Backend.LOCAL,
    *,
    weights: Mapping[int, Mapping[str, torch.Tensor]] | None = None,
    step: int = 0,
    timeout_s: float = 60.0,
    state: StepState | None = None,
    check_finite: bool = False,
    lanes: Lanes | None = None,
    reduce_copies: bool = True,
) -> StepResult:
    """One training step of ``schedule`` over ``stages`` (one module per stage).

    The mini-batch is split into M equal micro-batches along dimension 0. Afterwards every
    stage parameter's ``.grad`` holds the gradient of ``(1/M)·Σ_m loss_fn(model(x_m), y_m)``
    (added to what was there). ``Backend.LOCAL`` runs every device in this process, in an
    order that respects each device's list and every dependency (stages may sit on different
    CUDA devices); ``Backend.CONCURRENT`` runs every device as a lane of this machine, all at
    once (threads on CPU, green-context streams on one GPU: ``lanes``, see
    :mod:`executor.lanes`; by default an equal share of the machine per lane);
    ``Backend.DISTRIBUTED`` runs this process's device (its torch.distributed rank) and
    exchanges tensors with the other ranks point to point. The backend may also be given by
    its name (``"local"``, ``"concurrent"``, ``"distributed"``).

    ``weights`` maps a stage to the tensors it computes with instead of its parameters (the
    gradients then land on those tensors). ``timeout_s`` bounds each wait for a peer.
    ``state`` carries what consecutive steps share (see :class:`StepState`).
    ``check_finite`` checks every action's outputs and raises a
    :class:`~executor.errors.NonFiniteError` naming the first action that produced NaN or Inf
    (see :mod:`executor.nonfinite`; off by default here, where steps are timed).

    A schedule whose stages hold copies of the model (DualPipe: ``schedule.copies``, one
    module per stage of every copy, as :func:`~executor.split_model` makes them) runs each
    micro-batch through its own copy; after its actions each copy's gradients are summed
    with the other copies' of the same model stage (the all-reduce DualPipe runs before the
    optimizer step), so every copy's ``.grad`` gains the whole step's gradient and the copies
    stay identical. ``reduce_copies=False`` leaves each copy with its own micro-batches'
    gradients (their sum is then the step's).
    """
    check_stages(schedule, stages)
    chosen = parse_backend(backend)
    xs = split_microbatches(inputs, schedule.microbatches, "inputs")
    ys = split_microbatches(targets, schedule.microbatches, "targets")
    if lanes is not None and chosen is not Backend.CONCURRENT:
        raise BackendError(f"lanes go with the concurrent backend, not with {chosen.value}")
    if chosen is Backend.DISTRIBUTED:
        return run_distributed_step(
            schedule,
            stages,
            xs,
            ys,
            loss_fn,
            weights=weights,
            step=step,
            timeout_s=timeout_s,
            book=None if state is None else state.shapes,
            check_finite=check_finite,
            reduce_copies=reduce_copies,
        )
    if chosen is Backend.CONCURRENT:
        return run_concurrent_step(
            schedule,
            stages,
            xs,
            ys,
            loss_fn,
            lanes=lanes,
            weights=weights,
            step=step,
            timeout_s=timeout_s,
            check_finite=check_finite,
            reduce_copies=reduce_copies,
        )
    return run_local_step(
        schedule,
        stages,
        xs,
        ys,
        loss_fn,
        weights=weights,
        step=step,
        check_finite=check_finite,
        reduce_copies=reduce_copies,
    )
