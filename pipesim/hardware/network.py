"""Links, topologies and networks: which channels a transfer between two devices occupies.

Links are full duplex: each direction of a link is its own *channel*. The link model is the
alpha-beta model: a message's bytes occupy a channel for ``bytes / bandwidth`` (beta), one
message at a time, first come first served; its latency (alpha: propagation, software overhead)
is a delay that messages in flight share, not an occupancy. A message that starts at ``t``
frees its channels at ``t + bytes / bandwidth`` and arrives at
``t + latency + bytes / bandwidth``. So two 0-byte messages on one channel never wait for
each other, however long the latency.

Routes of several hops (ring, torus) are cut-through: the bytes stream over every hop of the
route at once at the narrowest hop's bandwidth, so the message holds every channel of its route
for ``bytes / narrowest bandwidth`` from the moment all of them are free, and the hops'
latencies add up (no store-and-forward of the whole message at each hop).
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, TypeVar, overload

import numpy as np
import numpy.typing as npt

from pipesim.common import checks
from pipesim.common.checks import SpecError
from pipesim.hardware.accelerator import Accelerator

FloatArray = npt.NDArray[np.float64]
Number = TypeVar("Number", float, FloatArray)


@dataclass(frozen=True)
class Link:
    """One point-to-point link (or a bus): bandwidth per direction and one-way latency.

    ``collective_bandwidth_bytes_per_s`` is the bus bandwidth a ring collective reaches per link
    (NCCL's ``busbw``: the link rate less the protocol's overhead, measured with nccl-tests);
    None means the point-to-point ``bandwidth_bytes_per_s``.
    """

    name: str
    bandwidth_bytes_per_s: float
    latency_s: float
    collective_bandwidth_bytes_per_s: float | None = None

    def __post_init__(self) -> None:
        checks.name("link.name", self.name)
        checks.rate(f"link {self.name!r} bandwidth_bytes_per_s", self.bandwidth_bytes_per_s)
        checks.non_negative(f"link {self.name!r} latency_s", self.latency_s)
        if self.collective_bandwidth_bytes_per_s is not None:
            checks.rate(
                f"link {self.name!r} collective_bandwidth_bytes_per_s",
                self.collective_bandwidth_bytes_per_s,
            )

    @property
    def bus_bandwidth_bytes_per_s(self) -> float:
        """The bandwidth a ring collective gets on this link (see the class docstring)."""
        if self.collective_bandwidth_bytes_per_s is None:
            return self.bandwidth_bytes_per_s
        return self.collective_bandwidth_bytes_per_s


class Topology(Enum):
    """How devices are joined.

    * ``all-to-all``: a dedicated link per pair (NVSwitch, or NVLink between every pair).
    * ``shared-bus``: one bus for all devices, full duplex (P100s on PCIe without NVLink).
    * ``ring``: device i linked to i±1 mod K; routes take the shorter way round.
    * ``torus-2d``: TPU interconnect, devices in rows x columns with wrap-around links,
      dimension-ordered routing (columns first).
    * ``hierarchical``: nodes of ``devices_per_node`` all-to-all devices, nodes joined by an
      inter-node link per pair of nodes (GPU servers over InfiniBand).
    """

    ALL_TO_ALL = "all-to-all"
    SHARED_BUS = "shared-bus"
    RING = "ring"
    TORUS_2D = "torus-2d"
    HIERARCHICAL = "hierarchical"


@dataclass(frozen=True)
class Route:
    """What a transfer from one device to another occupies and how long it takes.

    ``latency_s`` is the sum of the hops' latencies; ``bandwidth_bytes_per_s`` the narrowest
    hop's bandwidth (cut-through, see the module docstring).
    """

    channels: tuple[str, ...]
    latency_s: float
    bandwidth_bytes_per_s: float

    @overload
    def occupancy_s(self, size_bytes: float) -> float: ...
    @overload
    def occupancy_s(self, size_bytes: FloatArray) -> FloatArray: ...
    def occupancy_s(self, size_bytes: Any) -> Any:
        """How long a message of ``size_bytes`` holds the route's channels (elementwise over
        an array of sizes): :func:`occupancy_s`."""
        return occupancy_s(size_bytes, self.bandwidth_bytes_per_s)

    @overload
    def transfer_time_s(self, size_bytes: float) -> float: ...
    @overload
    def transfer_time_s(self, size_bytes: FloatArray) -> FloatArray: ...
    def transfer_time_s(self, size_bytes: Any) -> Any:
        """From the moment the message starts to its arrival (elementwise over an array of
        sizes): :func:`transfer_time_s`."""
        return transfer_time_s(size_bytes, self.latency_s, self.bandwidth_bytes_per_s)


def occupancy_s(size_bytes: Number, bandwidth_bytes_per_s: Number) -> Number:
    """The alpha-beta model's beta term, the one place it is written: a message holds its
    channels for bytes / bandwidth, 0 on an ideal link of infinite bandwidth (IEEE: a finite
    size over infinity is 0). Scalars, or numpy arrays elementwise (the fast engine costs all
    its transfers at once with it; a route's methods and the SimPy engine one at a time), in
    the same IEEE operation either way."""
    return size_bytes / bandwidth_bytes_per_s


def transfer_time_s(size_bytes: Number, latency_s: Number, bandwidth_bytes_per_s: Number) -> Number:
    """From a message's start to its arrival: latency (alpha) + :func:`occupancy_s` (an ideal
    link moves any size in its latency). Scalars or numpy arrays elementwise."""
    return latency_s + occupancy_s(size_bytes, bandwidth_bytes_per_s)


_MOST_ROUTES = 1 << 16
"""The most routes one network remembers (a few MB): the pairs a pipeline exchanges on are
few; a caller walking every pair of a large cluster computes the rest each time."""


@dataclass(frozen=True)
class Network:
    """``devices`` devices joined by ``link`` in ``topology``.

    ``inter_node_link`` and ``devices_per_node`` apply to the hierarchical topology;
    ``torus_columns`` to the 2-D torus (rows = devices / columns).

    ``rank_stride`` places device d of this network at rank ``d * rank_stride`` of the cluster
    the topology describes: a pipeline's devices are T ranks apart when tensor parallelism
    puts T ranks in between (:mod:`pipesim.parallel.ranks`), so with T = 8 on nodes of 8 every
    pipeline hop crosses nodes. Routes and channels are named by those cluster ranks.
    """

    devices: int
    topology: Topology
    link: Link
    inter_node_link: Link | None = None
    devices_per_node: int | None = None
    torus_columns: int | None = None
    rank_stride: int = 1
    message_overhead_s: float = 0.0
    # routes already asked for, by (source, destination): a partition search asks for the same
    # few pairs many thousand times (not a field of the value: dataclasses.replace starts a
    # new one, and equality and hashing leave it out)
    _routes: dict[tuple[int, int], Route] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        checks.positive_int("network.devices", self.devices)
        checks.positive_int("network.rank_stride", self.rank_stride)
        checks.non_negative("network.message_overhead_s", self.message_overhead_s)
        if not isinstance(self.topology, Topology):
            raise SpecError(
                f"network.topology must be one of {[t.value for t in Topology]}, got "
                f"{self.topology!r}"
            )
        if self.topology is Topology.HIERARCHICAL:
            if self.inter_node_link is None or self.devices_per_node is None:
                raise SpecError(
                    "network: the hierarchical topology needs devices_per_node and an inter-node "
                    "link"
                )
            checks.positive_int("network.devices_per_node", self.devices_per_node)
        if self.topology is Topology.TORUS_2D:
            ranks = self.ranks
            columns = self.torus_columns or _torus_columns(ranks)
            checks.positive_int("network.torus_columns", columns)
            if ranks % columns:
                raise SpecError(
                    f"network.torus_columns must divide the {ranks} devices, got {columns}"
                )
            object.__setattr__(self, "torus_columns", columns)

    @property
    def ranks(self) -> int:
        """How many ranks the topology spans: ``devices * rank_stride``."""
        return self.devices * self.rank_stride

    def route(self, source: int, destination: int) -> Route:
        """The channels, latency and bandwidth of a transfer ``source`` -> ``destination``
        (remembered per pair: a route depends on nothing else). Devices are integers (numpy's
        too); another number is refused, not looked up as the integer it equals."""
        source, destination = operator.index(source), operator.index(destination)
        known = self._routes.get((source, destination))
        if known is not None:
            return known
        found = self._route(source, destination)
        if len(self._routes) < _MOST_ROUTES:
            self._routes[(source, destination)] = found
        return found

    def _route(self, source: int, destination: int) -> Route:
        for what, device in (("source", source), ("destination", destination)):
            if not 0 <= device < self.devices:
                raise SpecError(
                    f"route {what} device {device} is outside the network's 0..{self.devices - 1}"
                )
        if source == destination:
            return Route((), 0.0, math.inf)
        source, destination = source * self.rank_stride, destination * self.rank_stride
        if self.topology is Topology.ALL_TO_ALL:
            return self._over([(self.link, f"{self.link.name} {source}->{destination}")])
        if self.topology is Topology.SHARED_BUS:
            direction = "up" if destination > source else "down"
            return self._over([(self.link, f"{self.link.name} {direction}")])
        if self.topology is Topology.RING:
            return self._over([(self.link, c) for c in self._ring_hops(source, destination)])
        if self.topology is Topology.TORUS_2D:
            return self._over([(self.link, c) for c in self._torus_hops(source, destination)])
        return self._hierarchical(source, destination)

    def _over(self, hops: list[tuple[Link, str]]) -> Route:
        return Route(
            tuple(channel for _, channel in hops),
            self.message_overhead_s + sum(link.latency_s for link, _ in hops),
            min(link.bandwidth_bytes_per_s for link, _ in hops),
        )

    def _ring_hops(
        self,
        source: int,
        destination: int,
        size: int | None = None,
        label: str | None = None,
        offset: int = 0,
        stride: int = 1,
    ) -> list[str]:
        size = self.ranks if size is None else size
        label = self.link.name if label is None else label
        forward = (destination - source) % size
        step = 1 if forward <= size - forward else -1
        hops, here = [], source
        while here != destination:
            nxt = (here + step) % size
            hops.append(f"{label} {offset + here * stride}->{offset + nxt * stride}")
            here = nxt
        return hops

    def _torus_hops(self, source: int, destination: int) -> list[str]:
        columns = self.torus_columns or 1
        rows = self.ranks // columns
        (src_row, src_col), (dst_row, dst_col) = (
            divmod(source, columns),
            divmod(destination, columns),
        )
        hops = self._ring_hops(src_col, dst_col, columns, self.link.name, src_row * columns)
        hops += self._ring_hops(src_row, dst_row, rows, self.link.name, dst_col, columns)
        return hops

    def _hierarchical(self, source: int, destination: int) -> Route:
        per_node = self.devices_per_node or 1
        inter = self.inter_node_link
        if inter is None:  # pragma: no cover - __post_init__ refuses this
            raise SpecError("network: the hierarchical topology needs an inter-node link")
        src_node, dst_node = source // per_node, destination // per_node
        if src_node == dst_node:
            return self._over([(self.link, f"{self.link.name} {source}->{destination}")])
        return self._over([(inter, f"{inter.name} node{src_node}->node{dst_node}")])

    def channels(self) -> tuple[str, ...]:
        """Every channel some route uses, for trace tracks."""
        seen: dict[str, None] = {}
        for source in range(self.devices):
            for destination in range(self.devices):
                for channel in self.route(source, destination).channels:
                    seen.setdefault(channel)
        return tuple(seen)


def _torus_columns(devices: int) -> int:
    """The most square factorization: columns = the largest divisor <= sqrt(devices)."""
    best = 1
    for candidate in range(1, math.isqrt(devices) + 1):
        if devices % candidate == 0:
            best = candidate
    return devices // best


@dataclass(frozen=True)
class Cluster:
    """The devices of a pipeline: one kind of accelerator, joined by a network."""

    accelerator: Accelerator
    network: Network

    @property
    def devices(self) -> int:
        """How many devices the cluster has."""
        return self.network.devices
