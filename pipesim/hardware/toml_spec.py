"""``--hardware FILE.toml``: a user's own cluster, validated field by field.

Example::

    name = "my-a100-box"

    [accelerator]
    peak_flops_per_s = { bf16 = 312e12, fp32 = 19.5e12 }
    efficiency = 0.5                  # optional with matmul_efficiency: layers given whole
    memory_bytes = 85899345920
    memory_bandwidth_bytes_per_s = 2.039e12
    kernel_overhead_s = 4e-6          # optional, default 0
    transfers_use_compute = false     # optional
    # optional, the kernel-level time model of transformer layers (see Accelerator):
    matmul_efficiency = [[2.1e9, 0.2], [1.1e12, 0.8]]   # [FLOPs of one multiply, fraction]
    memory_bandwidth_efficiency = 0.83                   # default 1
    reduction_bandwidth_fraction = 0.47                  # of that, softmax and norms; default 1
    random_bandwidth_fraction = 0.7                      # of that, dropout; default 1
    runtime_reserve_bytes = 2e9                          # default 0
    fragmentation_fraction = 0.05                        # default 0
    host_link_bandwidth_bytes_per_s = 32e9               # optional, per direction (PCIe)
    host_memory_bandwidth_bytes_per_s = 51.2e9           # optional, the host's per device

    [network]
    topology = "all-to-all"           # shared-bus, ring, torus-2d, hierarchical
    bandwidth_bytes_per_s = 300e9
    latency_s = 4e-6
    link_name = "nvlink"                         # optional, shown in summaries
    collective_bandwidth_bytes_per_s = 231.6e9   # optional: NCCL's bus bandwidth on the link
    message_overhead_s = 2.5e-4                  # optional: per pipeline message, default 0
    # hierarchical: devices_per_node, inter_node_bandwidth_bytes_per_s, inter_node_latency_s,
    #   inter_node_collective_bandwidth_bytes_per_s and inter_node_link_name (optional)
    # torus-2d: torus_columns (optional)
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from pipesim.common import checks
from pipesim.common.checks import SpecError
from pipesim.errors import shown
from pipesim.files.toml_reader import Fields, boolean, read_toml, string
from pipesim.files.toml_writer import number
from pipesim.hardware.accelerator import Accelerator
from pipesim.hardware.catalogue import HardwareSpec
from pipesim.hardware.network import Link, Topology


def _efficiency_lines(acc: Accelerator, number: Callable[[float], str]) -> list[str]:
    """``efficiency`` as a file gives it, with a word on an accelerator with a curve: there
    only models given as layers read it, and a run whose every layer takes the curve warns
    that nothing reads it (delete the line to run without the warning)."""
    if acc.efficiency is None:
        return []
    line = f"efficiency = {number(acc.efficiency)}"
    if acc.kernel_level:
        line += "  # models given as layers only: matmul_efficiency times the rest"
    return [line]


def _peaks(field: str, value: Any) -> dict[str, float]:
    if not isinstance(value, dict) or not value:
        raise SpecError(
            f"{field} must map dtypes to FLOP/s, e.g. {{ bf16 = 312e12 }}, got {shown(value)}"
        )
    return {str(k): checks.positive(f"{field}.{k}", v) for k, v in value.items()}


def _topology(field: str, value: Any) -> Topology:
    try:
        return Topology(value)
    except ValueError:
        known = ", ".join(t.value for t in Topology)
        raise SpecError(f"{field} must be one of {known}, got {shown(value)}") from None


def load_hardware(path: str | Path) -> HardwareSpec:
    """Read a hardware TOML file into a :class:`HardwareSpec`."""
    root = Fields(read_toml(path, "hardware"), "")
    name = root.take("name", string, Path(path).stem)
    description = root.take("description", string, f"from {path}")
    acc = root.table("accelerator")
    efficiency_given = acc.has("efficiency")
    curve = acc.take("matmul_efficiency", _curve_points, ())
    accelerator = Accelerator(
        acc.take("name", string, name),
        acc.take("peak_flops_per_s", _peaks),
        # required without a curve (Fields.take's error names it), optional with one
        efficiency=acc.take("efficiency", checks.fraction, *((None,) if curve else ())),
        memory_bytes=acc.take("memory_bytes", checks.positive_or_inf),
        memory_bandwidth_bytes_per_s=acc.take("memory_bandwidth_bytes_per_s", checks.rate),
        kernel_overhead_s=acc.take("kernel_overhead_s", checks.non_negative, 0.0),
        transfers_use_compute=acc.take("transfers_use_compute", boolean, False),
        source=str(path),
        matmul_efficiency=curve,
        memory_bandwidth_efficiency=acc.take("memory_bandwidth_efficiency", checks.fraction, 1.0),
        reduction_bandwidth_fraction=acc.take("reduction_bandwidth_fraction", checks.fraction, 1.0),
        random_bandwidth_fraction=acc.take("random_bandwidth_fraction", checks.fraction, 1.0),
        runtime_reserve_bytes=acc.take("runtime_reserve_bytes", checks.non_negative, 0.0),
        fragmentation_fraction=acc.take("fragmentation_fraction", checks.slack, 0.0),
        efficiency_given=efficiency_given,
        host_link_bandwidth_bytes_per_s=acc.take(
            "host_link_bandwidth_bytes_per_s", checks.rate, None
        ),
        host_memory_bandwidth_bytes_per_s=acc.take(
            "host_memory_bandwidth_bytes_per_s", checks.rate, None
        ),
    )
    acc.done()
    net = root.table("network")
    topology = net.take("topology", _topology)
    link = Link(
        net.take("link_name", string, topology.value),
        net.take("bandwidth_bytes_per_s", checks.rate),
        net.take("latency_s", checks.non_negative),
        net.take("collective_bandwidth_bytes_per_s", checks.rate, None),
    )
    message_overhead_s = net.take("message_overhead_s", checks.non_negative, 0.0)
    inter_node_link = None
    devices_per_node = None
    if topology is Topology.HIERARCHICAL:
        devices_per_node = net.take("devices_per_node", checks.positive_int)
        inter_node_link = Link(
            net.take("inter_node_link_name", string, "inter-node"),
            net.take("inter_node_bandwidth_bytes_per_s", checks.rate),
            net.take("inter_node_latency_s", checks.non_negative),
            net.take("inter_node_collective_bandwidth_bytes_per_s", checks.rate, None),
        )
    torus_columns = (
        net.take("torus_columns", checks.positive_int, None)
        if topology is Topology.TORUS_2D
        else None
    )
    net.done()
    root.done()
    return HardwareSpec(
        name,
        description,
        accelerator,
        topology,
        link,
        inter_node_link=inter_node_link,
        devices_per_node=devices_per_node,
        torus_columns=torus_columns,
        message_overhead_s=message_overhead_s,
    )


def _curve_points(field: str, value: Any) -> tuple[tuple[float, float], ...]:
    """A list of ``[flops, fraction]`` pairs (checked by :class:`Accelerator`)."""
    if not isinstance(value, list) or not value:
        raise SpecError(
            f"{field} must be a non-empty list of [flops, fraction] pairs, got {shown(value)}"
        )
    return tuple(tuple(pair) if isinstance(pair, list) else pair for pair in value)


def hardware_toml(spec: HardwareSpec) -> str:
    """``spec`` as a hardware TOML file that :func:`load_hardware` reads back to an equal
    spec: a catalogue entry to start a user's own from."""
    import json

    acc = spec.accelerator
    peaks = ", ".join(f"{json.dumps(k)} = {number(v)}" for k, v in acc.peak_flops_per_s.items())
    lines = [
        f"name = {json.dumps(spec.name)}",
        f"description = {json.dumps(spec.description)}",
        "",
        "[accelerator]",
        *([f"name = {json.dumps(acc.name)}"] if acc.name != spec.name else []),
        f"peak_flops_per_s = {{ {peaks} }}",
        *_efficiency_lines(acc, number),
        f"memory_bytes = {number(acc.memory_bytes)}",
        f"memory_bandwidth_bytes_per_s = {number(acc.memory_bandwidth_bytes_per_s)}",
        f"kernel_overhead_s = {number(acc.kernel_overhead_s)}",
        f"transfers_use_compute = {str(acc.transfers_use_compute).lower()}",
    ]
    if acc.matmul_efficiency:
        points = ", ".join(f"[{number(f)}, {number(e)}]" for f, e in acc.matmul_efficiency)
        lines.append(f"matmul_efficiency = [{points}]")
    lines += [
        f"memory_bandwidth_efficiency = {number(acc.memory_bandwidth_efficiency)}",
        f"reduction_bandwidth_fraction = {number(acc.reduction_bandwidth_fraction)}",
        f"random_bandwidth_fraction = {number(acc.random_bandwidth_fraction)}",
        f"runtime_reserve_bytes = {number(acc.runtime_reserve_bytes)}",
        f"fragmentation_fraction = {number(acc.fragmentation_fraction)}",
    ]
    for host in ("host_link_bandwidth_bytes_per_s", "host_memory_bandwidth_bytes_per_s"):
        if getattr(acc, host) is not None:
            lines.append(f"{host} = {number(getattr(acc, host))}")
    lines += [
        "",
        "[network]",
        f"topology = {json.dumps(spec.topology.value)}",
        f"link_name = {json.dumps(spec.link.name)}",
        f"bandwidth_bytes_per_s = {number(spec.link.bandwidth_bytes_per_s)}",
        f"latency_s = {number(spec.link.latency_s)}",
    ]
    if spec.link.collective_bandwidth_bytes_per_s is not None:
        bus = spec.link.collective_bandwidth_bytes_per_s
        lines.append(f"collective_bandwidth_bytes_per_s = {number(bus)}")
    lines.append(f"message_overhead_s = {number(spec.message_overhead_s)}")
    if spec.topology is Topology.HIERARCHICAL:
        inter = spec.inter_node_link
        assert inter is not None and spec.devices_per_node is not None
        lines += [
            f"devices_per_node = {spec.devices_per_node}",
            f"inter_node_link_name = {json.dumps(inter.name)}",
            f"inter_node_bandwidth_bytes_per_s = {number(inter.bandwidth_bytes_per_s)}",
            f"inter_node_latency_s = {number(inter.latency_s)}",
        ]
        if inter.collective_bandwidth_bytes_per_s is not None:
            bus = inter.collective_bandwidth_bytes_per_s
            lines.append(f"inter_node_collective_bandwidth_bytes_per_s = {number(bus)}")
    if spec.topology is Topology.TORUS_2D and spec.torus_columns is not None:
        lines.append(f"torus_columns = {spec.torus_columns}")
    return "\n".join(lines) + "\n"


def resolve_hardware(name_or_path: str) -> HardwareSpec:
    """A catalogue name, or a path to a ``.toml`` file."""
    from pipesim.hardware.catalogue import hardware

    if name_or_path.endswith(".toml") or Path(name_or_path).suffix == ".toml":
        return load_hardware(name_or_path)
    return hardware(name_or_path)
