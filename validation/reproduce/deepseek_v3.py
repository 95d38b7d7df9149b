"""DeepSeek-V3's comparison of pipeline schedules (arXiv 2412.19437 §3.2.1, Table 2): the
bubble, the parameters and the activations per device of 1F1B, ZB1P and DualPipe, against
pipesim's engine on equal stages. See ``deepseek_v3.md``."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

from pipesim.costs import synthetic_costs
from pipesim.costs.pipeline_costs import PipelineCosts
from pipesim.engine import simulate
from pipesim.engine.result import SimulationResult
from pipesim.schedules import build
from plots import save
from plots.style import new_figure
from validation.reproduce.common import suite_readme
from validation.reproduce.framework import Outcome, Row, Sample, SampleLabel, labelled

# Per device and micro-batch (seconds): a forward, the input-gradient and the weight-gradient
# halves of the backward (B = I + W in Table 2's notation). Two settings inside the range where
# the engine's DualPipe idle time has its closed form (W <= I <= F <= I + W).
COSTS = ((1.0, 1.0, 0.5), (1.2, 1.0, 0.6))
DEVICES = (4, 8, 16)
ACTIVATION_BYTES = 1.0  # one micro-batch's stash on one stage: the unit of Table 2's column
PARAMETER_BYTES = 1.0  # one stage's weights: the unit of its parameter column

BUBBLE = "Bubble (idle time per device)"
PARAMETERS = "Parameters per device (x one stage)"
ACTIVATIONS = "Activations per device (micro-batches of one stage)"
SAMPLES = {
    BUBBLE: SampleLabel(Sample.FORMULA, "Table 2's closed forms, not a measurement"),
    PARAMETERS: SampleLabel(Sample.FORMULA, "Table 2's closed forms, not a measurement"),
    ACTIVATIONS: SampleLabel(Sample.FORMULA, "Table 2's closed forms, not a measurement"),
}

# Table 2: (name, pipesim schedule, bubble(K, F, B, W), parameters, activations(K)); F&B (an
# overlapped forward and backward) is F + B here: pipesim models no overlap inside a pair.
TABLE_2: tuple[
    tuple[str, str, Callable[[int, float, float, float], float], int, Callable[[int], int]], ...
] = (
    ("1F1B", "1f1b", lambda k, f, b, w: (k - 1) * (f + b), 1, lambda k: k),
    ("ZB1P", "zb-h1", lambda k, f, b, w: (k - 1) * (f + b - 2 * w), 1, lambda k: k),
    (
        "DualPipe",
        "dualpipe",
        lambda k, f, b, w: (k / 2 - 1) * ((f + b) + b - 3 * w),
        2,
        lambda k: k + 1,
    ),
)


def _costs(devices: int, forward: float, input_grad: float, weight: float) -> PipelineCosts:
    costs = synthetic_costs(
        devices, 1, forward, input_grad, weight, activation_bytes=ACTIVATION_BYTES
    )
    return dataclasses.replace(
        costs,
        stages=tuple(
            dataclasses.replace(stage, parameter_bytes=PARAMETER_BYTES) for stage in costs.stages
        ),
    )


def _simulated(name: str, devices: int, costs: PipelineCosts) -> SimulationResult:
    full = name == "1f1b"  # 1F1B runs whole backwards: B = I + W in one action
    if full:
        stage = costs.stages[0]
        whole = dataclasses.replace(
            stage, input_grad_s=stage.input_grad_s + stage.weight_grad_s, weight_grad_s=0.0
        )
        costs = dataclasses.replace(costs, stages=(whole,) * len(costs.stages))
    return simulate(build(name, devices, 4 * devices), costs)


def run(out: Path) -> Outcome:
    rows = []
    for forward, input_grad, weight in COSTS:
        backward = input_grad + weight
        setting = f"F={forward:g} B={backward:g} W={weight:g}"
        for devices in DEVICES:
            for label, name, bubble, parameters, activations in TABLE_2:
                result = _simulated(name, devices, _costs(devices, forward, input_grad, weight))
                idle = max(d.idle_time_s for d in result.per_device)
                rows.append(
                    Row(
                        BUBBLE,
                        label,
                        setting,
                        devices,
                        4 * devices,
                        "seconds idle on the most idle device",
                        bubble(devices, forward, backward, weight),
                        idle,
                        "F&B taken as F + B (no overlap inside a pair)"
                        if name == "dualpipe"
                        else "",
                    )
                )
                if (forward, input_grad, weight) != COSTS[0]:
                    continue  # the memory columns do not depend on the times
                weights = max(d.memory.static.weights for d in result.per_device)
                peak = max(d.peak_activation_bytes for d in result.per_device)
                rows.append(
                    Row(
                        PARAMETERS,
                        label,
                        "equal stages",
                        devices,
                        4 * devices,
                        "stages' weights on the heaviest device",
                        parameters,
                        weights / PARAMETER_BYTES,
                    )
                )
                rows.append(
                    Row(
                        ACTIVATIONS,
                        label,
                        "equal stages",
                        devices,
                        4 * devices,
                        "stage stashes at the heaviest device's peak",
                        activations(devices),
                        peak / ACTIVATION_BYTES,
                    )
                )
    save(_bubble_figure(rows), out / "bubble.png")
    return Outcome(
        "DeepSeek-V3's pipeline schedules (arXiv 2412.19437, Table 2) reproduced with pipesim",
        labelled(rows, SAMPLES),
        suite_readme("deepseek_v3.md"),
        {"Idle time per device against PP, Table 2 and pipesim (F=1 B=1.5 W=0.5)": "bubble.png"},
    )


def _bubble_figure(rows: list[Row]) -> object:
    """Each schedule's idle time against PP: Table 2's (dashed, hollow) and pipesim's."""
    figure, axes = new_figure(7.5, 4.5)
    setting = rows[0].hardware
    for index, (label, *_) in enumerate(TABLE_2):
        mine = [r for r in rows if r.table == BUBBLE and r.model == label and r.hardware == setting]
        devices = [r.devices for r in mine]
        colour = f"C{index}"
        axes.plot(
            devices,
            [r.simulated for r in mine],
            color=colour,
            marker="o",
            label=f"{label}, pipesim",
        )
        axes.plot(
            devices,
            [r.paper for r in mine],
            color=colour,
            marker="o",
            linestyle="--",
            markerfacecolor="none",
            label=f"{label}, Table 2",
        )
    axes.set_xlabel("PP (pipeline ranks)")
    axes.set_ylabel("idle time per device (s)")
    axes.set_xticks(list(DEVICES))
    axes.set_title(f"Pipeline bubble per device, {setting}, M = 4·PP, F&B = F + B")
    axes.legend(fontsize="small")
    return figure
