"""Data parallelism: the gradient all-reduce of each pipeline device across its replicas.

N devices run ``data_parallel`` = N / K copies of a K-device pipeline. Devices are numbered
pipeline-major: replica r's pipeline device d is cluster device ``r*K + d``, so one pipeline
stays inside a server where it can and the replicas of device d (d, K + d, 2K + d, ...) form
its data-parallel group.

Model: a ring all-reduce (Patarasuk and Yuan; NCCL's ring) of the device's gradient bytes G
over the D replicas takes ``2(D-1)/D * G / bandwidth + 2(D-1) * latency``, where bandwidth is
the narrowest and latency the largest of the routes between ring neighbours on the cluster's
network. The K groups run at the same time on disjoint device sets; each device is assumed to
have its own path (one NIC per GPU, as DGX servers have), so groups do not slow each other.

When it runs: a device's all-reduce starts when its last backward of the step ends and its
optimizer step waits for it. The simulator gets this exactly by adding the all-reduce to the
device's optimizer step: it overlaps the other devices' compute (the pipeline's drain hides the
early-finishing devices' all-reduce) but not the device's own; bucketed overlap with the
device's own last backward is not modelled (a conservative choice).
"""

from __future__ import annotations

import dataclasses

from pipesim.common import checks
from pipesim.costs.pipeline_costs import PipelineCosts, StageCosts
from pipesim.hardware.network import Network


def ring_allreduce_s(network: Network, group: list[int], size_bytes: float) -> float:
    """Time of a ring all-reduce of ``size_bytes`` over the devices ``group`` of ``network``."""
    members = len(group)
    if members <= 1 or size_bytes <= 0:
        return 0.0
    routes = [network.route(group[i], group[(i + 1) % members]) for i in range(members)]
    bandwidth = min(route.bandwidth_bytes_per_s for route in routes)
    latency = max(route.latency_s for route in routes)
    steps = 2 * (members - 1)
    return steps / members * size_bytes / bandwidth + steps * latency


def replica_group(device: int, pipeline_devices: int, data_parallel: int) -> list[int]:
    """The cluster devices that hold pipeline device ``device`` in each replica."""
    return [replica * pipeline_devices + device for replica in range(data_parallel)]


def with_data_parallel(
    costs: PipelineCosts,
    placement: tuple[int, ...],
    cluster_network: Network,
    data_parallel: int,
) -> PipelineCosts:
    """``costs`` with each stage's gradient all-reduce added to its optimizer step, and the
    samples per micro-batch counted over all replicas (so throughput is the cluster's).

    ``placement[s]`` is the pipeline device of stage s; ``cluster_network`` joins all
    K x ``data_parallel`` devices.
    """
    data_parallel = checks.positive_int("data_parallel", data_parallel)
    if data_parallel == 1:
        return costs
    allreduce = allreduce_times_s(
        [stage.gradient_bytes for stage in costs.stages],
        placement,
        cluster_network,
        costs.network.devices,
        data_parallel,
    )
    stages = [
        add_to_optimizer_step(stage, extra)
        for stage, extra in zip(costs.stages, allreduce, strict=True)
    ]
    samples = costs.samples_per_microbatch
    return dataclasses.replace(
        costs,
        stages=tuple(stages),
        samples_per_microbatch=None if samples is None else samples * data_parallel,
        description=f"{costs.description}, data parallel x{data_parallel} (ring all-reduce)",
    )


def allreduce_times_s(
    gradient_bytes: list[float],
    placement: tuple[int, ...],
    cluster_network: Network,
    pipeline_devices: int,
    data_parallel: int,
) -> list[float]:
    """Per stage, the all-reduce time :func:`with_data_parallel` adds (for bounds)."""
    return [
        ring_allreduce_s(
            cluster_network,
            replica_group(placement[stage], pipeline_devices, data_parallel),
            size,
        )
        for stage, size in enumerate(gradient_bytes)
    ]


def add_to_optimizer_step(stage: StageCosts, extra_s: float) -> StageCosts:
    """``stage`` with ``extra_s`` seconds (its all-reduce) added to its optimizer step, which
    waits for it."""
    return dataclasses.replace(stage, optimizer_step_s=stage.optimizer_step_s + extra_s)
