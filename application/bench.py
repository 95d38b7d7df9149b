"""Benchmarks: how fast the engines play schedules, and how many configurations per second a
sweep or a planner gets.

* engine rates: actions really played per second (an I/W-split schedule plays three actions
  per stage and micro-batch, not two) for GPipe K=8 M=32, 1F1B K=64 M=1024, interleaved 1F1B
  K=16 v=4 M=256 and ZB-H1 K=32 M=512, by the SimPy engine, the fast engine interpreted, and
  the fast engine compiled (when numba is installed); building and validating is timed apart;
* sweeps: configurations per second of a planner-sized synthetic sweep (every schedule x K in
  2, 4, 8 x M in 4..32 with varied costs, each built, validated and simulated from scratch),
  and the time of GPipe's Table 2 (18 configurations of AmoebaNet-D and Transformer-48 on TPU
  cores, spec-derived costs);
* the peak memory (traced allocations) of building and simulating 1F1B K=64 M=1024.

Every figure is the best of ``repeats`` runs (the machine may be shared). Nothing here asserts
a time: the numbers are reported, with the machine.
"""

from __future__ import annotations

import gc
import itertools
import platform
import statistics
import time
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from pipesim.common.jit import kernel, numba_available
from pipesim.config import RunConfig
from pipesim.costs.model_on_hardware import model_on_hardware
from pipesim.costs.synthetic import synthetic_costs
from pipesim.engine import simulate
from pipesim.engine.fast import run_fast
from pipesim.engine.result import summarize
from pipesim.engine.simulate import warm_up
from pipesim.hardware import hardware
from pipesim.request.cost_request import ModelRequest, SyntheticRequest
from pipesim.schedules import Schedule, build, schedule_names
from pipesim.schedules.registry import clear_build_memo
from pipesim.sweep.grid import sweep_points
from pipesim.workload import model

ENGINE_CASES: tuple[tuple[str, int, int, int], ...] = (
    ("gpipe", 8, 32, 1),
    ("1f1b", 64, 1024, 1),
    ("interleaved-1f1b", 16, 256, 4),
    ("zb-h1", 32, 512, 1),
)
TABLE_2: tuple[tuple[str, str, int], ...] = (
    ("amoebanet-d-18-256", "tpu-v2", 128),
    ("gpipe-transformer-48", "tpu-v3", 32),
)


def machine() -> dict[str, Any]:
    """What the numbers were measured on."""
    import os

    return {
        "machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "numba": numba_available(),
    }


def best_of(repeats: int, run: Callable[[], object]) -> float:
    """The shortest wall time of ``repeats`` runs of ``run``, seconds."""
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        run()
        times.append(time.perf_counter() - began)
    return min(times)


@dataclass(frozen=True)
class EngineRate:
    """One schedule: its actions, build+validate time and each engine's simulation time."""

    case: str
    actions: int
    build_validate_s: float
    simulate_s: dict[str, float]

    def to_json(self) -> dict[str, Any]:
        """Seconds and actions per second per engine."""
        return {
            "case": self.case,
            "actions": self.actions,
            "build_validate_s": self.build_validate_s,
            "build_validate_actions_per_s": self.actions / self.build_validate_s,
            "simulate_s": self.simulate_s,
            "actions_per_s": {name: self.actions / s for name, s in self.simulate_s.items()},
        }


def engine_rates(
    cases: tuple[tuple[str, int, int, int], ...] = ENGINE_CASES,
    engines: tuple[str, ...] = ("simpy", "interpreted", "numba"),
    repeats: int = 3,
) -> list[EngineRate]:
    """Actions per second on each case (synthetic costs F=1, B=2, transfers 0.1) of each of
    ``engines``: ``simpy`` (one run: it is slow), ``interpreted`` and ``numba`` (the fast
    engine's kernels; ``numba`` is left out without the extra)."""
    rates = []
    for name, k, m, v in cases:
        schedule = build(name, k, m, v)
        costs = synthetic_costs(k, v, 1.0, 2.0, comm_s=0.1)
        build_s = best_of(repeats, lambda: _build_from_scratch(name, k, m, v))  # noqa: B023
        timings: dict[str, float] = {}
        for engine in engines:
            if engine == "simpy":
                timings[engine] = best_of(1, lambda: simulate(schedule, costs, engine="simpy"))  # noqa: B023
            elif engine == "interpreted" or numba_available():
                compiled = engine == "numba"
                _summarized(schedule, costs, compiled=compiled)  # kernels loaded, caches warm
                timings[f"fast ({engine})"] = best_of(
                    repeats,
                    lambda: _summarized(schedule, costs, compiled=compiled),  # noqa: B023
                )
        actions = schedule.action_arrays.actions
        rates.append(EngineRate(f"{name} K={k} v={v} M={m}", actions, build_s, timings))
    return rates


