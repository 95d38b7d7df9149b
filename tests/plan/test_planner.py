"""The planner: constructed cases with known answers, exact pruning, bounds that hold, and
plans that ``pipesim simulate`` reproduces number for number."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import random
import shlex
from collections.abc import Callable
from typing import Any

import pytest

from cli.main import main
from cli.plan_command import simulate_command
from pipesim.common.checks import SpecError
from pipesim.costs.model_on_hardware import model_on_hardware
from pipesim.engine import simulate
from pipesim.errors import LimitError
from pipesim.hardware import resolve_hardware
from pipesim.plan import DEFAULT_SCHEDULES, PlanSettings, candidates, plan
from pipesim.plan.bounds import iteration_lower_bound_s
from pipesim.plan.planner import PlanContext, _shape_key, space_limits
from pipesim.plan.report import plan_json, report_json, report_table
from pipesim.plan.space import SpaceLimits
from pipesim.request.cost_request import SyntheticRequest
from pipesim.schedules import build, schedule_names
from pipesim.synthesis.synthesis import synthesize
from pipesim.workload import resolve_model
from tests.cli.test_schedule_cli import run
from tests.plan.settings import plan_case, plan_settings


def _context(settings: PlanSettings) -> PlanContext:
    return PlanContext(settings)


def test_slow_interconnect_picks_the_shallowest_pipeline_that_fits(
    model_file: Callable[..., str], hardware_file: Callable[..., str]
) -> None:
    """Optimizer state makes one device too small (8 x 100 MB > 600 MB) but two enough; small
    gradients make the all-reduce cheap and large activations make pipeline transfers dear: on
    a 100 MB/s link K=2 with two replicas wins, on a fast one the deeper pipeline does."""
    model = model_file(optimizer_bytes=1000, parameters=1e5)
    slow = hardware_file(memory_bytes=600e6, bandwidth_bytes_per_s=1e8)
    # ZeRO-1 would shard the state that makes one device too small; PipeDream-2BW (asked for
    # by name) is what makes the deeper pipeline pay on a fast link
    options = {"zero": (0,), "schedules": (*DEFAULT_SCHEDULES, "pipedream-2bw")}
    best = plan(plan_settings(model, slow, 4, 16, **options), show_progress=False).plans[0]  # type: ignore[arg-type]
    assert (best.candidate.devices, best.candidate.data_parallel) == (2, 2)
    fast = hardware_file(memory_bytes=600e6, bandwidth_bytes_per_s=1e12)
    best = plan(plan_settings(model, fast, 4, 16, **options), show_progress=False).plans[0]  # type: ignore[arg-type]
    assert best.candidate.devices == 4


def test_a_sharded_optimizer_lets_replicas_hold_what_one_could_not(
    model_file: Callable[..., str], hardware_file: Callable[..., str]
) -> None:
    """The same model: 800 MB of optimizer state on a 600 MB device needs two pipeline
    devices when every replica holds it all, one with ZeRO-1 over four replicas (200 MB
    each); and the best plan with ZeRO-1 searched beats the best without. Adding ZeRO-3
    (FSDP) without a pipeline, which hides its per-micro-batch collectives behind the passes,
    finds a faster plan here: one device per replica."""
    model = model_file(optimizer_bytes=1000, parameters=1e5)
    slow = hardware_file(memory_bytes=600e6, bandwidth_bytes_per_s=1e8)
    settings = plan_settings(model, slow, 4, 16, zero=(0, 1))
    context = _context(settings)
    one_device = [
        c
        for c in candidates(4, 16, space_limits(context.model, context.hardware, settings))
        if c.devices == 1
    ]
    fits = {c.zero: not context.evaluate(c).oom for c in one_device}
    assert fits == {0: False, 1: True}
    best = plan(settings, show_progress=False).plans[0]
    replicated = plan(dataclasses.replace(settings, zero=(0,)), show_progress=False).plans[0]
    assert best.candidate.zero == 1
    assert (best.iteration_time_s or 0.0) < (replicated.iteration_time_s or 0.0)
    default = plan(plan_settings(model, slow, 4, 16), show_progress=False).plans[0]
    assert default.iteration_time_s == best.iteration_time_s  # ZeRO-1 alone, by default
    sharded = plan(plan_settings(model, slow, 4, 16, zero=(1, 3)), show_progress=False).plans[0]
    assert (sharded.candidate.devices, sharded.candidate.zero) == (1, 3)
    assert (sharded.iteration_time_s or 0.0) < (best.iteration_time_s or 0.0)


def test_tight_memory_leaves_only_rematerialization(
    model_file: Callable[..., str], hardware_file: Callable[..., str]
) -> None:
    """40 MB of activations per layer and sample on 250 MB devices: every configuration that
    fits re-materializes, and so does every plan."""
    settings = plan_settings(
        model_file(activation_bytes=40e6),
        hardware_file(memory_bytes=250e6, bandwidth_bytes_per_s=1e11),
        2,
        8,
        top=3,
    )
    context = _context(settings)
    fitting = [e for e in map(context.evaluate, candidates(2, 8, 8)) if not e.oom]
    assert fitting and all(e.candidate.remat for e in fitting)
    report = plan(settings, show_progress=False)
    assert report.plans and all(e.candidate.remat for e in report.plans)


def test_a_model_that_fits_one_device_runs_pure_data_parallel() -> None:
    """uniform-8 fits one A100 many times over: with flush schedules, four replicas without
    a pipeline beat every pipeline (no bubble)."""
    settings = plan_settings(
        "uniform-8", "a100", 4, 16, schedules=("gpipe", "1f1b", "interleaved-1f1b", "zb-h1")
    )
    best = plan(settings, show_progress=False).plans[0]
    assert (best.candidate.devices, best.candidate.data_parallel) == (1, 4)


def test_a_search_space_beyond_the_configurations_limit_is_refused_before_any_costing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same space passes at its own size and is refused one configuration below it,
    naming the limit's variable; nothing was costed (the refusal comes before the bounds)."""
    settings = plan_settings("uniform-8", "a100", 4, 16, schedules=("gpipe", "1f1b"))
    size = plan(settings, show_progress=False).configurations
    monkeypatch.setenv("PIPESIM_MAX_CONFIGS", str(size))
    assert plan(settings, show_progress=False).configurations == size
    monkeypatch.setenv("PIPESIM_MAX_CONFIGS", str(size - 1))
    monkeypatch.setattr(PlanContext, "quick_bound", _never_called)
    with pytest.raises(LimitError, match=r"search space: beyond the limit of .* PIPESIM_MAX_C"):
        plan(settings, show_progress=False)


