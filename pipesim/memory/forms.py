"""Per-device peak memory without a simulation: the simulator's memory model, in closed form.

The simulator (:mod:`pipesim.engine.memory_over_time`) changes a device's activation level when
an action starts or ends; a device runs its actions one after another, so (for actions that take
time) the sequence of levels depends only on each device's action order, never on the timing.
Each level is a sum over the device's stages of ``n_stash * stash + n_keep * keep + n_input *
input`` with counts fixed by the order: a :class:`MemoryForm` records the distinct count vectors
once per schedule, and the peak for any partition is the largest of those linear forms. Static
memory is weights x versions, gradients and optimizer state, as the simulator counts them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pipesim.costs.pipeline_costs import StageCosts
from pipesim.memory import rules
from pipesim.schedules.schedule import Schedule
from pipesim.schedules.unroll import Work, unroll

_Counts = tuple[int, ...]  # per stage on the device: n_stash, n_keep, n_input, n_stash, ...


@dataclass(frozen=True)
class MemoryForm:
    """One device's memory as a function of its stages' sizes.

    Attributes:
        stages: the stages the device holds, in increasing order.
        versions: weight versions kept (1 flush, 2 for 2BW, more for PipeDream's stashing).
        levels: the distinct activation levels reached, each as counts
            (n_stash, n_keep, n_input) per stage in ``stages`` order, flattened.
    """

    stages: tuple[int, ...]
    versions: int
    levels: tuple[_Counts, ...]

    def static_bytes(self, stage_costs: Sequence[StageCosts]) -> float:
        """Weights x versions, gradients and optimizer state of the device's stages
        (:func:`pipesim.memory.rules.static_bytes`)."""
        return rules.static_bytes(stage_costs, self.stages, self.versions)

    def peak_activation_bytes(self, stage_costs: Sequence[StageCosts]) -> float:
        """The largest activation level for these stage sizes (0 if none is positive)."""
        sizes = [
            (stage.activation_bytes, stage.weight_grad_activation_bytes, stage.input_bytes)
            for stage in (stage_costs[s] for s in self.stages)
        ]
        best = 0.0
        for counts in self.levels:
            level = 0.0
            for position, (stash, keep, inputs) in enumerate(sizes):
                slot = 3 * position
                level += rules.activation_level_bytes(counts[slot : slot + 3], stash, keep, inputs)
            best = max(best, level)
        return best

    def peak_bytes(self, stage_costs: Sequence[StageCosts]) -> float:
        """Static plus the activation peak: the simulator's ``peak_memory_bytes``."""
        return self.static_bytes(stage_costs) + self.peak_activation_bytes(stage_costs)


def memory_forms(schedule: Schedule, steps: int = 1) -> tuple[MemoryForm, ...]:
    """One :class:`MemoryForm` per device of ``schedule`` run for ``steps`` steps."""
    return tuple(
        MemoryForm(
            schedule.stages_on(device),
            rules.weight_versions(schedule, device),
            _maximal(_levels(schedule, device, work)),
        )
        for device, work in enumerate(unroll(schedule, steps))
    )


def _levels(schedule: Schedule, device: int, work: Sequence[Work]) -> list[_Counts]:
    """The count vector after every increase of the device's activation level."""
    index = {stage: i for i, stage in enumerate(schedule.stages_on(device))}
    remat = schedule.rematerialize
    counts = [0] * (3 * len(index))
    seen: dict[_Counts, None] = {}
    for item in work:
        action = item.action
        if action is None:
            continue
        base = 3 * index[action.stage]
        kind_changes = rules.changes(action.kind, remat)
        for stash, keep, inputs in (change.counts for change in kind_changes):
            counts[base] += stash
            counts[base + 1] += keep
            counts[base + 2] += inputs
            if stash > 0 or keep > 0 or inputs > 0:
                seen.setdefault(tuple(counts))
    return list(seen)


def _maximal(levels: list[_Counts]) -> tuple[_Counts, ...]:
    """Drop count vectors that another dominates (sizes are never negative)."""
    unique = sorted(set(levels), reverse=True)
    kept: list[_Counts] = []
    for counts in unique:
        if not any(all(a >= b for a, b in zip(other, counts, strict=True)) for other in kept):
            kept.append(counts)
    return tuple(kept)
