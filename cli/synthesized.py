"""``--schedule synth --memory-limit N``: a schedule synthesised for the costs of the run (see
:mod:`pipesim.schedules.synthesis`), on ``simulate`` and on ``schedule show`` and ``export``
(which then take the costs as ``simulate`` does)."""

from __future__ import annotations

import argparse
from typing import Any

from cli.schedule_source import require_shape
from pipesim.errors import PipesimError
from pipesim.schedules.synthesis import SYNTH_NAME, Synthesis, check_synthesis_size


def add_memory_limit_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--memory-limit",
        type=int,
        default=None,
        metavar="N",
        help="with --schedule synth: at most N micro-batches in flight on any device (from an "
        "F's start to the end of its last backward); the fastest order found for the costs",
    )


def wants_synthesis(args: argparse.Namespace) -> bool:
    """Whether the command asks for a synthesised schedule; a --memory-limit without it, or
    options synthesis does not take, are refused."""
    asked = getattr(args, "schedule", None) == SYNTH_NAME
    if not asked:
        if args.memory_limit is not None:
            raise PipesimError(
                f"--memory-limit goes with --schedule {SYNTH_NAME}, got {args.memory_limit}"
            )
        return False
    if args.memory_limit is None:
        raise PipesimError(f"--schedule {SYNTH_NAME} needs --memory-limit N (micro-batches)")
    if args.memory_limit < 1:
        raise PipesimError(f"--memory-limit must be an integer >= 1, got {args.memory_limit}")
    require_shape(args)
    if args.chunks not in (None, 1):
        raise PipesimError(
            f"-v/--chunks: --schedule {SYNTH_NAME} places one stage per device, got {args.chunks}"
        )
    if args.remat:
        raise PipesimError(f"--remat: --schedule {SYNTH_NAME} splits backwards into I and W")
    if getattr(args, "update_rule", None) is not None:
        raise PipesimError(
            f"--update-rule {args.update_rule}: only for --schedule-file; --schedule "
            f"{SYNTH_NAME} flushes"
        )
    # Its size before any costs are built: K, and 3·K·M actions over the steps.
    check_synthesis_size(args.devices, args.microbatches, getattr(args, "steps", 1))
    return True


def synthesized_schedule(args: argparse.Namespace, request: Any) -> Synthesis:
    """The synthesis for ``schedule show|export``: the costs ``request`` builds (as
    ``simulate`` builds them) for 1F1B's order of the shape, one step, then the order
    synthesised for them."""
    from pipesim.schedules import build
    from pipesim.schedules.synthesis import synthesize

    shape = build("1f1b", args.devices, args.microbatches)
    costs = request.build(shape.devices, 1, shape.microbatches, shape, 1)
    return synthesize(costs, args.microbatches, args.memory_limit)


def synthesis_line(found: Synthesis) -> str:
    """One line saying what was synthesised and what it beat."""
    others = ", ".join(f"{name} {time_s:.6g} s" for name, time_s in found.candidates[1:4])
    return (
        f"synthesised for at most {found.memory_limit} micro-batch(es) in flight per device: "
        f"{found.chosen} won ({found.step_time_s:.6g} s; next: {others or 'none'})"
    )
