"""Data parallelism: each stage's gradient reduction across the replicas, with or without a
sharded optimizer.

A job of T x K x D ranks runs D replicas of a K-device pipeline whose devices each hold 1/T of
their layers; ranks are numbered as Megatron-LM numbers them (:mod:`pipesim.parallel.ranks`:
tensor ranks innermost, then pipeline devices, then replicas), so pipeline device d's shard
has a data-parallel group of D ranks, one per replica, T x K ranks apart.

Per step, each stage's gradients (its ``gradient_bytes``, one tensor rank's share) are
* all-reduced over the group (plain data parallelism), or
* reduce-scattered, and after the optimizer step the updated weights all-gathered (ZeRO
  stage 1, Megatron's distributed optimizer, and stages 2 and 3 inside a pipeline, where
  PyTorch defers the gradient sync to the step's last backward), whose optimizer state and
  master weights are divided by D already (:mod:`pipesim.costs.spec_derived`), or
* without a pipeline under ZeRO-2/3, reduce-scattered during every micro-batch's backward,
  and under ZeRO-3 with the weights resharded after each forward, the weights all-gathered for
  every forward and every backward (:func:`pass_sync_s`), each pass exposing only what its
  compute does not hide (:mod:`pipesim.parallel.sharding` says which regime runs when).

The collectives move the stage's whole weights and gradients on one tensor rank
(``whole_parameter_bytes``, ``whole_gradient_bytes``), whatever share of them it holds.

With expert parallelism (EP) the routed experts' part of them (``expert_gradient_bytes``, and
the weights in the same proportion) belongs to the E/EP experts this rank holds, which only
the D x CP / EP ranks of its expert data group
(:meth:`~pipesim.parallel.ranks.RankLayout.expert_data_group`) hold too: that part is reduced,
and under ZeRO its weights gathered, over that group, after the dense part's collectives over
the data group (Megatron-Core's expert gradient buffers, and its distributed optimizer's expert
shards, live on the expert data-parallel group); ZeRO shards it over the same group
(:func:`expert_sharding`). With a tensor-parallel size of the experts' own (ETP != T,
Megatron-Core's parallel folding) that group has T x CP x D / (ETP x EP) ranks and may exist
without replicas (T = 4, ETP = 1, EP = 2: each expert whole on 2 of the 4 tensor ranks).

Each collective costs :func:`pipesim.hardware.collectives.collective_time_s` on the job's
network; the K x T groups run at once on disjoint ranks, each with its own path (one NIC per
GPU, as DGX servers have), so they do not slow each other.

Tied embeddings (GPT's output layer reusing the word embeddings) add an all-reduce of that
table's gradient between the first stage and the stage holding the copy, with or without
data parallelism (:func:`tied_embedding_sync_s`).

When it runs: after the stage's last backward of the step, before its optimizer step, which
waits for it: the simulator adds it to the stage's optimizer step, so it overlaps the other
devices' compute (the pipeline's drain hides the early devices') but not the device's own.
With ``overlap_grad_reduce`` (a recipe's choice: PyTorch DDP's buckets, Megatron's
``--overlap-grad-reduce``) the
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
from pipesim.parallel.ranks import RankLayout, reduction_group
from pipesim.parallel.sharding import ReshardPolicy, Sharding

_NEVER = ReshardPolicy.NEVER

BUCKET_BYTES = 25 * 2**20
"""PyTorch DDP's default gradient bucket (``bucket_cap_mb=25``)."""


def gradient_sync_s(stage: StageCosts, network: Network, group: Sequence[int], zero: int) -> float:
    """The data-parallel communication of one stage's shard over ``group`` once per step: an
    all-reduce of its gradients, or under ZeRO (any stage, inside a pipeline) a reduce-scatter
    of its gradients and an all-gather of its weights."""
    return step_sync_s(stage, network, group, Sharding.of(zero, len(group), _NEVER, True))


