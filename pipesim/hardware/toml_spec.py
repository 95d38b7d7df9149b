"""``--hardware FILE.toml``: a user's own cluster, validated field by field.

Example::

    name = "my-a100-box"

    [accelerator]
    peak_flops_per_s = { bf16 = 312e12, fp32 = 19.5e12 }
    efficiency = 0.5
    memory_bytes = 85899345920
    memory_bandwidth_bytes_per_s = 2.039e12
    kernel_overhead_s = 4e-6          # optional, default 0
    transfers_use_compute = false     # optional

    [network]
    topology = "all-to-all"           # shared-bus, ring, torus-2d, hierarchical
    bandwidth_bytes_per_s = 300e9
    latency_s = 4e-6
    # hierarchical: devices_per_node, inter_node_bandwidth_bytes_per_s, inter_node_latency_s
    # torus-2d: torus_columns (optional)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipesim.common import checks
from pipesim.common.checks import SpecError
from pipesim.errors import shown
from pipesim.files.toml_reader import Fields, boolean, read_toml, string
from pipesim.hardware.accelerator import Accelerator
from pipesim.hardware.catalogue import HardwareSpec
from pipesim.hardware.network import Link, Topology


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
    accelerator = Accelerator(
        name,
        acc.take("peak_flops_per_s", _peaks),
        efficiency=acc.take("efficiency", checks.fraction),
        memory_bytes=acc.take("memory_bytes", checks.positive_or_inf),
        memory_bandwidth_bytes_per_s=acc.take("memory_bandwidth_bytes_per_s", checks.rate),
        kernel_overhead_s=acc.take("kernel_overhead_s", checks.non_negative, 0.0),
        transfers_use_compute=acc.take("transfers_use_compute", boolean, False),
        source=str(path),
    )
    acc.done()
    net = root.table("network")
    topology = net.take("topology", _topology)
    link = Link(
        topology.value,
        net.take("bandwidth_bytes_per_s", checks.rate),
        net.take("latency_s", checks.non_negative),
    )
    inter_node_link = None
    devices_per_node = None
    if topology is Topology.HIERARCHICAL:
        devices_per_node = net.take("devices_per_node", checks.positive_int)
        inter_node_link = Link(
            "inter-node",
            net.take("inter_node_bandwidth_bytes_per_s", checks.rate),
            net.take("inter_node_latency_s", checks.non_negative),
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
    )


def resolve_hardware(name_or_path: str) -> HardwareSpec:
    """A catalogue name, or a path to a ``.toml`` file."""
    from pipesim.hardware.catalogue import hardware

    if name_or_path.endswith(".toml") or Path(name_or_path).suffix == ".toml":
        return load_hardware(name_or_path)
    return hardware(name_or_path)
