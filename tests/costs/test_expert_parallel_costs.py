"""Expert parallelism in the costs: the routed experts' gradients reduced (and under ZeRO their
weights gathered) over the expert data group, by hand on a uniform network; and end to end on
DeepSeek-V2-Lite: the all-to-alls added to F and I, the expert state 1/EP of a rank's, the
FLOPs unchanged."""

from __future__ import annotations

import dataclasses

import pytest

from pipesim.config import RunConfig
from pipesim.costs.data_parallel import (
    expert_sharding,
    pass_sync_s,
    step_sync_s,
    sync_times_s,
)
from pipesim.costs.model_on_hardware import model_on_hardware
from pipesim.costs.pipeline_costs import StageCosts, merge_layers
from pipesim.costs.spec_derived import costs_from_model
from pipesim.hardware import hardware
from pipesim.hardware.collectives import Collective, collective_time_s
from pipesim.hardware.network import Link, Network, Topology
from pipesim.parallel.config import Parallelism
from pipesim.parallel.groups import TensorGroup
from pipesim.parallel.ranks import RankLayout
from pipesim.parallel.sharding import ReshardPolicy, Sharding
from pipesim.workload import model

# 4 replicas of a one-device pipeline at 1 GB/s, no latency: the data group is ranks 0-3; with
# EP = 2 the experts are divided over ranks (0, 1), and ranks 0 and 2 hold the same ones.
JOB = Network(4, Topology.ALL_TO_ALL, Link("l", 1e9, 0.0))
LAYOUT = RankLayout(1, 1, 4, 1, 2)
# 4 GB of fp32 gradients, 3 GB of them the routed experts'; 2 GB of bf16 weights, 1.5 GB.
STAGE = StageCosts(
    1.0, 1.0, 1.0, parameter_bytes=2e9, gradient_bytes=4e9, expert_gradient_bytes=3e9
)


def test_the_groups() -> None:
    assert LAYOUT.data_group(0) == [0, 1, 2, 3]
    assert LAYOUT.expert_group(0) == [0, 1]
    assert LAYOUT.expert_data_group(0) == [0, 2]


def test_expert_gradients_are_all_reduced_over_the_expert_data_group() -> None:
    """ZeRO-0: the dense 1 GB all-reduced over 4 ranks, 2·3/4 s; the experts' 3 GB over 2,
    2·1/2·3 s: 4.5 s, where everything over the 4 ranks would take 2·3/4·4 = 6 s."""
    parallelism = Parallelism(data=4, expert=2)
    assert sync_times_s([STAGE], [0], JOB, LAYOUT, parallelism) == [pytest.approx(1.5 + 3.0)]
    without = dataclasses.replace(STAGE, expert_gradient_bytes=0.0)
    assert sync_times_s([without], [0], JOB, LAYOUT, parallelism) == [pytest.approx(6.0)]


def test_zero_1_shards_the_experts_over_the_expert_data_group() -> None:
    """ZeRO-1: the dense part reduce-scattered (3/4 x 1 GB) and gathered (3/4 x 0.5 GB) over
    4 ranks; the experts' reduce-scattered (1/2 x 3 GB) and gathered (1/2 x 1.5 GB) over 2."""
    parallelism = Parallelism(data=4, expert=2, zero=1)
    dense = 0.75 * 1.0 + 0.75 * 0.5
    experts = 0.5 * 3.0 + 0.5 * 1.5
    assert sync_times_s([STAGE], [0], JOB, LAYOUT, parallelism) == [pytest.approx(dense + experts)]
    regime = expert_sharding(parallelism, [0, 2], pipelined=True)
    assert regime == Sharding(1, 2, True, False)
    # an expert data group of one rank (D x CP = EP) reduces nothing
    alone = expert_sharding(parallelism, [0], pipelined=True)
    assert step_sync_s(STAGE, JOB, [0, 1], Sharding(1, 2), [0], alone) == pytest.approx(
        0.5 * 1.0 + 0.5 * 0.5
    )


def test_zero_3_without_a_pipeline_gathers_and_reduces_the_experts_over_their_group() -> None:
    """ZeRO-3, one stage (weights resharded after each forward): the forward gathers the
    dense 0.5 GB over 4 ranks and the experts' 1.5 GB over 2; the backward gathers them again
    and reduce-scatters 1 GB over 4 and 3 GB over 2."""
    dense = Sharding(3, 4, False, True)
    experts = Sharding(3, 2, False, True)
    forward, backward = pass_sync_s(STAGE, JOB, [0, 1, 2, 3], dense, [0, 2], experts)
    gather = 0.75 * 0.5 + 0.5 * 1.5
    assert forward == pytest.approx(gather)
    assert backward == pytest.approx(gather + 0.75 * 1.0 + 0.5 * 3.0)
    assert expert_sharding(
        Parallelism(data=4, expert=2, zero=3, reshard_after_forward=ReshardPolicy.DEFAULT),
        [0, 2],
        pipelined=False,
    ) == Sharding(3, 2, False, True)


def test_without_expert_parallelism_everything_is_reduced_over_the_data_group() -> None:
    """EP = 1 (whatever a stage says of its experts): one all-reduce of the 4 GB, 6 s."""
    layout = RankLayout(1, 1, 4)
    assert sync_times_s([STAGE], [0], JOB, layout, Parallelism(data=4)) == [pytest.approx(6.0)]