def expert_sharding(
    parallelism: Parallelism, expert_group: Sequence[int], pipelined: bool
) -> Sharding:
    """The ZeRO regime of the routed experts' state: ``parallelism``'s stage over the ranks of
    ``expert_group`` (the expert data group, D x CP / EP ranks; T x CP x D / (ETP x EP)
    folded)."""
    return Sharding.of(
        parallelism.zero, len(expert_group), parallelism.reshard_after_forward, pipelined
    )


def _split(stage: StageCosts) -> tuple[tuple[float, float], tuple[float, float]]:
    """((gradients, weights) of the dense part, (gradients, weights) of the experts' part) of
    the stage's whole bytes on one tensor rank: the weights split as the gradients."""
    gradients, weights = stage.whole_gradient_bytes, stage.whole_parameter_bytes
    expert_gradients = stage.expert_gradient_bytes
    expert_weights = weights * expert_gradients / gradients if gradients else 0.0
    return (gradients - expert_gradients, weights - expert_weights), (
        expert_gradients,
        expert_weights,
    )


def step_sync_s(
    stage: StageCosts,
    network: Network,
    group: Sequence[int],
    sharding: Sharding,
    expert_group: Sequence[int] = (),
    experts: Sharding | None = None,
) -> float:
    """What of one stage's data-parallel communication runs once per step, after its last
    backward and before (or, for the weights' all-gather, right after) its optimizer step:
    the gradients' all-reduce (ZeRO-0) or reduce-scatter (ZeRO-1, and ZeRO-2/3 inside a
    pipeline), and the weights' all-gather unless ZeRO-3 gathers them in every pass. With
    ``experts`` (the experts' regime over ``expert_group``, expert parallelism), the stage's
    routed experts' part runs over ``expert_group``, after the rest over ``group``."""
    if experts is None or not stage.expert_gradient_bytes:
        gradients, weights = stage.whole_gradient_bytes, stage.whole_parameter_bytes
        return _step_s(gradients, weights, network, group, sharding)
    (gradients, weights), (expert_gradients, expert_weights) = _split(stage)
    dense = _step_s(gradients, weights, network, group, sharding)
    return dense + _step_s(expert_gradients, expert_weights, network, expert_group, experts)


def _step_s(
    gradients: float, weights: float, network: Network, group: Sequence[int], sharding: Sharding
) -> float:
    """:func:`step_sync_s` of ``gradients`` and ``weights`` bytes over ``group``."""
    if sharding.zero == 0:
        return collective_time_s(network, group, Collective.ALL_REDUCE, gradients)
    reduce = (
        0.0
        if sharding.syncs_every_microbatch
        else collective_time_s(network, group, Collective.REDUCE_SCATTER, gradients)
    )
    gather = (
        0.0
        if sharding.reshard_after_forward
        else collective_time_s(network, group, Collective.ALL_GATHER, weights)
    )
    return reduce + gather


def pass_sync_s(
    stage: StageCosts,
    network: Network,
    group: Sequence[int],
    sharding: Sharding,
    expert_group: Sequence[int] = (),
    experts: Sharding | None = None,
) -> tuple[float, float]:
    """(forward, backward): the communication each micro-batch's passes of one stage start,
    ZeRO-2/3 without a pipeline: ZeRO-3 gathers the weights for the forward and, resharded
    after it, again for the backward; ZeRO-2/3 reduce-scatter each backward's gradients. With
    ``experts``, the routed experts' part over ``expert_group`` (:func:`step_sync_s`)."""
    if experts is None or not stage.expert_gradient_bytes:
        gradients, weights = stage.whole_gradient_bytes, stage.whole_parameter_bytes
        return _pass_s(gradients, weights, network, group, sharding)
    (gradients, weights), (expert_gradients, expert_weights) = _split(stage)
    forward, backward = _pass_s(gradients, weights, network, group, sharding)
    more = _pass_s(expert_gradients, expert_weights, network, expert_group, experts)
    return forward + more[0], backward + more[1]


