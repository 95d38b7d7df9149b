"""``pipesim partition``: cut a model (or a list of layer times) into pipeline stages, exactly."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from application.command_line import EXIT_OK
from cli.commands import command_summary
from pipesim.common.limits import Limit, check
from pipesim.common.units import format_bytes, format_seconds
from pipesim.errors import PipesimError, shown
from pipesim.files.strict_json import write_json


def register(subparsers: Any) -> None:
    """Add ``partition``."""
    parser = subparsers.add_parser(
        "partition",
        help=command_summary("partition"),
        description=(
            "Cut a model's layers into K·v contiguous stages: balanced (the least slowest-stage "
            "time per micro-batch, F+B plus the boundary transfers on the actual links) or "
            "memory-aware (the fastest whose every device fits its memory under the schedule). "
            "--costs takes a plain list of per-layer times instead of a model. Memory per stage "
            "is its device's peak under --schedule; without one, the stage's weights, gradients, "
            "optimizer state and one micro-batch's activations. The micro-batch is --batch / -M "
            "(-M defaults to K)."
        ),
    )
    parser.add_argument("--model", metavar="NAME|FILE", help="a model (pipesim models list)")
    parser.add_argument(
        "--hardware",
        metavar="NAME|FILE[,...]",
        help="a hardware spec or TOML; or one per device (K of them) for a mixed cluster: each "
        "device computes on its own accelerator and holds its own memory, the first one's "
        "links join them",
    )
    parser.add_argument(
        "--costs", metavar="T1,T2,...", help="per-layer times in seconds instead of a model"
    )
    parser.add_argument("-K", "--devices", type=int, required=True, metavar="N", help="devices")
    parser.add_argument(
        "-v", "--chunks", type=int, default=None, metavar="N", help="stages per device"
    )
    parser.add_argument("--schedule", metavar="NAME", help="schedule (placement and memory)")
    parser.add_argument("-M", "--microbatches", type=int, metavar="N", help="micro-batches")
    parser.add_argument(
        "--batch", type=int, metavar="N", help="samples per step (default: the model's)"
    )
    parser.add_argument("--remat", action="store_true", help="re-materialization")
    parser.add_argument(
        "--objective",
        choices=["balanced", "memory-aware"],
        default="balanced",
        help="what to optimize (default balanced)",
    )
    parser.add_argument("--optimizer", metavar="NAME|BYTES", help="optimizer state per parameter")
    parser.add_argument(
        "--master-weights",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="fp32 master weights (default: when weights are narrower than fp32)",
    )
    parser.add_argument(
        "--device-speeds",
        metavar="S0,S1,...",
        help="heterogeneous devices: each device's speed relative to the hardware's (2 = twice "
        "as fast), one per device",
    )
    parser.add_argument(
        "--device-memory",
        metavar="B0,B1,...",
        help="heterogeneous devices: each device's memory in bytes, one per device",
    )
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.set_defaults(handler=_partition)


def _partition(args: argparse.Namespace) -> int:
    from pipesim.parallel.placement import looped
    from pipesim.partition import balanced, memory_aware, memory_forms
    from pipesim.partition.report import memory_steps, partition_report

    if args.devices < 1:
        raise PipesimError(f"-K/--devices must be an integer >= 1, got {args.devices}")
    if (args.costs is None) == (args.model is None):
        raise PipesimError("give either --model NAME with --hardware NAME or --costs T1,T2,...")
    schedule = _schedule(args)
    chunks = schedule.chunks if schedule is not None else _given(args.chunks, 1)
    if chunks < 1:
        raise PipesimError(f"-v/--chunks must be an integer >= 1, got {chunks}")
    check(Limit.DEVICES, args.devices, f"-K {args.devices:,}")
    check(Limit.CHUNKS, chunks, f"-v {chunks:,}")
    placement = (
        schedule.placement[: schedule.model_stages]
        if schedule is not None
        else looped(args.devices, chunks)
    )
    if args.objective == "memory-aware" and (schedule is None or args.costs is not None):
        raise PipesimError(
            "--objective memory-aware needs --model, --hardware and --schedule NAME with -M "
            "(the peak depends on the schedule)"
        )
    names: list[str]
    if args.costs is not None:
        problem, names = _costs_problem(args.costs, placement), []
    else:
        problem, names = _model_problem(args, placement)
    problem = _heterogeneous(problem, args)
    found = (
        memory_aware(problem, memory_forms(schedule, memory_steps(schedule)))
        if args.objective == "memory-aware" and schedule is not None
        else balanced(problem)
    )
    payload = partition_report(
        problem, found, schedule, objective=args.objective, devices=args.devices, chunks=chunks
    )
    if args.json:
        write_json(payload)
        return EXIT_OK
    sys.stdout.write(_table(payload, names))
    return EXIT_OK


def _given(value: int | None, default: int) -> int:
    """An option's value, or ``default`` where it was not given (a given 0 stays 0, to be
    refused, not read as absent)."""
    return default if value is None else value


# Relative speeds far outside this range only overflow the stage times (a layer taking 1e308 s).
SPEED_RANGE = (1e-6, 1e6)


def _per_device(
    text: str | None, field: str, devices: int, bounds: tuple[float, float] | None = None
) -> tuple[float, ...] | None:
    if text is None:
        return None
    try:
        values = tuple(float(v) for v in text.split(","))
    except ValueError:
        values = ()
    low, high = bounds or (0.0, float("inf"))
    if len(values) != devices or any(
        not (0 < v < float("inf") and low <= v <= high) for v in values
    ):
        within = f" between {low:g} and {high:g}" if bounds else ""
        raise PipesimError(
            f"{field} must be {devices} positive numbers{within} (one per device), got {text!r}"
        )
    return values


def _heterogeneous(problem: Any, args: argparse.Namespace) -> Any:
    """``problem`` with the per-device speeds and memories the options give."""
    import dataclasses

    speeds = _per_device(args.device_speeds, "--device-speeds", args.devices, SPEED_RANGE)
    memory = _per_device(args.device_memory, "--device-memory", args.devices)
    if speeds is None and memory is None:
        return problem
    return dataclasses.replace(
        problem,
        device_speeds=speeds or problem.device_speeds,
        memory_capacity_bytes=memory or problem.memory_capacity_bytes,
    )


def _schedule(args: argparse.Namespace) -> Any:
    from pipesim.schedules import build

    if args.schedule is None:
        if args.microbatches is not None and args.model is None:
            raise PipesimError("-M goes with --schedule")
        return None
    if args.microbatches is None:
        raise PipesimError(f"-M/--microbatches is required with --schedule {args.schedule}")
    return build(args.schedule, args.devices, args.microbatches, args.chunks, remat=args.remat)


def _costs_problem(text: str, placement: tuple[int, ...]) -> Any:
    from pipesim.costs.pipeline_costs import StageCosts
    from pipesim.partition import PartitionProblem

    try:
        times = [float(t) for t in text.split(",")]
    except ValueError:
        times = []
    if not times or any(not t >= 0 or t == float("inf") for t in times):
        raise PipesimError(f"--costs must be per-layer seconds >= 0, e.g. 1,2,3, got {shown(text)}")
    check(Limit.LAYERS, len(times), f"--costs: {len(times):,} layers")
    if sum(times) == float("inf"):
        raise PipesimError("--costs: the per-layer seconds overflow a float: give smaller ones")
    if sum(times) == 0:
        raise PipesimError(f"--costs: every layer takes 0 s, nothing to balance, got {shown(text)}")
    return PartitionProblem(tuple(StageCosts(t, 0.0, 0.0) for t in times), 0.0, placement)


def _model_problem(args: argparse.Namespace, placement: tuple[int, ...]) -> tuple[Any, list[str]]:
    from pipesim.hardware import resolve_hardware
    from pipesim.partition.from_model import mixed_problem, model_problem
    from pipesim.workload import resolve_model
    from pipesim.workload.optimizer import with_optimizer

    if args.hardware is None:
        raise PipesimError("--hardware is required with --model")
    model = with_optimizer(resolve_model(args.model), args.optimizer, args.master_weights)
    batch = model.default_batch if args.batch is None else args.batch
    microbatches = _given(args.microbatches, args.devices)
    if microbatches < 1:
        raise PipesimError(f"-M/--microbatches must be an integer >= 1, got {microbatches}")
    if batch < 1 or batch % microbatches:
        raise PipesimError(
            f"--batch {batch} must be a positive multiple of the {microbatches} micro-batches"
        )
    names = [name.strip() for name in args.hardware.split(",")]
    if len(names) > 1:
        if len(names) != args.devices:
            raise PipesimError(
                f"--hardware lists {len(names)} kinds but -K is {args.devices}: give one "
                f"per device, got {args.hardware!r}"
            )
        problem = mixed_problem(
            model,
            [resolve_hardware(name) for name in names],
            batch / microbatches,
            placement,
            rematerialize=bool(args.remat),
        )
        return problem, [layer.name for layer in model.layers]
    cluster = resolve_hardware(args.hardware).cluster(args.devices)
    problem = model_problem(
        model,
        cluster,
        batch / microbatches,
        placement,
        rematerialize=bool(args.remat),
    )
    return problem, [layer.name for layer in model.layers]


def _table(payload: dict[str, Any], names: list[str]) -> str:
    lines = [
        f"{payload['objective']} partition: {','.join(map(str, payload['partition']))}",
        f"{'stage':>5} {'device':>6} {'layers':>6}  {'range':<24} {'time':>11} {'memory':>10}",
    ]
    for s in payload["stages"]:
        first, last = s["first_layer"], s["last_layer"]
        span = f"{names[first]}..{names[last]}" if names else f"{first}..{last}"
        lines.append(
            f"{s['stage']:>5} {s['device']:>6} {s['layers']:>6}  {span:<24} "
            f"{format_seconds(s['time']):>11} {format_bytes(s['memory_bytes']):>10}"
        )
    lines.append(
        f"bottleneck {format_seconds(payload['bottleneck_time'])} per micro-batch, imbalance "
        f"{payload['imbalance']:.3f} (slowest / mean stage)"
        + ("" if payload["exact"] else "; search budget ran out: best found, not proven")
    )
    return "\n".join(lines) + "\n"
