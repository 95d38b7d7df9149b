"""``pipesim run show FILE``: what a run file (or a translated framework file) configures, read
exactly as ``pipesim simulate --run FILE`` would read it, so a user can check a file against
what they meant before trusting its numbers: the model with its parameter count (in all, per
tensor-parallel rank, per pipeline stage), the layout and world size, the batch's split, the
schedule, the hardware and the recipe."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from application.command_line import EXIT_OK
from cli.commands import command_summary
from pipesim.common.units import format_count
from pipesim.files.strict_json import write_json


def register(subparsers: Any) -> None:
    """Add ``run``."""
    from cli.run_file import add_run_argument

    run = subparsers.add_parser("run", help=command_summary("run"))
    commands = run.add_subparsers(dest="run_command", metavar="COMMAND", required=True)
    show = commands.add_parser(
        "show",
        help="what a run file (or a translated Megatron-LM or torchtitan file) configures: "
        "model and parameter counts, layout, batch, schedule, hardware, recipe",
    )
    show.add_argument("file", metavar="FILE", nargs="?", help="a run file (TOML)")
    add_run_argument(show)
    show.add_argument(
        "--hardware", metavar="NAME|FILE", help="with a framework's file: what it runs on"
    )
    show.add_argument(
        "--write",
        metavar="RUN.toml",
        help="also write the run as a run file (a translation kept, to edit and pass as --run)",
    )
    show.add_argument("--json", action="store_true", help="print JSON instead of text")
    show.set_defaults(handler=_show)


def _show(args: argparse.Namespace) -> int:
    from application.outputs import output_path, write_text_atomically
    from pipesim.config.run_file import run_file_toml

    words = _source_words(args)
    if args.write is not None:
        output_path(args.write, "--write", (".toml",))  # before the work: a bad path loses none
    summary, run_file, notes = run_summary(words)
    if args.write is not None:
        header = (f"pipesim run show: {summary['file']} as a run file", *notes)
        write_text_atomically(args.write, run_file_toml(run_file, header), field="--write")
    if args.json:
        write_json({**summary, "notes": list(notes)})
        return EXIT_OK
    sys.stdout.write(summary_text(summary))
    for note in notes:
        sys.stdout.write(f"note       {note}\n")
    return EXIT_OK


def _source_words(args: argparse.Namespace) -> list[str]:
    """The command-line words that name the run to show (a run file, or a framework's file
    with what its translation needs)."""
    from pipesim.errors import PipesimError

    sources = [
        (flag, value)
        for flag, value in (
            ("--run", args.file if args.file is not None else args.run),
            ("--megatron-args", args.megatron_args),
            ("--torchtitan", args.torchtitan),
        )
        if value is not None
    ]
    if len(sources) != 1:
        raise PipesimError(
            "run show takes one run: FILE (a run file), --megatron-args FILE or --torchtitan FILE"
        )
    words = [sources[0][0], sources[0][1]]
    if args.hardware is not None:
        words += ["--hardware", args.hardware]
    if args.world_size is not None:
        words += ["--world-size", str(args.world_size)]
    if args.allow_ignored:
        words.append("--allow-ignored")
    return words


def run_summary(words: list[str]) -> tuple[dict[str, Any], Any, tuple[str, ...]]:
    """The run ``words`` name (``--run FILE`` or a framework's file), as ``simulate`` reads it
    (its checks included); the run file; and the translation's notes."""
    from application.command_line import ArgumentParser
    from cli import simulate_cmd
    from cli.run_config import run_config_of
    from cli.run_file import (
        INLINE_MODEL,
        read_run_source,
        run_flags,
        with_inline_model,
    )
    from pipesim.workload.stage_layers import even_partition, stage_parameters

    found = read_run_source(words)
    assert found is not None
    run_file, source, notes = found
    flags, _, _ = run_flags(run_file, "simulate")
    parser = ArgumentParser(prog="pipesim")
    simulate_cmd.register(parser.add_subparsers(dest="command"))  # read as simulate reads it
    args = with_inline_model(parser.parse_args(["simulate", *flags]), run_file)
    assert args.model != INLINE_MODEL
    path = source
    replicas = args.data_parallel or 1
    run = run_config_of(args, replicas)
    model, parallelism = run.trained_model, run.parallelism
    devices, chunks = args.devices or 1, args.chunks or 1
    stages = devices * chunks
    rank_layers = run.sharded().layers
    total = sum(layer.parameters - layer.shared_parameters for layer in model.layers)
    per_rank = sum(layer.parameters for layer in rank_layers)
    partition: list[int] | None
    partition_rule: str
    if args.partition is not None and args.partition.replace(",", "").isdigit():
        partition = [int(count) for count in args.partition.split(",")]
        partition_rule = "as the file states"
    elif args.partition in (None, "even"):
        partition = [len(r) for r in even_partition(model, stages)]
        partition_rule = "even by FLOPs, simulate's default"
    else:
        partition, partition_rule = None, f"{args.partition}: chosen when simulated"
    per_stage = None
    if partition is not None and sum(partition) == len(rank_layers):
        per_stage = stage_parameters(rank_layers, partition)
    arch = model.architecture
    microbatches = args.microbatches
    world = devices * parallelism.ranks_per_device * replicas
    summary = {
        "file": path,
        "model": {
            "name": model.name,
            "architecture": None if arch is None else arch.to_json(),
            "dtype": model.dtype,
            "layers": len(model.layers),
            "parameters": total,
            "parameters_per_tensor_rank": per_rank,
        },
        "layout": {
            "tensor_parallel": parallelism.tensor,
            "sequence_parallel": parallelism.sequence_parallel,
            "pipeline_parallel": devices,
            "chunks": chunks,
            "data_parallel": replicas,
            "world_size": world,
            "zero": parallelism.zero,
            "recompute": parallelism.recompute.label,
            "context_parallel": parallelism.context,
            "expert_parallel": parallelism.expert,
            **(
                {"expert_tensor_parallel": parallelism.expert_tensor_size}
                if parallelism.folded
                else {}
            ),
        },
        "pipeline": {
            "schedule": args.schedule,
            "microbatches": microbatches,
            "batch": args.batch,
            "microbatch_size": args.microbatch_size,
            "partition": partition,
            "partition_rule": partition_rule,
            "parameters_per_stage_per_rank": per_stage,
        },
        "hardware": run.hardware.name,
        "cluster": run.hardware.describe(world),
        "recipe": run.recipe.describe(),
    }
    return summary, run_file, tuple(notes)


def summary_text(summary: dict[str, Any]) -> str:
    """:func:`run_summary` for a person."""
    model, layout, pipeline = summary["model"], summary["layout"], summary["pipeline"]
    arch = model["architecture"]
    shape = (
        f"{model['layers']} layers given one by one"
        if arch is None
        else f"{arch['layers']} blocks, hidden {arch['hidden']:,}, {arch['heads']} heads "
        f"({arch['kv_heads']} key/value), ffn {arch['ffn']:,}, seq {arch['seq']:,}, vocab "
        f"{arch['vocab']:,}, {arch['mlp']}, {arch['norm']}, {arch['position']} positions"
    )
    lines = [
        f"from       {summary['file']}",
        f"model      {model['name']}: {shape}; {model['dtype']}",
        f"parameters {format_count(model['parameters'])} in all"
        + (
            f"; {format_count(model['parameters_per_tensor_rank'])} per tensor-parallel rank"
            if layout["tensor_parallel"] > 1
            else ""
        ),
        f"layout     T={layout['tensor_parallel']}"
        + (" SP" if layout["sequence_parallel"] else "")
        + (f" x CP={layout['context_parallel']}" if layout["context_parallel"] > 1 else "")
        + f" x K={layout['pipeline_parallel']} (v={layout['chunks']}) x "
        f"D={layout['data_parallel']}: {layout['world_size']:,} devices; ZeRO-{layout['zero']}"
        + (f"; EP={layout['expert_parallel']}" if layout["expert_parallel"] > 1 else "")
        + (f" ETP={layout['expert_tensor_parallel']}" if "expert_tensor_parallel" in layout else "")
        + "; "
        f"recompute {layout['recompute']}",
        f"schedule   {pipeline['schedule'] or 'none given'}; M="
        f"{pipeline['microbatches'] or 'not given'} micro-batches per replica; batch "
        f"{pipeline['batch'] or 'the model default'}",
    ]
    if pipeline["partition"] is not None:
        lines.append(
            f"partition  {','.join(map(str, pipeline['partition']))} layers per stage "
            f"({pipeline['partition_rule']})"
        )
    else:
        lines.append(f"partition  {pipeline['partition_rule']}")
    if pipeline["parameters_per_stage_per_rank"] is not None:
        counts = ", ".join(format_count(v) for v in pipeline["parameters_per_stage_per_rank"])
        lines.append(f"per stage  {counts} parameters per rank")
    lines += [f"hardware   {summary['cluster']}", f"recipe     {summary['recipe']}"]
    return "\n".join(lines) + "\n"