def _pass_s(
    gradients: float, weights: float, network: Network, group: Sequence[int], sharding: Sharding
) -> tuple[float, float]:
    """:func:`pass_sync_s` of ``gradients`` and ``weights`` bytes over ``group``."""
    gather = (
        collective_time_s(network, group, Collective.ALL_GATHER, weights)
        if sharding.reshard_after_forward
        else 0.0
    )
    reduce = (
        collective_time_s(network, group, Collective.REDUCE_SCATTER, gradients)
        if sharding.syncs_every_microbatch
        else 0.0
    )
    return gather, gather + reduce


def with_pass_sync(stage: StageCosts, forward_comm_s: float, backward_comm_s: float) -> StageCosts:
    """``stage`` with what of its passes' collectives their compute does not hide (FSDP runs
    them on their own stream, prefetching the next layer's gather during this one's compute):
    the part longer than the pass. The first layer's gather, which nothing precedes, is not
    counted: a lower bound on the exposed time."""
    forward_extra = max(0.0, forward_comm_s - stage.forward_s)
    backward_extra = max(0.0, backward_comm_s - stage.backward_s)
    if not forward_extra and not backward_extra:
        return stage
    full = stage.full_backward_s
    return dataclasses.replace(
        stage,
        forward_s=stage.forward_s + forward_extra,
        input_grad_s=stage.input_grad_s + backward_extra,
        full_backward_s=None if full is None else full + backward_extra,
    )


def exposed_sync_s(stage: StageCosts, sync_s: float, overlap: bool) -> float:
    """What of a stage's gradient communication its optimizer step waits for: all of it, or
    with bucketed overlap the part its last backward does not hide, at least the last
    bucket's."""
    if not overlap or sync_s <= 0:
        return sync_s
    gradients = stage.whole_gradient_bytes
    last_bucket = sync_s * min(1.0, BUCKET_BYTES / gradients) if gradients else 0.0
    return max(sync_s - stage.backward_s, last_bucket)


def tied_embedding_sync_s(
    stages: Sequence[StageCosts],
    placement: Sequence[int],
    job_network: Network,
    layout: RankLayout,
) -> list[float]:
    """Per stage, the all-reduce of tied embeddings' gradient (Megatron-LM's
    ``allreduce_embedding_grads``): the stage holding the output layer's copy of the first
    stage's word embeddings (``shared_parameter_bytes``) and the first stage sum their
    gradients of it over the two devices' ranks (each tensor rank with its peer: 1/T of the
    table) before their optimizer steps, which wait for it. Nothing when both sit on one
    device (a V-shaped placement)."""
    out = [0.0] * len(stages)
    for index, stage in enumerate(stages):
        if index == 0 or stage.shared_parameter_bytes <= 0:
            continue
        if placement[index] == placement[0] or stage.parameter_bytes <= 0:
            continue
        shared_gradient = (
            stage.shared_parameter_bytes * stage.whole_gradient_bytes / stage.parameter_bytes
        )
        group = [layout.rank(0, placement[0]), layout.rank(0, placement[index])]
        seconds = collective_time_s(job_network, group, Collective.ALL_REDUCE, shared_gradient)
        out[0] += seconds
        out[index] += seconds
    return out


def sync_times_s(
    stages: Sequence[StageCosts],
    placement: Sequence[int],
    job_network: Network,
    layout: RankLayout,
    parallelism: Parallelism,
    overlap_grad_reduce: bool = False,
) -> list[float]:
    """Per stage, the exposed communication :func:`with_data_parallel` adds before its
    optimizer step: the data-parallel reduction (with D > 1; overlapping the stage's last
    backward with ``overlap_grad_reduce``) and the tied embeddings' all-reduce
    (:func:`tied_embedding_sync_s`); with expert parallelism the routed experts' gradients
    over the expert data group."""
    out = tied_embedding_sync_s(stages, placement, job_network, layout)
    if not _replicated(layout):
        return out
    pipelined = len(stages) > 1
    sharding = parallelism.sharding(pipelined)
    for index, stage in enumerate(stages):
        group = reduction_group(layout, placement[index])
        experts, expert_regime = _expert_reduction(layout, parallelism, placement[index], pipelined)
        sync = step_sync_s(stage, job_network, group, sharding, experts, expert_regime)
        out[index] += exposed_sync_s(stage, sync, overlap_grad_reduce)
    return out


