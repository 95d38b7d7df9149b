"""Network routes: remembered per pair, outside the network's value."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from pipesim.hardware.network import Link, Network, Topology


def test_a_route_is_remembered_per_pair_and_not_part_of_the_network_s_value() -> None:
    """The same route object for the same pair (numpy integers too); equality, hashing and
    replace ignore what was remembered; a device that is not an integer is refused rather than
    answered with the route of the integer it equals."""
    network = Network(4, Topology.RING, Link("l", 1e9, 1e-6))
    first = network.route(0, 2)
    assert network.route(np.int64(0), np.int64(2)) is first
    fresh = Network(4, Topology.RING, Link("l", 1e9, 1e-6))
    assert fresh == network and hash(fresh) == hash(network)
    strided = dataclasses.replace(network, rank_stride=2)
    assert strided.route(0, 2).channels != first.channels  # its own routes, not the copy's
    with pytest.raises(TypeError):
        network.route(1.0, 2)  # type: ignore[arg-type]
