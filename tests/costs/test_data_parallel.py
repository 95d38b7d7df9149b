"""The data-parallel gradient communication: which groups, which collectives, how it joins
the costs, with ZeRO-1 and with bucketed overlap; every figure by hand."""

from __future__ import annotations

import pytest

from pipesim.costs.data_parallel import (
    BUCKET_BYTES,
    exposed_sync_s,
    gradient_sync_s,
    tied_embedding_sync_s,
    with_data_parallel,
)
from pipesim.costs.pipeline_costs import PipelineCosts, StageCosts
from pipesim.hardware.network import Link, Network, Topology
from pipesim.parallel.config import Parallelism
from pipesim.parallel.ranks import RankLayout


def test_with_data_parallel_adds_the_all_reduce_to_the_optimizer_step() -> None:
    """2 replicas of a 2-device pipeline; 1 GB of gradients per stage at 1 GB/s: a ring
    all-reduce over 2 ranks moves 2(2-1)/2 x 1 GB: 1 s."""
    stage = StageCosts(1.0, 1.0, 0.0, gradient_bytes=1e9, optimizer_step_s=0.25)
    pipeline = Network(2, Topology.ALL_TO_ALL, Link("l", 1e9, 0.0))
    costs = PipelineCosts((stage, stage), pipeline, samples_per_microbatch=2.0)
    job = Network(4, Topology.ALL_TO_ALL, Link("l", 1e9, 0.0))
    replicated = with_data_parallel(costs, (0, 1), job, Parallelism(data=2))
    assert [s.optimizer_step_s for s in replicated.stages] == [1.25, 1.25]
    assert replicated.samples_per_microbatch == 4.0
    assert with_data_parallel(costs, (0, 1), job, Parallelism()) is costs


def test_zero_1_reduce_scatters_gradients_and_all_gathers_weights() -> None:
    """4 replicas at 1 GB/s: reduce-scatter of 1 GB of gradients (3/4 s) and all-gather of
    0.5 GB of weights (3/8 s)."""
    stage = StageCosts(1.0, 1.0, 0.0, parameter_bytes=0.5e9, gradient_bytes=1e9)
    job = Network(4, Topology.ALL_TO_ALL, Link("l", 1e9, 0.0))
    assert gradient_sync_s(stage, job, [0, 1, 2, 3], 0) == pytest.approx(1.5)
    assert gradient_sync_s(stage, job, [0, 1, 2, 3], 1) == pytest.approx(0.75 + 0.375)


def test_overlap_leaves_what_the_last_backward_does_not_hide() -> None:
    """A 1 GB reduction taking 3 s behind a backward of 2 s (I 1.5 s + W 0.5 s): 1 s
    exposed; behind a backward of 10 s, the last bucket's share, 3 s x 25 MiB / 1 GB."""
    stage = StageCosts(1.0, 1.5, 0.5, gradient_bytes=1e9)
    assert exposed_sync_s(stage, 3.0, False) == 3.0
    assert exposed_sync_s(stage, 3.0, True) == pytest.approx(1.0)
    long = StageCosts(1.0, 9.0, 1.0, gradient_bytes=1e9)
    assert exposed_sync_s(long, 3.0, True) == pytest.approx(3.0 * BUCKET_BYTES / 1e9)


def test_the_groups_follow_megatrons_rank_order() -> None:
    """T = 2, K = 2, D = 2 on servers of 4 (tensor innermost): pipeline device 1's shard is
    held by ranks 2 (replica 0) and 6 (replica 1), in different servers: over the slow link,
    2(2-1)/2 x 1 GB at 1 GB/s."""
    stage = StageCosts(1.0, 1.0, 0.0, gradient_bytes=1e9)
    pipeline = Network(2, Topology.ALL_TO_ALL, Link("l", 1e9, 0.0))
    costs = PipelineCosts((stage, stage), pipeline)
    job = Network(
        8,
        Topology.HIERARCHICAL,
        Link("fast", 1e11, 0.0),
        inter_node_link=Link("slow", 1e9, 0.0),
        devices_per_node=4,
    )
    replicated = with_data_parallel(costs, (0, 1), job, Parallelism(tensor=2, data=2))
    assert [s.optimizer_step_s for s in replicated.stages] == pytest.approx([1.0, 1.0])


def test_tied_embeddings_all_reduce_between_the_end_stages() -> None:
    """A 3-stage pipeline whose last stage holds a 1 GB copy of the first's embeddings (of
    its 2 GB of weights, 4 GB of gradients: the copy's gradient is 2 GB): the two devices
    all-reduce it, 2(2-1)/2 x 2 GB at 1 GB/s = 2 s, before both optimizer steps; the middle
    stage waits for nothing, with or without replicas. Placed V-shaped (last stage on the
    first device) nothing moves."""
    first = StageCosts(1.0, 1.0, 0.0, parameter_bytes=1e9, gradient_bytes=2e9)
    middle = StageCosts(1.0, 1.0, 0.0)
    last = StageCosts(
        1.0, 1.0, 0.0, parameter_bytes=2e9, gradient_bytes=4e9, shared_parameter_bytes=1e9
    )
    layout = RankLayout(1, 3, 1)
    job = Network(3, Topology.ALL_TO_ALL, Link("l", 1e9, 0.0))
    stages = (first, middle, last)
    assert tied_embedding_sync_s(stages, (0, 1, 2), job, layout) == pytest.approx([2, 0, 2])
    assert tied_embedding_sync_s(stages, (0, 1, 0), job, layout) == [0.0, 0.0, 0.0]
    pipeline = Network(3, Topology.ALL_TO_ALL, Link("l", 1e9, 0.0))
    costs = PipelineCosts(stages, pipeline)
    alone = with_data_parallel(costs, (0, 1, 2), job, Parallelism())
    assert [s.optimizer_step_s for s in alone.stages] == pytest.approx([2, 0, 2])
    assert alone.description == costs.description  # no data parallelism to name
    # with 2 replicas: each stage's gradient all-reduce as well (2 GB, 0, 4 GB at 1 GB/s)
    job6 = Network(6, Topology.ALL_TO_ALL, Link("l", 1e9, 0.0))
    both = with_data_parallel(costs, (0, 1, 2), job6, Parallelism(data=2))
    assert [s.optimizer_step_s for s in both.stages] == pytest.approx([2 + 2, 0, 2 + 4])


