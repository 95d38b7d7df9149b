"""Cost requests: what a bad request is refused with."""

from __future__ import annotations

import dataclasses

import pytest

from pipesim.common.checks import SpecError
from pipesim.config import RunConfig
from pipesim.engine import simulate
from pipesim.hardware import hardware
from pipesim.parallel.config import Parallelism
from pipesim.request.cost_request import ModelRequest, SyntheticRequest
from pipesim.schedules import build
from pipesim.workload import model


@pytest.mark.parametrize("replicas", [0, -1])
def test_a_data_parallel_below_one_is_refused(replicas: int) -> None:
    with pytest.raises(
        SpecError, match=rf"^data_parallel must be an integer >= 1, got {replicas}$"
    ):
        Parallelism(data=replicas)


def test_a_model_request_splits_the_batch_of_its_run_over_every_replica() -> None:
    """uniform-4's default batch over 2 replicas and 4 micro-batches; a batch the replicas'
    micro-batches do not divide is refused naming the field."""
    run = RunConfig(model("uniform-4"), hardware("a100"), Parallelism(data=2))
    costs = ModelRequest(run, batch=16).build(2, 1, 4)
    assert costs.samples_per_microbatch == 16 / 4
    with pytest.raises(SpecError, match=r"^batch 12 must be a positive multiple of the 4 micro"):
        ModelRequest(run, batch=12).build(2, 1, 4)


def test_synthetic_costs_for_dualpipe_are_the_model_stages_on_both_copies() -> None:
    """``--costs F,B,W`` is one device's share of the model: DualPipe cuts the model into K
    stages (v = 1), each copy's stage costing its model stage's; the copies' gradient
    all-reduce has no bytes to cost and the description says so."""
    schedule = build("dualpipe", 4, 8)
    costs = SyntheticRequest(1.0, 2.0, 0.5).build(4, schedule.chunks, 8, schedule)
    assert len(costs.stages) == schedule.stages == 8
    assert {(s.forward_s, s.input_grad_s, s.weight_grad_s) for s in costs.stages} == {
        (1.0, 2.0, 0.5)
    }
    assert costs.description.endswith("; 2 model copies, their gradient all-reduce not costed")
    assert SyntheticRequest(1.0, 2.0).build(4, 1, 8, build("1f1b", 4, 8)).stages == (
        SyntheticRequest(1.0, 2.0).build(4, 1, 8).stages
    )


def test_a_model_on_hardware_for_dualpipe_costs_each_copy_and_their_all_reduce() -> None:
    """gpt-1.3b on A100s: each copy's stage costs its model stage's, as a 1F1B of the same
    K cuts the model, but for the optimizer step, which also waits for the all-reduce of the
    stage's gradients between the two devices holding its copies; each device holds both
    copies' weights."""
    run = RunConfig(model("gpt-1.3b"), hardware("a100"))
    schedule = build("dualpipe", 4, 8)
    costs = ModelRequest(run, batch=32).build(4, schedule.chunks, 8, schedule)
    plain = ModelRequest(run, batch=32).build(4, 1, 8, build("1f1b", 4, 8))
    assert len(costs.stages) == 8
    note = "; 2 model copies, their gradient all-reduce before the optimizer step"
    assert costs.description.endswith(note)
    for s, stage in enumerate(costs.stages):
        model_stage = plain.stages[schedule.model_stage(s)]
        assert dataclasses.replace(stage, optimizer_step_s=0.0) == dataclasses.replace(
            model_stage, optimizer_step_s=0.0
        )
        assert stage.optimizer_step_s > model_stage.optimizer_step_s  # the all-reduce
    result = simulate(schedule, costs)
    one_f_one_b = simulate(build("1f1b", 4, 8), plain)
    weights = [d.memory.static.weights for d in one_f_one_b.per_device]
    for device, summary in enumerate(result.per_device):
        assert summary.memory.static.weights == pytest.approx(weights[device] + weights[3 - device])
