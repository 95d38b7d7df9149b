"""Partition problems from a model on a hardware spec, and the ``--partition`` objectives.

The per-layer costs are exactly those :func:`~pipesim.costs.spec_derived.costs_from_model`
sums into stages (one-layer stages at the micro-batch size), so a partition chosen here and
simulated through ``--partition a,b,c`` sees the very same numbers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from enum import Enum

from pipesim.common.checks import SpecError
from pipesim.costs.pipeline_costs import StageCosts
from pipesim.costs.spec_derived import costs_from_model
from pipesim.hardware.catalogue import HardwareSpec
from pipesim.hardware.network import Cluster, Link, Network, Topology
from pipesim.memory.forms import memory_forms
from pipesim.partition.problem import PartitionProblem
from pipesim.partition.solver import balanced, memory_aware
from pipesim.schedules.placement import looped
from pipesim.schedules.schedule import Schedule
from pipesim.workload.model import Model
from pipesim.workload.stage_layers import even_partition


class Objective(Enum):
    """What ``--partition`` optimizes."""

    BALANCED = "balanced"
    MEMORY_AWARE = "memory-aware"
    EVEN = "even"


def objective(text: str) -> Objective:
    """``text`` as an :class:`Objective`; an unknown one names the valid ones."""
    try:
        return Objective(text)
    except ValueError:
        names = ", ".join(o.value for o in Objective)
        raise SpecError(
            f"--partition must be {names} or layer counts like 3,4,4,3, got {text!r}"
        ) from None


def layer_costs(
    model: Model, cluster: Cluster, microbatch_size: float, *, optimizer: bool = True
) -> tuple[StageCosts, ...]:
    """One :class:`StageCosts` per layer of ``model`` at ``microbatch_size`` on the
    cluster's accelerator (the network plays no part in them)."""
    layers = len(model.layers)
    free = Network(layers, Topology.ALL_TO_ALL, Link("none", math.inf, 0.0))
    costs = costs_from_model(
        model,
        Cluster(cluster.accelerator, free),
        layers,
        microbatch_size,
        [1] * layers,
        optimizer=optimizer,
    )
    return costs.stages


def model_problem(
    model: Model,
    cluster: Cluster,
    microbatch_size: float,
    placement: Sequence[int],
    *,
    rematerialize: bool = False,
    optimizer: bool = True,
    layers: tuple[StageCosts, ...] | None = None,
) -> PartitionProblem:
    """The partitioning problem of ``model`` on ``cluster`` for stages placed by ``placement``.

    ``layers``, when given, are the model's :func:`layer_costs` at ``microbatch_size`` on the
    cluster's accelerator already computed (a caller that caches them across problems)."""
    devices = cluster.devices
    if layers is None:
        layers = layer_costs(model, cluster, microbatch_size, optimizer=optimizer)
    return PartitionProblem(
        layers,
        model.input_bytes * microbatch_size,
        tuple(placement),
        cluster.network,
        (1.0,) * devices,
        (cluster.accelerator.memory_bytes,) * devices,
        rematerialize,
    )


def mixed_problem(
    model: Model,
    specs: Sequence[HardwareSpec],
    microbatch_size: float,
    placement: Sequence[int],
    *,
    rematerialize: bool = False,
) -> PartitionProblem:
    """Devices of different kinds, ``specs[d]`` for device d: each device's layer times on its
    own accelerator (the roofline, not a scaled copy), its own memory; the links are the first
    spec's network."""
    tables: dict[str, tuple[StageCosts, ...]] = {}
    for spec in specs:
        if spec.name not in tables:
            tables[spec.name] = layer_costs(model, spec.cluster(1), microbatch_size)
    device_layers = tuple(tables[spec.name] for spec in specs)
    return PartitionProblem(
        device_layers[0],
        model.input_bytes * microbatch_size,
        tuple(placement),
        specs[0].network(len(specs)),
        (1.0,) * len(specs),
        tuple(spec.accelerator.memory_bytes for spec in specs),
        rematerialize,
        device_layers,
    )


def choose_partition(
    goal: Objective,
    model: Model,
    cluster: Cluster,
    microbatch_size: float,
    chunks: int,
    schedule: Schedule | None = None,
    steps: int = 1,
    *,
    optimizer: bool = True,
) -> tuple[int, ...]:
    """Layers per stage by ``goal`` (balanced, memory-aware or the even split).
    ``memory-aware`` needs the schedule (its peak depends on the order)."""
    stages = cluster.devices * chunks
    if goal is Objective.EVEN:
        return tuple(len(r) for r in even_partition(model, stages))
    placement = schedule.placement if schedule is not None else looped(cluster.devices, chunks)
    remat = schedule.rematerialize if schedule is not None else False
    problem = model_problem(
        model, cluster, microbatch_size, placement, rematerialize=remat, optimizer=optimizer
    )
    if goal is Objective.BALANCED:
        return balanced(problem).counts
    if schedule is None:
        raise SpecError("--partition memory-aware needs a schedule (--schedule NAME with -M)")
    return memory_aware(problem, memory_forms(schedule, steps)).counts