def _never_called(*arguments: object) -> float:
    raise AssertionError("a candidate was costed")


@pytest.mark.parametrize(
    ("bandwidth", "schedules"),
    [
        (1e8, DEFAULT_SCHEDULES),
        (1e10, DEFAULT_SCHEDULES),
        (1e10, schedule_names()),
        (1e8, ("1f1b", "dualpipe")),
        (1e10, ("1f1b", "zb-h2", "dualpipe")),
    ],
)
def test_pruning_finds_the_exhaustive_top_and_bounds_hold(
    model_file: Callable[..., str],
    hardware_file: Callable[..., str],
    bandwidth: float,
    schedules: tuple[str, ...],
) -> None:
    """Simulate every configuration that fits: each bound is below its simulated time, and the
    planner's top plans are the exhaustive search's, in order."""
    settings = plan_settings(
        model_file(),
        hardware_file(memory_bytes=400e6, bandwidth_bytes_per_s=bandwidth),
        4,
        8,
        schedules=schedules,
        top=4,
    )
    context = _context(settings)
    limits = space_limits(context.model, context.hardware, settings)
    times = []
    copies = 0  # DualPipe's configurations simulated (two copies of the model)
    for candidate in candidates(4, 8, limits, schedules):
        quick = context.quick_bound(candidate)
        item = context.evaluate(candidate)
        if item.oom:
            continue
        done = context.simulate(item)
        copies += candidate.schedule == "dualpipe"
        assert done.iteration_time_s is not None
        assert quick <= done.iteration_time_s * (1 + 1e-9), candidate.label()
        assert item.bound_s <= done.iteration_time_s * (1 + 1e-9), candidate.label()
        # the closed-form peak the planner filters by is the simulator's
        assert max(item.peak_memory_bytes) == pytest.approx(done.simulated_peak_bytes, rel=1e-9)
        times.append(done.iteration_time_s)
    report = plan(settings, show_progress=False)
    found = [e.iteration_time_s for e in report.plans]
    assert found == pytest.approx(sorted(times)[: settings.top], rel=1e-12)
    assert report.simulated < len(times)  # the bounds pruned something
    assert copies == 2 * ("dualpipe" in schedules)  # K=2 DP=2 M=4, K=4 DP=1 M=8


