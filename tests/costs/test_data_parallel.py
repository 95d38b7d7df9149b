"""The data-parallel all-reduce: ring times literally, and how it joins the costs."""

from __future__ import annotations

import pytest

from pipesim.costs.data_parallel import replica_group, ring_allreduce_s, with_data_parallel
from pipesim.costs.pipeline_costs import PipelineCosts, StageCosts
from pipesim.hardware.network import Link, Network, Topology


def test_ring_time_literal() -> None:
    """4 replicas, 1 GB at 1 GB/s, 1 us: 2(4-1)/4 s of bytes and 2(4-1) latencies."""
    network = Network(4, Topology.ALL_TO_ALL, Link("l", 1e9, 1e-6))
    assert ring_allreduce_s(network, [0, 1, 2, 3], 1e9) == pytest.approx(1.5 + 6e-6)
    assert ring_allreduce_s(network, [2], 1e9) == 0.0


def test_ring_takes_the_narrowest_link() -> None:
    """Servers of 2 joined by a 10x slower link: a ring across servers runs at its speed."""
    network = Network(
        4,
        Topology.HIERARCHICAL,
        Link("fast", 1e10, 0.0),
        inter_node_link=Link("slow", 1e9, 0.0),
        devices_per_node=2,
    )
    assert replica_group(1, 2, 2) == [1, 3]
    assert ring_allreduce_s(network, [1, 3], 1e9) == pytest.approx(1.0)
    assert ring_allreduce_s(network, [0, 1], 1e9) == pytest.approx(0.1)


def test_with_data_parallel_adds_to_the_optimizer_step() -> None:
    stage = StageCosts(1.0, 1.0, 0.0, gradient_bytes=1e9, optimizer_step_s=0.25)
    pipeline = Network(2, Topology.ALL_TO_ALL, Link("l", 1e9, 0.0))
    costs = PipelineCosts((stage, stage), pipeline, samples_per_microbatch=2.0)
    cluster = Network(4, Topology.ALL_TO_ALL, Link("l", 1e9, 0.0))
    replicated = with_data_parallel(costs, (0, 1), cluster, 2)
    assert [s.optimizer_step_s for s in replicated.stages] == [1.25, 1.25]
    assert replicated.samples_per_microbatch == 4.0
    assert with_data_parallel(costs, (0, 1), cluster, 1) is costs
