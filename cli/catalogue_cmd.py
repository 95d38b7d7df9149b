"""``pipesim hardware list|show`` and ``pipesim models list``."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from application.command_line import EXIT_OK
from pipesim.common.units import format_bytes
from pipesim.files.strict_json import write_json


def register(subparsers: Any) -> None:
    """Add ``hardware`` and ``models``."""
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
