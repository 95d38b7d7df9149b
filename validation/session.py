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
import json
import os
import platform
import shutil
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
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

from application.lifetime import end_with_parent
from executor import StepResult, StepState, run_step, split_model
from executor.profile import (
    LinkProfile,
    StageProfile,
    profile_link,
    profile_stage,
    stage_inputs,
)
from executor.teardown import end_rank
from pipesim.common.limits import cpu_count
from pipesim.errors import RunFailed
from pipesim.schedules import Schedule, build
from validation import synthesized_runs
from validation.host import host_load, sample_host
from validation.rounds import (
    Rounds,
    Run,
    Stability,
    measurement_json,
    probe_runs,
    run_measurement,
    shape_schedule,
)
from validation.schema import CaseMeasurement, Machine
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
    rounds = DistributedRounds(case, probe_list + runs, rank, device, stability, report, made)
    rounds.measure()
    report("memory")
    memory = _measure_memory(case, rounds, rank)
    measured_runs = [
        run_measurement(case, run, rounds, index, memory[index], made.get(run[:2]))
        for index, run in enumerate(runs, start=len(probe_list))
    ]
    crosscheck = []
    if case.crosscheck:
        from validation.crosscheck import crosscheck as run_crosscheck

        report("cross-check with torch.distributed.pipelining")
        crosscheck = [c.to_json() for c in run_crosscheck(case, rank, device)]
    machine = _machine(case.backend).to_json()
    return measurement_json(
        case, machine, link, isolated, probes, rounds, measured_runs, crosscheck
    )


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


def _calibrate(case: Case, chunks: int, rank: int, device: torch.device) -> list[StageProfile]:
    """Each rank profiles its own stages, all at once; everyone gets every profile."""
    schedule = shape_schedule(case, chunks)
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


class DistributedRounds(Rounds):
    """The rounds with a process per device: every rank steps every run (a barrier before
    each step is timed), rank 0 measures the baselines while the others wait, and decides
    whether to measure more rounds."""

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
        super().__init__(case, runs, device, stability, report, made)
        self.rank = rank
        self.leader = rank == 0

    def _ready_to_time(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        dist.barrier()

    def _run(
        self,
        schedule: Schedule,
        stages: Sequence[nn.Module],
        x: torch.Tensor,
        y: torch.Tensor,
        round_: int,
        state: StepState,
    ) -> StepResult:
        return run_step(
            schedule, stages, x, y, LOSS, backend="distributed", step=round_, state=state
        )

    def _unpipelined(self, microbatches: int, x: torch.Tensor, y: torch.Tensor) -> StepResult:
        return run_step(build("1f1b", 1, microbatches), [self.model], x, y, LOSS)

    def _barrier(self) -> None:
        dist.barrier()

    def _agree(self, decision: bool) -> bool:
        decided = [decision]
        dist.broadcast_object_list(decided, src=0)
        return bool(decided[0])


def _measure_memory(case: Case, rounds: Rounds, rank: int) -> list[list[int | None]]:
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
