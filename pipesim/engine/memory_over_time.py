"""Memory per device over time, from the compute timeline and the memory model's rules.

The rules (static memory, and each action's changes to the activations it holds) live in
:mod:`pipesim.memory.rules`; this module applies them to a run's records, in bytes, at each
change's time. At equal times frees come first (and otherwise the records' completion order
holds).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from pipesim.costs.pipeline_costs import PipelineCosts
from pipesim.engine.arrays import OPTIMIZER, FloatArray, RunArrays, running_totals
from pipesim.memory import rules
from pipesim.schedules.encoded import KINDS
from pipesim.schedules.schedule import Schedule

# The terms of a device's peak memory, in the order a stacked bar draws them (the static
# ones first): the keys of DeviceMemory.breakdown() and of ``memory_breakdown`` in results.
BREAKDOWN_TERMS = (
    "weights",
    "gradients",
    "optimizer_state",
    "master_weights",
    "activations",
    "transient",
    "fragmentation",
    "runtime_reserve",
)


@dataclass(frozen=True, eq=False)
class DeviceMemory:
    """One device's memory: the static terms, the activation and transient curves, the peak
    and what made it.

    ``change_times_s``, ``activation_levels_bytes`` and ``transient_levels_bytes`` are the
    curves: after each change, the activation bytes held and the running actions' transients
    (the static part not included). The peak is the largest of their sum: at that moment
    ``activations_at_peak_bytes`` were stashed and ``transient_at_peak_bytes`` held by the
    running action (``peak_record``, an index into the run's records, or -1 when the device
    ran nothing). ``peak_activation_bytes`` is the largest stash at any time (transients left
    out), the figure the papers' activation-memory formulas give.
    """

    static: rules.StaticMemory
    peak_activation_bytes: float
    activations_at_peak_bytes: float
    transient_at_peak_bytes: float
    change_times_s: FloatArray = field(repr=False)
    activation_levels_bytes: FloatArray = field(repr=False)
    transient_levels_bytes: FloatArray = field(repr=False)
    runtime_reserve_bytes: float = 0.0
    fragmentation_fraction: float = 0.0
    peak_record: int = -1

    @property
    def static_bytes(self) -> float:
        """Weights, gradients, optimizer state and master weights."""
        return self.static.total

    @property
    def model_peak_bytes(self) -> float:
        """Static memory plus the largest activations-and-transient level."""
        return self.static_bytes + self.activations_at_peak_bytes + self.transient_at_peak_bytes

    @property
    def fragmentation_bytes(self) -> float:
        """The allocator's slack on top of the model's peak."""
        return self.model_peak_bytes * self.fragmentation_fraction

    @property
    def peak_bytes(self) -> float:
        """The reported peak: the model's, fragmentation and the runtime reserve."""
        return rules.peak_with_allowances(
            self.model_peak_bytes, self.runtime_reserve_bytes, self.fragmentation_fraction
        )

    def breakdown(self) -> dict[str, float]:
        """The peak term by term (bytes, keyed by :data:`BREAKDOWN_TERMS`); the terms add up
        to :attr:`peak_bytes`."""
        values = (
            self.static.weights,
            self.static.gradients,
            self.static.optimizer_state,
            self.static.master_weights,
            self.activations_at_peak_bytes,
            self.transient_at_peak_bytes,
            self.fragmentation_bytes,
            self.runtime_reserve_bytes,
        )
        return dict(zip(BREAKDOWN_TERMS, values, strict=True))

    @cached_property
    def timeline(self) -> tuple[tuple[float, float], ...]:
        """``(time_s, total bytes after the change)``, starting with ``(0, static)``: the
        model's memory (transients included; the allowances not)."""
        totals = (
            self.static_bytes + self.activation_levels_bytes + self.transient_levels_bytes
        ).tolist()
        return ((0.0, self.static_bytes), *zip(self.change_times_s.tolist(), totals, strict=True))


def static_breakdown(schedule: Schedule, costs: PipelineCosts, device: int) -> rules.StaticMemory:
    """Weights x versions, gradients, optimizer state and master weights of the stages on
    ``device``, term by term (:func:`pipesim.memory.rules.static_breakdown`)."""
    return rules.static_breakdown(
        costs.stages,
        schedule.stages_on(device),
        rules.weight_versions(schedule, device),
        schedule.model_stages if schedule.copies > 1 else None,
    )


