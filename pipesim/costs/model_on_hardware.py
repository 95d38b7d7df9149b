"""The one composition of a resolved model and hardware spec into pipeline costs.

``pipesim simulate --model ... --hardware ...`` (through
:class:`~pipesim.request.cost_request.ModelRequest`), the planner's finalists, the sweeps and
the reproductions all build their costs here, so a plan and the simulation of the same settings
see the very same numbers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from pipesim.costs.data_parallel import with_data_parallel
from pipesim.costs.pipeline_costs import PipelineCosts
from pipesim.costs.spec_derived import costs_from_model
from pipesim.hardware.catalogue import HardwareSpec
from pipesim.schedules.placement import looped
from pipesim.workload.model import Model


def model_on_hardware(
    model: Model,
    hardware: HardwareSpec,
    devices: int,
    chunks: int,
    microbatch_size: float,
    partition: Sequence[int] | None = None,
    *,
    optimizer: bool = True,
    dtype: str | None = None,
    data_parallel: int = 1,
    placement: Sequence[int] | None = None,
) -> PipelineCosts:
    """``model`` (in ``dtype`` when given) cut into K·v stages (``partition`` layers per stage,
    or the even split) on K = ``devices`` devices of ``hardware``, at ``microbatch_size``
    samples per micro-batch; with ``data_parallel`` replicas, each stage's gradient all-reduce
    (:mod:`pipesim.costs.data_parallel`) over the cluster of K x ``data_parallel`` devices,
    stage s on pipeline device ``placement[s]`` (by default the looped placement)."""
    if dtype is not None:
        model = dataclasses.replace(model, dtype=dtype)
    costs = costs_from_model(
        model,
        hardware.cluster(devices),
        devices * chunks,
        microbatch_size,
        partition,
        optimizer=optimizer,
    )
    if data_parallel == 1:
        return costs
    where = looped(devices, chunks) if placement is None else tuple(placement)
    return with_data_parallel(
        costs, where, hardware.network(devices * data_parallel), data_parallel
    )
