"""The composition of a model on hardware: what it adds around the stages' own costs."""

from __future__ import annotations

import pytest

from pipesim.config import RunConfig
from pipesim.costs.model_on_hardware import model_on_hardware, with_gathered_messages
from pipesim.costs.pipeline_costs import PipelineCosts, StageCosts
from pipesim.hardware import hardware
from pipesim.hardware.collectives import Collective, collective_time_s
from pipesim.hardware.network import Link, Network, Topology
from pipesim.parallel.config import Parallelism, Recompute
from pipesim.parallel.groups import TensorGroup
from pipesim.workload import model


def test_received_messages_are_gathered_over_the_tensor_group() -> None:
    """Three stages on devices 0, 1, 1 (the last two share a device), T = 4 ranks at 1 GB/s
    with no latency: each rank received 1 GB (its quarter of 4 GB), so an all-gather of 4 GB
    moves 3/4 of it, 3 s. Stage 1 gathers its input (from device 0) before its forward and
    nothing else (its neighbour stage 2 is on its own device); stage 0 gathers the gradient
    of its output before its input-gradient pass; stage 2 nothing."""
    stage = StageCosts(1.0, 2.0, 1.0, input_bytes=1e9, output_bytes=1e9, full_backward_s=3.5)
    costs = PipelineCosts((stage, stage, stage), Network(2, Topology.ALL_TO_ALL, Link("l", 1, 0)))
    job = Network(8, Topology.ALL_TO_ALL, Link("l", 1e9, 0.0))
    gathered = with_gathered_messages(costs, (0, 1, 1), TensorGroup(job, (0, 1, 2, 3)))
    first, middle, last = gathered.stages
    assert first.forward_s == 1.0 and first.input_grad_s == pytest.approx(5.0)
    assert first.full_backward_s == pytest.approx(6.5)
    assert middle.forward_s == pytest.approx(4.0) and middle.input_grad_s == 2.0
    assert last == stage


def test_sequence_parallelism_sends_a_shard_nobody_gathers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """megatron-39.1b, T = 8 on two A100 servers (16 ranks): without sequence parallelism the
    second stage's forward pays the all-gather of the first's output over its server's 8
    ranks (the message is 1/8 of it per rank); with it, the message is the sequence's 1/8
    already and nothing is added."""
    import pipesim.costs.model_on_hardware as composition

    built, a100 = model("megatron-39.1b"), hardware("a100")
    for sp in (False, True):
        parallelism = Parallelism(tensor=8, sequence_parallel=sp, recompute=Recompute.parse("none"))
        real = model_on_hardware(RunConfig(built, a100, parallelism), 2, 1, 1)
        with monkeypatch.context() as patch:
            patch.setattr(composition, "with_gathered_messages", lambda costs, *_: costs)
            raw = model_on_hardware(RunConfig(built, a100, parallelism), 2, 1, 1)
        if sp:
            assert real == raw
            continue
        size = raw.stages[1].input_bytes * 8
        gather = collective_time_s(a100.network(16), range(8), Collective.ALL_GATHER, size)
        assert gather > 0
        assert real.stages[1].forward_s == pytest.approx(raw.stages[1].forward_s + gather)
        assert real.stages[0].input_grad_s == pytest.approx(raw.stages[0].input_grad_s + gather)
        assert real.stages[0].forward_s == raw.stages[0].forward_s
