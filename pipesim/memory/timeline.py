"""Memory per device over time, from the compute timeline and the schedule's semantics.

Static: per stage, weights x versions (1 for flush, 2 for 2BW, K-d for PipeDream's stashing on
device d), gradients and optimizer state. Dynamic: each F stashes the stage's activations until
its backward frees them; under the I/W split the part W needs lives until W; with
re-materialization the forward keeps only the stage input, and the backward re-creates one
micro-batch's activations while it runs. Allocations happen when an action starts and frees when
it ends; at equal times frees come first (and otherwise the records' completion order holds).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from pipesim.costs.pipeline_costs import PipelineCosts
from pipesim.engine.arrays import FloatArray, RunArrays, running_totals
from pipesim.schedules.encoded import B, F, I, W
from pipesim.schedules.schedule import Schedule


@dataclass(frozen=True, eq=False)
class DeviceMemory:
    """One device's memory: the static part, the activation curve, and their peaks.

    ``change_times_s`` and ``activation_levels_bytes`` are the activation curve: after each
    change, the activation bytes held (the static part not included).
    """

    static_bytes: float
    peak_activation_bytes: float
    change_times_s: FloatArray = field(repr=False)
    activation_levels_bytes: FloatArray = field(repr=False)

    @property
    def peak_bytes(self) -> float:
        """Static plus the activation peak."""
        return self.static_bytes + self.peak_activation_bytes

    @cached_property
    def timeline(self) -> tuple[tuple[float, float], ...]:
        """``(time_s, total bytes after the change)``, starting with ``(0, static)``."""
        totals = (self.static_bytes + self.activation_levels_bytes).tolist()
        return ((0.0, self.static_bytes), *zip(self.change_times_s.tolist(), totals, strict=True))


def static_bytes_by_device(schedule: Schedule, costs: PipelineCosts) -> list[float]:
    """:func:`static_bytes` of every device."""
    return [static_bytes(schedule, costs, device) for device in range(schedule.devices)]


def static_bytes(schedule: Schedule, costs: PipelineCosts, device: int) -> float:
    """Weights x versions, gradients and optimizer state of the stages on ``device``."""
    versions = schedule.weight_staleness_steps(device) + 1
    return sum(
        stage.parameter_bytes * versions + stage.gradient_bytes + stage.optimizer_bytes
        for stage in (costs.stages[s] for s in schedule.stages_on(device))
    )


def device_memory(
    schedule: Schedule, costs: PipelineCosts, run: RunArrays
) -> tuple[DeviceMemory, ...]:
    """Memory of every device over the whole run in ``run``.

    Each record gives at most two changes, (time, bytes): F stashes at its start (and under
    remat swaps the stash for the stage input at its end); B frees at its end (under remat it
    re-creates the stash at its start); I frees the part W does not need; W frees the rest.
    """
    stages = costs.stages
    stash = np.array([s.activation_bytes for s in stages] + [0.0])
    keep = np.array([s.weight_grad_activation_bytes for s in stages] + [0.0])
    inputs = np.array([s.input_bytes for s in stages] + [0.0])
    # The optimizer (stage -1) reads the padding 0.0 at index -1 and changes nothing.
    a, w, x = stash[run.stage], keep[run.stage], inputs[run.stage]
    kind, start, end = run.kind, run.start_s, run.end_s
    remat = schedule.rematerialize
    is_f, is_b = kind == F, kind == B
    # First change of each record: F and (under remat) B at their start, the rest at the end.
    first_time = np.where(is_f | (is_b & remat), start, end)
    first_delta = np.where(
        is_f | (is_b & remat),
        a,
        np.where(is_b, -a, np.where(kind == I, -(a - w), np.where(kind == W, -w, 0.0))),
    )
    # Second change, under remat only: F swaps its stash for the input; B frees both.
    second_delta = np.where(is_f, x - a, -a - x)
    count = len(kind)
    times, deltas = np.empty(2 * count), np.empty(2 * count)
    valid = np.empty(2 * count, dtype=bool)
    times[0::2], times[1::2] = first_time, end
    deltas[0::2], deltas[1::2] = first_delta, second_delta
    valid[0::2], valid[1::2] = kind >= 0, (is_f | is_b) & remat
    devices = np.repeat(run.device, 2)[valid]
    times, deltas = times[valid], deltas[valid]
    # Stable: by device, then time, frees (and zero changes) before allocations, then as made.
    order = np.lexsort((deltas > 0, times, devices))
    times, deltas, devices = times[order], deltas[order], devices[order]
    totals = running_totals(deltas, devices, schedule.devices)
    peaks = np.maximum(totals.max(axis=1), 0.0).tolist()
    bounds = np.searchsorted(devices, np.arange(schedule.devices + 1)).tolist()
    statics = static_bytes_by_device(schedule, costs)
    return tuple(
        DeviceMemory(
            statics[device],
            peaks[device],
            times[bounds[device] : bounds[device + 1]],
            totals[device, : bounds[device + 1] - bounds[device]],
        )
        for device in range(schedule.devices)
    )
