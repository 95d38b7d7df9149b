"""Running a validation case for real: K processes calibrate, measure every run, measure the
unpipelined baseline and cross-check against torch.distributed.pipelining.

The parent spawns one process per device (gloo on CPU with one thread each, NCCL on CUDA with
one GPU each) and samples the host's load while they run. Every process calibrates its own
stages at the same time as the others (the way the measurement will run), then all take part in
every measured step. Rank 0 writes what was measured (every sample, no estimate) to a JSON file
the parent reads; nothing here predicts (see :mod:`validation.compare`).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import datetime
import functools
import gc
import json
import os
import platform
import shutil
import statistics
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.multiprocessing.spawn import (
    ProcessExitedException,
    ProcessRaisedException,
    start_processes,
)

from executor import StepResult, StepState, run_step, split_model
from executor.profile import (
    LinkProfile,
    StageProfile,
    action_samples,
    latency_samples,
    profile_link,
    profile_stage,
    stage_inputs,
)
from executor.teardown import end_rank
from pipesim.common.lifetime import end_with_parent
from pipesim.common.limits import cpu_count
from pipesim.engine.records import Timeline
from pipesim.errors import RunFailed
from pipesim.schedules import Schedule, build
from pipesim.schedules.registry import probe_schedules
from validation import synthesized_runs
from validation.estimate import relative_uncertainty
from validation.host import host_load, sample_host
from validation.schema import CaseMeasurement, Machine, RunMeasurement
from validation.suites import Case
from validation.workload import LOSS, make_batch, make_model

# glibc malloc settings for the CPU workers: serve every tensor from the heap and keep freed
# memory for reuse, as a GPU caching allocator does. By default glibc maps large blocks fresh
# and returns them on free, so every step pays page faults that grow with the memory a
# schedule holds (measured on the quick suite: the median step-time error of the predictions
# goes from about 3% with these settings to about 10% without).
MALLOC_SETTINGS = {
    "MALLOC_MMAP_THRESHOLD_": str(32 * 2**20),
    "MALLOC_TRIM_THRESHOLD_": str(64 * 2**30),
    "MALLOC_TOP_PAD_": str(256 * 2**20),
}


@dataclass(frozen=True)
class Stability:
    """Measure until stable: after the case's repeats, keep adding rounds while the median
    over the runs of their step-time estimate's relative uncertainty (half the 90%
    order-statistic interval, :func:`~validation.estimate.relative_uncertainty`) is above
    ``target_uncertainty``, for at most ``budget_s`` more seconds of measuring (per case).
    Unlike the spread of the repeats, the uncertainty shrinks as repeats are added."""

    target_uncertainty: float
    budget_s: float


def keep_measuring(spans: list[list[float]], stability: Stability, elapsed_s: float) -> bool:
    """Whether another round is worth it: the median of the runs' uncertainties is above the
    target and the time spent measuring is within the budget."""
    if not spans or not all(spans) or elapsed_s >= stability.budget_s:
        return False
    uncertainty = statistics.median(relative_uncertainty(s) for s in spans)
    return uncertainty > stability.target_uncertainty


@contextlib.contextmanager
def _worker_environment(backend: str) -> Iterator[None]:
    """Environment variables the spawned workers start with (restored afterwards)."""
    settings = MALLOC_SETTINGS if backend == "cpu" else {}
    saved = {key: os.environ.get(key) for key in settings}
    os.environ.update(settings)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def run_case(
    case: Case,
    timeout_s: float = 1800.0,
    stability: Stability | None = None,
    on_progress: Callable[[str], None] | None = None,
) -> CaseMeasurement:
    """Spawn the case's processes, sample the host while they run; return what they measured.

    ``on_progress`` is called (in this process) with what the workers are doing now. The
    working directory under the system's temporary directory is removed afterwards, also when
    the run fails or is interrupted (the worker processes are killed then).
    """
    workdir = Path(tempfile.mkdtemp(prefix="pipesim-validate-"))
    out = workdir / "measured.json"
    status = workdir / "progress"
    context = None
    try:
        with _worker_environment(case.backend):
            context = start_processes(  # type: ignore[no-untyped-call]
                _worker,
                args=(case.devices, str(workdir / "init"), str(out), str(status), case, stability),
                nprocs=case.devices,
                join=False,
                start_method="spawn",
            )
        samples = [sample_host()]
        deadline = time.monotonic() + timeout_s
        shown = ""
        try:
            while not context.join(timeout=1.0):
                samples.append(sample_host())
                if on_progress is not None:
                    with contextlib.suppress(OSError):
                        text = status.read_text(encoding="utf-8")
                        if text and text != shown:
                            shown = text
                            on_progress(text)
                if time.monotonic() > deadline:
                    raise RunFailed(
                        f"validation case {case.name!r} did not finish in {timeout_s} s"
                    )
        except ProcessRaisedException as error:
            detail = _worker_error(out) or str(error).strip().splitlines()[-1]
            raise RunFailed(f"validation case {case.name!r} failed: {detail}") from None
        except ProcessExitedException as error:
            raise RunFailed(f"validation case {case.name!r}: a process died ({error})") from None
        samples.append(sample_host())
        data = json.loads(out.read_text(encoding="utf-8"))
        data["host"] = host_load(samples).to_json()
        return CaseMeasurement.from_json(data)
    finally:
        if context is not None:
            for process in context.processes:
                if process.is_alive():
                    process.kill()
                    process.join(5)
        shutil.rmtree(workdir, ignore_errors=True)


def _worker_error(out: Path) -> str | None:
    """The error a worker wrote before failing, if it did."""
    try:
        return str(json.loads(out.read_text())["error"])
    except (OSError, ValueError, KeyError):
        return None


def _device(backend: str, rank: int) -> torch.device:
    return torch.device(f"cuda:{rank}") if backend == "cuda" else torch.device("cpu")


def _worker(
    rank: int,
    world: int,
    init_file: str,
    out_file: str,
    status_file: str,
    case: Case,
    stability: Stability | None,
) -> None:
    # A validate killed with -9 takes its ranks with it, and they remove its directory.
    end_with_parent(then=lambda: shutil.rmtree(Path(out_file).parent, ignore_errors=True))
    torch.set_num_threads(1)
    device = _device(case.backend, rank)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(
        "nccl" if case.backend == "cuda" else "gloo",
        init_method=f"file://{init_file}",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=300),
    )
    if case.backend == "cpu":
        _yield_to_communication()

    def report(text: str) -> None:
        if rank == 0:
            with contextlib.suppress(OSError):
                Path(status_file).write_text(text, encoding="utf-8")

    try:
        result = _measure(case, rank, device, stability, report)
    except Exception as error:  # reported to the parent as data, with the traceback
        failure = {
            "error": f"rank {rank}: {type(error).__name__}: {error}",
            "trace": traceback.format_exc(),
        }
        Path(out_file).write_text(json.dumps(failure))
        raise
    if rank == 0:
        Path(out_file).write_text(json.dumps(result))
    end_rank(0)


def _yield_to_communication() -> None:
    """Lower this (computing) thread's scheduling priority a little, so that gloo's I/O
    threads, started before, win a busy core promptly when a message needs moving: with
    every core computing, a transfer otherwise waits milliseconds for the scheduler. Lowering
    one's own priority needs no privilege; where it is refused, nothing changes."""
    with contextlib.suppress(AttributeError, OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 5)


