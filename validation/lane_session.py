"""Running a validation case on lanes of one machine (``--backend cpu-partitioned`` or
``cuda-partitioned``): one process, K lanes running at once (:mod:`executor.concurrent`).

What it measures is what :mod:`validation.session` measures with a process per device, in the
same :class:`~validation.schema.CaseMeasurement`, so the same comparison, report, ``--reuse``
and ``--resume`` serve both:

* the link: a message's one-way time between two lanes (a copy made on the receiving lane),
  fitted as latency plus size over bandwidth;
* each stage profiled alone on its lane (its thread budget on CPU, its SMs on CUDA), the
  others idle: the isolated costs the prediction starts from;
* rounds in which every run (and the probes that calibrate times in situ) steps once, and the
  unpipelined baseline (the whole model on one lane, the same share of the machine as one
  pipeline device) steps once per M: the speedup over K = 1 lane;
* memory: each lane's stash (the executor's meter) and the whole machine's peak during one
  more, untimed step (the allocator on CUDA, the resident-memory rise on CPU), since the lanes
  share one memory.

Every case of a suite uses :data:`~validation.suites.PARTITION_LANES` equal lanes, whatever
its K, so that a pipeline of K lanes and one lane alone are devices of one kind.
"""

from __future__ import annotations

import contextlib
import platform
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch import nn

from executor import StepResult, StepState, run_step, split_model
from executor.concurrent import ThreadTransport
from executor.interrupts import interrupts_that_stick
from executor.lanes import CudaLanes, Lanes, cpu_lanes, cuda_lanes
from executor.messages import Message
from executor.profile import (
    LinkProfile,
    StageProfile,
    fit_link,
    profile_stage,
    stage_inputs,
)
from pipesim.common.limits import cpu_count
from pipesim.errors import RunFailed
from pipesim.schedules import Action, Kind, Schedule, build
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
from validation.session import rss_rise
from validation.suites import PARTITION_LANES, Case, lane_threads
from validation.workload import LOSS, make_batch, make_model

LINK_SIZES = (64, 65536, 1 << 20, 4 << 20)


def case_lanes(case: Case) -> Lanes:
    """The suite's :data:`PARTITION_LANES` equal lanes (at least the case's K)."""
    count = max(PARTITION_LANES, case.devices)
    if case.backend.device_kind.value == "cuda":
        return cuda_lanes(count)
    return cpu_lanes(count, lane_threads())


@contextlib.contextmanager
def on_lane(lanes: Lanes, lane: int) -> Iterator[None]:
    """Work in the block runs as lane ``lane`` would (its stream, or its thread budget)."""
    if isinstance(lanes, CudaLanes):
        with torch.cuda.stream(lanes.stream(lane)):
            yield
    else:
        with lanes.budget():
            yield


def run_lane_case(
    case: Case,
    stability: Stability | None = None,
    on_progress: Callable[[str], None] | None = None,
    timeout_s: float = 1800.0,
) -> CaseMeasurement:
    """Measure ``case`` on lanes of this machine; everything measured, nothing predicted.

    This process computes (unlike :func:`validation.session.run_case`, whose workers do), so a
    Ctrl-C that lands while torch frees memory through a finalizer would be dropped: it is
    raised again until it gets through (:func:`executor.interrupts.interrupts_that_stick`)."""
    with interrupts_that_stick():
        return _measure_lane_case(case, stability, on_progress, timeout_s)


def _measure_lane_case(
    case: Case,
    stability: Stability | None,
    on_progress: Callable[[str], None] | None,
    timeout_s: float,
) -> CaseMeasurement:
    report = on_progress or (lambda text: None)
    lanes = case_lanes(case)
    samples = [sample_host()]
    runs = case.runs()
    report("link")
    link = lane_link(lanes)
    all_chunks = sorted({chunks for _, _, chunks in runs})
    report("calibration")
    isolated = {chunks: _calibrate(case, chunks, lanes) for chunks in all_chunks}
    probes = {chunks: probe_runs(case, chunks) for chunks in all_chunks}
    probe_list = [(name, m, c) for c, names in probes.items() for name, m in names]
    rounds = LaneRounds(case, probe_list + runs, lanes, stability, report, timeout_s)
    sampler = _HostSampler(samples)
    with sampler:
        rounds.measure()
        report("memory")
        peaks = [rounds.device_peak(index) for index in range(len(rounds.runs))]
    samples.append(sample_host())
    measured_runs = [
        run_measurement(
            case, run, rounds, index, [None] * case.devices, device_peak_bytes=peaks[index]
        )
        for index, run in enumerate(runs, start=len(probe_list))
    ]
    data = measurement_json(
        case, _machine(lanes).to_json(), link, isolated, probes, rounds, measured_runs, []
    )
    data["host"] = host_load(samples).to_json()
    return CaseMeasurement.from_json(data)


class _HostSampler:
    """Samples the host's load every second in a background thread while the block runs."""

    def __init__(self, samples: list[Any]) -> None:
        self.samples = samples
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="pipesim-host-sampler", daemon=True)

    def _loop(self) -> None:
        while not self._stop.wait(1.0):
            self.samples.append(sample_host())

    def __enter__(self) -> _HostSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)


def _machine(lanes: Lanes) -> Machine:
    cuda = isinstance(lanes, CudaLanes)
    threads = torch.get_num_threads() if isinstance(lanes, CudaLanes) else lanes.threads_per_lane
    return Machine(
        platform=platform.platform(),
        processor=platform.processor() or platform.machine(),
        cores=cpu_count(),
        python=platform.python_version(),
        torch=torch.__version__,
        threads_per_process=threads,
        gpu=torch.cuda.get_device_name(lanes.device) if cuda else None,
        lanes=lanes.describe(),
    )