def _summarized(schedule: Schedule, costs: Any, *, compiled: bool) -> None:
    """What ``simulate(engine="fast")`` does, with the kernel choice made explicit."""
    run, transfers = run_fast(schedule, costs, 1, compiled=compiled)
    summarize(schedule, costs, 1, run, transfers, "fast").to_json()


@dataclass(frozen=True)
class SweepRate:
    """Configurations run one after another, each built, validated and simulated."""

    name: str
    configs: int
    total_s: float
    per_config_ms: list[float]
    actions: int
    cpu_s: float = 0.0  # this process's CPU time over the same span (a shared machine's wall
    # time counts other work's time too)

    def to_json(self) -> dict[str, Any]:
        """Summary numbers."""
        ordered = sorted(self.per_config_ms)
        return {
            "benchmark": self.name,
            "configs": self.configs,
            "total_s": self.total_s,
            "configs_per_s": self.configs / self.total_s,
            "cpu_s": self.cpu_s,
            "configs_per_cpu_s": self.configs / self.cpu_s if self.cpu_s > 0 else None,
            "median_ms": statistics.median(ordered),
            "p95_ms": ordered[int(0.95 * (len(ordered) - 1))],
            "max_ms": ordered[-1],
            "simulated_actions": self.actions,
        }


def _build_from_scratch(name: str, devices: int, microbatches: int, chunks: int) -> Schedule:
    """Build and validate as if for the first time (the registry memoizes small shapes)."""
    clear_build_memo()
    return build(name, devices, microbatches, chunks)


def sweep_benchmark(
    configs: int = 1000,
    steps: int = 1,
    engine: str = "auto",
    label: str = "",
    *,
    reuse_schedules: bool = False,
) -> SweepRate:
    """A planner-sized synthetic sweep: ``configs`` configurations with varied costs, each
    schedule built from scratch, or (``reuse_schedules``) built once per shape and simulated
    under every cost, as a planner that keeps its schedules does (the engine keeps each
    schedule's cost-independent layout, so only the costs' part is redone)."""
    points, _ = sweep_points(list(schedule_names()), [2, 4, 8], [4, 8, 16, 32])
    requests = [
        SyntheticRequest(f, b, w, comm_s=c)
        for f, b, w, c in itertools.product((1.0, 1.5), (1.0, 2.0), (0.0, 0.5), (0.0, 0.05))
    ]
    timings, actions = [], 0
    clear_build_memo()  # from scratch: no schedule of an earlier run is reused
    work = itertools.islice(zip(itertools.cycle(points), itertools.cycle(requests)), configs)
    built: dict[tuple[str, int, int, int], Schedule] = {}
    if reuse_schedules:
        for point in points:
            shape = (point.schedule, point.devices, point.microbatches, point.chunks)
            built[shape] = build(*shape)
    start, cpu_start = time.perf_counter(), time.process_time()
    for point, request in work:
        began = time.perf_counter()
        shape = (point.schedule, point.devices, point.microbatches, point.chunks)
        schedule = built[shape] if reuse_schedules else build(*shape)
        costs = request.build(point.devices, point.chunks, point.microbatches)
        simulate(schedule, costs, steps=steps, engine=engine).to_json()
        timings.append((time.perf_counter() - began) * 1e3)
        actions += schedule.encoded.actions * steps
    total, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    reused = ", schedules built once per shape" if reuse_schedules else ""
    name = f"planner-sized synthetic sweep ({label or engine}{reused})"
    return SweepRate(name, len(timings), total, timings, actions, cpu)