Run = tuple[str, int, int]  # (schedule, M, chunks)


def _measure(
    case: Case,
    rank: int,
    device: torch.device,
    stability: Stability | None,
    report: Callable[[str], None],
) -> dict[str, Any]:
    """Everything the case measures, as the JSON of a :class:`CaseMeasurement` without the
    host's load (the parent adds it)."""
    runs = case.runs()
    report("link")
    link = _link(rank, device)
    all_chunks = sorted({chunks for _, _, chunks in runs})
    report("calibration")
    isolated = {chunks: _calibrate(case, chunks, rank, device) for chunks in all_chunks}
    probes = {chunks: probe_runs(case, chunks) for chunks in all_chunks}
    probe_list = [(name, m, c) for c, names in probes.items() for name, m in names]
    made = _synthesized(case, runs, isolated, link, rank, report)
    rounds = _Rounds(case, probe_list + runs, rank, device, stability, report, made)
    rounds.measure()
    report("memory")
    memory = _measure_memory(case, rounds, rank)
    # Per chunk count, per measured round: what that round's probe steps showed.
    in_situ: dict[int, list[dict[str, list[float]]]] = {}
    latencies: dict[int, list[list[float]]] = {}
    for chunks in all_chunks:
        probes_here = [i for i, (_, _, c) in enumerate(probe_list) if c == chunks]
        per_round = [
            [rounds.timelines[i][r] for i in probes_here] for r in range(rounds.measured_rounds)
        ]
        in_situ[chunks] = [_action_samples(timelines) for timelines in per_round]
        latencies[chunks] = [
            latency_samples(timelines, link.bandwidth_bytes_per_s) for timelines in per_round
        ]
    measured_runs = [
        _run_measurement(case, run, rounds, index, memory[index], made.get(run[:2]))
        for index, run in enumerate(runs, start=len(probe_list))
    ]
    crosscheck = []
    if case.crosscheck:
        from validation.crosscheck import crosscheck as run_crosscheck

        report("cross-check with torch.distributed.pipelining")
        crosscheck = [c.to_json() for c in run_crosscheck(case, rank, device)]
    return {
        "case": case.to_json(),
        "machine": _machine(case.backend).to_json(),
        "link": link.to_json(),
        "isolated_calibration": {
            str(c): [p.to_json() for p in profiles] for c, profiles in isolated.items()
        },
        "probes": {str(c): [f"{name} M={m}" for name, m in names] for c, names in probes.items()},
        "in_situ_samples": {str(c): samples for c, samples in in_situ.items()},
        "latency_samples": {str(c): values for c, values in latencies.items()},
        "runs": [r.to_json() for r in measured_runs],
        "baseline_samples": {str(m): v for m, v in rounds.baseline.items()},
        "solo_samples": rounds.solo,
        "crosscheck": crosscheck,
        "rounds": rounds.measured_rounds,
    }


