"""Helpers the reproduction suites share: simulating a catalogue model on catalogue hardware."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from importlib import resources

from pipesim.config import RunConfig
from pipesim.config.recipe import CHOICES, Recipe
from pipesim.config.recipes import PIPESIM
from pipesim.costs.model_on_hardware import model_on_hardware
from pipesim.engine import SimulationResult, simulate
from pipesim.hardware import hardware
from pipesim.hardware.catalogue import HardwareSpec
from pipesim.parallel.config import Parallelism
from pipesim.partition.from_model import blocks_partition
from pipesim.schedules import build
from pipesim.workload import Model, model
from pipesim.workload.architecture import Attention


def simulate_model(
    schedule: str,
    devices: int,
    microbatches: int,
    model_or_name: Model | str,
    hardware_name: str,
    batch: int,
    *,
    chunks: int | None = None,
    remat: bool = False,
    dtype: str | None = None,
    steps: int = 1,
    optimizer: bool = False,
    recipe: Recipe = PIPESIM,
) -> SimulationResult:
    """One simulated step (or ``steps`` back to back) of a model on K devices, run by
    ``recipe``'s software. The papers that simulate through here (GPipe on Lingvo and TPUs,
    PipeDream-2BW on its own PyTorch runtime) used none of the named frameworks, so they run on
    the simulator's own recipe, named here: their published figures are speedups and memory,
    which the recipe's choices (fused accumulation, overlapped messages) barely move."""
    built = build(schedule, devices, microbatches, chunks, remat=remat)
    target = model(model_or_name) if isinstance(model_or_name, str) else model_or_name
    if dtype is not None:
        target = dataclasses.replace(target, dtype=dtype)
    run = RunConfig(target, hardware(hardware_name), recipe=recipe)
    costs = model_on_hardware(run, devices, built.chunks, batch / microbatches, optimizer=optimizer)
    return simulate(built, costs, steps=steps)


def simulate_megatron_layout(
    target: Model,
    spec: HardwareSpec,
    parallelism: Parallelism,
    recipe: Recipe,
    pipeline: int,
    chunks: int,
    microbatch_size: int,
    microbatches: int,
) -> SimulationResult:
    """One step of a run laid out as Megatron-LM lays it out: 1F1B (interleaved over
    ``chunks`` when there are several), the blocks split evenly over the stages with the
    embedding on the first and the output layer on the last; ``parallelism``'s tensor,
    sequence, recomputation, ZeRO and data parallelism; ``recipe``'s software. The Megatron-LM
    tables and the published runs simulate through here."""
    name = "1f1b" if chunks == 1 else "interleaved-1f1b"
    schedule = build(name, pipeline, microbatches, chunks)
    costs = model_on_hardware(
        RunConfig(target, spec, parallelism, recipe),
        pipeline,
        chunks,
        microbatch_size,
        blocks_partition(target, pipeline * chunks),
        placement=schedule.placement,
    )
    return simulate(schedule, costs)


def recipe_sensitivity(
    recipe: Recipe, step_s: Callable[[Recipe], float], base_s: float
) -> dict[str, float]:
    """``recipe.CHOICE`` -> how far the step moves (relative to ``base_s``) with that one
    choice turned the other way (:func:`flipped_recipe`), ``step_s`` timing a step under a
    recipe."""
    moved = {}
    for choice in CHOICES:
        other = flipped_recipe(recipe, choice)
        if other is not None and other != recipe:
            moved[f"recipe.{choice}"] = step_s(other) / base_s - 1
    return moved


def flipped_recipe(recipe: Recipe, choice: str) -> Recipe | None:
    """``recipe`` with one choice turned the other way, for a sensitivity table: a switch
    flipped, eager and flash attention swapped (the model's becomes flash), a message overhead
    made 0 (none given becomes 0 as well); None for a choice with no other value."""
    value = getattr(recipe, choice)
    if isinstance(value, bool):
        changed: object = not value
    elif choice == "attention":
        changed = Attention.FLASH if value is not Attention.FLASH else Attention.EAGER
    elif choice == "message_overhead_s":
        changed = 0.0 if value is None or value > 0 else None
    else:
        return None
    return recipe.with_choices({choice: changed}, why="sensitivity")


def sensitivity_markdown(moves: Sequence[tuple[str, Mapping[str, float]]]) -> str:
    """A table of how far each run's predicted step moves with each change (%)."""
    keys = sorted({key for _, moved in moves for key in moved})
    lines = [
        "| run | " + " | ".join(keys) + " |",
        "| --- | " + " | ".join("---" for _ in keys) + " |",
    ]
    for label, moved in moves:
        cells = [f"{moved[k]:+.1%}" if k in moved else "-" for k in keys]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def suite_readme(filename: str) -> str:
    """A suite's README text, shipped beside its code as package data."""
    return resources.files("validation.reproduce").joinpath(filename).read_text("utf-8")


def total_static_bytes(result: SimulationResult) -> float:
    """Weights, gradients and optimizer state summed over the devices."""
    return sum(d.memory.static_bytes for d in result.per_device)


def total_activation_bytes(result: SimulationResult) -> float:
    """Each device's activation peak, summed over the devices."""
    return sum(d.peak_activation_bytes for d in result.per_device)


GiB = 2**30