def _change_table(remat: bool) -> list[tuple[FloatArray, ...]]:
    """Per change slot (first, second) and kind code: whether it happens, whether at the
    action's start, and its counts of (stash, keep, input, transient), from
    :data:`rules.CHANGES`; the last row (index -1) is the optimizer step: its transient at its
    start and its end."""
    table = []
    for slot in range(2):
        happens, at_start, counts = [], [], []
        for kind in KINDS:
            found = rules.changes(kind, remat)
            change = found[slot] if slot < len(found) else None
            happens.append(change is not None)
            at_start.append(change is not None and change.at is rules.At.START)
            counts.append((0, 0, 0, 0) if change is None else (*change.counts, change.transient))
        happens.append(True)
        at_start.append(slot == 0)
        counts.append((0, 0, 0, 1 if slot == 0 else -1))
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
    each at the record's start or end, in bytes of its stage's sizes; the activation and the
    transient curves are kept apart (the first is the papers' activation memory).
    """
    stages = costs.stages
    remat = schedule.rematerialize
    stash = np.array([s.activation_bytes for s in stages] + [0.0])
    keep = np.array([s.weight_grad_activation_bytes for s in stages] + [0.0])
    inputs = np.array([s.input_bytes for s in stages] + [0.0])
    # transient[stage, kind code]; the optimizer (stage -1, kind -1) is per device, below
    transient = np.zeros((len(stages) + 1, len(KINDS) + 1))
    for index, stage in enumerate(stages):
        for code, action_kind in enumerate(KINDS):
            transient[index, code] = rules.transient_bytes(stage, action_kind, remat)
    optimizer = np.array(
        [
            rules.optimizer_transient_bytes(stages, schedule.stages_on(device))
            for device in range(schedule.devices)
        ]
    )
    step_transient = np.where(
        run.kind == OPTIMIZER, optimizer[run.device], transient[run.stage, run.kind]
    )
    # The optimizer reads the padding at index -1 for the stash, keep and input sizes.
    sizes = (stash[run.stage], keep[run.stage], inputs[run.stage])
    kind, start, end = run.kind, run.start_s, run.end_s
    count = len(kind)
    times = np.empty(2 * count)
    act_deltas, trans_deltas = np.empty(2 * count), np.empty(2 * count)
    valid = np.empty(2 * count, dtype=bool)
    for slot, (happens, at_start, *counts) in enumerate(_change_table(remat)):
        times[slot::2] = np.where(at_start[kind], start, end)
        act_deltas[slot::2] = _bytes(tuple(c[kind] for c in counts[:3]), sizes)
        trans_deltas[slot::2] = _bytes((counts[3][kind],), (step_transient,))
        # a change that only moves a transient of 0 bytes is no change at all
        moves_activations = (counts[0][kind] != 0) | (counts[1][kind] != 0) | (counts[2][kind] != 0)
        valid[slot::2] = happens[kind] & (moves_activations | (trans_deltas[slot::2] != 0))
    record = np.repeat(np.arange(count), 2)[valid]
    devices = np.repeat(run.device, 2)[valid]
    times, act_deltas, trans_deltas = times[valid], act_deltas[valid], trans_deltas[valid]
    # Stable: by device, then time, frees (and zero changes) before allocations, then as made.
    order = np.lexsort((act_deltas + trans_deltas > 0, times, devices))
    times, devices, record = times[order], devices[order], record[order]
    act_deltas, trans_deltas = act_deltas[order], trans_deltas[order]
    activations = running_totals(act_deltas, devices, schedule.devices)
    transients = running_totals(trans_deltas, devices, schedule.devices)
    bounds = np.searchsorted(devices, np.arange(schedule.devices + 1)).tolist()
    out = []
    for device in range(schedule.devices):
        width = bounds[device + 1] - bounds[device]
        act = activations[device, :width]
        trans = transients[device, :width]
        if width:
            at = int(np.argmax(act + trans))
            peak_total = float(act[at] + trans[at])
        else:
            at, peak_total = -1, 0.0
        if peak_total > 0:
            at_act, at_trans = float(act[at]), float(trans[at])
            peak_record = int(record[bounds[device] + at])
        else:
            at_act, at_trans, peak_record = 0.0, 0.0, -1
        out.append(
            DeviceMemory(
                static_breakdown(schedule, costs, device),
                max(float(act.max()) if width else 0.0, 0.0),
                at_act,
                at_trans,
                times[bounds[device] : bounds[device + 1]],
                act,
                trans,
                costs.runtime_reserve_bytes,
                costs.fragmentation_fraction,
                peak_record,
            )
        )
    return tuple(out)


def shared_peak_bytes(memories: Sequence[DeviceMemory], *, static: bool = True) -> float:
    """The most the devices hold at one moment when they share one memory (the lanes of one
    GPU, :mod:`executor.lanes`): every device's static terms (with ``static``) plus the largest
    sum over devices of their activation and transient levels at one time. At equal times,
    frees come first. Never more than the sum of the devices' own peaks, and less where their
    peaks fall at different times."""
    times, deltas = [], []
    for memory in memories:
        levels = memory.activation_levels_bytes + memory.transient_levels_bytes
        if len(levels):
            times.append(memory.change_times_s)
            deltas.append(np.diff(levels, prepend=0.0))
    fixed = sum(m.static_bytes for m in memories) if static else 0.0
    if not times:
        return float(fixed)
    at, change = np.concatenate(times), np.concatenate(deltas)
    order = np.lexsort((change > 0, at))
    return float(fixed + max(0.0, float(np.cumsum(change[order]).max())))
