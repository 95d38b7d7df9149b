"""Lower bounds on a configuration's iteration time, so only finalists are simulated.

For a flush schedule run for one step, device d cannot start before the first micro-batch's
forward has reached its first stage (the forwards of the stages before it plus the transfers
between them, with no waiting), must then compute M micro-batches of its stages (F + B, and F
again under re-materialization), and ends with its optimizer step (which carries the gradient
all-reduce under data parallelism):

    T >= max over d of  head(d) + M * work(d) + optimizer(d)

and T is at least one micro-batch's forward through every stage and its input-gradient
backward back (W may leave the path under the I/W split), plus the first stage's optimizer
step. For no-flush schedules in steady state only the per-step work bound holds, less what
the timing may leave out: T >= max over d of M * work(d) + optimizer(d) - K * forward(d) /
(steps - 1) (the steps are timed from the first step's end, by which a device may have run up
to K of the next step's forwards). DualPipe's overlapped pairs hide up to a pass's exposed
communication (``forward_comm_s``, ``input_grad_comm_s``): with them each pass counts without
it. Every term is a time the
simulator must spend, so the bound never exceeds the simulated time; candidates whose bound is
already slower than the best plans found are never simulated.

A schedule whose stages hold C copies of the model (DualPipe) sends each micro-batch through
one copy only: copy c's stages run the M_c micro-batches routed to it (M / 2 each for
DualPipe), so a device's work is the sum over its stages of M_c times the stage's, not M
times; each copy's micro-batches enter at its own first stage (copy 1 of DualPipe at device
K-1), so a device's head is the earliest arrival over the copies that reach it, along each
copy's own stages; and the one-micro-batch path is taken per copy (through its stages and back,
then the optimizer step of the device holding its first stage), the longest of them. Read as
one copy (M micro-batches on every stage, copy 1's stages after copy 0's) the bound would
count every device's work twice and copy 1's fill after copy 0's whole path, and overshoot.
"""

from __future__ import annotations

from collections.abc import Sequence

from pipesim.costs.pipeline_costs import StageCosts
from pipesim.engine.durations import hideable_s
from pipesim.hardware.network import Network


def iteration_lower_bound_s(
    stages: Sequence[StageCosts],
    placement: Sequence[int],
    network: Network,
    microbatches: int,
    *,
    remat: bool,
    flush: bool,
    copies: int = 1,
    routes: Sequence[int] | None = None,
    overlapped: bool = False,
    steps: int = 1,
) -> float:
    """The bound above for ``stages`` placed by ``placement`` (optimizer steps included).
    With ``copies`` > 1, ``stages`` and ``placement`` are the IR's (copy-major: copy c's stages
    are c·S_model .. (c+1)·S_model - 1, in its micro-batches' order) and ``routes[m]`` is the
    copy micro-batch m runs through (None: the micro-batches in C contiguous equal blocks).
    ``overlapped``: the schedule hides a pass's communication under another's compute
    (DualPipe's pairs), so each pass counts without its exposed communication; ``steps``: the
    steps a no-flush schedule is timed over (see the module docstring)."""
    devices = max(placement) + 1
    per_copy = len(stages) // copies
    if routes is None:
        routes = [m * copies // microbatches for m in range(microbatches)]
    runs = [sum(1 for r in routes if r == copy) for copy in range(copies)]
    work = [0.0] * devices
    forward = [0.0] * devices  # one micro-batch's forwards on the device
    optimizer = [0.0] * devices
    for stage, costs in enumerate(stages):
        device = placement[stage]
        runs_here = runs[stage // per_copy]
        hidden = hideable_s(costs) if overlapped else 0.0
        pass_s = costs.forward_s * (2 if remat else 1) + costs.backward_s - hidden
        work[device] += runs_here * max(pass_s, 0.0)
        forward[device] += costs.forward_s
        optimizer[device] += costs.optimizer_step_s
    if not flush:
        # timed as (end of the last step - end of the first) / (steps - 1): by the first
        # step's end a device may have run the next step's warm-up forwards (at most one per
        # device of the pipeline), which then fall before the interval
        early = [devices * forward[d] / max(steps - 1, 1) for d in range(devices)]
        return max(work[d] + optimizer[d] - early[d] for d in range(devices))
    head = [float("inf")] * devices
    path = 0.0
    for copy in range(copies):
        if not runs[copy]:
            continue  # no micro-batch enters this copy: its stages never run
        own = range(copy * per_copy, (copy + 1) * per_copy)
        arrival = 0.0
        returning = 0.0  # the gradients' transfers back
        for stage in own:
            costs, device = stages[stage], placement[stage]
            head[device] = min(head[device], arrival)
            arrival += costs.forward_s
            if stage + 1 < own.stop and placement[stage + 1] != device:
                target = placement[stage + 1]
                arrival += network.route(device, target).transfer_time_s(costs.output_bytes)
                returning += network.route(target, device).transfer_time_s(costs.output_bytes)
        through = arrival + returning
        # the gradient chain needs only the input-gradient part: W may run off the path (I/W)
        through += sum(
            stages[s].input_grad_s + (stages[s].forward_s if remat else 0.0) for s in own
        )
        if overlapped:  # each pass may hide its exposed communication
            through -= sum(hideable_s(stages[s]) for s in own)
        through += optimizer[placement[own.start]]
        path = max(path, through)
    per_device = max(
        head[d] + work[d] + optimizer[d] for d in range(devices) if head[d] < float("inf")
    )
    return max(per_device, path)
