"""Partition problems from a model on a hardware spec, and the ``--partition`` objectives.

The per-layer costs are exactly those :func:`~pipesim.costs.spec_derived.costs_from_model`
sums into stages (one-layer stages at the micro-batch size), so a partition chosen here and
simulated through ``--partition a,b,c`` sees the very same numbers. Under ``--recompute N`` a
problem carries each layer's fully recomputed twin too (:func:`recompute_first`), and the
solver weighs the first N blocks of every stage recomputed exactly, in time and memory.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum

from pipesim.common.checks import SpecError
from pipesim.costs.pipeline_costs import StageCosts
from pipesim.costs.spec_derived import costs_of_layers
from pipesim.errors import named
from pipesim.hardware.catalogue import HardwareSpec
from pipesim.hardware.network import Cluster
from pipesim.memory.forms import memory_forms
from pipesim.parallel.config import IDENTITY, Parallelism
from pipesim.parallel.groups import TensorGroup
from pipesim.parallel.placement import looped
from pipesim.partition.problem import PartitionProblem, RecomputeFirst
from pipesim.partition.solver import balanced, memory_aware
from pipesim.schedules.schedule import Schedule
from pipesim.workload.model import Model
from pipesim.workload.sharding import sharded_layers
from pipesim.workload.stage_layers import even_partition
from pipesim.workload.transformer import is_block


class Objective(Enum):
    """What ``--partition`` optimizes (``blocks``: Megatron-LM's layout, the same number of
    transformer blocks on every stage, the embedding with the first and the output layer with
    the last)."""

    BALANCED = "balanced"
    MEMORY_AWARE = "memory-aware"
    EVEN = "even"
    BLOCKS = "blocks"


def objective(text: str) -> Objective:
    """``text`` as an :class:`Objective`; an unknown one names the valid ones."""
    try:
        return Objective(text)
    except ValueError:
        names = ", ".join(o.value for o in Objective)
        raise SpecError(
            f"{named('partition')} must be {names} or layer counts like 3,4,4,3, got {text!r}"
        ) from None


def layer_costs(
    model: Model,
    cluster: Cluster,
    microbatch_size: float,
    *,
    optimizer: bool = True,
    parallelism: Parallelism = IDENTITY,
    tensor_group: TensorGroup | None = None,
    pipelined: bool = True,
) -> tuple[StageCosts, ...]:
    """One :class:`StageCosts` per layer of ``model`` at ``microbatch_size`` on the
    cluster's accelerator, as one tensor-parallel rank holds it under ``parallelism`` (the
    pipeline's network plays no part in them; the tensor-parallel collectives run on
    ``tensor_group``; ``pipelined``: they sit in a pipeline of more than one stage, which
    decides what ZeRO-2/3 hold). Under ``--recompute N`` the layers are the ones built without
    recomputation; their recomputed twins, which each stage's first N blocks swap in, are
    :func:`recompute_first`'s."""
    sharded = sharded_layers(model, parallelism)
    return tuple(
        costs_of_layers(
            sharded.layers,
            model.input_bytes * microbatch_size,
            model,
            cluster.accelerator,
            microbatch_size,
            optimizer=optimizer,
            parallelism=parallelism,
            tensor_group=tensor_group,
            pipelined=pipelined,
            offloaded=sharded.offloaded(parallelism.offload_activations),
        )
    )


def recompute_first(
    model: Model,
    cluster: Cluster,
    microbatch_size: float,
    *,
    optimizer: bool = True,
    parallelism: Parallelism = IDENTITY,
    tensor_group: TensorGroup | None = None,
    pipelined: bool = True,
) -> RecomputeFirst | None:
    """Under ``--recompute N`` (``parallelism.recompute.layers_per_stage``): each layer of
    one rank fully recomputed, costed as :func:`layer_costs` costs the layers, for a
    problem's stages to swap in for their first N blocks; None otherwise."""
    layers_per_stage = parallelism.recompute.layers_per_stage
    if layers_per_stage is None:
        return None
    sharded = sharded_layers(model, parallelism)
    assert sharded.recomputed is not None  # built for --recompute N
    twins = costs_of_layers(
        sharded.recomputed,
        model.input_bytes * microbatch_size,
        model,
        cluster.accelerator,
        microbatch_size,
        optimizer=optimizer,
        parallelism=parallelism,
        tensor_group=tensor_group,
        pipelined=pipelined,
        offloaded=sharded.offloaded(parallelism.offload_activations),
    )
    return RecomputeFirst(
        layers_per_stage, tuple(twins), tuple(is_block(layer) for layer in sharded.layers)
    )