def lane_link(lanes: Lanes, repeats: int = 30) -> LinkProfile:
    """One message's one-way time between lanes 0 and 1 for a few sizes (the minimum over
    ``repeats``: a transfer is never faster than the link), fitted as latency plus size over
    bandwidth. On CPU a ping-pong between two lane threads through the transport the steps
    use; on CUDA a copy on lane 1 of a tensor lane 0 produced, timed by events."""
    samples = []
    for size in LINK_SIZES:
        elements = max(1, size // 4)
        if isinstance(lanes, CudaLanes):
            one_way = _cuda_one_way(lanes, elements, repeats)
        else:
            one_way = _thread_one_way(lanes, elements, repeats)
        samples.append((elements * 4, min(one_way)))
    return fit_link(samples)


def _thread_one_way(lanes: Lanes, elements: int, repeats: int) -> list[float]:
    transport = ThreadTransport(timeout_s=30.0)
    there = Message(0, Action(0, Kind.F, 0), Action(1, Kind.F, 0))
    back = Message(0, Action(1, Kind.B, 0), Action(0, Kind.B, 0))
    rounds = repeats + 2

    def echo() -> None:
        for _ in range(rounds):
            transport.send(transport.receive(there, 0), back, 0)

    buffer = torch.zeros(elements)
    times = []
    peer = threading.Thread(target=echo, daemon=True)
    with on_lane(lanes, 0):
        peer.start()
        for round_ in range(rounds):
            began = time.perf_counter_ns()
            transport.send(buffer, there, 1)
            buffer = transport.receive(back, 1)
            if round_ >= 2:
                times.append((time.perf_counter_ns() - began) / 2e9)
        peer.join(30)
    return times


def _cuda_one_way(lanes: CudaLanes, elements: int, repeats: int) -> list[float]:
    source, target = lanes.stream(0), lanes.stream(1)
    buffer = torch.zeros(elements, device=lanes.device)
    pairs = []
    for _ in range(repeats + 2):
        produced = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        arrived = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        with torch.cuda.stream(source):
            buffer.add_(1.0)
            produced.record(source)
        with torch.cuda.stream(target):
            target.wait_event(produced)
            buffer.record_stream(target)
            copy = buffer.clone()
            arrived.record(target)
        pairs.append((produced, arrived, copy))
    torch.cuda.synchronize(lanes.device)
    return [produced.elapsed_time(arrived) / 1e3 for produced, arrived, _ in pairs[2:]]


def _calibrate(case: Case, chunks: int, lanes: Lanes) -> list[StageProfile]:
    """Each stage profiled alone on its own lane, the other lanes idle."""
    schedule = shape_schedule(case, chunks)
    stages = split_model(make_model(case.model, lanes.device), schedule)
    x, y = make_batch(case.model, 1, lanes.device)
    inputs = stage_inputs(stages, x)
    profiles = []
    for s in range(schedule.stages):
        with on_lane(lanes, schedule.device_of(s)):
            profiles.append(
                profile_stage(s, stages[s], inputs[s], y, LOSS, last=s == schedule.stages - 1)
            )
    return profiles


class LaneRounds(Rounds):
    """The rounds on lanes of this process (:class:`validation.rounds.Rounds`): no barriers,
    each step's clock started once the GPU is idle, the baselines on the first lane, and a
    bound on the whole case's time."""

    def __init__(
        self,
        case: Case,
        runs: list[Run],
        lanes: Lanes,
        stability: Stability | None,
        report: Callable[[str], None],
        timeout_s: float,
    ) -> None:
        super().__init__(case, runs, lanes.device, stability, report)
        self.lanes = lanes
        self.deadline = time.monotonic() + timeout_s
        self.timeout_s = timeout_s

    def _ready_to_time(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

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
            schedule, stages, x, y, LOSS, backend="concurrent", step=round_, lanes=self.lanes
        )

    def _unpipelined(self, microbatches: int, x: torch.Tensor, y: torch.Tensor) -> StepResult:
        return run_step(
            build("1f1b", 1, microbatches),
            [self.model],
            x,
            y,
            LOSS,
            backend="concurrent",
            lanes=self.lanes,
        )

    def _first_device(self) -> contextlib.AbstractContextManager[None]:
        return on_lane(self.lanes, 0)

    def _check_time(self) -> None:
        if time.monotonic() > self.deadline:
            raise RunFailed(
                f"validation case {self.case.name!r} did not finish in {self.timeout_s:g} s"
            )

    def device_peak(self, index: int) -> int | None:
        """The whole machine's peak during one more, untimed step of run ``index``: on CUDA
        the allocator's peak less what was resident before the step (the batches, caches)
        plus the model's weights and gradients; on CPU the resident-memory rise."""
        if self.device.type == "cuda":
            self.model.zero_grad(set_to_none=False)
            self._ready_to_time()
            resident = torch.cuda.memory_allocated(self.device)
            result, _ = self.step(index, self.rounds_run)
            if result.device_peak_allocated_bytes is None:
                return None
            state = sum(
                2 * p.numel() * p.element_size() for p in self.model.parameters() if p.requires_grad
            )
            return max(0, result.device_peak_allocated_bytes - resident) + state
        with rss_rise() as rise:
            self.step(index, self.rounds_run)
        return rise()