def _replicated(layout: RankLayout) -> bool:
    """Some weights are held by more than one rank of a pipeline device: the dense layers'
    (D x CP > 1) or, folded (ETP != T), the routed experts' (EDP > 1 with D x CP = 1, e.g.
    T = 4, ETP = 1, EP = 2: each expert whole on 2 of the 4 tensor ranks)."""
    return layout.data * layout.context > 1 or (layout.experts_apart and layout.expert_data > 1)


def _expert_reduction(
    layout: RankLayout, parallelism: Parallelism, device: int, pipelined: bool
) -> tuple[Sequence[int], Sharding | None]:
    """Pipeline device ``device``'s expert data group and the experts' ZeRO regime over it;
    ((), None) without expert parallelism."""
    if not layout.experts_apart:
        return (), None
    group = reduction_group(layout, device, experts=True)
    return group, expert_sharding(parallelism, group, pipelined)


def with_sync(
    stages: Sequence[StageCosts],
    placement: Sequence[int],
    job_network: Network,
    layout: RankLayout,
    parallelism: Parallelism,
    overlap_grad_reduce: bool = False,
) -> list[StageCosts]:
    """The stages with their data-parallel communication: each pass's exposed collectives
    (ZeRO-2/3 without a pipeline, :func:`pass_sync_s`) and the once-per-step part added to
    the optimizer step (:func:`sync_times_s`)."""
    extra = sync_times_s(stages, placement, job_network, layout, parallelism, overlap_grad_reduce)
    out = [add_to_optimizer_step(s, e) if e else s for s, e in zip(stages, extra, strict=True)]
    sharding = parallelism.sharding(pipelined=len(stages) > 1)
    if not _replicated(layout) or not (
        sharding.reshard_after_forward or sharding.syncs_every_microbatch
    ):
        return out
    for index, stage in enumerate(out):
        group = reduction_group(layout, placement[index])
        experts, regime = _expert_reduction(layout, parallelism, placement[index], len(out) > 1)
        passes = pass_sync_s(stage, job_network, group, sharding, experts, regime)
        out[index] = with_pass_sync(stage, *passes)
    return out


def with_data_parallel(
    costs: PipelineCosts,
    placement: Sequence[int],
    job_network: Network,
    parallelism: Parallelism,
    overlap_grad_reduce: bool = False,
) -> PipelineCosts:
    """``costs`` with each stage's data-parallel communication added to its optimizer step,
    and the samples per micro-batch counted over all replicas (so throughput is the job's).

    ``placement[s]`` is the pipeline device of stage s; ``job_network`` joins all
    T x K x D ranks; ``overlap_grad_reduce`` (the recipe's) overlaps the reduction with each
    stage's last backward.
    """
    replicas = parallelism.data
    layout = parallelism.layout(costs.network.devices)
    stages = with_sync(
        costs.stages, placement, job_network, layout, parallelism, overlap_grad_reduce
    )
    if replicas == 1 and all(a is b for a, b in zip(stages, costs.stages, strict=True)):
        return costs
    if replicas == 1:
        return dataclasses.replace(costs, stages=tuple(stages))
    samples = costs.samples_per_microbatch
    kind = (
        f"ZeRO-{parallelism.zero} reduce-scatter + all-gather"
        if parallelism.zero
        else "ring all-reduce"
    )
    return dataclasses.replace(
        costs,
        stages=tuple(stages),
        samples_per_microbatch=None if samples is None else samples * replicas,
        description=f"{costs.description}, data parallel x{replicas} ({kind})",
    )


def add_to_optimizer_step(stage: StageCosts, extra_s: float) -> StageCosts:
    """``stage`` with ``extra_s`` seconds (its gradient communication) added to its optimizer
    step, which waits for it."""
    return stage.with_optimizer_step_s(stage.optimizer_step_s + extra_s)
