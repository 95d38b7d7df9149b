"""A partitioning problem: per-layer costs, the stage-to-device placement, the devices.

A stage is a contiguous slice of layers; its compute and sizes are the sums over its layers
(what :func:`pipesim.costs.spec_derived.costs_from_model` does), except its input (the previous
layer's output, or the model's input) and its output (its last layer's). The *stage time* the
partitioner balances is, per micro-batch:

    (F + B [+ F again under re-materialization]) / device speed
      + the transfers at its two boundaries (each: the activation forward and the gradient
        backward, latency + bytes / bandwidth on the route between the two devices)

Devices may differ (heterogeneous clusters): each has a speed (compute times are divided by
it) and a memory capacity.

Under ``--recompute N`` (Megatron-LM's ``--recompute-method block``: each stage fully
recomputes its first N transformer blocks and keeps the others' activations) a layer's costs
depend on where its stage starts: :class:`RecomputeFirst` gives each layer's fully recomputed
twin, and every stage of the problem swaps in the twins of its first N blocks
(:meth:`PartitionProblem.stage_layers`), for its time and its memory alike, as the simulator's
costs do (:meth:`pipesim.workload.sharding.ShardedLayers.for_stage`). The solver weighs this
exactly (:mod:`pipesim.partition.solver`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pipesim.common import checks
from pipesim.common.checks import SpecError
from pipesim.costs.pipeline_costs import StageCosts, merge_layers
from pipesim.hardware.network import Network


@dataclass(frozen=True)
class RecomputeFirst:
    """``--recompute N`` in a partition problem: each stage fully recomputes its first N
    blocks.

    Attributes:
        layers_per_stage: N, the blocks each stage recomputes (a stage with fewer recomputes
            all of them).
        recomputed: one :class:`StageCosts` per layer, the layer fully recomputed (its
            twin); a stage swaps in the twins of its first N blocks.
        blocks: per layer, whether it is a transformer block (counted towards N); the others
            (an embedding, an output layer) are never recomputed.
    """

    layers_per_stage: int
    recomputed: tuple[StageCosts, ...]
    blocks: tuple[bool, ...]

    def __post_init__(self) -> None:
        checks.non_negative_int("recompute layers per stage", self.layers_per_stage)
        object.__setattr__(self, "recomputed", tuple(self.recomputed))
        object.__setattr__(self, "blocks", tuple(bool(b) for b in self.blocks))
        if len(self.recomputed) != len(self.blocks):
            raise SpecError(
                f"recompute: {len(self.recomputed)} recomputed layers for {len(self.blocks)} "
                "block flags"
            )

    def ends(self) -> np.ndarray:
        """For each start i in 0..L, the layer after the N-th block at or after i (L when
        fewer follow): a stage starting at i holds the twins of exactly the blocks in
        [i, ends[i]) it reaches."""
        count = len(self.blocks)
        if self.layers_per_stage == 0:
            return np.arange(count + 1)
        positions = np.flatnonzero(np.array(self.blocks, dtype=bool))
        before = np.concatenate(([0], np.cumsum(self.blocks, dtype=int)))  # blocks before i
        last = before + self.layers_per_stage - 1  # which block is the N-th from each start
        reached = last < len(positions)
        ends = np.full(count + 1, count, dtype=int)
        ends[reached] = positions[last[reached]] + 1
        return ends

    def swapped(self, start: int, end: int) -> tuple[bool, ...]:
        """For each layer of [start, end): whether the stage holds its twin."""
        left = self.layers_per_stage
        out = []
        for index in range(start, end):
            take = left > 0 and self.blocks[index]
            out.append(take)
            left -= int(take)
        return tuple(out)


@dataclass(frozen=True)
class PartitionProblem:
    """What a partition is chosen for.

    Attributes:
        layers: one :class:`StageCosts` per layer (a one-layer stage), on a speed-1 device.
        input_bytes: the model's input per micro-batch (the first stage's input).
        placement: ``placement[s]`` is the device of stage s (S = len(placement)).
        network: routes between devices; None means transfers are free.
        device_speeds: per device, compute runs ``speed`` times faster than ``layers`` says.
        memory_capacity_bytes: per device.
        rematerialize: the backward re-runs the forward (counted in the stage time).
        device_layers: per device, its own per-layer costs (devices of different kinds: times
            differ, sizes must not); None means every device has ``layers``.
        runtime_reserve_bytes, fragmentation_fraction: the allowances a device's reported
            peak carries on top of the model's (:func:`pipesim.memory.rules.peak_with_allowances`).
        recompute_first: ``--recompute N``: each stage swaps in the fully recomputed twins of
            its first N blocks (None: every stage holds ``layers`` as they are). Not with
            ``device_layers``.
    """

    layers: tuple[StageCosts, ...]
    input_bytes: float
    placement: tuple[int, ...]
    network: Network | None = None
    device_speeds: tuple[float, ...] | None = None
    memory_capacity_bytes: tuple[float, ...] | None = None
    rematerialize: bool = False
    device_layers: tuple[tuple[StageCosts, ...], ...] | None = None
    runtime_reserve_bytes: float = 0.0
    fragmentation_fraction: float = 0.0
    recompute_first: RecomputeFirst | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "layers", tuple(self.layers))
        object.__setattr__(self, "placement", tuple(self.placement))
        if not self.layers:
            raise SpecError("a partition needs at least one layer")
        if not self.placement:
            raise SpecError("a partition needs at least one stage")
        if len(self.placement) > len(self.layers):
            raise SpecError(
                f"stages: {len(self.placement)} stages need at least {len(self.placement)} "
                f"layers, but there are {len(self.layers)}"
            )
        devices = max(self.placement) + 1
        if self.device_speeds is None:
            object.__setattr__(self, "device_speeds", (1.0,) * devices)
        if self.memory_capacity_bytes is None:
            object.__setattr__(self, "memory_capacity_bytes", (math.inf,) * devices)
        speeds = tuple(self.device_speeds or ())
        capacities = tuple(self.memory_capacity_bytes or ())
        for what, values in (("device_speeds", speeds), ("memory_capacity_bytes", capacities)):
            if len(values) < devices:
                raise SpecError(
                    f"{what} has {len(values)} value(s) but the placement uses {devices} devices"
                )
        for index, speed in enumerate(speeds):
            checks.positive(f"device {index} speed", speed)
        for index, capacity in enumerate(capacities):
            checks.positive_or_inf(f"device {index} memory_capacity_bytes", capacity)
        object.__setattr__(self, "device_speeds", speeds)
        object.__setattr__(self, "memory_capacity_bytes", capacities)
        if self.device_layers is not None:
            tables = tuple(tuple(table) for table in self.device_layers)
            if len(tables) < devices or any(len(t) != len(self.layers) for t in tables):
                raise SpecError(
                    f"device_layers must give {len(self.layers)} layers for each of the "
                    f"{devices} devices"
                )
            object.__setattr__(self, "device_layers", tables)
        if self.recompute_first is not None:
            if len(self.recompute_first.recomputed) != len(self.layers):
                raise SpecError(
                    f"recompute_first must give {len(self.layers)} recomputed layers, got "
                    f"{len(self.recompute_first.recomputed)}"
                )
            if self.device_layers is not None:
                raise SpecError(
                    "recompute_first with device_layers: recomputing the first N layers of "
                    "each stage is modelled on devices of one kind"
                )
        if self.network is not None and self.network.devices < devices:
            raise SpecError(
                f"the network has {self.network.devices} device(s) but the placement uses {devices}"
            )

    @property
    def stages(self) -> int:
        """S, the number of stages."""
        return len(self.placement)

    @property
    def devices(self) -> int:
        """K, the devices the placement uses."""
        return max(self.placement) + 1

    def compute_s(self, layer: StageCosts) -> float:
        """One layer's per-micro-batch compute on a speed-1 device (F + B, F twice under
        re-materialization)."""
        recompute = layer.forward_s if self.rematerialize else 0.0
        return layer.forward_s + recompute + layer.backward_s

    def boundary_s(self, cut: int, stage: int) -> float:
        """The transfers across the cut before layer ``cut`` between stage ``stage - 1`` and
        ``stage``: the activation one way and the gradient back (0 on one device)."""
        if self.network is None or cut <= 0 or cut >= len(self.layers):
            return 0.0
        source, target = self.placement[stage - 1], self.placement[stage]
        if source == target:
            return 0.0
        size = self.layers[cut - 1].output_bytes
        return self.network.route(source, target).transfer_time_s(size) + self.network.route(
            target, source
        ).transfer_time_s(size)

    def layers_on(self, device: int) -> tuple[StageCosts, ...]:
        """The per-layer costs on ``device`` (its own table, or the shared one)."""
        return self.device_layers[device] if self.device_layers is not None else self.layers

    def stage_layers(self, start: int, end: int, device: int) -> tuple[StageCosts, ...]:
        """The per-layer costs of a stage holding layers [start, end) on ``device``: under
        :attr:`recompute_first`, the twins of its first N blocks in place of the layers."""
        layers = self.layers_on(device)[start:end]
        first = self.recompute_first
        if first is None:
            return layers
        swapped = first.swapped(start, end)
        return tuple(
            first.recomputed[start + offset] if swap else layer
            for offset, (layer, swap) in enumerate(zip(layers, swapped, strict=True))
        )

    def stage_time_s(self, stage: int, start: int, end: int) -> float:
        """The balanced objective's time of stage ``stage`` holding layers [start, end)."""
        device = self.placement[stage]
        speed = self.device_speeds[device] if self.device_speeds else 1.0
        layers = self.stage_layers(start, end, device)
        compute = sum(self.compute_s(layer) for layer in layers) / speed
        incoming = self.boundary_s(start, stage) if stage > 0 else 0.0
        outgoing = self.boundary_s(end, stage + 1) if stage + 1 < self.stages else 0.0
        return compute + incoming + outgoing

    def stage_costs(self, start: int, end: int, device: int) -> StageCosts:
        """The :class:`StageCosts` of layers [start, end) on ``device`` (times / speed)."""
        return merge_layers(
            self.stage_layers(start, end, device),
            self.input_bytes if start == 0 else self.layers[start - 1].output_bytes,
            self.device_speeds[device] if self.device_speeds else 1.0,
        )


def counts_to_cuts(counts: Sequence[int]) -> tuple[int, ...]:
    """Layer counts per stage -> cut positions 0 = c_0 < c_1 < ... < c_S = L."""
    cuts = [0]
    for count in counts:
        cuts.append(cuts[-1] + count)
    return tuple(cuts)