def _four_replicas() -> tuple[Network, PipelineCosts]:
    job = Network(4, Topology.ALL_TO_ALL, Link("l", 1e9, 0.0))
    stage = StageCosts(
        1.0,
        1.5,
        0.5,
        parameter_bytes=0.0,
        gradient_bytes=0.25e9,
        unsharded_parameter_bytes=0.5e9,
        unsharded_gradient_bytes=1e9,
    )
    one = Network(1, Topology.ALL_TO_ALL, Link("l", 1e9, 0.0))
    return job, PipelineCosts((stage,), one)


def test_fsdp_without_a_pipeline_gathers_in_every_pass_and_reduces_every_backward() -> None:
    """One stage, ZeRO-3 resharded after the forward over 4 replicas at 1 GB/s: the forward
    gathers 0.5 GB (3/8 s, hidden by its 1 s), the backward gathers again and reduce-scatters
    1 GB (3/8 + 3/4 s against 2 s: hidden); nothing waits at the step's end. The collectives
    move the whole weights and gradients, not the shards the rank holds."""
    job, costs = _four_replicas()
    fsdp = with_data_parallel(costs, (0,), job, Parallelism(zero=3, data=4))
    (stage,) = fsdp.stages
    assert (stage.forward_s, stage.backward_s, stage.optimizer_step_s) == (1.0, 2.0, 0.0)
    assert fsdp.samples_per_microbatch is None


def test_what_a_pass_does_not_hide_is_exposed() -> None:
    """The same on a link 4 times slower: the forward's gather takes 1.5 s against 1 s of
    compute (0.5 s exposed, added to F), the backward's 1.5 + 3 s against 2 s (2.5 s, added
    to I)."""
    job = Network(4, Topology.ALL_TO_ALL, Link("l", 0.25e9, 0.0))
    _, costs = _four_replicas()
    fsdp = with_data_parallel(costs, (0,), job, Parallelism(zero=3, data=4))
    (stage,) = fsdp.stages
    assert stage.forward_s == pytest.approx(1.5)
    assert stage.input_grad_s == pytest.approx(1.5 + 2.5)
    assert stage.weight_grad_s == 0.5


def test_zero_2_without_a_pipeline_gathers_the_weights_once_per_step() -> None:
    """ZeRO-2: the gradients reduce-scattered in each backward (3/4 s, hidden by 2 s), the
    updated weights all-gathered once after the optimizer step (3/8 s)."""
    job, costs = _four_replicas()
    (stage,) = with_data_parallel(costs, (0,), job, Parallelism(zero=2, data=4)).stages
    assert stage.optimizer_step_s == pytest.approx(0.375)
    assert (stage.forward_s, stage.backward_s) == (1.0, 2.0)


@pytest.mark.parametrize("zero", [1, 2, 3])
def test_inside_a_pipeline_every_stage_moves_what_zero_1_moves(zero: int) -> None:
    """Two stages: PyTorch defers ZeRO-2/3's gradient sync to the step's last backward and
    keeps the gathered weights, so each stage reduce-scatters its 1 GB of gradients (3/4 s)
    and gathers its 0.5 GB of weights (3/8 s) once per step, as ZeRO-1 does."""
    _, single = _four_replicas()
    stage = single.stages[0]
    pipeline = Network(2, Topology.ALL_TO_ALL, Link("l", 1e9, 0.0))
    costs = PipelineCosts((stage, stage), pipeline)
    job8 = Network(8, Topology.ALL_TO_ALL, Link("l", 1e9, 0.0))
    stages = with_data_parallel(costs, (0, 1), job8, Parallelism(zero=zero, data=4)).stages
    assert [s.optimizer_step_s for s in stages] == pytest.approx([1.125, 1.125])
    assert [s.forward_s for s in stages] == [1.0, 1.0]


def test_context_ranks_reduce_their_gradients_without_replicas() -> None:
    """D = 1, CP = 2: the two context ranks hold the same weights and all-reduce their 1 GB of
    gradients (2(2-1)/2 x 1 GB at 1 GB/s: 1 s), as Megatron reduces over D x CP."""
    stage = StageCosts(1.0, 1.0, 0.0, gradient_bytes=1e9)
    pipeline = Network(2, Topology.ALL_TO_ALL, Link("l", 1e9, 0.0))
    costs = PipelineCosts((stage, stage), pipeline, samples_per_microbatch=1.0)
    job = Network(4, Topology.ALL_TO_ALL, Link("l", 1e9, 0.0))
    synced = with_data_parallel(costs, (0, 1), job, Parallelism(context=2))
    assert [s.optimizer_step_s for s in synced.stages] == pytest.approx([1.0, 1.0])
    assert synced.samples_per_microbatch == 1.0  # the CP ranks share each sample
