"""Training over several steps with the schedule's weight-update rule.

* flush: each step's gradients are those of the current weights; the optimizer then steps.
* 2bw (PipeDream-2BW): the step computes with the previous weight version and updates the
  current one, W(t+1) = W(t) - lr·grad f(W(t-1)); two versions are kept.
* async (PipeDream's weight stashing): device d computes with its weights as they were
  K-1-d steps ago, the staleness its 1F1B position gives it, and updates the current ones;
  K-d versions are kept on device d.

A stale version is a detached copy of the stage's parameters, run through
``torch.func.functional_call``; its gradients are moved onto the live parameters before the
optimizer steps, so any ``torch.optim`` optimizer works.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Sequence

import torch
from torch import nn

from executor.backends import Backend, parse_backend
from executor.runtime import StepResult, StepState, check_stages
from executor.stage import LossFn
from executor.step import run_step
from pipesim.schedules import Schedule

OptimizerFactory = Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer]


class PipelineTrainer:
    """Steps a pipelined model: ``trainer.step(inputs, targets)`` per mini-batch.

    Args:
        schedule: what to run, with its update rule.
        stages: one module per stage (see :func:`executor.split_model`).
        loss_fn: per micro-batch; the step minimizes the mean over micro-batches.
        optimizer: builds one optimizer per stage from its parameters (default SGD, lr 0.1).
        backend: ``Backend.LOCAL`` or ``Backend.DISTRIBUTED`` (then only this rank's stages
            are stepped), or its name.
        timeout_s: bound on each wait for a peer (distributed).
        check_finite: check every action's outputs for NaN and Inf and stop the step at the
            first (a :class:`~executor.errors.NonFiniteError` naming the action), before a
            non-finite gradient reaches the weights. On by default.
    """

    def __init__(
        self,
        schedule: Schedule,
        stages: Sequence[nn.Module],
        loss_fn: LossFn,
        optimizer: OptimizerFactory | None = None,
        backend: Backend | str = Backend.LOCAL,
        timeout_s: float = 60.0,
        check_finite: bool = True,
    ) -> None:
        check_stages(schedule, stages)
        self.schedule = schedule
        self.stages = list(stages)
        self.loss_fn = loss_fn
        self.backend = parse_backend(backend)
        self.timeout_s = timeout_s
        self.check_finite = check_finite
        make = optimizer or (lambda params: torch.optim.SGD(params, lr=0.1))
        self.owned = self._owned_stages()
        self.optimizers = {s: make(self.stages[s].parameters()) for s in self.owned}
        self.history: dict[int, deque[dict[str, torch.Tensor]]] = {
            s: deque(maxlen=schedule.weight_staleness_steps(schedule.device_of(s)) + 1)
            for s in self.owned
        }
        self.steps_done = 0
        self._state = StepState()

    def _owned_stages(self) -> list[int]:
        if self.backend is not Backend.DISTRIBUTED:
            return list(range(self.schedule.stages))
        import torch.distributed as dist

        return list(self.schedule.stages_on(dist.get_rank()))

    def step(self, inputs: torch.Tensor, targets: torch.Tensor) -> StepResult:
        """One optimizer step on one mini-batch; returns what the step measured."""
        weights: dict[int, dict[str, torch.Tensor]] = {}
        for s in self.owned:
            live = dict(self.stages[s].named_parameters())
            history = self.history[s]
            if history.maxlen == 1:
                continue  # flush: compute with the live weights
            history.append({n: p.detach().clone().requires_grad_(True) for n, p in live.items()})
            weights[s] = history[0]
        for s in self.owned:
            self.optimizers[s].zero_grad(set_to_none=True)
        result = self._run(inputs, targets, weights or None)
        for s, version in weights.items():
            for name, parameter in self.stages[s].named_parameters():
                stale = version[name]
                parameter.grad = None if stale.grad is None else stale.grad.clone()
                stale.grad = None
        for s in self.owned:
            self.optimizers[s].step()
        self.steps_done += 1
        return result

    def _run(
        self,
        inputs: torch.Tensor,
        targets: torch.Tensor,
        weights: dict[int, dict[str, torch.Tensor]] | None,
    ) -> StepResult:
        return run_step(
            self.schedule,
            self.stages,
            inputs,
            targets,
            self.loss_fn,
            self.backend,
            weights=weights,
            step=self.steps_done,
            timeout_s=self.timeout_s,
            state=self._state,
            check_finite=self.check_finite,
        )
