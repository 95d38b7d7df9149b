"""Infinity in a hardware TOML: every bandwidth (the link's, its collective bus bandwidth, the
inter-node link's two, the memory's) takes ``inf`` alike, an ideal link or memory as
:class:`pipesim.hardware.network.Link` takes it (``checks.rate``: at least 1 per second,
infinity allowed); every other number refuses it. A hostile pass read the two collective and
link bandwidths as the only ones that take it: they are not, and refusing them alone would
make the fields disagree with each other and with ``Link``."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from pipesim.common.checks import SpecError
from pipesim.hardware.toml_spec import hardware_toml, load_hardware

HIERARCHICAL = """
name = "box"
[accelerator]
peak_flops_per_s = { bf16 = 312e12 }
efficiency = 0.5
memory_bytes = 85899345920
memory_bandwidth_bytes_per_s = 2.039e12
kernel_overhead_s = 4e-6
[network]
topology = "hierarchical"
bandwidth_bytes_per_s = 300e9
latency_s = 4e-6
collective_bandwidth_bytes_per_s = 231.6e9
message_overhead_s = 2.5e-4
devices_per_node = 8
inter_node_bandwidth_bytes_per_s = 25e9
inter_node_latency_s = 5e-6
inter_node_collective_bandwidth_bytes_per_s = 20e9
"""
BANDWIDTHS = (
    "memory_bandwidth_bytes_per_s",
    "bandwidth_bytes_per_s",
    "collective_bandwidth_bytes_per_s",
    "inter_node_bandwidth_bytes_per_s",
    "inter_node_collective_bandwidth_bytes_per_s",
)
OTHERS = (
    "efficiency",
    "kernel_overhead_s",
    "latency_s",
    "message_overhead_s",
    "devices_per_node",
    "inter_node_latency_s",
)


def _with(tmp_path: Path, field: str, value: str) -> Path:
    path = tmp_path / "hw.toml"
    path.write_text(re.sub(rf"^{field} = .*$", f"{field} = {value}", HIERARCHICAL, flags=re.M))
    return path


@pytest.mark.parametrize("field", BANDWIDTHS)
def test_every_bandwidth_takes_infinity_and_writes_it_back(tmp_path: Path, field: str) -> None:
    spec = load_hardware(_with(tmp_path, field, "inf"))
    assert f"{field} = inf" in hardware_toml(spec)
    assert load_hardware(_with(tmp_path, field, "inf")) == spec


@pytest.mark.parametrize("field", BANDWIDTHS)
def test_every_bandwidth_refuses_nan_and_a_crawl(tmp_path: Path, field: str) -> None:
    for value in ("nan", "0.5"):
        with pytest.raises(SpecError, match=rf"{field} must be a number >= 1 \(per second\)"):
            load_hardware(_with(tmp_path, field, value))


@pytest.mark.parametrize("field", OTHERS)
def test_the_other_numbers_refuse_infinity(tmp_path: Path, field: str) -> None:
    with pytest.raises(SpecError, match=rf"{field} must be .*, got inf"):
        load_hardware(_with(tmp_path, field, "inf"))


def test_an_ideal_inter_node_link_moves_any_size_in_its_latency(tmp_path: Path) -> None:
    spec = load_hardware(_with(tmp_path, "inter_node_bandwidth_bytes_per_s", "inf"))
    assert spec.inter_node_link is not None
    assert spec.inter_node_link.bandwidth_bytes_per_s == math.inf
