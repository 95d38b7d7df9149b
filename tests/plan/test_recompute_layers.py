"""The planner's recomputation of the first N blocks of each stage (``--recompute N``,
Megatron-LM's ``--recompute-method block``): a literal case it must win, the planner's best
against simulating every count N of every configuration, and plans that ``pipesim simulate``
reproduces number for number."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import pytest

from cli.plan_command import simulate_command
from pipesim.plan import candidates, plan
from pipesim.plan.planner import Evaluated, PlanContext, space_limits
from pipesim.plan.report import plan_json, report_table
from pipesim.plan.space import RECOMPUTE_LAYERS, SPLIT_BACKWARD, Candidate
from tests.plan.settings import plan_case, plan_settings
from tests.plan.test_planner import _assert_simulate_reproduces

# The tiny transformer (8 blocks of hidden 256, sequence 512, fp32) on one device of 1 TFLOP/s
# with 230 MB (219 MiB), batch 4: without recomputation the fastest shape (M=4, b=1) needs
# 259 MiB; recomputing the first 3 blocks 222 MiB, the first 4 204 MiB; every block 132 MiB,
# but 14% slower than 4 (140.8 against 123.6 ms).
LITERAL = {"memory_bytes": 230e6, "bandwidth_bytes_per_s": 1e10}


def test_recomputing_the_fewest_blocks_that_fit_beats_none_and_full(
    transformer_file: Callable[..., str], hardware_file: Callable[..., str]
) -> None:
    """The plan recomputes the first 4 blocks: without recomputation the shape does not fit,
    with 3 it does not either, and full recomputation fits but is slower."""
    settings = plan_settings(
        transformer_file(),
        hardware_file(**LITERAL),
        1,
        4,
        recompute=("none", "full", RECOMPUTE_LAYERS),
        top=3,
    )
    report = plan(settings, show_progress=False)
    best = report.plans[0]
    c = best.candidate
    assert (c.microbatches, c.microbatch_size, c.recompute) == (4, 1, "4")
    assert best.iteration_time_s == pytest.approx(0.1236, abs=1e-4)
    context = PlanContext(settings)
    without = context.evaluate(dataclasses.replace(c, recompute="none"))
    fewer = context.evaluate(dataclasses.replace(c, recompute="3"))
    assert without.oom and fewer.oom
    assert max(fewer.peak_memory_bytes) > settings.run.job_hardware.accelerator.memory_bytes
    full = context.simulate(context.evaluate(dataclasses.replace(c, recompute="full")))
    assert not full.oom and not full.simulated_oom
    assert (full.iteration_time_s or 0.0) > (best.iteration_time_s or math.inf) * 1.1
    assert all(e.candidate.recompute != "none" for e in report.plans)
    table = report_table(report)
    assert "first 4" in table  # the table's recompute column
    assert plan_json(best, settings.batch)["recompute_layers_per_stage"] == 4


def _every_count(context: PlanContext, c: Candidate, blocks: int) -> list[Candidate]:
    """``c`` with each recomputation the planner could run: its own, and for a configuration
    without recomputation on a schedule with a full backward every N from 1 to the blocks."""
    if c.recompute != "none" or c.remat or c.schedule in SPLIT_BACKWARD:
        return [c]
    return [c] + [dataclasses.replace(c, recompute=str(n)) for n in range(1, blocks + 1)]


@pytest.mark.parametrize(
    ("blocks", "seq", "devices", "memory_bytes"),
    [
        (8, 512, 2, 140e6),
        (8, 512, 2, 160e6),
        (8, 512, 2, 200e6),
        (8, 512, 4, 120e6),
        (8, 512, 4, 160e6),
        (8, 512, 4, 200e6),
        (12, 256, 2, 160e6),
    ],
)
def test_the_best_plan_is_the_best_of_every_count_simulated(
    transformer_file: Callable[..., str],
    hardware_file: Callable[..., str],
    blocks: int,
    seq: int,
    devices: int,
    memory_bytes: float,
) -> None:
    """Exhaustively: every configuration of the space (pipelines and data parallelism of the
    tiny transformer, T = 1, none or full recomputation), and for each that can recompute the
    first N blocks every N from 1 to the model's 8, partitioned (memory-aware where the
    balanced partition overflows) and simulated; the fastest that fits is the planner's best,
    which searches N as ``layers`` (the fewest that fit, and the few above it whose balanced
    partition may be faster than a memory-aware one). At these memories a count N is among
    the configurations that fit (8 blocks at 160 MB on 2 devices: the best is interleaved 1F1B
    with the first block of each stage recomputed, on a memory-aware partition, where the
    balanced partition needs every block recomputed; 12 blocks at 160 MB: the best recomputes
    1 block on the balanced partition where none fits on a memory-aware one, and searching the
    fewest N alone finds a plan 1.6% slower)."""
    schedules = ("gpipe", "1f1b", "interleaved-1f1b", "zb-h1")
    settings = plan_settings(
        transformer_file(layers=blocks, seq=seq),
        hardware_file(memory_bytes=memory_bytes, bandwidth_bytes_per_s=1e10),
        devices,
        8,
        schedules=schedules,
        tensor_sizes=(1,),
        recompute=("none", "full", RECOMPUTE_LAYERS),
        top=1,
    )
    report = plan(settings, show_progress=False)
    context = PlanContext(settings)
    exhaustive = dataclasses.replace(
        space_limits(context.model, context.hardware, settings), recompute=("none", "full")
    )
    fastest: tuple[float, Evaluated] | None = None
    counted = 0
    for candidate in candidates(devices, 8, exhaustive, schedules):
        for c in _every_count(context, candidate, exhaustive.blocks):
            item = context.evaluate(c)
            if item.oom:
                continue
            done = context.simulate(item)
            if done.simulated_oom or done.iteration_time_s is None:
                continue
            # the bounds hold: the search's for every N >= 1 (``layers``), N's own, its
            # partition's
            time_s = done.iteration_time_s * (1 + 1e-9)
            assert item.bound_s <= time_s, c.label()
            assert context.quick_bound(c) <= time_s, c.label()
            if c.recompute.isdigit():
                searched = dataclasses.replace(c, recompute=RECOMPUTE_LAYERS)
                assert context.quick_bound(searched) <= time_s, c.label()
            counted += c.recompute.isdigit()
            if fastest is None or done.iteration_time_s < fastest[0]:
                fastest = (done.iteration_time_s, done)
    assert fastest is not None and report.plans and counted
    found = report.plans[0]
    assert found.iteration_time_s == pytest.approx(fastest[0], rel=1e-12), (
        f"planner {found.candidate.label()} {found.partition}, "
        f"exhaustive {fastest[1].candidate.label()} {fastest[1].partition}"
    )


def test_every_finalist_recomputing_n_resimulates_to_the_same_numbers(
    transformer_file: Callable[..., str],
    hardware_file: Callable[..., str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Each configuration the planner simulated (recompute N among them, and counts covering
    every block, labelled full) reports, in its ``plan --json`` object, what its ``pipesim
    simulate --recompute N --partition ...`` command gives; each device's closed-form peak is
    the simulator's."""
    settings, args = plan_case(
        transformer_file(),
        hardware_file(memory_bytes=150e6, bandwidth_bytes_per_s=1e10),
        2,
        8,
        schedules=("gpipe", "1f1b", "interleaved-1f1b"),
        top=8,
    )
    report = plan(settings, show_progress=False)
    finalists = [e for e in report.evaluated if e.simulated]
    assert any(e.candidate.recompute.isdigit() for e in finalists)
    for e in finalists:
        command = simulate_command(report, e, args)
        if e.candidate.recompute != "none":
            assert f"--recompute {e.candidate.recompute}" in command
        result = _assert_simulate_reproduces(plan_json(e, settings.batch), command, capsys)
        peaks = [d["peak_memory_bytes"] for d in result["per_device"]]
        assert peaks == pytest.approx(list(e.peak_memory_bytes), rel=1e-9), command


