"""One pipeline stage at run time: its forward, full backward, input-gradient and
weight-gradient passes, and what each micro-batch keeps between them.

A stage computes with the weights it is given: by default its module's own parameters (the
gradients land in their ``.grad``), or a snapshot of older weights for the no-flush update rules
(:mod:`executor.trainer`), in which case the gradients land on the snapshot tensors.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch
from torch import nn
from torch.func import functional_call
from torch.utils.checkpoint import checkpoint

from executor.errors import StageError
from executor.split_backward import (
    WeightGradState,
    backward_full,
    backward_input,
    backward_weight,
)
from executor.stash import StashMeter

LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass
class _InFlight:
    """A micro-batch between its forward and the end of its backward."""

    input: torch.Tensor
    output: torch.Tensor  # the stage output, or the scaled loss on the last stage
    weight_state: WeightGradState | None = None


class StageRunner:
    """Runs one stage's passes for the micro-batches of a step.

    Args:
        index: the stage number (0 takes the input).
        module: the stage's layers.
        last: True for the last stage, which applies ``loss_fn`` (with copies of the model,
            each copy's last).
        first: True for a stage that takes the micro-batch's input, whose input needs no
            gradient (default: stage 0; with copies of the model, each copy's first).
        loss_fn: ``loss_fn(output, target)`` per micro-batch; the step minimizes the mean over
            micro-batches, so each micro-batch's loss is divided by ``microbatches``.
        microbatches: M.
        rematerialize: run the forward under ``torch.utils.checkpoint`` (only the input is kept;
            the backward re-runs the forward).
        weights: tensors to compute with instead of the module's parameters (by name).
        meter: counts the activation bytes the stage stashes.
    """

    def __init__(
        self,
        index: int,
        module: nn.Module,
        *,
        last: bool,
        loss_fn: LossFn,
        microbatches: int,
        rematerialize: bool = False,
        weights: Mapping[str, torch.Tensor] | None = None,
        meter: StashMeter | None = None,
        first: bool | None = None,
    ) -> None:
        self.index = index
        self.first = index == 0 if first is None else first
        self.module = module
        self.last = last
        self.loss_fn = loss_fn
        self.microbatches = microbatches
        self.rematerialize = rematerialize
        self.weights = dict(weights) if weights is not None else None
        self.meter = meter or StashMeter()
        used = self.weights.values() if self.weights is not None else module.parameters()
        self.params = [p for p in used if p.requires_grad]
        self.meter.exclude(self.params)
        self.meter.exclude(module.buffers())
        self.device = _module_device(module)
        self.losses: dict[int, torch.Tensor] = {}
        self._in_flight: dict[int, _InFlight] = {}

    # -- passes ----------------------------------------------------------------------------

    def forward(
        self, microbatch: int, x: torch.Tensor, target: torch.Tensor | None, split: bool
    ) -> torch.Tensor | None:
        """F: run the stage on ``x``; return the output to pass on (None on the last stage).

        ``split`` makes the input require a gradient even on the first stage, so that the
        input-gradient pass walks the stage (the weight-gradient pass starts from what it
        captured).
        """
        leaf = x.detach().to(self.device).requires_grad_(not self.first or split)
        with self._failing("forward", microbatch, leaf), self.meter.counting():
            output = (
                checkpoint(self._call, leaf, use_reentrant=False)
                if self.rematerialize
                else self._call(leaf)
            )
            if not isinstance(output, torch.Tensor):
                raise TypeError(
                    f"a stage must return one tensor, got {type(output).__name__} (the executor "
                    "passes a single tensor between stages)"
                )
            if self.last:
                if target is None:
                    raise ValueError("the last stage needs the micro-batch's targets")
                loss = self.loss_fn(output, target.to(output.device))
                output = loss / self.microbatches
                self.losses[microbatch] = output.detach()
        self._in_flight[microbatch] = _InFlight(leaf, output)
        return None if self.last else output.detach()

    def backward(
        self, microbatch: int, grad_output: torch.Tensor | None, split: bool
    ) -> torch.Tensor | None:
        """B (``split`` False) or I (``split`` True): return the gradient for the stage input
        (None on the first stage); B also accumulates the weight gradients, I keeps what W
        needs."""
        state = self._take(microbatch, "backward")
        grad = None if grad_output is None else grad_output.to(state.output.device)
        with self._failing("backward", microbatch, state.input):
            if split:
                grads, weight_state = backward_input(state.output, grad, state.input, self.params)
                # The graph lives on in the weight-gradient state only, until W.
                self._in_flight[microbatch] = _InFlight(
                    state.input, state.output.detach(), weight_state
                )
            else:
                grads = backward_full(state.output, grad, state.input, self.params)
        return None if self.first else grads[0]

    def weight(self, microbatch: int) -> None:
        """W: accumulate the weight gradients the input-gradient pass left for later."""
        state = self._take(microbatch, "weight gradient")
        if state.weight_state is None:
            raise StageError(
                f"stage {self.index} micro-batch {microbatch}: W without a preceding I"
            )
        with self._failing("weight gradient", microbatch, state.input):
            backward_weight(state.weight_state)

    def pending(self) -> list[int]:
        """Micro-batches whose backward has not finished (empty after a complete step)."""
        return sorted(self._in_flight)

    # -- helpers ---------------------------------------------------------------------------

    def _call(self, x: torch.Tensor) -> torch.Tensor:
        if self.weights is None:
            result: torch.Tensor = self.module(x)
            return result
        buffers = dict(self.module.named_buffers())
        called: torch.Tensor = functional_call(self.module, (self.weights, buffers), (x,))
        return called

    def _take(self, microbatch: int, what: str) -> _InFlight:
        state = self._in_flight.pop(microbatch, None)
        if state is None:
            raise StageError(
                f"stage {self.index} micro-batch {microbatch}: {what} without its forward"
            )
        return state

    def _failing(self, what: str, microbatch: int, x: torch.Tensor) -> _Reraise:
        return _Reraise(
            f"stage {self.index} {what} of micro-batch {microbatch} failed on an input of shape "
            f"{tuple(x.shape)}"
        )


class _Reraise:
    """Turns an exception inside a pass into a :class:`StageError` naming stage, micro-batch
    and input shape, with the original as its cause."""

    def __init__(self, message: str) -> None:
        self.message = message

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: object
    ) -> None:
        if error is not None and isinstance(error, Exception) and not isinstance(error, StageError):
            raise StageError(f"{self.message}: {type(error).__name__}: {error}") from error


def _module_device(module: nn.Module) -> torch.device:
    for tensor in (*module.parameters(), *module.buffers()):
        return tensor.device
    return torch.device("cpu")