def _synthesized(
    case: Case,
    runs: list[Run],
    isolated: dict[int, list[StageProfile]],
    link: LinkProfile,
    rank: int,
    report: Callable[[str], None],
) -> dict[tuple[str, int], Schedule]:
    """The case's synthesised runs (``synth N=<limit>``) made on rank 0 from the isolated
    profiles and the link, and handed to every rank (:mod:`validation.synthesized_runs`)."""
    wanted = [
        (name, m, limit)
        for name, m, _ in runs
        if (limit := synthesized_runs.synth_limit(name)) is not None
    ]
    if not wanted:
        return {}
    report("synthesis")
    orders: list[Any] = [None]
    if rank == 0:
        orders[0] = {
            (name, m): synthesized_runs.order_of(
                synthesized_runs.synthesized(isolated[1], link, case.devices, m, limit)
            )
            for name, m, limit in wanted
        }
    dist.broadcast_object_list(orders, src=0)
    return {
        key: synthesized_runs.run_schedule(key[0], case.devices, key[1], 1, order)
        for key, order in orders[0].items()
    }


def _action_samples(timelines: list[Timeline]) -> dict[str, list[float]]:
    """Every compute action's duration in ``timelines``, by "stage/kind" (the JSON keys)."""
    return {
        f"{stage}/{kind.value}": durations
        for (stage, kind), durations in action_samples(timelines).items()
    }


