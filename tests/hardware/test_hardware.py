"""Hardware specs: catalogue, topologies' routes, field checks and TOML files."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from pipesim.common.checks import SpecError
from pipesim.hardware import (
    Accelerator,
    Link,
    Network,
    Topology,
    hardware,
    hardware_names,
    load_hardware,
    resolve_hardware,
)
from pipesim.hardware.catalogue import CATALOGUE
from pipesim.hardware.toml_spec import hardware_toml


def test_catalogue_has_the_papers_hardware() -> None:
    assert {"tpu-v2", "tpu-v3", "p100-pcie", "v100-nvlink", "a100", "h100", "h200", "cpu"} <= set(
        hardware_names()
    )
    v3 = hardware("tpu-v3").accelerator
    assert v3.peak_flops_per_s["bf16"] == 61.5e12 and v3.memory_bytes == 16 * 2**30
    assert hardware("tpu-v2").accelerator.memory_bytes == 8 * 2**30
    assert hardware("p100-pcie").topology is Topology.SHARED_BUS
    assert hardware("h100").accelerator.peak_flops_per_s["bf16"] == 989e12
    assert hardware("h200").accelerator.memory_bandwidth_bytes_per_s == 4.8e12
    for name in hardware_names():
        assert hardware(name).accelerator.source


def test_unknown_hardware_lists_the_catalogue() -> None:
    with pytest.raises(SpecError, match=r"^unknown hardware 'tpu-v9'; choose one of: tpu-v2, "):
        hardware("tpu-v9")


def test_roofline_takes_the_slower_of_compute_and_memory() -> None:
    acc = Accelerator("x", {"bf16": 100.0}, 0.5, 1e9, 10.0, kernel_overhead_s=1.0)
    assert acc.compute_time_s(100.0, 10.0, "bf16") == 2.0 + 1.0  # compute bound
    assert acc.compute_time_s(10.0, 100.0, "bf16") == 10.0 + 1.0  # memory bound
    assert acc.compute_time_s(0.0, 0.0, "bf16") == 0.0
    with pytest.raises(SpecError, match=r"dtype 'fp8' has no peak FLOP/s on accelerator 'x'"):
        acc.compute_time_s(1.0, 1.0, "fp8")


def routes(network: Network) -> dict[tuple[int, int], tuple[str, ...]]:
    return {
        (s, d): network.route(s, d).channels
        for s in range(network.devices)
        for d in range(network.devices)
        if s != d
    }


def test_all_to_all_gives_each_direction_of_each_pair_its_own_channel() -> None:
    net = Network(3, Topology.ALL_TO_ALL, Link("nv", 100.0, 1.0))
    assert routes(net)[(0, 1)] == ("nv 0->1",)
    assert routes(net)[(1, 0)] == ("nv 1->0",)
    assert len(set(routes(net).values())) == 6
    assert net.route(0, 1).transfer_time_s(50.0) == 1.5
    assert net.route(2, 2).channels == ()


def test_shared_bus_is_one_channel_per_direction() -> None:
    net = Network(4, Topology.SHARED_BUS, Link("pcie", 10.0, 0.0))
    assert set(routes(net).values()) == {("pcie up",), ("pcie down",)}


def test_ring_takes_the_shorter_way() -> None:
    net = Network(6, Topology.RING, Link("r", 10.0, 1.0))
    assert net.route(0, 2).channels == ("r 0->1", "r 1->2")
    assert net.route(0, 5).channels == ("r 0->5",)
    assert net.route(1, 4).latency_s == 3.0


def test_torus_routes_columns_then_rows() -> None:
    net = Network(8, Topology.TORUS_2D, Link("ici", 10.0, 1.0))
    assert net.torus_columns == 4  # 2 rows x 4 columns
    assert net.route(0, 5).channels == ("ici 0->1", "ici 1->5")
    assert net.route(3, 0).channels == ("ici 3->0",)  # wrap-around


def test_hierarchical_uses_the_inter_node_link_between_nodes() -> None:
    net = Network(16, Topology.HIERARCHICAL, Link("nv", 300.0, 1e-6), Link("ib", 25.0, 1e-5), 8)
    assert net.route(0, 7).channels == ("nv 0->7",)
    assert net.route(7, 8).channels == ("ib node0->node1",)
    assert net.route(7, 8).bandwidth_bytes_per_s == 25.0


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (
            lambda: Link("l", -1.0, 0.0),
            "link 'l' bandwidth_bytes_per_s must be a number >= 1 (per second), got -1.0",
        ),
        (lambda: Link("l", 1.0, -2), "link 'l' latency_s must be a number >= 0, got -2"),
        (
            lambda: Network(0, Topology.RING, Link("l", 1.0, 0.0)),
            "network.devices must be an integer >= 1, got 0",
        ),
        (
            lambda: Network(6, Topology.TORUS_2D, Link("l", 1.0, 0.0), torus_columns=4),
            "network.torus_columns must divide the 6 devices, got 4",
        ),
        (
            lambda: Network(4, Topology.HIERARCHICAL, Link("l", 1.0, 0.0)),
            "network: the hierarchical topology needs devices_per_node and an inter-node link",
        ),
        (
            lambda: Accelerator("a", {"bf16": 1.0}, 1.5, 1.0, 1.0),
            "accelerator.efficiency must be a number in (0, 1], got 1.5",
        ),
        (
            lambda: Accelerator("a", {}, 0.5, 1.0, 1.0),
            "accelerator.peak_flops_per_s must map dtypes to FLOP/s, e.g. {bf16 = 312e12}, got {}",
        ),
        (
            lambda: Accelerator("a", {"bf16": 0}, 0.5, 1.0, 1.0),
            "accelerator.peak_flops_per_s.bf16 must be a number >= 1 (per second), got 0",
        ),
        (
            lambda: Accelerator("a", {"bf16": 1.0}, 0.5, -1.0, 1.0),
            "accelerator.memory_bytes must be a number > 0, got -1.0",
        ),
    ],
)
def test_bad_specs_name_the_field(build: object, message: str) -> None:
    with pytest.raises(SpecError) as error:
        build()  # type: ignore[operator]
    assert str(error.value) == message


GOOD = """
name = "box"
[accelerator]
peak_flops_per_s = { bf16 = 312e12 }
efficiency = 0.5
memory_bytes = 85899345920
memory_bandwidth_bytes_per_s = 2.0e12
[network]
topology = "hierarchical"
bandwidth_bytes_per_s = 300e9
latency_s = 4e-6
devices_per_node = 4
inter_node_bandwidth_bytes_per_s = 25e9
inter_node_latency_s = 1e-5
"""


def test_toml_hardware_loads(tmp_path: Path) -> None:
    path = tmp_path / "box.toml"
    path.write_text(GOOD)
    spec = resolve_hardware(str(path))
    cluster = spec.cluster(8)
    assert spec.name == "box" and cluster.devices == 8
    assert cluster.network.route(3, 4).bandwidth_bytes_per_s == 25e9
    assert load_hardware(path) == spec


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            GOOD.replace("efficiency = 0.5", "efficiency = 2"),
            "accelerator.efficiency must be a number in (0, 1], got 2",
        ),
        (
            GOOD.replace("latency_s = 4e-6", "latency_s = -1"),
            "network.latency_s must be a number >= 0, got -1",
        ),
        (
            GOOD.replace('topology = "hierarchical"', 'topology = "mesh"'),
            "network.topology must be one of all-to-all, shared-bus, ring, torus-2d, hierarchical, "
            "got 'mesh'",
        ),
        (GOOD.replace("efficiency = 0.5", "efficency = 0.5"), "accelerator.efficiency is required"),
        (GOOD + "colour = 1\n", "unknown key(s) in network: colour"),
        (GOOD.replace("[network]", "[net]"), "network is required (a [network] table)"),
        ("name = ", None),
    ],
)
def test_toml_hardware_errors_name_the_field(
    tmp_path: Path, text: str, message: str | None
) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(SpecError) as error:
        load_hardware(path)
    if message is None:
        assert str(error.value).startswith(f"hardware file {str(path)!r}: not valid TOML (")
    else:
        assert str(error.value) == message


@pytest.mark.parametrize("name", sorted(CATALOGUE))
def test_every_catalogue_entry_reads_back_from_its_toml(name: str, tmp_path: Path) -> None:
    """``pipesim hardware show NAME`` writes a file that loads to an equal spec: every field
    of the kernel-level model (efficiency curve, bandwidths, overheads) has a TOML key."""
    path = tmp_path / f"{name}.toml"
    path.write_text(hardware_toml(hardware(name)))
    assert load_hardware(path) == hardware(name)


KERNEL_LEVEL = (
    GOOD.replace(
        "memory_bandwidth_bytes_per_s = 2.0e12\n",
        "memory_bandwidth_bytes_per_s = 2.0e12\n"
        "matmul_efficiency = [[1e9, 0.25], [1e12, 0.75]]\n"
        "memory_bandwidth_efficiency = 0.8\n"
        "reduction_bandwidth_fraction = 0.5\n"
        "random_bandwidth_fraction = 0.7\n"
        "runtime_reserve_bytes = 3e9\n"
        "fragmentation_fraction = 0.1\n",
    )
    + "collective_bandwidth_bytes_per_s = 2.3e11\nmessage_overhead_s = 2.5e-4\n"
    + "inter_node_collective_bandwidth_bytes_per_s = 2.4e10\n"
)


def test_toml_hardware_takes_the_kernel_level_fields(tmp_path: Path) -> None:
    path = tmp_path / "box.toml"
    path.write_text(KERNEL_LEVEL)
    spec = load_hardware(path)
    acc = spec.accelerator
    assert acc.kernel_level and acc.matmul_efficiency == ((1e9, 0.25), (1e12, 0.75))
    # halfway in log(FLOPs) between the points: halfway between their fractions
    assert acc.matmul_fraction(math.sqrt(1e9 * 1e12)) == pytest.approx(0.5)
    assert (acc.memory_bandwidth_efficiency, acc.runtime_reserve_bytes) == (0.8, 3e9)
    assert acc.fragmentation_fraction == 0.1
    assert (acc.reduction_bandwidth_fraction, acc.random_bandwidth_fraction) == (0.5, 0.7)
    assert spec.link.bus_bandwidth_bytes_per_s == 2.3e11
    assert spec.inter_node_link is not None
    assert spec.inter_node_link.bus_bandwidth_bytes_per_s == 2.4e10
    assert spec.message_overhead_s == 2.5e-4
    assert spec.network(8).message_overhead_s == 2.5e-4


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (
            "[[1e9, 0.25], [1e12, 0.75]]",
            "[[1e12, 0.25], [1e9, 0.75]]",
            "accelerator.matmul_efficiency must list increasing FLOPs, got 1e+09 after 1e+12",
        ),
        (
            "[[1e9, 0.25], [1e12, 0.75]]",
            "[[1e9, 1.5]]",
            "accelerator.matmul_efficiency[0] fraction must be a number in (0, 1], got 1.5",
        ),
        (
            "[[1e9, 0.25], [1e12, 0.75]]",
            "[]",
            "accelerator.matmul_efficiency must be a non-empty list of [flops, fraction] pairs, "
            "got []",
        ),
        (
            "[[1e9, 0.25], [1e12, 0.75]]",
            "[1e9]",
            "accelerator.matmul_efficiency[0] must be a [flops, fraction] pair, got 1000000000.0",
        ),
        (
            "memory_bandwidth_efficiency = 0.8",
            "memory_bandwidth_efficiency = 0",
            "accelerator.memory_bandwidth_efficiency must be a number in (0, 1], got 0",
        ),
        (
            "reduction_bandwidth_fraction = 0.5",
            "reduction_bandwidth_fraction = 2",
            "accelerator.reduction_bandwidth_fraction must be a number in (0, 1], got 2",
        ),
        (
            "random_bandwidth_fraction = 0.7",
            "random_bandwidth_fraction = 0",
            "accelerator.random_bandwidth_fraction must be a number in (0, 1], got 0",
        ),
        (
            "runtime_reserve_bytes = 3e9",
            "runtime_reserve_bytes = -1",
            "accelerator.runtime_reserve_bytes must be a number >= 0, got -1",
        ),
        (
            "message_overhead_s = 2.5e-4",
            'message_overhead_s = "fast"',
            "network.message_overhead_s must be a number >= 0, got 'fast'",
        ),
        (
            "collective_bandwidth_bytes_per_s = 2.3e11",
            "collective_bandwidth_bytes_per_s = 0",
            "network.collective_bandwidth_bytes_per_s must be a number >= 1 (per second), got 0",
        ),
    ],
)
def test_kernel_level_fields_are_checked(tmp_path: Path, old: str, new: str, message: str) -> None:
    path = tmp_path / "bad.toml"
    assert old in KERNEL_LEVEL
    path.write_text(KERNEL_LEVEL.replace(old, new, 1))
    with pytest.raises(SpecError) as error:
        load_hardware(path)
    assert str(error.value) == message


def test_unreadable_hardware_file(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"cannot read it \(No such file or directory\)"):
        resolve_hardware(str(tmp_path / "missing.toml"))


def test_infinite_link_moves_any_size_in_its_latency() -> None:
    net = Network(2, Topology.ALL_TO_ALL, Link("l", math.inf, 0.25))
    assert net.route(0, 1).transfer_time_s(1e12) == 0.25


def test_the_link_formulas_are_one_operation_on_scalars_and_arrays() -> None:
    """The fast engine costs every transfer at once with the formulas a route applies to one."""
    import numpy as np

    from pipesim.hardware.network import Route, occupancy_s, transfer_time_s

    sizes = np.array([0.0, 1.0, 3e9, 7.5])
    for bandwidth, latency in ((2e9, 1e-6), (float("inf"), 5e-6)):
        route = Route(("x",), latency, bandwidth)
        assert route.occupancy_s(3e9) == (1.5 if bandwidth == 2e9 else 0.0)
        assert route.transfer_time_s(3e9) == latency + route.occupancy_s(3e9)
        elementwise = occupancy_s(sizes, np.full(4, bandwidth))
        assert elementwise.tolist() == [route.occupancy_s(float(s)) for s in sizes]
        arrivals = transfer_time_s(sizes, np.full(4, latency), np.full(4, bandwidth))
        assert arrivals.tolist() == [route.transfer_time_s(float(s)) for s in sizes]


@pytest.mark.parametrize("rate", [1e-300, 0.5, float("nan")])
def test_a_rate_too_slow_to_be_meant_is_refused_before_it_overflows_any_time(rate: float) -> None:
    """A link of 1e-300 B/s would turn every transfer into an infinite time; it is refused
    where it is stated, naming the field."""
    from pipesim.hardware.network import Link

    with pytest.raises(SpecError, match=r"link 'l' bandwidth_bytes_per_s must be a number >= 1"):
        Link("l", rate, 1e-6)
    assert Link("l", 1.0, 0.0).bandwidth_bytes_per_s == 1.0
    assert Link("l", float("inf"), 0.0).bandwidth_bytes_per_s == float("inf")