def table_2_benchmark(engine: str = "auto", label: str = "") -> SweepRate:
    """GPipe's Table 2 in-process: 2 models x K in 2, 4, 8 x M in 1, 4, 32, with remat."""
    timings, actions = [], 0
    start, cpu_start = time.perf_counter(), time.process_time()
    for name, hw, batch in TABLE_2:
        target, spec = model(name), hardware(hw)
        for m in (1, 4, 32):
            for k in (2, 4, 8):
                began = time.perf_counter()
                schedule = build("gpipe", k, m, remat=True)
                costs = model_on_hardware(RunConfig(target, spec), k, 1, batch / m)
                simulate(schedule, costs, engine=engine).to_json()
                timings.append((time.perf_counter() - began) * 1e3)
                actions += schedule.encoded.actions
    total, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    name = f"GPipe Table 2, 18 configurations ({label or engine})"
    return SweepRate(name, len(timings), total, timings, actions, cpu)


def model_benchmark(configs: int = 100, engine: str = "auto") -> SweepRate:
    """Spec-derived costs: GPipe's Transformer-48 on TPU v3 cores, four schedules."""
    points, _ = sweep_points(
        ["gpipe", "1f1b", "interleaved-1f1b", "zb-h1"], [2, 4, 8], [4, 8, 16, 32]
    )
    request = ModelRequest(RunConfig(model("gpipe-transformer-48"), hardware("tpu-v3")), batch=32)
    timings, actions = [], 0
    start, cpu_start = time.perf_counter(), time.process_time()
    for point in itertools.islice(itertools.cycle(points), configs):
        began = time.perf_counter()
        schedule = build(point.schedule, point.devices, point.microbatches, point.chunks)
        costs = request.build(point.devices, point.chunks, point.microbatches)
        simulate(schedule, costs, engine=engine).to_json()
        timings.append((time.perf_counter() - began) * 1e3)
        actions += schedule.encoded.actions
    total, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    return SweepRate(
        f"model sweep, gpipe-transformer-48 on tpu-v3 ({engine})",
        len(timings),
        total,
        timings,
        actions,
        cpu,
    )


@contextmanager
def _traced() -> Iterator[list[int]]:
    """Trace Python and numpy allocations; yields a list that receives the peak, bytes."""
    gc.collect()
    peak: list[int] = []
    tracemalloc.start()
    try:
        yield peak
    finally:
        peak.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()


def peak_memory_bytes(name: str = "1f1b", devices: int = 64, microbatches: int = 1024) -> int:
    """Peak traced memory of building, validating and simulating one schedule (fast engine,
    interpreted) and writing its JSON: what ``pipesim simulate --json`` holds at once."""
    with _traced() as peak:
        schedule = build(name, devices, microbatches)
        simulate(schedule, synthetic_costs(devices, 1, 1.0, 2.0)).to_json()
    return peak[0]


def warm_up_s() -> float | None:
    """How long loading the compiled kernels takes in this process (None without numba)."""
    if not numba_available():
        return None
    began = time.perf_counter()
    warm_up()
    return time.perf_counter() - began


@kernel
def longest_path(
    order: Any, device: Any, duration: Any, source: Any, transfer: Any, devices: int, end: Any
) -> float:
    """A plain longest path, for comparison: items in ``order``, each starting once its device
    is free and its source's result has arrived (``transfer`` after the source ends); no
    channel is booked. Fills ``end``; returns the makespan."""
    device_free = [0.0] * devices
    makespan = 0.0
    for item in order:
        ready = device_free[device[item]]
        producer = source[item]
        if producer >= 0:
            came = end[producer] + transfer[producer]
            if came > ready:
                ready = came
        finish = ready + duration[item]
        end[item] = finish
        device_free[device[item]] = finish
        if finish > makespan:
            makespan = finish
    return makespan


