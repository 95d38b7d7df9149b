"""A folded MoE layout (ETP != T) in the costs: the routed experts' gradients reduced over
the expert data group of T x CP x D / (ETP x EP) ranks, even where the dense layers have no
replicas, by hand on a uniform network; end to end on DeepSeek-V2-Lite: the experts' state per
rank, the expert-tensor group's gathers timed on its ranks, the FLOPs unchanged."""

from __future__ import annotations

import dataclasses

import pytest

from pipesim.config import RunConfig
from pipesim.costs.data_parallel import sync_times_s
from pipesim.costs.model_on_hardware import model_on_hardware
from pipesim.costs.pipeline_costs import StageCosts
from pipesim.costs.spec_derived import costs_from_model
from pipesim.hardware import hardware
from pipesim.hardware.collectives import Collective, collective_time_s
from pipesim.hardware.network import Link, Network, Topology
from pipesim.parallel.config import Parallelism
from pipesim.parallel.groups import TensorGroup
from pipesim.parallel.ranks import RankLayout
from pipesim.workload import model

# 4 ranks at 1 GB/s, no latency; 4 GB of gradients, 3 GB of them the routed experts'
JOB = Network(4, Topology.ALL_TO_ALL, Link("l", 1e9, 0.0))
STAGE = StageCosts(
    1.0, 1.0, 1.0, parameter_bytes=2e9, gradient_bytes=4e9, expert_gradient_bytes=3e9
)


def test_experts_replicated_inside_the_tensor_group_are_reduced_there() -> None:
    """T = 4, ETP = 1, EP = 2, D = 1: no dense replica, but each expert whole on ranks 0 and
    2: its 3 GB all-reduced over them, 2·(1/2)·3 = 3 s; under ZeRO-1 reduce-scattered
    (1.5 s) and its 1.5 GB of weights gathered (0.75 s)."""
    layout = RankLayout(4, 1, 1, expert=2, expert_tensor=1)
    assert layout.expert_data_group(0) == [0, 2]
    par = Parallelism(tensor=4, sequence_parallel=True, expert=2, expert_tensor=1)
    assert sync_times_s([STAGE], [0], JOB, layout, par) == [pytest.approx(3.0)]
    zero = dataclasses.replace(par, zero=1)
    assert sync_times_s([STAGE], [0], JOB, layout, zero) == [pytest.approx(2.25)]
    # the same ranks at ETP = T hold no replica of anything
    plain = Parallelism(tensor=4, sequence_parallel=True)
    assert sync_times_s([STAGE], [0], JOB, RankLayout(4, 1, 1), plain) == [0.0]


# --- end to end: DeepSeek-V2-Lite (27 blocks, the first dense; 64 experts, top-6, h 2048) ----

PARTITION = [15, 14]


def _run(tensor: int, etp: int | None, zero: int = 1, data: int = 4) -> RunConfig:
    par = Parallelism(
        tensor=tensor,
        sequence_parallel=tensor > 1,
        expert=4,
        data=data,
        zero=zero,
        expert_tensor=etp,
    )
    return RunConfig(model("deepseek-v2-lite"), hardware("h100"), par)


def test_folding_doubles_the_experts_weights_not_their_sharded_state() -> None:
    """T = 2, EP = 4, D = 4 under ZeRO-1: at ETP = 1 a rank holds its 16 experts whole (at
    ETP = 2 halved): their weights and gradients double; the optimizer state and master
    weights, sharded over EDP = 2 rather than 1, stay; the FLOPs are the same."""
    default, folded = _run(2, None), _run(2, 1)
    assert (default.parallelism.expert_data, folded.parallelism.expert_data) == (1, 2)
    costs = {
        etp: model_on_hardware(run, 2, 1, 1, PARTITION) for etp, run in ((2, default), (1, folded))
    }
    layers = default.sharded().layers
    experts = [
        sum(layer.expert_parameters for layer in layers[:15]),
        sum(layer.expert_parameters for layer in layers[15:]),
    ]
    built = default.trained_model
    for index, (base, other) in enumerate(zip(costs[2].stages, costs[1].stages, strict=True)):
        weights = experts[index] * built.weight_bytes_per_parameter
        grads = experts[index] * built.gradient_bytes_per_parameter
        assert other.parameter_bytes - base.parameter_bytes == pytest.approx(weights)
        assert other.gradient_bytes - base.gradient_bytes == pytest.approx(grads)
        assert other.optimizer_bytes == pytest.approx(base.optimizer_bytes)
        assert other.master_weight_bytes == pytest.approx(base.master_weight_bytes)
    assert costs[1].flops == costs[2].flops


def test_the_expert_tensor_gathers_run_on_the_expert_tensor_group() -> None:
    """T = 1, ETP = 2, EP = 4, D = 8 (pipeline of 2: rank p + 2d): the expert-tensor group is
    ranks 0 and 2, the EP group 0, 4, 8, 12; each MoE block's F and I wait for an all-gather
    and a reduce-scatter of e·u·k·s·h/t = 2·2·6·4096·2048 bytes over the first."""
    run = _run(1, 2, zero=0, data=8)
    layout = run.parallelism.layout(2)
    job = run.job_hardware.network(layout.devices)
    group = TensorGroup.of(job, layout)
    assert group is not None
    assert (group.expert_tensor_ranks, group.expert_ranks) == ((0, 2), (0, 4, 8, 12))
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
        for where in (group, dataclasses.replace(group, expert_tensor_ranks=()))
    ]
    size = 2 * 2 * 6 * 4096 * 2048
    pair = sum(
        collective_time_s(job, group.expert_tensor_ranks, kind, size)
        for kind in (Collective.ALL_GATHER, Collective.REDUCE_SCATTER)
    )
    assert pair > 0
    for timed, silent, blocks in zip(costs[0].stages, costs[1].stages, (13, 13), strict=True):
        assert timed.forward_s - silent.forward_s == pytest.approx(blocks * pair)
        assert timed.input_grad_s - silent.input_grad_s == pytest.approx(blocks * pair)
        assert timed.weight_grad_s == silent.weight_grad_s
