"""``pipesim simulate``: play a schedule on a cluster and report time, bubble, memory."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from typing import Any

from application.command_line import EXIT_OK
from cli.commands import command_summary
from cli.run_config import add_recipe_argument
from cli.run_file import add_run_argument
from cli.schedule_source import add_schedule_source_arguments, read_schedule_source
from cli.synthesized import add_memory_limit_argument, read_synthesis, synthesis_line
from pipesim.common.limits import Limit, check
from pipesim.common.units import format_bytes, format_percent, format_seconds
from pipesim.errors import SHOWN_CHARACTERS, PipesimError
from pipesim.files.strict_json import json_text, overflow_checked, require_reportable, write_json


def register(subparsers: Any) -> None:
    """Add ``simulate``."""
    parser = subparsers.add_parser(
        "simulate",
        help=command_summary("simulate"),
        description=(
            "Simulate a pipeline schedule with synthetic costs (--costs) or a model on a "
            "hardware spec (--model and --hardware). Times in seconds, sizes in bytes."
        ),
    )
    add_schedule_source_arguments(parser, allow_file=True)
    add_run_argument(parser)
    add_memory_limit_argument(parser)
    add_cost_arguments(parser)
    add_steps_argument(parser)
    add_engine_argument(parser)
    parser.add_argument("--json", action="store_true", help="print the JSON result object")
    parser.add_argument("--trace", metavar="FILE", help="write a Chrome/Perfetto trace JSON")
    parser.add_argument("--timeline-csv", metavar="FILE", help="write the timeline as CSV")
    parser.add_argument(
        "--timeline", metavar="FIGURE", help="draw the timeline (Gantt chart) as .png or .svg"
    )
    parser.add_argument(
        "--save",
        metavar="FILE",
        help="save the result with its timeline and memory as JSON (for pipesim plot)",
    )
    parser.set_defaults(handler=_simulate)


def _parse_costs(text: str) -> tuple[float, float, float]:
    parts = text.split(",")
    try:
        values = [float(p) for p in parts]
    except ValueError:
        values = []
    if len(values) not in (2, 3):
        raise PipesimError(
            f"--costs must be F,B or F,B,W in seconds, e.g. 1,2 or 1,1,1, got {text!r}"
        )
    return values[0], values[1], values[2] if len(values) == 3 else 0.0


def _parse_partition(text: str) -> tuple[int, ...] | str:
    """Layer counts per stage, or an objective: balanced, memory-aware, even. A count is
    ASCII digits (a sign is left to the counts' own check, ">= 1"): int() alone would also
    take "６" (fullwidth) or "4_0", which --recompute and every other count refuse."""
    if text in ("balanced", "memory-aware", "even", "blocks"):
        return text
    parts = [p.strip() for p in text.split(",")]
    digits = [p[1:] if p[:1] in ("+", "-") else p for p in parts]
    try:
        if not all(d.isascii() and d.isdigit() for d in digits):
            raise ValueError(text)
        return tuple(int(p) for p in parts)  # ValueError beyond int's 4,300 digits
    except ValueError:
        raise PipesimError(
            "--partition must be balanced, memory-aware, even, blocks or layer counts per "
            f"stage, e.g. 3,4,4,3, got {text!r}"
        ) from None


# The options add_cost_arguments adds: flag, attribute, its value when not given, and which
# costs it belongs to (a synthetic model, or a model on hardware).
COST_OPTIONS = (
    ("--costs", "costs", None, "synthetic"),
    ("--model", "model", None, "model"),
    ("--hardware", "hardware", None, "model"),
    ("--comm", "comm", 0.0, "synthetic"),
    ("--activation-bytes", "activation_bytes", 0.0, "synthetic"),
    ("--batch", "batch", None, "model"),
    ("--partition", "partition", None, "model"),
    ("--dtype", "dtype", None, "model"),
    ("--seq-length", "seq_length", None, "model"),
    ("--optimizer", "optimizer", None, "model"),
    ("--master-weights", "master_weights", None, "model"),
    ("--data-parallel", "data_parallel", None, "model"),
    ("--no-optimizer", "no_optimizer", False, "model"),
    ("--tensor-parallel", "tensor_parallel", None, "model"),
    ("--sequence-parallel", "sequence_parallel", False, "model"),
    ("--recompute", "recompute", None, "model"),
    ("--zero", "zero", None, "model"),
    ("--reshard-after-forward", "reshard_after_forward", None, "model"),
    ("--context-parallel", "context_parallel", None, "model"),
    ("--context-exchange", "cp_comm_type", None, "model"),
    ("--expert-parallel", "expert_parallel", None, "model"),
    ("--expert-tensor-parallel", "expert_tensor_parallel", None, "model"),
    ("--offload-optimizer", "offload_optimizer", False, "model"),
    ("--offload-activations", "offload_activations", None, "model"),
    ("--microbatch-size", "microbatch_size", None, "model"),
    ("--overlap-grad-reduce", "overlap_grad_reduce", None, "model"),
    ("--attention", "attention", None, "model"),
    ("--blocking-p2p", "blocking_p2p", None, "model"),
    ("--scatter-gather-p2p", "scatter_gather_p2p", None, "model"),
    ("--tp-comm-overlap", "tp_comm_overlap", None, "model"),
    ("--memory-reserve", "memory_reserve", None, "model"),
    ("--fragmentation", "fragmentation", None, "model"),
    ("--tensor-across-nodes", "tensor_across_nodes", False, "model"),
    ("--recipe", "recipe", None, "model"),
)
# What a model on hardware takes besides --model itself.
MODEL_OPTIONS = tuple(o for o in COST_OPTIONS if o[3] == "model" and o[0] != "--model")


def given_cost_options(
    args: argparse.Namespace, options: tuple[tuple[str, str, Any, str], ...] = COST_OPTIONS
) -> list[tuple[str, Any]]:
    """The (flag, value) of each of ``options`` the command line gave, in order."""
    given = []
    for flag, attribute, absent, _ in options:
        value = getattr(args, attribute, absent)
        if value != absent:
            given.append((flag, value))
    return given


@dataclass(frozen=True)
class CostsAsk:
    """The costs the command line asks for, read and checked against each other: synthetic
    figures, or a model on hardware (whose names, files and settings :meth:`request` resolves
    into a run's configuration)."""

    args: argparse.Namespace
    synthetic: tuple[float, float, float] | None
    partition: tuple[int, ...] | str | None = None
    data_parallel: int = 1

    def request(self) -> Any:
        """The cost request: synthetic, or a model request holding the run's configuration,
        resolved and checked whole (:func:`cli.run_config.run_config_of`)."""
        from cli.run_config import run_config_of
        from pipesim.request.cost_request import ModelRequest, SyntheticRequest

        args = self.args
        if self.synthetic is not None:
            forward, backward, weight = self.synthetic
            return SyntheticRequest(forward, backward, weight, args.comm, args.activation_bytes)
        run = run_config_of(args, self.data_parallel)
        return ModelRequest(
            run, args.batch, self.partition, not args.no_optimizer, args.microbatch_size
        )


def read_costs(args: argparse.Namespace) -> CostsAsk:
    """The costs the arguments ask for (synthetic, or model on hardware), their options read
    and checked against each other; nothing resolved yet."""
    if (args.costs is None) == (args.model is None):
        raise PipesimError(
            "give either --costs F,B[,W] or --model NAME with --hardware NAME (not both)"
        )
    if args.costs is not None:
        for flag, value in given_cost_options(args, MODEL_OPTIONS):
            if isinstance(value, bool):  # a switch: the form typed, --X or --no-X
                said = flag if value else flag.replace("--", "--no-", 1)
                raise PipesimError(f"{said} goes with --model, not with --costs")
            if isinstance(value, str) and (not value or len(value) > SHOWN_CHARACTERS):
                value = repr(value)  # an empty value seen as one; a long one quoted, then cut
            raise PipesimError(f"{flag} goes with --model, not with --costs, got {value}")
        return CostsAsk(args, _parse_costs(args.costs))
    if args.hardware is None:
        raise PipesimError("--hardware is required with --model")
    if args.comm or args.activation_bytes:
        raise PipesimError("--comm and --activation-bytes go with --costs, not with --model")
    partition = None if args.partition is None else _parse_partition(args.partition)
    data_parallel = 1 if args.data_parallel is None else args.data_parallel
    if data_parallel < 1:
        raise PipesimError(f"--data-parallel must be an integer >= 1, got {data_parallel}")
    if args.tensor_parallel is not None and args.tensor_parallel < 1:
        raise PipesimError(f"--tensor-parallel must be an integer >= 1, got {args.tensor_parallel}")
    return CostsAsk(args, None, partition, data_parallel)


def cost_request(args: argparse.Namespace) -> Any:
    """The cost request (synthetic, or model on hardware) the arguments ask for."""
    return read_costs(args).request()


def add_engine_argument(parser: argparse.ArgumentParser) -> None:
    """--engine simpy|fast|auto (simulate and sweep): the result's "engine" says which ran."""
    parser.add_argument(
        "--engine",
        choices=["simpy", "fast", "auto"],
        default="auto",
        help="simpy: the readable reference; fast: the same numbers from flat arrays; "
        "auto (default): fast",
    )


def add_steps_argument(parser: argparse.ArgumentParser) -> None:
    """--steps N: steps back to back (simulate and sweep)."""
    parser.add_argument(
        "--steps",
        type=int,
        default=1,
        metavar="N",
        help="steps back to back; >= 2 reports the steady state (default 1)",
    )


def add_cost_arguments(parser: argparse.ArgumentParser) -> None:
    """--costs/--comm/--activation-bytes, or --model/--hardware/--batch/--partition."""
    synthetic = parser.add_argument_group("synthetic costs")
    synthetic.add_argument(
        "--costs",
        metavar="F,B[,W]",
        help="seconds per micro-batch through one device's share: forward, input-gradient "
        "backward, weight-gradient backward (default 0); a full backward costs B+W",
    )
    synthetic.add_argument(
        "--comm",
        type=float,
        default=0.0,
        metavar="T",
        help="seconds per transfer between two devices (default 0)",
    )
    synthetic.add_argument(
        "--activation-bytes",
        type=float,
        default=0.0,
        metavar="N",
        help="bytes one micro-batch stashes on a device (default 0)",
    )
    spec = parser.add_argument_group("model on hardware")
    spec.add_argument("--model", metavar="NAME|FILE", help="a model (pipesim models list) or TOML")
    spec.add_argument(
        "--hardware", metavar="NAME|FILE", help="a hardware spec (pipesim hardware list) or TOML"
    )
    spec.add_argument(
        "--batch",
        type=int,
        metavar="N",
        help="samples per optimizer step (default: the model's); split into M micro-batches",
    )
    spec.add_argument(
        "--partition",
        metavar="OBJECTIVE|N,N,...",
        help="layers per stage (the embedding and the output layer count as layers), or "
        "balanced (least slowest stage, transfers counted), memory-aware (fastest that fits the "
        "schedule's peak memory), even (by FLOPs, the default) or blocks (Megatron-LM's: the "
        "transformer blocks split evenly, the first stages taking one more where they do not "
        "divide, embedding first, output layer last)",
    )
    spec.add_argument(
        "--optimizer",
        metavar="NAME|BYTES",
        help="optimizer state per parameter: sgd, momentum, rmsprop, adam, or bytes "
        "(default: the model's own)",
    )
    spec.add_argument(
        "--master-weights",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="fp32 master weights (4 bytes per parameter; default: when weights are < fp32)",
    )
    spec.add_argument(
        "--data-parallel",
        type=int,
        metavar="N",
        help="N replicas of the pipeline, --batch split among them; each device's gradient "
        "all-reduce (ring) joins its optimizer step (default 1)",
    )
    spec.add_argument(
        "--dtype", metavar="NAME", help="compute dtype, e.g. fp16 or fp32 (default: the model's)"
    )
    spec.add_argument(
        "--seq-length",
        type=int,
        metavar="N",
        help="train on sequences of N tokens (default: the model's; a Hugging Face config's is "
        "its max_position_embeddings)",
    )
    spec.add_argument(
        "--no-optimizer", action="store_true", help="leave the optimizer step's time out"
    )
    add_parallel_arguments(parser)


def add_parallel_arguments(parser: argparse.ArgumentParser) -> None:
    """Hybrid parallelism besides the pipeline (simulate and sweep; plan searches them)."""
    hybrid = parser.add_argument_group("hybrid parallelism (with --model)")
    hybrid.add_argument(
        "--tensor-parallel",
        type=int,
        metavar="T",
        help="tensor-parallel size: heads, MLP and vocabulary split T ways, two all-reduces "
        "per layer forward and backward (default 1)",
    )
    hybrid.add_argument(
        "--sequence-parallel",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="sequence parallelism in each tensor-parallel group: norms and dropouts on 1/T "
        "of the sequence, all-gathers and reduce-scatters instead of all-reduces",
    )
    hybrid.add_argument(
        "--recompute",
        metavar="MODE",
        help="activation recomputation: none (default), selective (the attention core), full "
        "(every layer), or N (the first N layers of each stage, fully)",
    )
    hybrid.add_argument(
        "--zero",
        type=int,
        metavar="0-3",
        help="ZeRO stage over the data-parallel replicas: 1 shards optimizer state and master "
        "weights (Megatron's distributed optimizer), 2 the gradients too, 3 the weights too "
        "(FSDP, torchtitan's default); 0 (default): replicate them",
    )
    hybrid.add_argument(
        "--reshard-after-forward",
        metavar="POLICY",
        help="ZeRO-3 (FSDP): free each layer's gathered weights after its forward: default "
        "(only without a pipeline, torchtitan's), always, never",
    )
    hybrid.add_argument(
        "--context-parallel",
        type=int,
        metavar="CP",
        help="context parallelism: each sample's sequence split CP ways (the CP ranks of a "
        "replica replicate the weights; default 1)",
    )
    hybrid.add_argument(
        "--context-exchange",
        dest="cp_comm_type",
        metavar="KIND",
        help="how the context-parallel ranks exchange keys and values: p2p (default, "
        "Megatron-Core's ring beside the attention) or all-gather (Llama 3's, before it)",
    )
    hybrid.add_argument(
        "--expert-parallel",
        type=int,
        metavar="EP",
        help="expert parallelism: each MoE layer's experts divided over EP of the D x CP ranks, "
        "tokens dispatched and combined by all-to-alls (default 1)",
    )
    hybrid.add_argument(
        "--expert-tensor-parallel",
        type=int,
        metavar="ETP",
        help="expert tensor parallelism (Megatron-Core's --expert-tensor-parallel-size, "
        "parallel folding): each routed expert split ETP ways, the MoE layers laid out as "
        "ETP x EP x EDP over the T x CP x D ranks (default: T)",
    )
    hybrid.add_argument(
        "--offload-optimizer",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="optimizer state and master weights in host memory, the optimizer step on the "
        "host's CPU (ZeRO-Offload, DeepSpeed's offload_optimizer): gradients to the host, the "
        "host's step, the weights back, after the backward",
    )
    hybrid.add_argument(
        "--offload-activations",
        type=int,
        metavar="N",
        help="the model's first N transformer blocks keep their stash in host memory between "
        "forward and backward (Megatron-Core's --cpu-offloading-num-layers): copies under the "
        "neighbouring blocks' compute over the host link (default 0)",
    )
    hybrid.add_argument(
        "--microbatch-size",
        type=int,
        metavar="b",
        help="samples per micro-batch; the batch is then b x M x data-parallel size (or "
        "--batch must equal it)",
    )
    hybrid.add_argument(
        "--overlap-grad-reduce",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="overlap each stage's gradient reduction with its last backward (DDP buckets; "
        "a change to the recipe's choice)",
    )
    hybrid.add_argument(
        "--attention",
        choices=["eager", "flash"],
        help="attention implementation (default: the recipe's, else the model's): eager "
        "stores the s^2 scores, flash only their statistics",
    )
    hybrid.add_argument(
        "--blocking-p2p",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="sends occupy their device until delivered (Megatron's "
        "--no-overlap-p2p-communication)",
    )
    hybrid.add_argument(
        "--scatter-gather-p2p",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="under tensor parallelism without sequence parallelism, each rank sends 1/T of a "
        "pipeline message and the receivers all-gather it (Megatron-LM's scatter/gather, "
        "before Megatron-Core)",
    )
    hybrid.add_argument(
        "--tp-comm-overlap",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="tensor-parallel collectives overlap the GEMMs beside them (Megatron-Core's "
        "--tp-comm-overlap, Transformer Engine's userbuffers)",
    )
    hybrid.add_argument(
        "--memory-reserve",
        type=float,
        metavar="BYTES",
        help="memory each device's runtime holds besides the model (default: the hardware's)",
    )
    hybrid.add_argument(
        "--fragmentation",
        type=float,
        metavar="F",
        help="allocator slack as a fraction of the model's peak (default: the hardware's)",
    )
    hybrid.add_argument(
        "--tensor-across-nodes",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="allow a tensor-parallel size larger than a node (its collectives cross nodes)",
    )
    add_recipe_argument(hybrid)


def _simulate(args: argparse.Namespace) -> int:
    from pipesim.engine import simulate

    # The whole command line, read and checked against itself before anything is built.
    synthesis = read_synthesis(args)
    source = None if synthesis is not None else read_schedule_source(args)
    if args.steps < 1:
        raise PipesimError(f"--steps must be an integer >= 1, got {args.steps}")
    costs_asked = read_costs(args)
    _check_outputs(args)  # a bad path loses no work
    # What it names, built and checked against the library's limits, and the run's
    # configuration: every check that costs nothing comes before the costs are built (a
    # memory-aware partition simulates memory over the steps).
    if synthesis is not None:
        synthesis.check(getattr(args, "recompute", None), args.steps)
        schedule = synthesis.shape()  # the registered order the costs are built for
    else:
        assert source is not None
        schedule = source.load()
    check_steps(schedule, args.steps)
    request = costs_asked.request()
    # The work: the costs, the synthesised order if asked for, the simulation.
    costs = request.build(
        schedule.devices, schedule.chunks, schedule.microbatches, schedule, args.steps
    )
    found = None if synthesis is None else synthesis.synthesize(costs)
    if found is not None:
        schedule = found.schedule
    with overflow_checked():  # a non-finite result is refused in one line just below
        result = simulate(schedule, costs, steps=args.steps, engine=args.engine)
    require_reportable(result.to_json(), "simulate")
    if args.trace is not None:
        from application.outputs import write_text_atomically
        from pipesim.export.chrome_trace import chrome_trace

        memory = [d.memory.timeline for d in result.per_device]
        trace = chrome_trace(
            result.compute,
            result.transfers,
            schedule.devices,
            title=f"pipesim {schedule.name}",
            memory=memory,
        )
        write_text_atomically(args.trace, json_text(trace), field="--trace")
    if args.timeline_csv is not None:
        from application.outputs import write_text_atomically
        from pipesim.export.timeline_csv import timeline_csv

        write_text_atomically(
            args.timeline_csv,
            timeline_csv(result.compute, result.transfers),
            field="--timeline-csv",
        )
    if args.save is not None:
        from application.outputs import write_text_atomically
        from pipesim.export.saved import saved_run

        saved = saved_run(result)
        write_text_atomically(args.save, json_text(saved), field="--save")
    if args.timeline is not None:
        from pipesim.export.saved import SavedRun, layout_label
        from plots import bars_from_timeline, save, timeline_figure

        compute, transfers = bars_from_timeline(result.timeline)
        title = SavedRun(
            schedule=schedule.name,
            devices=schedule.devices,
            microbatches=schedule.microbatches,
            chunks=schedule.chunks,
            iteration_time_s=result.iteration_time_s,
            bubble_fraction=result.bubble_fraction,
            oom=result.oom,
            capacity_bytes=None,
            compute=(),
            transfers=(),
            memory=(),
            layout=layout_label(result.costs.layout),
        ).title
        save(timeline_figure(compute, transfers, title=title), args.timeline, field="--timeline")
    if args.json:
        write_json(result.to_json())
    else:
        if found is not None:
            sys.stdout.write(synthesis_line(found) + "\n")
        sys.stdout.write(summary(result) + "\n")
    return EXIT_OK


def check_steps(schedule: Any, steps: int) -> None:
    """Refuse ``steps`` that would simulate more actions than :mod:`pipesim.common.limits`
    allows."""
    actions = schedule.action_arrays.actions * steps
    check(Limit.ACTIONS, actions, f"--steps {steps:,} x {schedule.action_arrays.actions:,} actions")


def _check_outputs(args: argparse.Namespace) -> None:
    """Refuse bad output paths before simulating, so nothing is computed or written in vain."""
    for path, field in (
        (args.trace, "--trace"),
        (args.timeline_csv, "--timeline-csv"),
        (args.save, "--save"),
    ):
        if path is not None:
            from application.outputs import output_path

            output_path(path, field)
    if args.timeline is not None:
        from plots.style import figure_path

        figure_path(args.timeline, "--timeline")


def summary(result: Any) -> str:
    """The short human summary of a simulation result."""
    s = result.schedule
    lines = [
        f"{s.name}: K={s.devices} devices, M={s.microbatches} micro-batches, v={s.chunks}, "
        f"update={s.update_rule.value}" + (", re-materialization" if s.rematerialize else ""),
        f"  costs          {result.costs.description}",
    ]
    steady = f" (steady state over {result.steps} steps)" if result.steps > 1 else ""
    lines.append(f"  iteration time {format_seconds(result.iteration_time_s)}{steady}")
    analytic = result.analytic_bubble_fraction
    closed = (
        f"closed form {format_percent(analytic)}"
        if analytic is not None
        else "no closed form for this case"
    )
    lines.append(f"  bubble         {format_percent(result.bubble_fraction)} ({closed})")
    flops = result.costs.flops
    ranks = flops.devices if flops is not None else s.devices
    if ranks == s.devices:
        over = "over one device"
    elif s.devices == 1:
        over = f"(no pipeline; the {ranks:,} ranks' tensor and data parallelism not counted)"
    else:
        over = (
            f"over its {s.devices} pipeline stages run one after another (pipeline speedup; "
            f"the {ranks:,} ranks' tensor and data parallelism not counted)"
        )
    lines.append(
        f"  throughput     {result.throughput:.4g} {result.throughput_unit}; speedup "
        f"{result.speedup:.3g}x {over}"
    )
    if flops is not None:
        achieved = result.achieved_flops_per_device or 0.0
        lines.append(
            f"  utilisation    MFU {format_percent(result.model_flops_utilization or 0.0)}, "
            f"HFU {format_percent(result.hardware_flops_utilization or 0.0)} "
            f"({achieved / 1e12:.4g} of {flops.peak_flops_per_s / 1e12:.4g} TFLOP/s per device, "
            "recomputation counted)"
        )
    if result.costs.cluster:
        lines.append(f"  cluster        {result.costs.cluster}")
    capacity = result.costs.memory_capacity_bytes
    lines.append(f"  peak memory per device (capacity {format_bytes(capacity)}):")
    for d in result.per_device:
        flag = "  OUT OF MEMORY" if d.oom else ""
        memory = d.memory
        # the terms on top of static memory and activations, where there are any: the line
        # adds up to the peak it shows
        extra = "".join(
            f" + {name} {format_bytes(value)}"
            for name, value in (
                ("transient", memory.transient_at_peak_bytes),
                ("fragmentation", memory.fragmentation_bytes),
                ("reserve", memory.runtime_reserve_bytes),
            )
            if value
        )
        lines.append(
            f"    device {d.device:<3} {format_bytes(d.peak_memory_bytes):>10}  (static "
            f"{format_bytes(memory.static_bytes)} + activations "
            f"{format_bytes(memory.activations_at_peak_bytes)}{extra}){flag}"
        )
    heaviest = result.heaviest_device()
    where = result.peak_action(heaviest)
    terms = ", ".join(
        f"{name.replace('_', ' ')} {format_bytes(value)}"
        for name, value in heaviest.memory.breakdown().items()
        if value
    )
    during = f" (at its peak it runs {where})" if where else ""
    lines.append(f"  heaviest device {heaviest.device}{during}: {terms}")
    if result.oom:
        lines.append("  out of memory on at least one device: the peak exceeds the capacity")
    return "\n".join(lines)
