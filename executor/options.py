"""The launcher's command line, and the checks that run before torch is even imported: the
options' values, and an estimate of the memory a run would take against a documented limit.

Nothing here imports torch, so ``python -m executor --help`` and every refusal of bad input
work on a machine without it.
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass

from application.command_line import ArgumentParser, positive_int
from executor.backends import DeviceKind
from executor.errors import LimitError
from pipesim.common.limits import Limit, cpu_count, limit
from pipesim.errors import PipesimError

PROG = "python -m executor"
DEFAULT_MAX_MEMORY_GIB = 16.0
TRANSFORMER_HEADS = 4
TRANSFORMER_SEQUENCE = 16
# What one process holds besides the activations, in copies of the model's parameters: the
# model, the unpipelined reference copy and the gradients of each (--check fills both).
PARAMETER_COPIES = 4


def under_torchrun() -> bool:
    """True when torchrun (or another launcher setting ``WORLD_SIZE``) started this process."""
    return "WORLD_SIZE" in os.environ


@dataclass(frozen=True)
class RankPlace:
    """Where this process stands under torchrun: the world's size, its rank and its rank on
    this host, read from the variables torchrun sets."""

    world_size: int
    rank: int
    local_rank: int


def rank_place(environ: Mapping[str, str] | None = None) -> RankPlace | None:
    """None when not under torchrun; else the rank's place, every variable the rendezvous
    reads checked first (``WORLD_SIZE=two`` or no ``MASTER_ADDR`` is one line, not a
    traceback from inside torch.distributed)."""
    env = os.environ if environ is None else environ
    if "WORLD_SIZE" not in env:
        return None
    world = _whole(env, "WORLD_SIZE", 1, limit(Limit.DEVICES))
    rank = _whole(env, "RANK", 0, world - 1)
    local = _whole(env, "LOCAL_RANK", 0, world - 1, default=rank)
    for name in ("MASTER_ADDR", "MASTER_PORT"):
        if not env.get(name, "").strip():
            raise PipesimError(
                f"{name} is not set: with WORLD_SIZE={world} the ranks meet at MASTER_ADDR:"
                "MASTER_PORT (torchrun sets both; unset WORLD_SIZE to run without it)"
            )
    _whole(env, "MASTER_PORT", 1, 65535)
    return RankPlace(world, rank, local)


def _whole(
    env: Mapping[str, str], name: str, low: int, high: int, default: int | None = None
) -> int:
    text = env.get(name)
    if text is None and default is not None:
        return default
    try:
        value = int((text or "").strip())
    except ValueError:
        value = low - 1
    if not low <= value <= high:
        raise PipesimError(
            f"{name} must be a whole number from {low} to {high}, got {text!r} (set by "
            "torchrun; unset WORLD_SIZE to run without it)"
        )
    return value


def check_options(args: argparse.Namespace) -> None:
    """The checks that need no torch: the model's shape and the threads asked for (torch
    crashes the process on more threads than it can start)."""
    if args.model == "transformer" and args.width % TRANSFORMER_HEADS:
        raise PipesimError(
            f"--width {args.width}: the transformer's {TRANSFORMER_HEADS} attention heads must "
            f"divide it; use a multiple of {TRANSFORMER_HEADS}"
        )
    cpus = cpu_count()
    if args.threads is not None and args.threads > cpus:
        raise PipesimError(
            f"--threads {args.threads}: more than the {cpus} CPUs this process may run on"
        )


def positive_float(text: str) -> float:
    """argparse type: a finite number > 0 (no NaN, no infinity)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"expected a finite number > 0, got {text!r}")
    return value


def parser() -> ArgumentParser:
    """The launcher's options."""
    parser = ArgumentParser(
        prog=PROG,
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
    parser.add_argument("--device", choices=[d.value for d in DeviceKind], default="cpu")
    parser.add_argument(
        "--threads", type=positive_int, metavar="N", help="torch threads per process"
    )
    parser.add_argument(
        "--timeout",
        type=positive_float,
        default=60.0,
        metavar="S",
        help="seconds to wait for a peer before failing (default 60)",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="compare the first step's gradients with the unpipelined model",
    )
    parser.add_argument(
        "--no-check-finite",
        dest="check_finite",
        action="store_false",
        help="do not check each action's outputs for NaN and Inf (checked by default)",
    )
    parser.add_argument(
        "--max-memory-gib",
        type=positive_float,
        default=DEFAULT_MAX_MEMORY_GIB,
        metavar="GIB",
        help="refuse runs whose estimated memory per process exceeds this "
        f"(default {DEFAULT_MAX_MEMORY_GIB:g})",
    )
    parser.add_argument("--trace", metavar="FILE", help="Chrome/Perfetto trace of the last step")
    parser.add_argument("--json", action="store_true", help="print per-step results as JSON")
    return parser


@dataclass(frozen=True)
class MemoryEstimate:
    """What one launcher process holds, in bytes (an upper bound: every micro-batch's
    activations counted as if all were in flight)."""

    parameter_bytes: int
    activation_bytes: int

    @property
    def total_bytes(self) -> int:
        """Parameters in all their copies, and activations."""
        return PARAMETER_COPIES * self.parameter_bytes + self.activation_bytes


def estimate_memory(
    model: str, width: int, layers: int, rows: int, element_bytes: int
) -> MemoryEstimate:
    """The launcher's model of ``layers`` layers of ``width`` on a mini-batch of ``rows``.

    An MLP layer is a width x width linear with its bias and saves two tensors of the batch
    per layer; a transformer block has 12·h² + 13·h parameters and saves about 16 tensors of
    the batch's width and the attention scores (heads x sequence²) per sequence.
    """
    if model == "transformer":
        per_layer = 12 * width * width + 13 * width
        saved = (
            rows * TRANSFORMER_SEQUENCE * (16 * width + TRANSFORMER_HEADS * TRANSFORMER_SEQUENCE)
        )
    else:
        per_layer = width * width + width
        saved = rows * 2 * width
    return MemoryEstimate(
        parameter_bytes=layers * per_layer * element_bytes,
        activation_bytes=layers * saved * element_bytes,
    )


def check_memory(args: argparse.Namespace, layers: int, rows: int, element_bytes: int) -> None:
    """Refuse a run whose estimate exceeds ``--max-memory-gib``, saying how to raise it."""
    estimate = estimate_memory(args.model, args.width, layers, rows, element_bytes)
    limit = args.max_memory_gib * 2**30
    if estimate.total_bytes > limit:
        raise LimitError(
            f"--width {args.width} with {layers} layers and {rows} rows per step needs about "
            f"{_gib(estimate.total_bytes)} per process (model, reference copy and gradients "
            f"{_gib(PARAMETER_COPIES * estimate.parameter_bytes)}, activations "
            f"{_gib(estimate.activation_bytes)}), over the limit of {args.max_memory_gib:g} "
            "GiB; raise it with --max-memory-gib"
        )


def _gib(count: int) -> str:
    return f"{count / 2**30:.3g} GiB"
