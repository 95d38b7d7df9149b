"""The result of a simulation: timeline, memory and the metrics of docs/architecture.md."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Protocol

import numpy as np

from pipesim.analysis.bubble import analytic_bubble_fraction
from pipesim.costs.pipeline_costs import PipelineCosts
from pipesim.engine.arrays import OPTIMIZER, IntArray, RunArrays, running_totals
from pipesim.engine.durations import overlap_savings_s
from pipesim.engine.memory_over_time import DeviceMemory, device_memory
from pipesim.engine.records import ComputeRecord, Timeline, TransferRecord
from pipesim.engine.run_layout import run_layout
from pipesim.schedules.action import Action
from pipesim.schedules.encoded import KINDS
from pipesim.schedules.schedule import Schedule


@dataclass(frozen=True)
class DeviceSummary:
    """One device over one (steady-state) step."""

    device: int
    busy_time_s: float
    idle_time_s: float
    memory: DeviceMemory
    memory_capacity_bytes: float

    @property
    def peak_memory_bytes(self) -> float:
        """Static memory plus the activation peak."""
        return self.memory.peak_bytes

    @property
    def peak_activation_bytes(self) -> float:
        """The largest activation stash at any time."""
        return self.memory.peak_activation_bytes

    @property
    def oom(self) -> bool:
        """True when the peak exceeds the device's memory."""
        return self.peak_memory_bytes > self.memory_capacity_bytes

    @property
    def static_memory_bytes(self) -> float:
        """Weights, gradients, optimizer state and master weights."""
        return self.memory.static_bytes


class TransferSource(Protocol):
    """Where a result's transfer records come from: stored, or built on demand."""

    def __call__(self) -> tuple[TransferRecord, ...]: ...


