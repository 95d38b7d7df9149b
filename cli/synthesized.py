"""``--schedule synth --memory-limit N [--placement looped|v] [-v V]``: a schedule synthesised
for the costs of the run (see :mod:`pipesim.synthesis.synthesis`), on ``simulate`` and on
``schedule show`` and ``export`` (which then take the costs as ``simulate`` does)."""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cli.schedule_source import require_shape
from pipesim.common.units import format_bytes
from pipesim.errors import PipesimError
from pipesim.synthesis.names import PLACEMENTS, SYNTH_NAME

if TYPE_CHECKING:  # the synthesis (and numpy) loads when a synthesis is asked for
    from pipesim.schedules.schedule import Schedule
    from pipesim.synthesis.synthesis import Synthesis


def add_memory_limit_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--memory-limit",
        type=int,
        default=None,
        metavar="N",
        help="with --schedule synth: at most N (stage, micro-batch) pairs in flight on any "
        "device (from an F's start to the end of its last backward); the fastest order found "
        "for the costs",
    )
    parser.add_argument(
        "--memory-limit-bytes",
        type=float,
        default=None,
        metavar="B",
        help="with --schedule synth, instead of --memory-limit: at most B bytes of activations "
        "on any device, each stage's stash as the costs give it (an I frees all but what its W "
        "keeps); the simulated peak activation memory never exceeds it",
    )
    parser.add_argument(
        "--placement",
        choices=PLACEMENTS,
        default=None,
        help="with --schedule synth: stages looped over the devices (-v per device, default "
        "1) or two per device in a V (ZB-V's; 1F1B's memory is then 2K pairs of half-size "
        "stages)",
    )


@dataclass(frozen=True)
class SynthesisAsk:
    """A synthesised schedule as the command line asked for it, its options checked against
    each other: the shape, the placement and the memory limit (pairs in flight, or bytes)."""

    devices: int
    microbatches: int
    chunks: int
    placement_name: str
    memory_limit: int | None
    memory_limit_bytes: float | None
    show_progress: bool

    def check(self, recompute: str | None, steps: int) -> None:
        """What the library refuses before any costs are built: recomputation a split
        backward cannot carry, more actions than the limits allow over ``steps``, a pair limit
        below what the placement needs."""
        from pipesim.synthesis.synthesis import check_pair_limit, check_synthesis_size

        if recompute is not None:
            from pipesim.parallel.config import Recompute
            from pipesim.request.cost_request import check_split_backward_recompute

            check_split_backward_recompute(SYNTH_NAME, Recompute.parse(recompute))
        # Its size before any costs are built: K, v, and 3·K·v·M actions over the steps.
        check_synthesis_size(self.devices, self.microbatches, steps, self.chunks)
        if self.memory_limit is not None:
            check_pair_limit(self.memory_limit, self.placement())

    def placement(self) -> tuple[int, ...]:
        """Each stage's device."""
        from pipesim.synthesis.synthesis import placement_of

        return placement_of(self.placement_name, self.devices, self.chunks)

    def shape(self) -> Schedule:
        """A registered schedule of the asked shape and placement (1F1B, looped BFS over -v
        chunks, or ZB-V): the costs are built for it (a model's memory-aware partition is
        chosen for its memory); the order itself is synthesised for those costs."""
        from pipesim.schedules import build

        if self.placement_name == "v":
            return build("zbv", self.devices, self.microbatches)
        if self.chunks == 1:
            return build("1f1b", self.devices, self.microbatches)
        return build("looped-bfs", self.devices, self.microbatches, self.chunks)

    def synthesize(self, costs: Any) -> Synthesis:
        """The synthesis for ``costs`` (built for :meth:`shape`), with a progress bar on a
        terminal."""
        from pipesim.common.progress import progress
        from pipesim.synthesis.synthesis import synthesis_steps, synthesize

        placement = self.placement()
        steps = synthesis_steps(placement, self.microbatches)
        with progress(steps, "synthesis", enabled=self.show_progress) as bar:
            return synthesize(
                costs,
                self.microbatches,
                self.memory_limit,
                memory_limit_bytes=self.memory_limit_bytes,
                placement=placement,
                progress=bar,
            )