@dataclass(frozen=True)
class PathRate:
    """One schedule's longest path by a plain loop (Python and compiled) beside the fast
    engine's in-order walk (compiled) on the same arrays: loops only, inputs made before."""

    case: str
    items: int
    python_s: float
    compiled_s: float | None
    walk_compiled_s: float | None
    makespan_s: float
    engine_makespan_s: float

    def to_json(self) -> dict[str, Any]:
        """Seconds and items per second per loop."""
        rate = {"plain longest path (python)": self.items / self.python_s}
        if self.compiled_s:
            rate["plain longest path (compiled)"] = self.items / self.compiled_s
        if self.walk_compiled_s:
            rate["engine walk (compiled)"] = self.items / self.walk_compiled_s
        return {
            "case": self.case,
            "items": self.items,
            "python_s": self.python_s,
            "compiled_s": self.compiled_s,
            "walk_compiled_s": self.walk_compiled_s,
            "items_per_s": rate,
            "makespan_s": self.makespan_s,
            "engine_makespan_s": self.engine_makespan_s,
        }


def path_rates(
    cases: tuple[tuple[str, int, int, int], ...] = ENGINE_CASES, repeats: int = 3
) -> list[PathRate]:
    """The plain longest path and the engine's walk on each case (synthetic costs F=1, B=2,
    transfers 0.1, links not shared: the walk needs no replay). The makespans are reported
    side by side: the plain path is an independent check of the engine's."""
    from pipesim.engine.fast import _durations, _lone_channels, _transfers
    from pipesim.engine.kernels import play_in_order
    from pipesim.engine.run_layout import run_layout

    out = []
    for name, k, m, v in cases:
        schedule = build(name, k, m, v)
        costs = synthetic_costs(k, v, 1.0, 2.0, comm_s=0.1)
        layout = run_layout(schedule, 1)
        items = layout.items
        duration = _durations(schedule, costs, layout.stage, layout.kind, items.device, items.flat)
        route, occupancy, transfer, starts, channels, names, _ = _transfers(
            costs, items, layout.stage, layout.source, layout.consumer
        )
        arrays = (layout.order, items.device, duration, layout.source, transfer)
        lists = [a.tolist() for a in arrays]
        count = len(items.device)
        end_list = [0.0] * count
        python_s = best_of(
            repeats,
            lambda: longest_path.python(*lists, k, end_list),  # noqa: B023
        )
        makespan = longest_path.python(*lists, k, end_list)
        compiled_s = walk_s = None
        if numba_available():
            end = np.zeros(count)
            compiled = longest_path.compiled()
            compiled(*arrays, k, end)
            compiled_s = best_of(repeats, lambda: compiled(*arrays, k, end))  # noqa: B023
            walk = play_in_order.compiled()
            walk_arrays = (
                layout.order,
                items.device,
                duration,
                layout.source,
                route,
                occupancy,
                transfer,
                starts,
                channels,
                _lone_channels(starts, channels, duration),
                bool(costs.transfers_use_compute),
            )
            spare = [np.zeros(count) for _ in range(3)]

            def play() -> None:
                scratch = (np.zeros(k), np.zeros(len(names)), np.zeros(len(names)))  # noqa: B023
                walk(*walk_arrays, *scratch, *spare)  # noqa: B023

            play()
            walk_s = best_of(repeats, play)
        engine = simulate(schedule, costs, engine="fast").makespan_s
        out.append(
            PathRate(
                f"{name} K={k} v={v} M={m}", count, python_s, compiled_s, walk_s, makespan, engine
            )
        )
    return out


END_TO_END = ("1f1b", 64, 1024)


def end_to_end_s(repeats: int = 3) -> float:
    """In this process, what ``pipesim simulate --schedule 1f1b -K 64 -M 1024 --costs 1,2
    --json`` does after start-up: build and validate (no memo), simulate, the JSON text."""
    from pipesim.files.strict_json import json_text

    name, k, m = END_TO_END

    def once() -> None:
        clear_build_memo()
        schedule = build(name, k, m)
        json_text(simulate(schedule, synthetic_costs(k, 1, 1.0, 2.0)).to_json())

    once()
    return best_of(repeats, once)


def command_s(arguments: list[str], repeats: int = 3) -> float:
    """The best wall time of ``pipesim ARGUMENTS`` in a new process, after one untimed run
    that may write the bytecode caches (as ``pip install`` does for an installed package:
    a ``PYTHONDONTWRITEBYTECODE`` in this environment would otherwise time the compiler)."""
    import os
    import subprocess
    import sys

    command = [sys.executable, "-m", "cli", *arguments]
    environment = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, env=environment)
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - began)
    return min(times)


