"""Synthetic costs: ``--costs F,B[,W] [--comm T] [--activation-bytes N]``.

F, B and W are seconds for one micro-batch through one device's share of the model; a chunk of
an interleaved or V-shaped schedule costs 1/v of it. B is the input-gradient part and W the
weight-gradient part, so a full backward costs B + W (W defaults to 0). ``comm`` is the time of
one transfer between two devices, whatever its size. No optimizer cost unless asked for.
"""

from __future__ import annotations

import math

from pipesim.common import checks
from pipesim.costs.pipeline_costs import PipelineCosts, StageCosts
from pipesim.hardware.network import Link, Network, Topology


def synthetic_costs(
    devices: int,
    chunks: int,
    forward_s: float,
    backward_s: float,
    weight_s: float = 0.0,
    comm_s: float = 0.0,
    activation_bytes: float = 0.0,
    optimizer_s: float = 0.0,
    memory_capacity_bytes: float = math.inf,
) -> PipelineCosts:
    """Equal stages: each of the K·v stages costs 1/v of the per-device figures.

    ``activation_bytes`` is what one micro-batch stashes on a device (1/v per stage), all of
    it needed by W under the I/W split; ``optimizer_s`` is one device's optimizer step.
    """
    devices = checks.positive_int("devices", devices)
    chunks = checks.positive_int("chunks", chunks)
    forward = checks.non_negative("costs F", forward_s)
    backward = checks.non_negative("costs B", backward_s)
    weight = checks.non_negative("costs W", weight_s)
    comm = checks.non_negative("comm", comm_s)
    stash = checks.non_negative("activation_bytes", activation_bytes) / chunks
    stage = StageCosts(
        forward_s=forward / chunks,
        input_grad_s=backward / chunks,
        weight_grad_s=weight / chunks,
        activation_bytes=stash,
        weight_grad_activation_bytes=stash,
        input_bytes=0.0,
        output_bytes=0.0,
        optimizer_step_s=checks.non_negative("optimizer_s", optimizer_s) / chunks,
    )
    network = Network(devices, Topology.ALL_TO_ALL, Link("link", math.inf, comm))
    return PipelineCosts(
        (stage,) * (devices * chunks),
        network,
        memory_capacity_bytes=memory_capacity_bytes,
        description=(
            f"synthetic: F={forward:g}s B={backward:g}s W={weight:g}s per device and "
            f"micro-batch, comm={comm:g}s"
        ),
    )
