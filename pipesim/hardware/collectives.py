"""Collectives over a group of ranks: ring all-reduce, all-gather and reduce-scatter.

The one place their time is written; tensor parallelism's per-layer collectives, the
data-parallel gradient reduction and ZeRO's gather of parameters all cost theirs here.

The ring model (Patarasuk and Yuan; NCCL's ring algorithm), for a buffer of S bytes over n ranks:

=================  ==============  =====================================
collective          steps           time
=================  ==============  =====================================
all-reduce          2(n - 1)        2(n-1)/n · S / B + 2(n-1) · latency
all-gather          n - 1           (n-1)/n · S / B + (n-1) · latency
reduce-scatter      n - 1           (n-1)/n · S / B + (n-1) · latency
=================  ==============  =====================================

S is the whole buffer (the gathered output of an all-gather, the input of a reduce-scatter),
as nccl-tests count it; (n-1)/n and 2(n-1)/n are its bus factors, so B is the *bus bandwidth*
(``busbw``) a link reaches, :attr:`~pipesim.hardware.network.Link.bus_bandwidth_bytes_per_s`.
The ring runs at the slowest link it crosses, and each step waits for the largest latency.

On a hierarchical cluster (nodes of ``devices_per_node``, one inter-node NIC per device, as
DGX servers have) a group spanning nodes crosses them on as many rails at once as it has
members in each node (NCCL builds one ring per rail): the inter-node bandwidth of the group is
the inter-node link's times the fewest members any of its nodes holds, and the intra-node links
bound it when a node holds two or more.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum

from pipesim.common.sized_memo import SizedMemo
from pipesim.hardware.network import Network, Topology


class Collective(Enum):
    """A collective operation."""

    ALL_REDUCE = "all-reduce"
    ALL_GATHER = "all-gather"
    REDUCE_SCATTER = "reduce-scatter"
    ALL_TO_ALL = "all-to-all"
    SEND_RECV = "send-recv"

    def steps(self, ranks: int) -> int:
        """Ring steps over ``ranks`` ranks: 2(n-1) for an all-reduce, n-1 for an all-gather,
        a reduce-scatter, an all-to-all (n-1 exchanges of 1/n of the buffer, which NCCL runs
        at once: one latency, see :func:`collective_time_s`) or a ring of point-to-point
        sends passing every rank's block around (context parallelism's keys and values)."""
        return 2 * (ranks - 1) if self is Collective.ALL_REDUCE else ranks - 1


def ring_bandwidth_and_latency(network: Network, group: Sequence[int]) -> tuple[float, float]:
    """The bus bandwidth and per-step latency of a ring over ``group`` (devices of
    ``network``; see the module docstring). Every topology but the hierarchical one joins its
    devices by one kind of link; a step waits for the longest route between ring
    neighbours."""
    if network.topology is Topology.HIERARCHICAL:
        return _hierarchical(network, group)
    members = len(group)
    latency = max(
        network.route(group[i], group[(i + 1) % members]).latency_s for i in range(members)
    )
    return network.link.bus_bandwidth_bytes_per_s, latency - network.message_overhead_s


def _hierarchical(network: Network, group: Sequence[int]) -> tuple[float, float]:
    """The ring's bus bandwidth and latency on a hierarchical network: set by how many of
    the group's ranks each node holds (remembered per network and group: a planner asks
    for the same data groups' many times)."""
    members = tuple(group)
    return _HIERARCHICAL.get(
        (network, members), lambda: _hierarchical_uncached(network, members), lambda _: len(members)
    )


# the ranks the remembered groups may hold together: about 8 MB of keys, whatever the groups'
# sizes (a data group of a 65,536-GPU job has thousands of ranks)
_HIERARCHICAL: SizedMemo[tuple[Network, tuple[int, ...]], tuple[float, float]] = SizedMemo(
    1_000_000
)


def _hierarchical_uncached(network: Network, group: Sequence[int]) -> tuple[float, float]:
    per_node = network.devices_per_node or 1
    inter = network.inter_node_link
    stride = network.rank_stride
    members: dict[int, int] = {}
    for rank in group:
        node = rank * stride // per_node
        members[node] = members.get(node, 0) + 1
    intra = network.link
    if len(members) == 1:
        return intra.bus_bandwidth_bytes_per_s, intra.latency_s
    if inter is None:  # pragma: no cover - the Network refuses a hierarchy without it
        raise ValueError("a hierarchical network needs an inter-node link")
    rails = min(members.values())
    bandwidth = inter.bus_bandwidth_bytes_per_s * rails
    latency = inter.latency_s
    if max(members.values()) > 1:
        bandwidth = min(bandwidth, intra.bus_bandwidth_bytes_per_s)
        latency = max(latency, intra.latency_s)
    return bandwidth, latency


def collective_time_s(
    network: Network, group: Sequence[int], kind: Collective, size_bytes: float
) -> float:
    """Time of ``kind`` on a buffer of ``size_bytes`` over the ranks ``group`` of ``network``
    (0 for a group of one or an empty buffer)."""
    ranks = len(group)
    if ranks <= 1 or size_bytes <= 0:
        return 0.0
    bandwidth, latency = ring_bandwidth_and_latency(network, group)
    steps = kind.steps(ranks)
    if kind is Collective.ALL_TO_ALL:  # nccl-tests: busbw = algbw x (n-1)/n, one round
        return steps / ranks * size_bytes / bandwidth + latency
    return steps / ranks * size_bytes / bandwidth + steps * latency