def read_synthesis(args: argparse.Namespace) -> SynthesisAsk | None:
    """The synthesis the command asks for (None: a registered schedule or a file), its options
    checked against each other; a --memory-limit or --placement without it, or options
    synthesis does not take, are refused. Nothing is built yet (:meth:`SynthesisAsk.check`)."""
    asked = getattr(args, "schedule", None) == SYNTH_NAME
    given = (
        ("--memory-limit", args.memory_limit),
        ("--memory-limit-bytes", args.memory_limit_bytes),
        ("--placement", args.placement),
    )
    if not asked:
        for flag, value in given:
            if value is not None:
                shown = f"{value:g}" if isinstance(value, float) else value
                raise PipesimError(f"{flag} goes with --schedule {SYNTH_NAME}, got {shown}")
        return None
    if args.memory_limit is None and args.memory_limit_bytes is None:
        raise PipesimError(f"--schedule {SYNTH_NAME} needs --memory-limit N (micro-batches)")
    if args.memory_limit is not None and args.memory_limit_bytes is not None:
        raise PipesimError(
            f"--memory-limit-bytes {args.memory_limit_bytes:g}: give --memory-limit or "
            "--memory-limit-bytes, not both"
        )
    if args.memory_limit_bytes is not None and not (
        math.isfinite(args.memory_limit_bytes) and args.memory_limit_bytes > 0
    ):
        raise PipesimError(
            f"--memory-limit-bytes must be a finite number > 0, got {args.memory_limit_bytes:g}"
        )
    require_shape(args)
    if args.placement == "v" and args.chunks not in (None, 2):
        raise PipesimError(
            f"-v/--chunks: --placement v holds 2 stages per device, got {args.chunks}"
        )
    if args.remat:
        raise PipesimError(f"--remat: --schedule {SYNTH_NAME} splits backwards into I and W")
    if getattr(args, "update_rule", None) is not None:
        raise PipesimError(
            f"--update-rule {args.update_rule}: only for --schedule-file; --schedule "
            f"{SYNTH_NAME} flushes"
        )
    return SynthesisAsk(
        args.devices,
        args.microbatches,
        synthesis_chunks(args),
        args.placement or "looped",
        args.memory_limit,
        args.memory_limit_bytes,
        not getattr(args, "json", False),
    )


def wants_synthesis(args: argparse.Namespace) -> bool:
    """Whether the command asks for a synthesised schedule, checked whole
    (:func:`read_synthesis`, then :meth:`SynthesisAsk.check`)."""
    ask = read_synthesis(args)
    if ask is not None:
        ask.check(getattr(args, "recompute", None), getattr(args, "steps", 1))
    return ask is not None


def synthesis_chunks(args: argparse.Namespace) -> int:
    """v, the stages per device of the synthesis asked for."""
    if args.placement == "v":
        return 2
    return 1 if args.chunks is None else args.chunks


def synthesized_schedule(args: argparse.Namespace, request: Any) -> Synthesis:
    """The synthesis for ``schedule show|export``: the costs ``request`` builds (as
    ``simulate`` builds them) for the shape's registered order, one step, then the order
    synthesised for them."""
    ask = read_synthesis(args)
    assert ask is not None
    shape = ask.shape()
    costs = request.build(shape.devices, shape.chunks, shape.microbatches, shape, 1)
    return ask.synthesize(costs)


def synthesis_line(found: Synthesis) -> str:
    """One line saying what was synthesised and what it beat."""
    others = ", ".join(f"{name} {time_s:.6g} s" for name, time_s in found.candidates[1:4])
    if found.memory_limit_bytes is not None:
        limit = f"{format_bytes(found.memory_limit_bytes)} of activations"
    else:
        unit = "micro-batch(es)" if found.schedule.chunks == 1 else "(stage, micro-batch) pairs"
        limit = f"{found.memory_limit} {unit} in flight"
    return (
        f"synthesised for at most {limit} per device: "
        f"{found.chosen} won ({found.step_time_s:.6g} s; next: {others or 'none'})"
    )
