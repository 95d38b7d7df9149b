"""Memory per device over time, from the compute timeline and the memory model's rules.

The rules (static memory, and each action's changes to the activations it holds) live in
:mod:`pipesim.memory.rules`; this module applies them to a run's records, in bytes, at each
change's time. At equal times frees come first (and otherwise the records' completion order
holds).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from pipesim.costs.pipeline_costs import PipelineCosts
from pipesim.engine.arrays import FloatArray, RunArrays, running_totals
from pipesim.memory import rules
from pipesim.schedules.encoded import KINDS
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
    """Weights x versions, gradients and optimizer state of the stages on ``device``
    (:func:`pipesim.memory.rules.static_bytes`)."""
    return rules.static_bytes(
        costs.stages, schedule.stages_on(device), rules.weight_versions(schedule, device)
    )


def _change_table(remat: bool) -> list[tuple[FloatArray, ...]]:
    """Per change slot (first, second) and kind code: whether it happens, whether at the
    action's start, and its counts of (stash, keep, input), from :data:`rules.CHANGES`; the
    last row (index -1) is the optimizer step, which changes nothing."""
    table = []
    for slot in range(2):
        happens, at_start, counts = [], [], []
        for kind in KINDS:
            found = rules.changes(kind, remat)
            change = found[slot] if slot < len(found) else None
            happens.append(change is not None)
            at_start.append(change is not None and change.at is rules.At.START)
            counts.append((0, 0, 0) if change is None else change.counts)
        happens.append(False)
        at_start.append(False)
        counts.append((0, 0, 0))
        columns = np.array(counts, dtype=np.int64)
        table.append((np.array(happens), np.array(at_start), *columns.T))
    return table


def _bytes(counts: tuple[FloatArray, ...], sizes: tuple[FloatArray, ...]) -> FloatArray:
    """:meth:`rules.Change.bytes`, elementwise: the same operations in the same order."""
    total = np.zeros(len(sizes[0]))
    for count, size in zip(counts, sizes, strict=True):
        total = np.where(
            count == 1, total + size, np.where(count == -1, total - size, total + count * size)
        )
    return total


def device_memory(
    schedule: Schedule, costs: PipelineCosts, run: RunArrays
) -> tuple[DeviceMemory, ...]:
    """Memory of every device over the whole run in ``run``.

    Each record makes the changes :mod:`pipesim.memory.rules` gives its kind (at most two),
    each at the record's start or end, in bytes of its stage's sizes.
    """
    stages = costs.stages
    stash = np.array([s.activation_bytes for s in stages] + [0.0])
    keep = np.array([s.weight_grad_activation_bytes for s in stages] + [0.0])
    inputs = np.array([s.input_bytes for s in stages] + [0.0])
    # The optimizer (stage -1, kind -1) reads the padding at index -1 and changes nothing.
    sizes = (stash[run.stage], keep[run.stage], inputs[run.stage])
    kind, start, end = run.kind, run.start_s, run.end_s
    count = len(kind)
    times, deltas = np.empty(2 * count), np.empty(2 * count)
    valid = np.empty(2 * count, dtype=bool)
    for slot, (happens, at_start, *counts) in enumerate(_change_table(schedule.rematerialize)):
        times[slot::2] = np.where(at_start[kind], start, end)
        deltas[slot::2] = _bytes(tuple(c[kind] for c in counts), sizes)
        valid[slot::2] = happens[kind]
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