def _machine(backend: str) -> Machine:
    return Machine(
        platform=platform.platform(),
        processor=platform.processor() or platform.machine(),
        cores=cpu_count(),
        python=platform.python_version(),
        torch=torch.__version__,
        threads_per_process=torch.get_num_threads(),
        gpu=torch.cuda.get_device_name(0) if backend == "cuda" else None,
    )


def _link(rank: int, device: torch.device) -> Any:
    """Ping-pong between ranks 0 and 1 (the minimum of many round trips per size: a round
    trip is never faster than the link, only slower when a thread waits for a core); every
    rank learns the fit."""
    dist.barrier()
    data = profile_link(1 - rank, device=device, repeats=30, statistic=min) if rank < 2 else None
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, data)
    return gathered[0]


def _shape_schedule(case: Case, chunks: int) -> Schedule:
    """A schedule with this many chunks, for its stage count and placement: the full-backward
    probe's, which every chunk count the registry offers has."""
    name = probe_schedules(case.devices, 3 * case.devices, chunks)[0]
    return build(name, case.devices, max(case.microbatches), chunks)


def _calibrate(case: Case, chunks: int, rank: int, device: torch.device) -> list[StageProfile]:
    """Each rank profiles its own stages, all at once; everyone gets every profile."""
    schedule = _shape_schedule(case, chunks)
    stages = split_model(make_model(case.model, device), schedule)
    x, y = make_batch(case.model, 1, device)
    inputs = stage_inputs(stages, x)
    mine = {}
    dist.barrier()
    for s in schedule.stages_on(rank):
        mine[s] = profile_stage(s, stages[s], inputs[s], y, LOSS, last=s == schedule.stages - 1)
    dist.barrier()
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, mine)
    merged: dict[int, StageProfile] = {}
    for part in gathered:
        merged.update(part)
    return [merged[s] for s in range(schedule.stages)]


def probe_runs(case: Case, chunks: int) -> list[tuple[str, int]]:
    """The short pipelined runs that calibrate times in situ: the registry's full-backward and
    split-backward probes for this chunk count, at a micro-batch count the case does not
    validate (3K), so every validated run is predicted, not replayed."""
    microbatches = 3 * case.devices
    return [(name, microbatches) for name in probe_schedules(case.devices, microbatches, chunks)]


def _span(result: StepResult) -> float:
    records = result.timeline.compute
    return float(max(r.end_s for r in records) - min(r.start_s for r in records))


