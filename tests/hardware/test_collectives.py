"""Ring collectives on hand-computed clusters: flat, and two-level (servers joined by a slower
link, one NIC per device)."""

from __future__ import annotations

from typing import Any

import pytest

from pipesim.common.sized_memo import SizedMemo
from pipesim.hardware.collectives import Collective, collective_time_s
from pipesim.hardware.network import Link, Network, Topology

GB = 1e9


def _two_level(latency_inter: float = 0.0) -> Network:
    """16 devices in servers of 4: 100 GB/s (bus 80 GB/s) inside, 10 GB/s (bus 8) between."""
    return Network(
        16,
        Topology.HIERARCHICAL,
        Link("nvlink", 100 * GB, 1e-6, collective_bandwidth_bytes_per_s=80 * GB),
        inter_node_link=Link("ib", 10 * GB, latency_inter, collective_bandwidth_bytes_per_s=8 * GB),
        devices_per_node=4,
    )


def test_flat_ring_literally() -> None:
    """4 ranks, 1 GB, 1 GB/s, 1 us: all-reduce 2(4-1)/4 s + 6 us; all-gather and
    reduce-scatter (4-1)/4 s + 3 us; nothing for one rank or no bytes."""
    network = Network(4, Topology.ALL_TO_ALL, Link("l", 1 * GB, 1e-6))
    group = [0, 1, 2, 3]
    assert collective_time_s(network, group, Collective.ALL_REDUCE, GB) == pytest.approx(1.5 + 6e-6)
    for kind in (Collective.ALL_GATHER, Collective.REDUCE_SCATTER):
        assert collective_time_s(network, group, kind, GB) == pytest.approx(0.75 + 3e-6)
    assert collective_time_s(network, [2], Collective.ALL_REDUCE, GB) == 0.0
    assert collective_time_s(network, group, Collective.ALL_REDUCE, 0.0) == 0.0


def test_inside_one_server_the_fast_links_bus_bandwidth() -> None:
    """Ranks 0-3 (one server): 2(4-1)/4 x 1 GB / 80 GB/s + 6 x 1 us."""
    expected = 1.5 * GB / (80 * GB) + 6e-6
    assert collective_time_s(_two_level(), [0, 1, 2, 3], Collective.ALL_REDUCE, GB) == (
        pytest.approx(expected)
    )


def test_one_rank_per_server_runs_at_one_nic() -> None:
    """Ranks 0, 4, 8, 12 (a data-parallel group with T = 4): every ring step crosses servers
    on one NIC each: 2(4-1)/4 x 1 GB / 8 GB/s + 6 x 5 us."""
    network = _two_level(latency_inter=5e-6)
    expected = 1.5 * GB / (8 * GB) + 6 * 5e-6
    assert collective_time_s(network, [0, 4, 8, 12], Collective.ALL_REDUCE, GB) == (
        pytest.approx(expected)
    )


def test_whole_servers_use_every_rail() -> None:
    """All 16 ranks: 4 per server, so 4 rails of 8 GB/s (32) carry the crossing, below the
    80 GB/s inside: 2(16-1)/16 x 1 GB / 32 GB/s + 30 x 1 us (the larger latency)."""
    expected = (30 / 16) * GB / (32 * GB) + 30 * 1e-6
    assert collective_time_s(_two_level(), list(range(16)), Collective.ALL_REDUCE, GB) == (
        pytest.approx(expected)
    )


def test_two_per_server_use_two_rails() -> None:
    """Ranks 0, 1, 4, 5: two per server, two rails of 8 GB/s: (4-1)/4 x 1 GB / 16 GB/s for an
    all-gather, 3 x 1 us."""
    expected = 0.75 * GB / (16 * GB) + 3e-6
    assert collective_time_s(_two_level(), [0, 1, 4, 5], Collective.ALL_GATHER, GB) == (
        pytest.approx(expected)
    )


def test_point_to_point_overhead_is_not_paid_by_collectives() -> None:
    """A 50 us message overhead raises every route's latency, not a collective's steps."""
    network = Network(4, Topology.ALL_TO_ALL, Link("l", 1 * GB, 1e-6), message_overhead_s=50e-6)
    assert network.route(0, 1).latency_s == pytest.approx(51e-6)
    assert collective_time_s(network, [0, 1], Collective.ALL_REDUCE, GB) == pytest.approx(
        1.0 + 2e-6
    )


def test_remembered_rings_hold_a_bounded_number_of_ranks_and_the_same_answers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The hierarchical ring's figures are remembered per network and group, the oldest
    forgotten once the groups hold more ranks than the bound; an answer is the same whether
    remembered or not."""
    from pipesim.hardware import collectives

    memo: SizedMemo[Any, Any] = SizedMemo(10)
    monkeypatch.setattr(collectives, "_HIERARCHICAL", memo)
    network = _two_level(1e-6)
    groups = [[0, 4], [1, 5, 9], [2, 3], [0, 1, 2, 3, 4, 5, 6, 7], [8, 12]]
    first = [collective_time_s(network, g, Collective.ALL_REDUCE, 1e9) for g in groups]
    assert memo.held <= 10
    assert memo.held == sum(len(key[1]) for key in memo.oldest_first())
    again = [collective_time_s(network, g, Collective.ALL_REDUCE, 1e9) for g in groups]
    assert again == first
    fresh = [collectives._hierarchical_uncached(network, g) for g in groups]
    assert [collectives._hierarchical(network, g) for g in groups] == fresh
