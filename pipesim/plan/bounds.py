"""Lower bounds on a configuration's iteration time, so only finalists are simulated.

For a flush schedule run for one step, device d cannot start before the first micro-batch's
forward has reached its first stage (the forwards of the stages before it plus the transfers
between them, with no waiting), must then compute M micro-batches of its stages (F + B, and F
again under re-materialization), and ends with its optimizer step (which carries the gradient
all-reduce under data parallelism):

    T >= max over d of  head(d) + M * work(d) + optimizer(d)

and T is at least one micro-batch's forward through every stage and its input-gradient
backward back (W may leave the path under the I/W split), plus the first stage's optimizer
step. For no-flush schedules in steady state only the per-step work
bound holds: T >= max over d of M * work(d) + optimizer(d). Every term is a time the
simulator must spend, so the bound never exceeds the simulated time; candidates whose bound is
already slower than the best plans found are never simulated.
"""

from __future__ import annotations

from collections.abc import Sequence

from pipesim.costs.pipeline_costs import StageCosts
from pipesim.hardware.network import Network


def iteration_lower_bound_s(
    stages: Sequence[StageCosts],
    placement: Sequence[int],
    network: Network,
    microbatches: int,
    *,
    remat: bool,
    flush: bool,
) -> float:
    """The bound above for ``stages`` placed by ``placement`` (optimizer steps included)."""
    devices = max(placement) + 1
    work = [0.0] * devices
    optimizer = [0.0] * devices
    for stage, costs in enumerate(stages):
        device = placement[stage]
        work[device] += costs.forward_s * (2 if remat else 1) + costs.backward_s
        optimizer[device] += costs.optimizer_step_s
    if not flush:
        return max(microbatches * work[d] + optimizer[d] for d in range(devices))
    head = [float("inf")] * devices
    arrival = 0.0
    returning = 0.0  # the gradients' transfers back
    for stage, costs in enumerate(stages):
        device = placement[stage]
        head[device] = min(head[device], arrival)
        arrival += costs.forward_s
        if stage + 1 < len(stages) and placement[stage + 1] != device:
            target = placement[stage + 1]
            arrival += network.route(device, target).transfer_time_s(costs.output_bytes)
            returning += network.route(target, device).transfer_time_s(costs.output_bytes)
    path = arrival + returning
    # the gradient chain needs only the input-gradient part: W may run off the path (I/W split)
    path += sum(c.input_grad_s + (c.forward_s if remat else 0.0) for c in stages)
    path += optimizer[placement[0]]
    per_device = max(head[d] + microbatches * work[d] + optimizer[d] for d in range(devices))
    return max(per_device, path)
