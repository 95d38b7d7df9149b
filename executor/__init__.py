"""Runs pipesim schedules for real on PyTorch (CPU/gloo, CUDA/NCCL, or K lanes of one machine)
and times every action.

>>> import torch
>>> from torch import nn
>>> from pipesim.schedules import build
>>> from executor import split_model, run_step
>>> model = nn.Sequential(*(nn.Linear(4, 4) for _ in range(4)))
>>> schedule = build("1f1b", devices=2, microbatches=4)
>>> stages = split_model(model, schedule)
>>> result = run_step(schedule, stages, torch.randn(8, 4), torch.randn(8, 4), nn.MSELoss())
>>> len(result.timeline.compute)
16

The executor is the only package besides ``validation`` that imports torch. Importing this
package does not: its public names are loaded on first use, so ``python -m executor`` can say
in one line that torch is missing, and :mod:`executor.backends` and :mod:`executor.errors`
work without it.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

from executor.backends import Backend, DeviceKind
from executor.errors import (
    BackendError,
    ExecutorError,
    LimitError,
    NonFiniteError,
    PeerError,
    SplitError,
    StageError,
)

if TYPE_CHECKING:
    from executor.lanes import cpu_lanes, cuda_lanes
    from executor.runtime import StepResult, StepState
    from executor.split import split_microbatches, split_model
    from executor.step import run_step
    from executor.trainer import PipelineTrainer

_LAZY = {
    "PipelineTrainer": "executor.trainer",
    "StepResult": "executor.runtime",
    "StepState": "executor.runtime",
    "cpu_lanes": "executor.lanes",
    "cuda_lanes": "executor.lanes",
    "run_step": "executor.step",
    "split_microbatches": "executor.split",
    "split_model": "executor.split",
}

__all__ = [
    "Backend",
    "BackendError",
    "DeviceKind",
    "ExecutorError",
    "LimitError",
    "NonFiniteError",
    "PeerError",
    "PipelineTrainer",
    "SplitError",
    "StageError",
    "StepResult",
    "StepState",
    "cpu_lanes",
    "cuda_lanes",
    "run_step",
    "split_microbatches",
    "split_model",
]


def __getattr__(name: str) -> object:
    """Load the torch-backed public names on first use."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'executor' has no attribute {name!r}")
    return getattr(import_module(module), name)
