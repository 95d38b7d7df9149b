"""``pipesim hardware list|show``, ``pipesim models list`` and ``pipesim recipes list|show``."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from application.command_line import EXIT_OK
from pipesim.common.units import format_bytes
from pipesim.errors import PipesimError
from pipesim.files.strict_json import write_json


def register(subparsers: Any) -> None:
    """Add ``hardware``, ``models`` and ``recipes``."""
    hardware = subparsers.add_parser("hardware", help="the hardware catalogue")
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

    models = subparsers.add_parser("models", help="the model catalogue")
    model_commands = models.add_subparsers(dest="models_command", metavar="COMMAND", required=True)
    listing = model_commands.add_parser("list", help="the model families, with an example each")
    listing.add_argument("--json", action="store_true", help="print JSON instead of a table")
    listing.set_defaults(handler=_models_list)

    recipes = subparsers.add_parser(
        "recipes", help="the software recipes: how each framework and era runs a step"
    )
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