# A command's start-up: the interpreter, the imports and the parser, with no work; and the
# smallest simulation (its imports included), against which the large one is "after start-up".
STARTUP_COMMANDS = {
    "pipesim --version": ["--version"],
    "pipesim simulate --help": ["simulate", "--help"],
    "pipesim simulate 1f1b K=4 M=8": [
        *("simulate", "--schedule", "1f1b", "-K", "4", "-M", "8", "--costs", "1,2", "--json")
    ],
}


def command_end_to_end() -> dict[str, float]:
    """``pipesim simulate`` of the 131,072-action 1F1B from a shell, with the start-up
    (``pipesim simulate --help``: the interpreter, the imports, the parser) measured apart, and
    the start-up of each of :data:`STARTUP_COMMANDS`."""
    name, k, m = END_TO_END
    startups = {what: command_s(words) for what, words in STARTUP_COMMANDS.items()}
    startup = startups["pipesim simulate --help"]
    whole = command_s(
        ["simulate", "--schedule", name, "-K", str(k), "-M", str(m), "--costs", "1,2", "--json"]
    )
    return {
        "command_s": whole,
        "startup_s": startup,
        "after_startup_s": whole - startup,
        "small_command_s": startups["pipesim simulate 1f1b K=4 M=8"],
        "version_s": startups["pipesim --version"],
    }


def peak_rss_bytes(arguments: list[str]) -> tuple[float, int]:
    """Wall time and peak resident memory (bytes) of ``pipesim ARGUMENTS`` in a new process
    (one run; the interpreter and its imports included)."""
    import subprocess
    import sys

    # The high-water mark of /proc/self/status (VmHWM) starts afresh at exec; getrusage's
    # ru_maxrss does not (a child forked from a large parent reports the parent's peak).
    code = (
        "import runpy, sys; sys.argv = ['pipesim', *sys.argv[1:]]\n"
        "try:\n    runpy.run_module('cli', run_name='__main__')\n"
        "except SystemExit:\n    pass\n"
        "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM:')][0]\n"
        "print(int(hwm.split()[1]), file=sys.stderr)"
    )
    began = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", code, *arguments],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    took = time.perf_counter() - began
    return took, int(done.stderr.strip().splitlines()[-1]) * 1024


SIMULATE_131K = ["simulate", "--schedule", "1f1b", "-K", "64", "-M", "1024", "--costs", "1,2"]
SIMULATE_131K += ["--json"]
PLAN_16K = ["plan", "--model", "megatron-1t", "--hardware", "a100"]
PLAN_16K += ["--devices", "16384", "--batch", "4096", "--json"]


def cluster_sweep(configs: int = 1000) -> list[SweepRate]:
    """The same synthetic sweep run one point after another here, on a local pool of two
    processes, and on a local Dask cluster of two workers (``--cluster local``; its start-up
    counted). Empty without the ``cluster`` extra."""
    from application.sweeps import run_sweep
    from application.workers import dask_available

    points, _ = sweep_points(list(schedule_names()), [2, 4, 8], [4, 8, 16, 32])
    work = list(itertools.islice(itertools.cycle(points), configs))
    request = SyntheticRequest(1.0, 2.0, 0.5, comm_s=0.05)
    ways: list[tuple[str, dict[str, Any]]] = [("one process", {}), ("pool of 2", {"jobs": 2})]
    if dask_available():
        ways.append(("dask --cluster local, 2 workers", {"jobs": 2, "cluster": "local"}))
    out = []
    for label, options in ways:
        start, cpu_start = time.perf_counter(), time.process_time()
        rows = list(run_sweep(work, request, **options))
        total, cpu = time.perf_counter() - start, time.process_time() - cpu_start
        per_row_ms = [total * 1e3 / len(rows)]
        name = f"synthetic sweep, {label} (CPU time: this process only)"
        out.append(SweepRate(name, len(rows), total, per_row_ms, 0, cpu))
    return out