def _assert_simulate_reproduces(
    item: dict[str, Any], command: str, capsys: pytest.CaptureFixture[str]
) -> dict[str, Any]:
    """``command`` (a plan's ``pipesim simulate`` line) run through the command line gives
    exactly the numbers the plan reports in ``item`` (its ``plan --json`` object): iteration
    time, throughput, bubble, the peak of the fullest device, the shape. Returns the
    simulation's JSON."""
    words = shlex.split(command)
    assert words[:2] == ["pipesim", "simulate"]
    assert main([*words[1:], "--json"]) == 0
    result: dict[str, Any] = json.loads(capsys.readouterr().out)
    label = f"{command}: "
    assert result["iteration_time"] == item["iteration_time"], label
    assert result["throughput"] == item["throughput"], label
    assert result["bubble_fraction"] == item["bubble_fraction"], label
    peak = max(d["peak_memory_bytes"] for d in result["per_device"])
    assert peak == item["peak_memory_bytes"], label
    shape = ("devices", "microbatches", "chunks", "schedule")
    assert [result[k] for k in shape] == [item[k] for k in shape], label
    assert result["rematerialize"] == item["remat"], label
    assert result["steps"] == item["steps"], label
    return result


@pytest.mark.parametrize(
    "argv",
    [
        ["--model", "uniform-8", "--hardware", "a100", "--devices", "4", "--batch", "16"],
        [
            "--model",
            "gpt-355m",
            "--hardware",
            "v100-16gb-nvlink",
            "--devices",
            "8",
            "--batch",
            "64",
            "--optimizer",
            "adam",
            "--top",
            "3",
        ],
    ],
)
def test_every_printed_plan_resimulates_to_the_same_numbers(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """``pipesim plan --json`` then each plan's printed ``pipesim simulate`` command, both
    through the command line."""
    assert main(["plan", *argv, "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["plans"]
    for item in payload["plans"]:
        result = _assert_simulate_reproduces(item, item["simulate_command"], capsys)
        assert result["oom"] is item["oom"] is False


# Settings over models, hardware (all-to-all, torus, hierarchical), dtypes, optimizer states and
# master weights, every schedule (looped and V-shaped placements, no-flush steady states), data
# parallelism, memory-aware partitions and re-materialization.
FINALIST_CASES: dict[
    str, Callable[[Callable[..., str], Callable[..., str]], tuple[PlanSettings, argparse.Namespace]]
] = {
    "uniform-8 a100": lambda m, h: plan_case("uniform-8", "a100", 4, 16),
    "gpt-355m adam v100": lambda m, h: plan_case(
        "gpt-355m", "v100-16gb-nvlink", 8, 64, optimizer_state="adam", top=3
    ),
    "gpt-1.3b adam v100 memory-aware": lambda m, h: plan_case(
        "gpt-1.3b", "v100-16gb-nvlink", 8, 64, optimizer_state="adam", top=3
    ),
    "zb-1.5b fp16 a100-ib": lambda m, h: plan_case(
        "zb-1.5b", "a100-ib", 16, 32, dtype="fp16", master_weights=False, top=3
    ),
    "amoebanet tpu-v3 every schedule": lambda m, h: plan_case(
        "amoebanet-d-18-256",
        "tpu-v3",
        8,
        64,
        optimizer_state="momentum",
        schedules=schedule_names(),
        top=3,
    ),
    "gpt-1.3b bf16 master weights h100-ib": lambda m, h: plan_case(
        "gpt-1.3b",
        "h100-ib",
        16,
        64,
        optimizer_state="adam",
        master_weights=True,
        dtype="bf16",
        top=3,
    ),
    "gpt-1.3b V-shaped data parallel on a torus": lambda m, h: plan_case(
        "gpt-1.3b", "tpu-v3", 16, 64, schedules=("zbv", "dualpipev"), dtype="bf16", top=3
    ),
    "constructed remat slow links": lambda m, h: plan_case(
        m(activation_bytes=40e6),
        h(memory_bytes=250e6, bandwidth_bytes_per_s=1e8),
        4,
        8,
        schedules=schedule_names(),
        top=3,
    ),
}


@pytest.mark.parametrize("case", sorted(FINALIST_CASES))
def test_every_finalist_resimulates_to_the_same_numbers(
    case: str,
    model_file: Callable[..., str],
    hardware_file: Callable[..., str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Every configuration the planner simulated (not only the printed top ones) reports, in
    the JSON ``plan --json`` prints for it, exactly what ``pipesim simulate`` gives for its
    re-simulation command; each device's closed-form peak is the simulator's."""
    settings, args = FINALIST_CASES[case](model_file, hardware_file)
    report = plan(settings, show_progress=False)
    finalists = [e for e in report.evaluated if e.simulated]
    assert finalists and report.plans
    printed = report_json(report)["plans"]
    assert [p["iteration_time"] for p in printed] == [e.iteration_time_s for e in report.plans]
    for e in finalists:
        command = simulate_command(report, e, args)
        result = _assert_simulate_reproduces(plan_json(e, settings.batch), command, capsys)
        assert result["oom"] is e.simulated_oom, command
        peaks = [d["peak_memory_bytes"] for d in result["per_device"]]
        assert peaks == pytest.approx(list(e.peak_memory_bytes), rel=1e-9), command


def test_report_json_has_the_documented_fields() -> None:
    report = plan(plan_settings("uniform-8", "a100", 4, 16, top=2), show_progress=False)
    payload = report_json(report)
    assert set(payload) >= {"plans", "rejected", "evaluated", "seconds"}
    for item in payload["plans"]:
        assert set(item) >= {
            "devices",
            "data_parallel",
            "schedule",
            "chunks",
            "microbatches",
            "remat",
            "partition",
            "iteration_time",
            "throughput",
            "peak_memory_bytes",
            "oom",
        }
        assert item["oom"] is False
        assert sum(item["partition"]) == 8
        assert item["devices"] * item["data_parallel"] == 4
        assert math.isfinite(item["throughput"])
    assert payload["evaluated"] >= len(payload["plans"])


def test_plan_offers_a_synthesised_schedule_that_resimulates_exactly(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """With ``synth`` among --schedules, the best shapes get a synthesised schedule for the
    smallest memory limit as fast as the largest that fits; offered only when faster than
    every fixed schedule simulated for its shape; its printed command gives its numbers."""
    # the pipeline-only space on 40 GB devices, where pipelines win (with tensor parallelism
    # and ZeRO-1 the plain data-parallel plans do)
    settings = plan_settings(
        "gpt-1.3b",
        "a100-40gb",
        8,
        64,
        schedules=("1f1b", "zb-h1", "synth"),
        top=5,
        tensor_sizes=(1,),
        zero=(0,),
        recompute=("none",),
    )
    report = plan(settings, show_progress=False)
    synthesised = [e for e in report.plans if e.candidate.schedule == "synth"]
    assert synthesised, report_table(report)
    for e in synthesised:
        c = e.candidate
        assert c.memory_limit is not None and 1 <= c.memory_limit <= 2 * c.devices - 1
        assert c.schedule_label == f"synth N={c.memory_limit}"
        fixed = [
            f.iteration_time_s
            for f in report.evaluated
            if f.simulated and _shape_key(f.candidate) == _shape_key(c)
        ]
        assert fixed and e.iteration_time_s is not None
        assert e.iteration_time_s < min(t for t in fixed if t is not None)
        if c.memory_limit > 1:  # the smallest limit as fast: one less is slower or too big
            costs = model_on_hardware(
                _context(settings).run_of(c),
                c.devices,
                1,
                c.microbatch_size,
                e.partition,
                placement=tuple(range(c.devices)),
            )
            less = synthesize(costs, c.microbatches, c.memory_limit - 1).result
            assert (
                less.iteration_time_s > e.iteration_time_s * (1 + 1e-9)
                or max(d.peak_memory_bytes for d in less.per_device) > e.capacity_bytes
            )
        command = simulate_command(report, e, plan_case("gpt-1.3b", "a100-40gb", 8, 64)[1])
        assert f"--schedule synth --memory-limit {c.memory_limit} " in command
        item = plan_json(e, settings.batch)
        assert item["memory_limit"] == c.memory_limit
        _assert_simulate_reproduces(item, command, capsys)


def test_synth_alone_is_refused() -> None:
    with pytest.raises(SpecError, match=r"^schedules synth: a synthesised schedule is offered"):
        plan(plan_settings("uniform-8", "a100", 4, 16, schedules=("synth",)), show_progress=False)


def test_repeated_search_values_count_once() -> None:
    """--recompute full,full, --zero 0,1,1 and --tensor-parallel 2,2 each search a value
    once (the plans are not listed twice)."""
    settings = plan_settings(
        "gpt-1.3b",
        "a100",
        16,
        64,
        recompute=("full", "full", "selective", "full"),
        zero=(0, 1, 1),
        tensor_sizes=(2, 2),
    )
    limits = space_limits(resolve_model("gpt-1.3b"), resolve_hardware("a100"), settings)
    assert limits.recompute == ("full", "selective")
    assert limits.tensor_sizes == (2,)
    space = list(candidates(16, 64, limits, ("1f1b",), (2,)))
    assert len(space) == len(set(space))


def test_a_configuration_is_labelled_whole_and_compared_field_by_field() -> None:
    """A rejected alternative prints every dimension, defaults included, and where it differs
    from plan 1; a configuration without a pipeline is not called by a pipeline's name."""
    from pipesim.plan.space import Candidate

    plan_1 = Candidate(
        16,
        16,
        "zbv",
        2,
        48,
        2,
        False,
        tensor=4,
        sequence_parallel=True,
        recompute="selective",
        zero=1,
    )
    other = dataclasses.replace(plan_1, tensor=8, data_parallel=8, recompute="none")
    assert other.full_label() == ("zbv T=8 SP=on K=16 DP=8 v=2 M=48 b=2 recompute=none ZeRO=1")
    assert other.differences(plan_1) == "T=8 (4), DP=8 (16), recompute=none (selective)"
    assert plan_1.differences(plan_1) == "nothing but its partition"
    flat = Candidate(1, 32, "1f1b", 1, 4, 4, False)
    assert flat.schedule_label == "no pipeline (1f1b)"
    assert (
        flat.full_label()
        == "no pipeline (1f1b) T=1 SP=off K=1 DP=32 v=1 M=4 b=4 recompute=none ZeRO=0"
    )


def test_the_table_says_what_each_rejected_alternative_changes_and_why_it_lost() -> None:
    settings = plan_settings("megatron-1.7b", "a100", 32, 512, top=2)
    report = plan(settings, show_progress=False)
    text = report_table(report)
    section = text.split("best rejected alternatives")[1].splitlines()[1:]
    assert section and len(section) == 3 * len(report.rejected)
    for (e, why), at in zip(report.rejected, range(0, len(section), 3), strict=True):
        assert section[at] == f"  {e.candidate.full_label()}"
        assert (
            section[at + 1]
            == f"      differs in {e.candidate.differences(report.plans[0].candidate)}"
        )
        assert section[at + 2] == f"      rejected: {why}"


def test_context_parallel_sizes_join_the_search_and_pruning_still_finds_the_exhaustive_top() -> (
    None
):
    """With CP in {1, 2}: every configuration uses T x CP x K x D = N devices, each bound is
    below its simulated time, and the planner's top plans are the exhaustive search's."""
    settings = plan_settings(
        "megatron-1.7b",
        "a100",
        8,
        8,
        schedules=("1f1b", "zb-h1"),
        top=3,
        tensor_sizes=(1, 2),
        recompute=("none",),
        context_sizes=(1, 2),
    )
    context = _context(settings)
    limits = space_limits(context.model, context.hardware, settings)
    times = []
    seen = set()
    for candidate in candidates(8, 8, limits, settings.schedules):
        assert candidate.ranks == 8
        seen.add(candidate.context)
        item = context.evaluate(candidate)
        if item.oom:
            continue
        done = context.simulate(item)
        assert done.iteration_time_s is not None
        assert context.quick_bound(candidate) <= done.iteration_time_s * (1 + 1e-9)
        assert item.bound_s <= done.iteration_time_s * (1 + 1e-9), candidate.label()
        times.append(done.iteration_time_s)
    assert seen == {1, 2} and len(times) > settings.top
    report = plan(settings, show_progress=False)
    found = [e.iteration_time_s for e in report.plans]
    assert found == pytest.approx(sorted(times)[: settings.top], rel=1e-12)


def test_context_and_expert_sizes_the_model_cannot_take_are_refused() -> None:
    with pytest.raises(SpecError, match=r"context_parallel 3: the sequence \(2,048 tokens\)"):
        plan(plan_settings("megatron-1.7b", "a100", 8, 8, context_sizes=(3,)), show_progress=False)
    with pytest.raises(SpecError, match=r"^context_parallel 16 must divide the 8 devices$"):
        plan(plan_settings("megatron-1.7b", "a100", 8, 8, context_sizes=(16,)), show_progress=False)
    with pytest.raises(SpecError, match=r"expert_parallel 2: model .* has no experts"):
        plan(plan_settings("megatron-1.7b", "a100", 8, 8, expert_sizes=(2,)), show_progress=False)


def test_dualpipe_is_searched_when_named_on_the_shapes_it_takes() -> None:
    """``dualpipe`` joins the space when named (not by default): K even, M even and >= 2K,
    one model stage of each copy per device; K = 1 stays plain data parallelism."""
    limits = SpaceLimits(16)
    assert not any(c.schedule == "dualpipe" for c in candidates(8, 64, limits))
    space = list(candidates(8, 64, limits, ("1f1b", "dualpipe")))
    dual = [c for c in space if c.schedule == "dualpipe"]
    assert {c.devices for c in dual} == {2, 4, 8}
    for c in dual:
        assert c.devices % 2 == 0 and c.microbatches % 2 == 0, c.label()
        assert c.microbatches >= 2 * c.devices and c.chunks == 1, c.label()
    shapes = {(c.devices, c.microbatches) for c in dual}
    assert (8, 16) in shapes and (8, 8) not in shapes and (2, 4) in shapes and (2, 2) not in shapes
    assert all(c.schedule == "1f1b" for c in space if c.devices == 1)


def test_copy_aware_bound_holds_where_one_copys_reading_overshoots() -> None:
    """DualPipe's bound counts each device's work as M/2 micro-batches of each of its two
    stages and each copy's own fill: below the simulated time on equal stages, where the
    same stages read as one copy (M micro-batches on every stage) overshoot it."""
    for devices, microbatches in ((2, 4), (4, 8), (4, 12), (6, 12), (8, 16)):
        schedule = build("dualpipe", devices, microbatches, 1)
        costs = SyntheticRequest(1.0, 1.2, 0.8, comm_s=0.05).build(
            devices, 1, microbatches, schedule
        )
        simulated = simulate(schedule, costs).iteration_time_s
        stages = costs.stages
        bound = iteration_lower_bound_s(
            stages,
            schedule.placement,
            costs.network,
            microbatches,
            remat=False,
            flush=True,
            copies=schedule.copies,
            routes=schedule.routes,
        )
        one_copy = iteration_lower_bound_s(
            stages, schedule.placement, costs.network, microbatches, remat=False, flush=True
        )
        assert bound <= simulated * (1 + 1e-9), (devices, microbatches)
        assert bound >= 0.8 * simulated, (devices, microbatches)  # and not vacuous
        assert one_copy > simulated, (devices, microbatches)


def test_a_dualpipe_plan_resimulates_to_its_own_time(
    model_file: Callable[..., str],
    hardware_file: Callable[..., str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A DualPipe plan (the model's K stages, both copies' weights on every device, the
    copies' gradient all-reduce) is what ``pipesim simulate`` gives for its own command, number
    for number, and its closed-form peak is the simulator's."""
    settings, args = plan_case(
        model_file(),
        hardware_file(memory_bytes=400e6, bandwidth_bytes_per_s=1e10),
        4,
        8,
        schedules=("1f1b", "dualpipe"),
        top=3,
    )
    report = plan(settings, show_progress=False)
    dual = [e for e in report.plans if e.candidate.schedule == "dualpipe"]
    assert dual, [e.candidate.label() for e in report.plans]
    for e in dual:
        assert len(e.partition) == e.candidate.devices  # the model's stages, not the IR's
        command = simulate_command(report, e, args)
        result = _assert_simulate_reproduces(plan_json(e, settings.batch), command, capsys)
        assert "2 model copies" in result["costs"], command
        peaks = [d["peak_memory_bytes"] for d in result["per_device"]]
        assert peaks == pytest.approx(list(e.peak_memory_bytes), rel=1e-9), command


def test_a_configuration_whose_balanced_partition_overflows_is_memory_aware_and_fits() -> None:
    """GPT-3 175B, T=2, K=16, 1F1B, M=24, b=2, selective: the balanced partition overflows an
    A100's 80 GiB, the memory-aware one fits. The evaluation reports that partition, its own
    peaks (within the memory) and no out-of-memory reason, with or without the search's
    limit; and its simulation agrees that it fits."""
    settings = plan_settings("gpt3-175b", "a100", 1024, 1536)
    context = PlanContext(settings)
    shape = {"tensor": 2, "devices": 16, "schedule": "1f1b", "microbatches": 24}
    shape |= {"microbatch_size": 2, "recompute": "selective", "data_parallel": 32}
    limits = space_limits(context.model, context.hardware, settings)
    space = candidates(1024, 1536, limits, settings.schedules, settings.chunk_options)
    candidate = next(
        c
        for c in space
        if all(getattr(c, k) == v for k, v in shape.items()) and c.zero == 1 and c.chunks == 1
    )
    assert not context.balanced_fits(candidate)
    for limit in (math.inf, 1e9):
        context.time_limit_s = limit
        context.evaluations.clear()
        evaluated = context.evaluate(candidate, limited=True)
        assert evaluated.oom_reason is None and not evaluated.beyond_limit
        assert evaluated.partition_objective == "memory-aware"
        assert max(evaluated.peak_memory_bytes) <= evaluated.capacity_bytes
    simulated = context.simulate(evaluated)
    assert not simulated.simulated_oom


def test_a_time_budget_stops_the_search_with_the_best_so_far_and_a_bound_on_the_rest(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A budget spent at once: the plans are those simulated ahead of the search (the first
    configurations that fit), marked not exhaustive, with the least time of the rest; the
    same search without a budget is exhaustive and its best is no slower."""
    settings = plan_settings("megatron-1.7b", "a100", 16, 64)
    stopped = plan(dataclasses.replace(settings, time_budget_s=1e-9), show_progress=False)
    full = plan(settings, show_progress=False)
    assert full.exhaustive and full.stopped is None and full.unexamined_bound_s is None
    assert not stopped.exhaustive and stopped.stopped == "its time budget of 1e-09 s ran out"
    assert stopped.plans and len(stopped.evaluated) < len(full.evaluated)
    best = full.plans[0].iteration_time_s
    assert best is not None and best <= (stopped.plans[0].iteration_time_s or math.inf)
    assert stopped.unexamined_bound_s is not None and stopped.unexamined_bound_s <= best
    payload = report_json(stopped)
    assert (payload["exhaustive"], payload["stopped"]) == (False, stopped.stopped)
    assert report_table(stopped).splitlines()[2].startswith("NOT EXHAUSTIVE: the search stopped")
    arguments = ["plan", "--model", "megatron-1.7b", "--hardware", "a100", "--devices", "16"]
    status, _, err = run(capsys, *arguments, "--time-budget", "0")
    assert status == 2 and "--time-budget must be a number of seconds > 0, got 0.0" in err


def test_ctrl_c_during_the_search_prints_the_plans_ranked_so_far_and_exits_130(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    original = PlanContext.evaluate_all
    calls = [0]

    def interrupted_later(self: PlanContext, c: Any) -> Any:
        calls[0] += 1
        if calls[0] == 4:
            raise KeyboardInterrupt
        return original(self, c)

    monkeypatch.setattr(PlanContext, "evaluate_all", interrupted_later)
    arguments = ["plan", "--model", "megatron-1.7b", "--hardware", "a100", "--devices", "16"]
    status, out, err = run(capsys, *arguments, "--batch", "64", "--json")
    assert status == 130
    payload = json.loads(out)
    assert payload["stopped"] == "interrupted" and payload["plans"]
    assert err.startswith("pipesim: interrupted: the plan search stopped after examining")


@pytest.mark.parametrize(
    ("model", "hardware", "devices", "batch", "schedules"),
    [
        # no-flush: timed between step ends, a device may run the next step's warm-up early
        ("megatron-1.7b", "a100", 16, 16, ("pipedream",)),
        # DualPipeV's overlapped pairs hide the expert all-to-alls: bounds without them
        ("deepseek-v2-lite", "h100", 8, 64, ("dualpipev",)),
    ],
)
def test_pruning_finds_the_exhaustive_top_on_real_costs(
    model: str, hardware: str, devices: int, batch: int, schedules: tuple[str, ...]
) -> None:
    """Communication-bearing costs of catalogue models: every configuration that fits
    simulated, each evaluated bound below its simulated time, and the planner's top 3 (and
    its top 1 alone: a plan simulated ahead of the search is ranked whatever its bound) the
    exhaustive search's."""
    settings = plan_settings(model, hardware, devices, batch, schedules=schedules, top=3)
    context = PlanContext(settings)
    limits = space_limits(context.model, context.hardware, settings)
    times = []
    for candidate in candidates(devices, batch, limits, schedules):
        for item in context.evaluate_all(candidate):
            if item.oom:
                continue
            done = context.simulate(item)
            if done.simulated_oom or done.iteration_time_s is None:
                continue
            assert item.bound_s <= done.iteration_time_s * (1 + 1e-9), candidate.label()
            times.append(done.iteration_time_s)
    best = sorted(set(times))
    for top in (3, 1):
        report = plan(dataclasses.replace(settings, top=top), show_progress=False)
        found = [e.iteration_time_s for e in report.plans]
        assert found == pytest.approx(best[:top], rel=1e-12)


def _compositions(total: int, parts: int, rng: random.Random, count: int) -> set[tuple[int, ...]]:
    """Up to ``count`` random ways to cut ``total`` layers into ``parts`` non-empty stages,
    with the most lopsided ones (one layer in every stage but one) among them."""
    out = {tuple(total - parts + 1 if s == p else 1 for s in range(parts)) for p in range(parts)}
    while len(out) < count:
        cuts = sorted(rng.sample(range(1, total), parts - 1))
        out.add(tuple(b - a for a, b in zip([0, *cuts], [*cuts, total], strict=True)))
    return out


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b", "zb-h1"])
def test_the_quick_bound_holds_for_every_partition_not_only_the_chosen_one(
    schedule: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The quick bound (with its fill and drain term for one stage per device) is below the
    simulated step of each configuration under any partition of its layers, balanced or as
    lopsided as a memory-aware search could choose; where every backward is whole the fill
    term counts the backward chain too, and is above the fill of the forwards alone."""
    settings = plan_settings(
        "megatron-1.7b",
        "a100",
        4,
        16,
        schedules=(schedule,),
        tensor_sizes=(1,),
        recompute=("none",),
        chunk_options=(1,),
    )
    context = _context(settings)
    limits = space_limits(context.model, context.hardware, settings)
    rng = random.Random(7)
    checked = 0
    for c in candidates(4, 16, limits, settings.schedules):
        if c.devices < 2 or c.chunks != 1:
            continue
        quick, fill = context.quick_bound(c), context.fill_bound(c)
        assert fill > 0, c.label()
        item = context.evaluate(c)
        for counts in _compositions(len(context.model.layers), c.devices, rng, 8):
            done = context.simulate(dataclasses.replace(item, partition=counts))
            assert done.iteration_time_s is not None
            assert quick <= done.iteration_time_s * (1 + 1e-9), (c.label(), counts)
            checked += 1
        if context.whole_backward(c):
            with monkeypatch.context() as patched:  # the forwards' chain alone
                patched.setattr(context, "whole_backward", lambda _: False)
                assert context.fill_bound(c) < fill, c.label()
    assert checked >= 16
