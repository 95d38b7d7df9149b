"""``pipesim hardware list|show``, ``pipesim models list|show`` and ``pipesim recipes
list|show``."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from application.command_line import EXIT_OK
from cli.commands import command_summary
from pipesim.common.units import format_bytes, format_count
from pipesim.errors import PipesimError
from pipesim.files.strict_json import write_json


def register(subparsers: Any) -> None:
    """Add ``hardware``, ``models`` and ``recipes``."""
    hardware = subparsers.add_parser("hardware", help=command_summary("hardware"))
    hw_commands = hardware.add_subparsers(dest="hardware_command", metavar="COMMAND", required=True)
    listing = hw_commands.add_parser("list", help="the catalogue's accelerators and links")
    listing.add_argument("--json", action="store_true", help="print JSON instead of a table")
    listing.set_defaults(handler=_hardware_list)
    show = hw_commands.add_parser(
        "show",
        help="one entry as a hardware TOML file, to edit and pass back as --hardware FILE.toml",
    )
    show.add_argument("name", help="a catalogue name (pipesim hardware list)")
    show.set_defaults(handler=_hardware_show)

    models = subparsers.add_parser("models", help=command_summary("models"))
    model_commands = models.add_subparsers(dest="models_command", metavar="COMMAND", required=True)
    listing = model_commands.add_parser("list", help="the model families, with an example each")
    listing.add_argument("--json", action="store_true", help="print JSON instead of a table")
    listing.set_defaults(handler=_models_list)
    show = model_commands.add_parser(
        "show",
        help="one model: its architecture, parameter count (in all, by kind of layer, per "
        "pipeline stage with -K) and the model TOML that reproduces it",
    )
    show.add_argument("name", metavar="NAME|FILE", help="a catalogue name, a TOML or config.json")
    show.add_argument(
        "--seq-length", type=int, metavar="N", help="at this sequence length (default: its own)"
    )
    show.add_argument(
        "-K", "--devices", type=int, metavar="N", help="also its parameters per pipeline stage"
    )
    show.add_argument("-v", "--chunks", type=int, default=1, metavar="N", help="stages per device")
    show.add_argument(
        "--toml",
        action="store_true",
        help="print only the model TOML (to save, edit and pass back as --model FILE.toml)",
    )
    show.add_argument("--json", action="store_true", help="print JSON instead of text")
    show.set_defaults(handler=_models_show)

    recipes = subparsers.add_parser("recipes", help=command_summary("recipes"))
    recipe_commands = recipes.add_subparsers(
        dest="recipes_command", metavar="COMMAND", required=True
    )
    listing = recipe_commands.add_parser("list", help="every named recipe and its choices")
    listing.add_argument(
        "--json", action="store_true", help="print JSON, with each choice's source"
    )
    listing.set_defaults(handler=_recipes_list)
    show = recipe_commands.add_parser("show", help="one recipe: each choice and its source")
    show.add_argument("name", help="a recipe's name (pipesim recipes list)")
    show.set_defaults(handler=_recipes_show)


def _hardware_list(args: argparse.Namespace) -> int:
    from pipesim.hardware import CATALOGUE

    rows: list[dict[str, Any]] = []
    for spec in CATALOGUE.values():
        acc = spec.accelerator
        rows.append(
            {
                "name": spec.name,
                "description": spec.description,
                "peak_flops_per_s": dict(acc.peak_flops_per_s),
                "efficiency": acc.efficiency,
                "memory_bytes": acc.memory_bytes,
                "memory_bandwidth_bytes_per_s": acc.memory_bandwidth_bytes_per_s,
                "topology": spec.topology.value,
                "link_bandwidth_bytes_per_s": spec.link.bandwidth_bytes_per_s,
                "link_latency_s": spec.link.latency_s,
                "devices_per_node": spec.devices_per_node,
                "kernel_level": acc.kernel_level,
                "source": acc.source,
            }
        )
    if args.json:
        write_json(rows)
        return EXIT_OK
    width = max(len(r["name"]) for r in rows)
    for row in rows:
        peak = ", ".join(f"{k} {v / 1e12:g}T" for k, v in row["peak_flops_per_s"].items())
        sys.stdout.write(
            f"{row['name']:<{width}}  {format_bytes(row['memory_bytes']):>8}  {peak}  "
            f"[{row['topology']}, {row['link_bandwidth_bytes_per_s'] / 1e9:g} GB/s]  "
            f"{row['description']}\n"
        )
    return EXIT_OK


def _hardware_show(args: argparse.Namespace) -> int:
    from pipesim.hardware import hardware
    from pipesim.hardware.toml_spec import hardware_toml

    sys.stdout.write(hardware_toml(hardware(args.name)))
    return EXIT_OK


def _models_list(args: argparse.Namespace) -> int:
    from pipesim.workload import FAMILIES, model

    rows: list[dict[str, Any]] = []
    for family in FAMILIES:
        example = model(family.example)
        rows.append(
            {
                "pattern": family.pattern,
                "example": family.example,
                "summary": family.summary,
                "example_layers": len(example.layers),
                "example_parameters": example.parameters,
                "example_default_batch": example.default_batch,
            }
        )
    if args.json:
        write_json(rows)
        return EXIT_OK
    width = max(len(r["example"]) for r in rows)
    for row in rows:
        sys.stdout.write(
            f"{row['example']:<{width}}  {row['example_parameters'] / 1e6:8.1f}M params  "
            f"{row['summary']}  (names: {row['pattern']})\n"
        )
    return EXIT_OK


def _models_show(args: argparse.Namespace) -> int:
    from pipesim.files.toml_writer import toml_text
    from pipesim.request.cost_request import resolved_model
    from pipesim.workload.stage_layers import even_partition, stage_parameters
    from pipesim.workload.toml_spec import model_table

    model = resolved_model(args.name, None, None, None, args.seq_length)
    try:
        toml = toml_text(model_table(model), header=(f"pipesim models show {args.name}",))
    except ValueError as error:  # layers with more than a model file states
        raise PipesimError(f"{args.name}: no model file can state it ({error})") from None
    if args.toml:
        sys.stdout.write(toml)
        return EXIT_OK
    kinds: dict[str, float] = {}
    for layer in model.layers:
        kind = "blocks" if layer.name.startswith("block") else layer.name
        kinds[kind] = kinds.get(kind, 0.0) + layer.parameters - layer.shared_parameters
    stages: list[dict[str, Any]] | None = None
    if args.devices is not None:
        for field, value in (("-K", args.devices), ("-v", args.chunks)):
            if value < 1:
                raise PipesimError(f"{field} must be an integer >= 1, got {value}")
        spans = even_partition(model, args.devices * args.chunks)
        held = stage_parameters(model.layers, [len(span) for span in spans])
        stages = [
            {"layers": len(span), "parameters": parameters}
            for span, parameters in zip(spans, held, strict=True)
        ]
    arch = model.architecture
    summary: dict[str, Any] = {
        "name": model.name,
        "description": model.description,
        "architecture": None if arch is None else arch.to_json(),
        "layers": len(model.layers),
        "parameters": model.parameters,
        "parameters_by_kind": kinds,
        "dtype": model.dtype,
        "bytes_per_parameter": {
            "weights": model.weight_bytes_per_parameter,
            "gradients": model.gradient_bytes_per_parameter,
            "optimizer_state": model.optimizer_bytes_per_parameter,
            "master_weights": model.master_weight_bytes_per_parameter,
        },
        "default_batch": model.default_batch,
        "stages": stages,
        "toml": toml,
    }
    if args.json:
        write_json(summary)
        return EXIT_OK
    sys.stdout.write(_model_text(summary))
    return EXIT_OK


def _model_text(summary: dict[str, Any]) -> str:
    arch = summary["architecture"]
    b = summary["bytes_per_parameter"]
    kinds = ", ".join(
        f"{kind} {format_count(n)}" for kind, n in summary["parameters_by_kind"].items()
    )
    described = summary["description"]
    same = described.startswith(summary["name"])  # the catalogue's say the name first
    lines = [described if same else f"{summary['name']}: {described}"]
    if arch is not None:
        lines.append(
            f"architecture  {arch['layers']} blocks, hidden {arch['hidden']:,}, {arch['heads']} "
            f"heads ({arch['kv_heads']} key/value), ffn {arch['ffn']:,}, seq {arch['seq']:,}, "
            f"vocab {arch['vocab']:,}; {arch['mlp']}, {arch['norm']}, {arch['position']} "
            f"positions, {arch['attention']} attention"
            + (", tied embeddings" if arch["tied_embeddings"] else "")
        )
    lines += [
        f"parameters    {format_count(summary['parameters'])} ({kinds})",
        f"precision     {summary['dtype']}; bytes per parameter: weights {b['weights']:g}, "
        f"gradients {b['gradients']:g}, optimizer state {b['optimizer_state']:g}, master "
        f"weights {b['master_weights']:g}",
        f"batch         {summary['default_batch']:,} samples per step by default",
    ]
    if summary["stages"] is not None:
        per_stage = ", ".join(
            f"{format_count(s['parameters'])} ({s['layers']} layers)" for s in summary["stages"]
        )
        lines.append(f"per stage     {per_stage} (even by FLOPs, simulate's default split)")
    lines += ["", "as a model file (pipesim models show NAME --toml > my-model.toml):", ""]
    return "\n".join(lines) + "\n" + str(summary["toml"])


def _recipes_list(args: argparse.Namespace) -> int:
    from pipesim.config import DEFAULT_RECIPE, RECIPES

    if args.json:
        write_json(
            [
                {
                    **r.to_json(),
                    "default": r is DEFAULT_RECIPE,
                    "description": r.description,
                    "sources": dict(r.sources),
                }
                for r in RECIPES.values()
            ]
        )
        return EXIT_OK
    for recipe in RECIPES.values():
        default = " (the default)" if recipe is DEFAULT_RECIPE else ""
        sys.stdout.write(f"{recipe.describe()}{default}\n")
    return EXIT_OK


def _recipes_show(args: argparse.Namespace) -> int:
    from pipesim.config import CHOICES, RECIPES

    if args.name not in RECIPES:
        raise PipesimError(f"unknown recipe {args.name!r}; the recipes: {', '.join(RECIPES)}")
    chosen = RECIPES[args.name]
    values = chosen.to_json()
    sys.stdout.write(f"{chosen.name}: {chosen.description}\n")
    for choice in CHOICES:
        absent = "as the hardware's" if choice == "message_overhead_s" else "as the model's"
        shown = absent if values[choice] is None else values[choice]
        if isinstance(shown, bool):
            shown = str(shown).lower()
        sys.stdout.write(f"  {choice} = {shown}\n      {chosen.sources[choice]}\n")
    return EXIT_OK
