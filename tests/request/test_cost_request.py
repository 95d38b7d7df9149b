"""Cost requests: what a bad request is refused with."""

from __future__ import annotations

import pytest

from pipesim.common.checks import SpecError
from pipesim.request.cost_request import ModelRequest


@pytest.mark.parametrize("replicas", [0, -1])
def test_model_request_refuses_a_data_parallel_below_one(replicas: int) -> None:
    request = ModelRequest("uniform-4", "a100", data_parallel=replicas)
    with pytest.raises(
        SpecError, match=rf"^data_parallel must be an integer >= 1, got {replicas}$"
    ):
        request.build(2, 1, 4)