class _Rounds:
    """Every run and the unpipelined baselines, measured in interleaved rounds.

    Each round steps every run once (round robin), so a slow spell of the machine (another
    tenant, a frequency change) touches every run a little rather than all repeats of one run,
    and the calibration probes are measured in the same rounds as the runs they predict. The
    baselines (the whole model on rank 0, the others idle) take their turn in every round too,
    with a profile of the whole model's F and B on one micro-batch.
    """

    def __init__(
        self,
        case: Case,
        runs: list[Run],
        rank: int,
        device: torch.device,
        stability: Stability | None,
        report: Callable[[str], None],
        made: dict[tuple[str, int], Schedule] | None = None,
    ) -> None:
        self.case, self.runs, self.rank, self.device = case, runs, rank, device
        self.stability, self.report = stability, report
        self.model = make_model(case.model, device)
        self.splits: dict[int, list[nn.Module]] = {}
        self.plans: list[tuple[Schedule, StepState]] = []
        for name, m, chunks in runs:
            schedule = (made or {}).get((name, m)) or build(name, case.devices, m, chunks)
            if chunks not in self.splits:
                self.splits[chunks] = split_model(self.model, schedule)
            self.plans.append((schedule, StepState()))
        self.batches = {
            m: make_batch(case.model, m, device)
            for m in {m for _, m, _ in runs} | set(case.microbatches)
        }
        # The one micro-batch rank 0 profiles the whole model on each round (never changes).
        self.one = make_batch(case.model, 1, device)
        self.spans: list[list[float]] = [[] for _ in runs]
        self.walls: list[list[float]] = [[] for _ in runs]
        self.stash: list[list[list[int]]] = [[] for _ in runs]
        self.allocated: list[list[list[int | None]]] = [[] for _ in runs]
        self.timelines: list[list[Timeline]] = [[] for _ in runs]
        self.baseline: dict[int, list[float]] = {m: [] for m in case.microbatches}
        self.solo: dict[str, list[float]] = {
            key: [] for key in ("forward_s", "backward_s", "input_grad_s", "weight_grad_s")
        }
        self.measured_rounds = 0
        self.rounds_run = 0

    def step(self, index: int, round_: int) -> tuple[StepResult, float]:
        """One step of run ``index``; its result and rank 0's wall time."""
        schedule, state = self.plans[index]
        chunks = self.runs[index][2]
        # Persistent gradient buffers, zeroed in place (as DDP and Megatron keep them): the
        # first round allocates them, measured rounds pay no first-touch page faults.
        self.model.zero_grad(set_to_none=False)
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        x, y = self.batches[schedule.microbatches]
        dist.barrier()
        began = time.perf_counter()
        result = run_step(
            schedule,
            self.splits[chunks],
            x,
            y,
            LOSS,
            backend="distributed",
            step=round_,
            state=state,
        )
        return result, time.perf_counter() - began

    def measure(self) -> None:
        """Warm-up rounds, the case's repeats, then (when measuring until stable) more rounds
        while the runs are noisy and the budget lasts.

        Python's cyclic garbage collector is off while steps are timed and runs once at the end
        of every round, on every rank at once, outside any step: the rounds keep every step's
        timeline, and with that many objects alive a collection landing inside a step costs it
        tens of milliseconds (timeit turns it off for the same reason)."""
        enabled = gc.isenabled()
        gc.disable()
        try:
            self._measure_rounds()
        finally:
            if enabled:
                gc.enable()

    def _measure_rounds(self) -> None:
        case = self.case
        extra_from = None  # when the case's own repeats ended: the budget counts from there
        round_ = 0
        while True:
            keep = round_ >= case.warmup
            if round_ == case.warmup + case.repeats:
                extra_from = time.monotonic()
            planned = case.warmup + case.repeats
            self.report(
                f"round {round_ + 1}/{planned}" + (" (warm-up)" if not keep else "")
                if round_ < planned
                else f"round {round_ + 1} (measuring until stable)"
            )
            self._round(round_, keep)
            round_ += 1
            self.rounds_run = round_
            if keep:
                self.measured_rounds += 1
            if round_ >= case.warmup + case.repeats and not self._go_on(
                extra_from if extra_from is not None else time.monotonic()
            ):
                break

    def _go_on(self, started: float) -> bool:
        """Whether to measure another round (rank 0 decides, every rank follows)."""
        decision = [False]
        if self.rank == 0 and self.stability is not None:
            decision = [keep_measuring(self.spans, self.stability, time.monotonic() - started)]
        dist.broadcast_object_list(decision, src=0)
        return bool(decision[0])

    def _round(self, round_: int, keep: bool) -> None:
        for index in range(len(self.runs)):
            result, wall = self.step(index, round_)
            if keep:
                self.spans[index].append(_span(result))
                self.walls[index].append(wall)
                self.stash[index].append(list(result.peak_stash_bytes))
                self.allocated[index].append(list(result.peak_allocated_bytes))
                self.timelines[index].append(result.timeline)
        dist.barrier()
        if self.rank == 0:
            model = self.model
            for m in self.case.microbatches:
                model.zero_grad(set_to_none=False)
                x, y = self.batches[m]
                # Unpipelined gradient accumulation on one device: F, B, F, B, ...
                span = _span(run_step(build("1f1b", 1, m), [model], x, y, LOSS))
                if keep:
                    self.baseline[m].append(span)
            model.zero_grad(set_to_none=False)
            x1, y1 = self.one
            profile = profile_stage(0, model, x1, y1, LOSS, last=True, repeats=2, warmup=1)
            if keep:
                for key, values in self.solo.items():
                    values.append(getattr(profile, key))
        gc.collect()
        dist.barrier()


