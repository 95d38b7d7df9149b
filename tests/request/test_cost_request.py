"""Cost requests: what a bad request is refused with."""

from __future__ import annotations

import pytest

from pipesim.common.checks import SpecError
from pipesim.config import RunConfig
from pipesim.hardware import hardware
from pipesim.parallel.config import Parallelism
from pipesim.request.cost_request import ModelRequest
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