def test_layers_search_includes_none_and_resolves_per_configuration(
    transformer_file: Callable[..., str], hardware_file: Callable[..., str]
) -> None:
    """``--recompute layers`` searches none with it (N = 0), never leaves the token itself in
    a plan, and a count covering every block of every stage reads as full."""
    settings = plan_settings(
        transformer_file(),
        hardware_file(**LITERAL),
        1,
        4,
        recompute=(RECOMPUTE_LAYERS,),
        top=5,
    )
    context = PlanContext(settings)
    limits = space_limits(context.model, context.hardware, settings)
    assert limits.recompute == (RECOMPUTE_LAYERS, "none")
    report = plan(settings, show_progress=False)
    labels = {e.candidate.recompute for e in report.evaluated}
    assert RECOMPUTE_LAYERS not in labels
    assert "full" in labels  # M=1, b=4: the 8 blocks of its one stage, every one
    assert not any(e.candidate.recompute == "8" for e in report.evaluated)


def test_a_count_is_searched_where_every_partition_holds_that_many_blocks(
    transformer_file: Callable[..., str], hardware_file: Callable[..., str]
) -> None:
    """``--recompute 3`` on 8 blocks: K·v = 2 stages (some stage holds 4 or more) but not 4
    (ceil(8 / 4) = 2: a partition could leave every stage 2); never with a split backward."""
    settings = plan_settings(
        transformer_file(),
        hardware_file(memory_bytes=1e12, bandwidth_bytes_per_s=1e10),
        4,
        8,
        recompute=("3",),
        tensor_sizes=(1,),
    )
    context = PlanContext(settings)
    limits = space_limits(context.model, context.hardware, settings)
    space = list(candidates(4, 8, limits, settings.schedules))
    assert space and all(c.recompute == "3" for c in space)
    assert {c.stages for c in space} == {1, 2}
    assert not any(c.schedule in SPLIT_BACKWARD for c in space)


def test_recompute_layers_searches_beside_context_parallelism() -> None:
    """With CP > 1 the bound of a ``layers`` candidate reads its ranks (which recomputation
    does not change): the search runs (it used to stop on '--recompute must be ... got
    layers'), resolves every plan to a count, ``none`` or ``full``, and finds no worse a plan
    than the same space without it."""
    options = {"schedules": ("1f1b",), "context_sizes": (1, 2), "tensor_sizes": (1,)}
    settings = plan_settings(
        "megatron-1.7b", "a100", 8, 16, recompute=("none", "layers"), **options
    )
    report = plan(settings, show_progress=False)
    assert report.plans
    assert all(e.candidate.recompute != "layers" for e in report.plans)
    assert any(e.candidate.context == 2 for e in report.evaluated)
    without = plan(
        plan_settings("megatron-1.7b", "a100", 8, 16, recompute=("none",), **options),
        show_progress=False,
    )
    assert report.plans[0].iteration_time_s <= without.plans[0].iteration_time_s  # type: ignore[operator]