def test_a_merged_stage_sums_its_layers_expert_gradients() -> None:
    layer = StageCosts(1.0, 1.0, 1.0, gradient_bytes=4.0, expert_gradient_bytes=3.0)
    assert merge_layers([layer, layer], 0.0).expert_gradient_bytes == 6.0
    with pytest.raises(Exception, match="expert_gradient_bytes must not exceed"):
        StageCosts(1.0, 1.0, 1.0, gradient_bytes=1.0, expert_gradient_bytes=2.0)


# --- end to end: DeepSeek-V2-Lite (27 blocks, the first dense; 64 experts, top-6, h 2048) ----

PARTITION = [15, 14]  # the embedding and blocks 0-13 (13 MoE blocks); blocks 14-26 and the head
MOE_BLOCKS = (13, 13)


def _run(ep: int, zero: int = 0) -> RunConfig:
    return RunConfig(
        model("deepseek-v2-lite"), hardware("h100"), Parallelism(expert=ep, data=4, zero=zero)
    )


@pytest.mark.parametrize("ep", [2, 4])
def test_the_all_to_alls_add_to_each_moe_blocks_passes(ep: int) -> None:
    """Each MoE block's F and I wait for two all-to-alls of e·k·s·h = 2·6·4096·2048 bytes
    over the EP ranks: the stages' F and I with them, less the same costs with no expert group
    to run them on, are 2 x (the stage's MoE blocks) x one all-to-all."""
    run = _run(ep)
    layout = run.parallelism.layout(2)
    job = run.job_hardware.network(layout.devices)
    group = TensorGroup.of(job, layout)
    assert group is not None and group.expert_ranks == tuple(range(0, 2 * ep, 2))
    costs = [
        costs_from_model(
            run.trained_model,
            run.job_hardware.cluster(2),
            2,
            1,
            PARTITION,
            parallelism=run.parallelism,
            tensor_group=where,
        )
        for where in (group, dataclasses.replace(group, expert_ranks=()))
    ]
    one = collective_time_s(job, group.expert_ranks, Collective.ALL_TO_ALL, 2 * 6 * 4096 * 2048)
    assert one > 0
    for timed, silent, blocks in zip(costs[0].stages, costs[1].stages, MOE_BLOCKS, strict=True):
        assert timed.forward_s - silent.forward_s == pytest.approx(2 * blocks * one)
        assert timed.input_grad_s - silent.input_grad_s == pytest.approx(2 * blocks * one)
        assert timed.weight_grad_s == silent.weight_grad_s


def test_ep_grows_the_passes_and_divides_the_expert_state() -> None:
    """EP = 1, 2, 4 with D = 4: each stage's F and I grow with the all-to-alls; its weights,
    gradients, Adam state and master weights lose (1 - 1/EP) of the routed experts'; the
    FLOPs per micro-batch are the same."""
    built = model("deepseek-v2-lite")
    runs = {ep: model_on_hardware(_run(ep), 2, 1, 1, PARTITION) for ep in (1, 2, 4)}
    per_parameter = {
        "parameter_bytes": built.weight_bytes_per_parameter,
        "gradient_bytes": built.gradient_bytes_per_parameter,
        "optimizer_bytes": built.optimizer_bytes_per_parameter,
        "master_weight_bytes": built.master_weight_bytes_per_parameter,
    }
    layers = built.layers
    experts = [
        sum(layer.expert_parameters for layer in layers[:15]),
        sum(layer.expert_parameters for layer in layers[15:]),
    ]
    for ep in (2, 4):
        for index, (base, other) in enumerate(zip(runs[1].stages, runs[ep].stages, strict=True)):
            for field, size in per_parameter.items():
                fallen = experts[index] * size * (1 - 1 / ep)
                assert getattr(base, field) - getattr(other, field) == pytest.approx(fallen)
        assert runs[ep].flops == runs[1].flops
    for stage in range(2):
        forwards = [runs[ep].stages[stage].forward_s for ep in (1, 2, 4)]
        backwards = [runs[ep].stages[stage].input_grad_s for ep in (1, 2, 4)]
        assert forwards == sorted(forwards) and len(set(forwards)) == 3
        assert backwards == sorted(backwards) and len(set(backwards)) == 3


def test_zero_1_keeps_the_experts_optimizer_state_per_rank() -> None:
    """Megatron's distributed optimizer shards the E/EP experts' state over the D x CP / EP
    ranks holding them: per rank the same as the E experts' over D x CP, whatever EP; and
    each stage's expert gradients are named for their reduction."""
    built = model("deepseek-v2-lite")
    runs = {ep: model_on_hardware(_run(ep, zero=1), 2, 1, 1, PARTITION) for ep in (1, 2, 4)}
    for ep in (2, 4):
        for base, other in zip(runs[1].stages, runs[ep].stages, strict=True):
            assert other.optimizer_bytes == pytest.approx(base.optimizer_bytes)
            assert other.master_weight_bytes == pytest.approx(base.master_weight_bytes)
            assert other.expert_gradient_bytes > 0
    experts = sum(layer.expert_parameters for layer in built.layers[15:])
    assert runs[2].stages[1].expert_gradient_bytes == pytest.approx(
        experts / 2 * built.gradient_bytes_per_parameter
    )