@dataclass(frozen=True)
class SimulationResult:
    """Everything a simulation produced.

    ``iteration_time_s`` is the time of one optimizer step: the whole run for one step, the
    steady-state interval between step completions for several. ``bubble_fraction`` is the mean
    over devices of (iteration time - compute busy time) / iteration time. ``engine`` names the
    engine that ran (``simpy`` or ``fast``). The compute and transfer records are built when
    first read: a large run has hundreds of thousands of them, and a sweep reads none.
    """

    schedule: Schedule
    costs: PipelineCosts
    steps: int
    iteration_time_s: float
    makespan_s: float
    per_device: tuple[DeviceSummary, ...]
    analytic_bubble_fraction: float | None
    unpipelined_time_s: float
    engine: str
    run: RunArrays = field(repr=False, compare=False)
    transfer_source: TransferSource = field(repr=False, compare=False)

    @cached_property
    def compute(self) -> tuple[ComputeRecord, ...]:
        """Every action and optimizer step run, in the order they completed."""
        return self.run.records()

    @cached_property
    def transfers(self) -> tuple[TransferRecord, ...]:
        """Every transfer, in the order its channels were reserved."""
        return self.transfer_source()

    @property
    def timeline(self) -> Timeline:
        """The compute and transfer records, in the format the executor also produces."""
        return Timeline(self.compute, self.transfers)

    @property
    def bubble_fraction(self) -> float:
        """Mean over devices of the idle share of one step."""
        return (
            sum(d.idle_time_s for d in self.per_device)
            / (len(self.per_device) * self.iteration_time_s)
            if self.iteration_time_s > 0
            else 0.0
        )

    @property
    def throughput(self) -> float:
        """Samples per second (micro-batches per second when the sample count is unknown)."""
        per_step = self.schedule.microbatches * (self.costs.samples_per_microbatch or 1.0)
        return per_step / self.iteration_time_s if self.iteration_time_s > 0 else float("inf")

    @property
    def throughput_unit(self) -> str:
        """``samples/s`` or ``microbatches/s``."""
        return "samples/s" if self.costs.samples_per_microbatch else "microbatches/s"

    @property
    def speedup(self) -> float:
        """Throughput over that of the same model and mini-batch unpipelined on one device
        (every stage's F, I and W for every micro-batch, one after another, plus the optimizer)."""
        return self.unpipelined_time_s / self.iteration_time_s if self.iteration_time_s else 1.0

    @property
    def oom(self) -> bool:
        """True when any device's peak memory exceeds its capacity."""
        return any(d.oom for d in self.per_device)

    @property
    def model_flops_utilization(self) -> float | None:
        """MFU: the model's FLOPs per step (no recomputation; 2104.04473's appendix count)
        over the time and the job's peak; None for synthetic costs."""
        flops = self.costs.flops
        if flops is None:
            return None
        return flops.utilization(
            flops.model_flops_per_microbatch, self.schedule.microbatches, self.iteration_time_s
        )

    @property
    def hardware_flops_utilization(self) -> float | None:
        """HFU: as MFU, counting the recomputed forward work too; None for synthetic costs."""
        flops = self.costs.flops
        if flops is None:
            return None
        return flops.utilization(
            flops.hardware_flops_per_microbatch, self.schedule.microbatches, self.iteration_time_s
        )

    @property
    def achieved_flops_per_device(self) -> float | None:
        """Hardware FLOP/s per device (the figure Megatron-LM's Table 1 reports as achieved
        teraFLOP/s per GPU, recomputation counted); None for synthetic costs."""
        flops = self.costs.flops
        hfu = self.hardware_flops_utilization
        return None if flops is None or hfu is None else hfu * flops.peak_flops_per_s

    def heaviest_device(self) -> DeviceSummary:
        """The device with the largest peak memory."""
        return max(self.per_device, key=lambda d: d.peak_memory_bytes)

    def peak_action(self, device: DeviceSummary) -> str | None:
        """What ``device`` was running at its memory peak: an action (``3I5``), ``optimizer``,
        or None when nothing ran."""
        index = device.memory.peak_record
        if index < 0:
            return None
        kind = int(self.run.kind[index])
        if kind == OPTIMIZER:
            return "optimizer"
        stage, microbatch = int(self.run.stage[index]), int(self.run.microbatch[index])
        return str(Action(stage, KINDS[kind], microbatch))

    def to_json(self) -> dict[str, Any]:
        """The ``pipesim simulate --json`` object (times in seconds, sizes in bytes)."""
        devices = [
            {
                "device": d.device,
                "busy_time": d.busy_time_s,
                "idle_time": d.idle_time_s,
                "peak_memory_bytes": (peak := d.peak_memory_bytes),
                "peak_activation_bytes": d.peak_activation_bytes,
                "static_memory_bytes": d.memory.static_bytes,
                "memory_breakdown": d.memory.breakdown(),
                "peak_action": self.peak_action(d),
                "memory_capacity_bytes": _json_number(d.memory_capacity_bytes),
                "oom": peak > d.memory_capacity_bytes,  # DeviceSummary.oom
            }
            for d in self.per_device
        ]
        return {
            "schedule": self.schedule.name,
            "devices": self.schedule.devices,
            "microbatches": self.schedule.microbatches,
            "chunks": self.schedule.chunks,
            "stages": self.schedule.stages,
            **({"copies": self.schedule.copies} if self.schedule.copies > 1 else {}),
            "update_rule": self.schedule.update_rule.value,
            "rematerialize": self.schedule.rematerialize,
            "steps": self.steps,
            "iteration_time": self.iteration_time_s,
            "makespan": self.makespan_s,
            "bubble_fraction": self.bubble_fraction,
            "analytic_bubble_fraction": self.analytic_bubble_fraction,
            "throughput": self.throughput,
            "throughput_unit": self.throughput_unit,
            "speedup": self.speedup,
            "oom": any(device["oom"] for device in devices),  # self.oom
            "costs": self.costs.description,
            "recipe": None if self.costs.recipe is None else dict(self.costs.recipe),
            "layout": None if self.costs.layout is None else dict(self.costs.layout),
            "engine": self.engine,
            **self._flops_json(),
            "per_device": devices,
        }

    def _flops_json(self) -> dict[str, Any]:
        """The utilisation fields of the JSON object (nulls for synthetic costs)."""
        flops = self.costs.flops
        steps = self.schedule.microbatches * (flops.replicas if flops else 1)
        return {
            "devices_total": flops.devices if flops else self.schedule.devices,
            "model_flops_per_step": flops.model_flops_per_microbatch * steps if flops else None,
            "hardware_flops_per_step": flops.hardware_flops_per_microbatch * steps
            if flops
            else None,
            "flops_formula": FLOPS_FORMULA if flops else None,
            "mfu": self.model_flops_utilization,
            "hfu": self.hardware_flops_utilization,
            "achieved_flops_per_device": self.achieved_flops_per_device,
        }


FLOPS_FORMULA = (
    "matmul FLOPs of arXiv 2104.04473's appendix: per layer forward 24bsh^2 + 4bs^2h (with "
    "grouped-query or gated MLPs, 2 x their matmul parameters x bs + 4bs^2h), backward twice the "
    "forward, logits 6bshV; hardware FLOPs add the recomputed forward work"
)


