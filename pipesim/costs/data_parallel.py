"""Data parallelism: each stage's gradient reduction across the replicas, with or without a
sharded optimizer.

A job of T x K x D ranks runs D replicas of a K-device pipeline whose devices each hold 1/T of
their layers; ranks are numbered as Megatron-LM numbers them (:mod:`pipesim.parallel.ranks`:
tensor ranks innermost, then pipeline devices, then replicas), so pipeline device d's shard
has a data-parallel group of D ranks, one per replica, T x K ranks apart.

Per step, each stage's gradients (its ``gradient_bytes``, one tensor rank's share) are
* all-reduced over the group (plain data parallelism), or
* reduce-scattered, and after the optimizer step the updated weights (``parameter_bytes``)
  all-gathered (ZeRO stage 1, Megatron's distributed optimizer), whose optimizer state and
  master weights are divided by D already (:mod:`pipesim.costs.spec_derived`).

Each collective costs :func:`pipesim.hardware.collectives.collective_time_s` on the job's
network; the K x T groups run at once on disjoint ranks, each with its own path (one NIC per
GPU, as DGX servers have), so they do not slow each other.

When it runs: after the stage's last backward of the step, before its optimizer step, which
waits for it: the simulator adds it to the stage's optimizer step, so it overlaps the other
devices' compute (the pipeline's drain hides the early devices') but not the device's own.
With ``overlap_grad_reduce`` (PyTorch DDP's buckets, Megatron's ``--overlap-grad-reduce``) the
reduction of each bucket starts as soon as its gradients are ready during the stage's last
backward: what stays exposed is the part longer than that backward, and at least the last
bucket's (:data:`BUCKET_BYTES`, DDP's default 25 MB).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from pipesim.costs.pipeline_costs import PipelineCosts, StageCosts
from pipesim.hardware.collectives import Collective, collective_time_s
from pipesim.hardware.network import Network
from pipesim.parallel.config import Parallelism
from pipesim.parallel.ranks import RankLayout

BUCKET_BYTES = 25 * 2**20
"""PyTorch DDP's default gradient bucket (``bucket_cap_mb=25``)."""


def gradient_sync_s(stage: StageCosts, network: Network, group: Sequence[int], zero: int) -> float:
    """The data-parallel communication of one stage's shard over ``group``: an all-reduce of
    its gradients, or under ZeRO-1 a reduce-scatter of its gradients and an all-gather of its
    weights."""
    if zero:
        return collective_time_s(
            network, group, Collective.REDUCE_SCATTER, stage.gradient_bytes
        ) + collective_time_s(network, group, Collective.ALL_GATHER, stage.parameter_bytes)
    return collective_time_s(network, group, Collective.ALL_REDUCE, stage.gradient_bytes)


def exposed_sync_s(stage: StageCosts, sync_s: float, overlap: bool) -> float:
    """What of a stage's gradient communication its optimizer step waits for: all of it, or
    with bucketed overlap the part its last backward does not hide, at least the last
    bucket's."""
    if not overlap or sync_s <= 0:
        return sync_s
    last_bucket = (
        sync_s * min(1.0, BUCKET_BYTES / stage.gradient_bytes) if stage.gradient_bytes else 0.0
    )
    return max(sync_s - stage.backward_s, last_bucket)


def sync_times_s(
    stages: Sequence[StageCosts],
    placement: Sequence[int],
    job_network: Network,
    layout: RankLayout,
    parallelism: Parallelism,
) -> list[float]:
    """Per stage, the exposed data-parallel communication :func:`with_data_parallel` adds."""
    out = []
    for index, stage in enumerate(stages):
        group = layout.data_group(placement[index])
        sync = gradient_sync_s(stage, job_network, group, parallelism.zero)
        out.append(exposed_sync_s(stage, sync, parallelism.overlap_grad_reduce))
    return out


def with_data_parallel(
    costs: PipelineCosts,
    placement: Sequence[int],
    job_network: Network,
    parallelism: Parallelism,
) -> PipelineCosts:
    """``costs`` with each stage's data-parallel communication added to its optimizer step,
    and the samples per micro-batch counted over all replicas (so throughput is the job's).

    ``placement[s]`` is the pipeline device of stage s; ``job_network`` joins all
    T x K x D ranks.
    """
    replicas = parallelism.data
    if replicas == 1:
        return costs
    layout = RankLayout(parallelism.tensor, costs.network.devices, replicas)
    extra = sync_times_s(costs.stages, placement, job_network, layout, parallelism)
    stages = [
        add_to_optimizer_step(stage, seconds)
        for stage, seconds in zip(costs.stages, extra, strict=True)
    ]
    samples = costs.samples_per_microbatch
    kind = "ZeRO-1 reduce-scatter + all-gather" if parallelism.zero else "ring all-reduce"
    return dataclasses.replace(
        costs,
        stages=tuple(stages),
        samples_per_microbatch=None if samples is None else samples * replicas,
        description=f"{costs.description}, data parallel x{replicas} ({kind})",
    )


def add_to_optimizer_step(stage: StageCosts, extra_s: float) -> StageCosts:
    """``stage`` with ``extra_s`` seconds (its gradient communication) added to its optimizer
    step, which waits for it."""
    return dataclasses.replace(stage, optimizer_step_s=stage.optimizer_step_s + extra_s)