def model_problem(
    model: Model,
    cluster: Cluster,
    microbatch_size: float,
    placement: Sequence[int],
    *,
    rematerialize: bool = False,
    optimizer: bool = True,
    layers: tuple[StageCosts, ...] | None = None,
    parallelism: Parallelism = IDENTITY,
    tensor_group: TensorGroup | None = None,
    recomputed: RecomputeFirst | None = None,
) -> PartitionProblem:
    """The partitioning problem of ``model`` on ``cluster`` for stages placed by ``placement``.

    ``layers``, when given, are the model's :func:`layer_costs` at ``microbatch_size`` on the
    cluster's accelerator already computed (a caller that caches them across problems), and
    ``recomputed`` likewise :func:`recompute_first`'s twins under ``--recompute N``; without
    them, they are costed for ``parallelism`` here."""
    devices = cluster.devices
    if recomputed is None and parallelism.recompute.layers_per_stage is not None:
        recomputed = recompute_first(
            model,
            cluster,
            microbatch_size,
            optimizer=optimizer,
            parallelism=parallelism,
            tensor_group=tensor_group,
            pipelined=len(placement) > 1,
        )
    if layers is None:
        layers = layer_costs(
            model,
            cluster,
            microbatch_size,
            optimizer=optimizer,
            parallelism=parallelism,
            tensor_group=tensor_group,
            pipelined=len(placement) > 1,
        )
    accelerator = cluster.accelerator
    return PartitionProblem(
        layers,
        model.input_bytes * microbatch_size,
        tuple(placement),
        cluster.network,
        (1.0,) * devices,
        (accelerator.memory_bytes,) * devices,
        rematerialize,
        runtime_reserve_bytes=accelerator.runtime_reserve_bytes,
        fragmentation_fraction=accelerator.fragmentation_fraction,
        recompute_first=recomputed,
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


def blocks_partition(model: Model, stages: int) -> tuple[int, ...]:
    """Megatron-LM's layout: the transformer's blocks split evenly over the stages (the first
    stages take one more when they do not divide), the embedding joins the first stage and
    the output layer the last. Only for a model built from a transformer architecture."""
    arch = model.architecture
    if arch is None or len(model.layers) != arch.layers + 2:
        raise SpecError(
            f"{named('partition')} blocks splits a transformer's blocks; model {model.name!r} "
            "is given "
            "as layers: give layer counts or balanced, memory-aware or even"
        )
    if stages > arch.layers:
        raise SpecError(
            f"{named('partition')} blocks: {stages} stages need at least {stages} blocks, but "
            f"model {model.name!r} has {arch.layers}"
        )
    base, extra = divmod(arch.layers, stages)
    counts = [base + (1 if s < extra else 0) for s in range(stages)]
    counts[0] += 1
    counts[-1] += 1
    return tuple(counts)


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
    parallelism: Parallelism = IDENTITY,
    tensor_group: TensorGroup | None = None,
) -> tuple[int, ...]:
    """Layers per stage by ``goal`` (balanced, memory-aware or the even split).
    ``memory-aware`` needs the schedule (its peak depends on the order).

    ``balanced`` and ``memory-aware`` with ``--recompute N`` (``simulate``'s objectives) are
    still refused here, though :func:`model_problem` weighs N exactly and ``pipesim plan``
    partitions with it: simulate's command line and its tests pin the refusal, and lifting it
    is a change of their own."""
    stages = cluster.devices * chunks
    if goal is Objective.EVEN:
        return tuple(len(r) for r in even_partition(model, stages))
    if goal is Objective.BLOCKS:
        return blocks_partition(model, stages)
    placement = (  # a schedule with model copies: the first copy's stages are the model's
        schedule.placement[: schedule.model_stages]
        if schedule is not None
        else looped(cluster.devices, chunks)
    )
    remat = schedule.rematerialize if schedule is not None else False
    problem = model_problem(
        model,
        cluster,
        microbatch_size,
        placement,
        rematerialize=remat,
        optimizer=optimizer,
        parallelism=parallelism,
        tensor_group=tensor_group,
    )
    if goal is Objective.BALANCED:
        return balanced(problem).counts
    if schedule is None:
        raise SpecError(
            f"{named('partition')} memory-aware needs a schedule ({named('schedule')} NAME "
            f"with {named('microbatches')})"
        )
    return memory_aware(problem, memory_forms(schedule, steps)).counts