def _measure_memory(case: Case, rounds: _Rounds, rank: int) -> list[list[int | None]]:
    """Per run, per device: how far each rank's resident memory rose during one more step of
    the run, untimed (see :func:`rss_rise`); None for every device where it cannot be read."""
    rises: list[list[int | None]] = []
    for index in range(len(rounds.runs)):
        if case.backend == "cpu":
            with rss_rise() as rise:
                rounds.step(index, rounds.rounds_run)
            mine = rise()
        else:
            rounds.step(index, rounds.rounds_run)
            mine = None
        gathered: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(gathered, mine)
        rises.append(list(gathered))
    return rises


def _run_measurement(
    case: Case,
    run: Run,
    rounds: _Rounds,
    index: int,
    rss: list[int | None],
    made: Schedule | None = None,
) -> RunMeasurement:
    name, microbatches, chunks = run
    spans = rounds.spans[index]
    median_index = sorted(range(len(spans)), key=lambda i: spans[i])[len(spans) // 2]
    timeline = rounds.timelines[index][median_index]
    allocated = rounds.allocated[index]
    stash = rounds.stash[index]
    return RunMeasurement(
        schedule=name,
        devices=case.devices,
        microbatches=microbatches,
        chunks=chunks,
        step_times_s=tuple(spans),
        wall_times_s=tuple(rounds.walls[index]),
        peak_stash_bytes=tuple(max(r[d] for r in stash) for d in range(case.devices)),
        peak_allocated_bytes=tuple(
            None if allocated[0][d] is None else max(int(r[d] or 0) for r in allocated)
            for d in range(case.devices)
        ),
        peak_rss_bytes=tuple(rss),
        timeline=tuple(
            (r.device, r.step, None if r.action is None else str(r.action), r.start_s, r.end_s)
            for r in timeline.compute
        ),
        order=() if made is None else synthesized_runs.order_of(made),
    )


PROC_STATUS = Path("/proc/self/status")
CLEAR_REFS = Path("/proc/self/clear_refs")


def _status_bytes(field: str) -> int | None:
    try:
        for line in PROC_STATUS.read_text(encoding="ascii").splitlines():
            key, _, value = line.partition(":")
            if key == field:
                return int(value.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


@contextlib.contextmanager
def rss_rise() -> Iterator[Callable[[], int | None]]:
    """Measure how far this process's resident memory rises above its level at the start of
    the block: the kernel's high-water mark (VmHWM) minus the resident size (VmRSS) at the
    start, after returning the C allocator's free memory to the kernel (``malloc_trim``) and
    resetting the high-water mark (``clear_refs`` 5). It counts every byte the block made
    resident (tensors, autograd's intermediates, receive buffers), whoever allocated it, and
    nothing the executor says; it yields a function that gives the rise (None where Linux's
    ``/proc`` files or glibc are not there)."""
    ready = _release_and_reset()
    start = _status_bytes("VmRSS") if ready else None
    rise: list[int | None] = [None]
    try:
        yield lambda: rise[0]
    finally:
        peak = _status_bytes("VmHWM") if start is not None else None
        if start is not None and peak is not None:
            rise[0] = max(0, peak - start)


@functools.cache
def _libc_name() -> str | None:
    """The C library's name; looked up once per process (``find_library`` runs ``ldconfig``)."""
    return ctypes.util.find_library("c")


def _release_and_reset() -> bool:
    name = _libc_name()
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        libc.malloc_trim(0)
        CLEAR_REFS.write_text("5", encoding="ascii")
    except (OSError, AttributeError):
        return False
    return True