def _json_number(value: float) -> float | None:
    """JSON has no infinity: an unlimited capacity is null."""
    return None if value == float("inf") else value


def summarize(
    schedule: Schedule,
    costs: PipelineCosts,
    steps: int,
    run: RunArrays,
    transfers: TransferSource,
    engine: str,
) -> SimulationResult:
    """Metrics from a finished run: step ends, per-device busy time of the last step, memory."""
    if steps == 1 and len(run):  # the same maximum (a maximum is exact in any order)
        step_end = np.maximum(run.end_s.max(keepdims=True), 0.0)
    else:
        step_end = np.full(steps, -np.inf)
        np.maximum.at(step_end, run.step, run.end_s)
        step_end = np.maximum(step_end, 0.0)
    makespan = float(step_end.max())
    iteration = (
        float(step_end[0]) if steps == 1 else float((step_end[-1] - step_end[0]) / (steps - 1))
    )
    busy = _last_step_busy_s(run, steps, schedule.devices, schedule)
    memory = device_memory(schedule, costs, run)
    per_device = tuple(
        DeviceSummary(
            device,
            busy[device],
            max(0.0, iteration - busy[device]),
            memory[device],
            costs.memory_capacity_bytes,
        )
        for device in range(schedule.devices)
    )
    # the baseline runs the same actions one after another: an overlapped pair's hidden
    # communication is hidden there too, so the speedup is the pipeline's alone
    unpipelined = _unpipelined_s(schedule, costs) - float(overlap_savings_s(schedule, costs).sum())
    return SimulationResult(
        schedule,
        costs,
        steps,
        iteration,
        makespan,
        per_device,
        analytic_bubble_fraction(schedule, costs, steps),
        unpipelined,
        engine,
        run,
        transfers,
    )


def _unpipelined_s(schedule: Schedule, costs: PipelineCosts) -> float:
    """One step of the model on one device: every micro-batch's F and B through every stage,
    and the optimizer step. With copies of the model, a micro-batch runs through its own
    copy's stages, and one copy is updated."""
    if schedule.copies == 1:
        return schedule.microbatches * sum(
            stage.forward_s + stage.backward_s for stage in costs.stages
        ) + sum(stage.optimizer_step_s for stage in costs.stages)
    per_copy = [
        sum(costs.stages[s].forward_s + costs.stages[s].backward_s for s in stages)
        for stages in map(schedule.stages_of_copy, range(schedule.copies))
    ]
    first = schedule.stages_of_copy(0)
    return sum(per_copy[copy] for copy in schedule.routes) + sum(
        costs.stages[s].optimizer_step_s for s in first
    )


def _last_step_busy_s(
    run: RunArrays, steps: int, devices: int, schedule: Schedule | None = None
) -> list[float]:
    """Per device, the durations of its last-step records added up in completion order."""
    durations, owner = run.end_s - run.start_s, run.device
    if steps == 1 and run.item is not None and schedule is not None:
        place = _busy_places(schedule, len(run))
        if place is not None and bool((durations >= 0).all()):
            # A device's records complete in its list order (the layout's): each starts no
            # sooner than the one before it ends and lasts >= 0, so their ends never decrease,
            # and the execution order that breaks ties follows the device's list. So each
            # device's row, filled in layout order, adds the same durations in the same order.
            positions, shape = place
            totals = np.zeros(shape)
            totals.ravel()[positions[run.item]] = durations
            np.add.accumulate(totals, axis=1, out=totals)
            return [float(total) for total in totals[:, -1]]
    if steps > 1:
        last = run.step == steps - 1
        durations, owner = durations[last], owner[last]
    # the same stable order; small integers sort by radix
    order = np.argsort(owner.astype(np.int16) if devices < 2**15 else owner, kind="stable")
    totals = running_totals(durations[order], owner[order], devices)
    return [float(total) for total in totals[:, -1]]


def _busy_places(schedule: Schedule, records: int) -> tuple[IntArray, tuple[int, int]] | None:
    """For a one-step run of ``records`` records: each layout item's place in a (device,
    position on the device) matrix, flat, and the matrix's shape; None when the one-step
    layout has another number of items. Kept on the schedule."""
    layout = run_layout(schedule, 1)
    if len(layout.kind) != records:
        return None

    def make() -> tuple[IntArray, tuple[int, int]]:
        starts = layout.items.device_starts
        device = layout.items.device
        width = max(int(np.diff(starts).max(initial=0)), 1)
        column = np.arange(len(device)) - starts[device]
        return device * width + column, (schedule.devices, width)

    return schedule.derived("busy places", make)
