"""Calibration: measure each stage's F, B, I and W times, its stashed, input, output and
parameter bytes, and the point-to-point link between ranks, on the machine at hand; turn them
into the simulator's :class:`~pipesim.costs.PipelineCosts`, so a calibrated prediction uses no
hand-typed numbers.

Two sources of times: :func:`profile_stage` times a stage alone (and measures its bytes);
:func:`in_situ_times` reads them off the timelines of short pipelined runs, where a stage
shares its machine with its neighbours as it will in the runs being predicted.

Stages are timed through the same :class:`~executor.stage.StageRunner` code path the pipeline
runs, so the executor's per-action overhead is part of what is measured. Calibrate the way the
measurement will run: in the same processes, with the same threads per process and backend,
every rank profiling its own stages at the same time (a core shared with a busy neighbour is
not the same core as an idle machine's).
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass

import torch
from torch import nn

from executor.stage import LossFn, StageRunner
from executor.stash import StashMeter
from pipesim.costs import PipelineCosts, StageCosts
from pipesim.engine.records import Timeline
from pipesim.hardware import Link, Network, Topology
from pipesim.schedules import Kind


@dataclass(frozen=True)
class StageProfile:
    """Medians over repeats for one stage and one micro-batch (seconds, bytes)."""

    forward_s: float
    backward_s: float
    input_grad_s: float
    weight_grad_s: float
    activation_bytes: float
    weight_grad_activation_bytes: float
    input_bytes: float
    output_bytes: float
    parameter_bytes: float
    forward_spread: float  # (max - min) / median of the forward times

    def to_json(self) -> dict[str, float]:
        """Every field."""
        return asdict(self)


@dataclass(frozen=True)
class LinkProfile:
    """One-way time of a message: ``latency_s + bytes / bandwidth_bytes_per_s`` (least-squares
    fit of ping-pong measurements)."""

    latency_s: float
    bandwidth_bytes_per_s: float
    samples: tuple[tuple[int, float], ...]  # (bytes, median one-way seconds)

    def to_json(self) -> dict[str, object]:
        """Fit and samples."""
        return {
            "latency_s": self.latency_s,
            "bandwidth_bytes_per_s": self.bandwidth_bytes_per_s,
            "samples": [list(s) for s in self.samples],
        }


def profile_stage(
    index: int,
    module: nn.Module,
    sample_input: torch.Tensor,
    sample_target: torch.Tensor,
    loss_fn: LossFn,
    *,
    last: bool,
    repeats: int = 10,
    warmup: int = 3,
) -> StageProfile:
    """Time stage ``index`` on one micro-batch: F then B, and F then I then W, ``repeats``
    times each after ``warmup`` rounds; measure what it stashes. Gradients accumulate into the
    module's ``.grad`` buffers (allocated in the warm-up, as in training with persistent
    gradient buffers) and are zeroed in place afterwards."""
    meter = StashMeter()
    runner = StageRunner(index, module, last=last, loss_fn=loss_fn, microbatches=1, meter=meter)
    cuda = runner.device.type == "cuda"

    def synchronize() -> None:
        if cuda:
            torch.cuda.synchronize(runner.device)

    def clock() -> int:
        synchronize()
        return time.perf_counter_ns()

    generator = torch.Generator().manual_seed(0)

    def gradient_for(output: torch.Tensor | None) -> torch.Tensor | None:
        # A gradient of realistic size and sign pattern (all-ones runs measurably slower).
        if output is None:
            return None
        noise = torch.randn(output.shape, generator=generator, dtype=output.dtype)
        return (noise * 1e-3).to(output.device)

    times: dict[Kind, list[float]] = {kind: [] for kind in Kind}
    stash = stash_w = 0
    output_bytes = 0.0
    for round_ in range(warmup + repeats):
        keep = round_ >= warmup
        t0 = clock()
        out = runner.forward(0, sample_input, sample_target, False)
        t1 = clock()
        if keep:
            stash = max(stash, meter.live_bytes)
        runner.backward(0, gradient_for(out), False)
        t2 = clock()
        out = runner.forward(0, sample_input, sample_target, True)
        t3 = clock()
        runner.backward(0, gradient_for(out), True)
        t4 = clock()
        if keep:
            stash_w = max(stash_w, meter.live_bytes)
        runner.weight(0)
        t5 = clock()
        if out is not None:
            output_bytes = float(out.numel() * out.element_size())
        if keep:
            times[Kind.F].append((t1 - t0) / 1e9)
            times[Kind.B].append((t2 - t1) / 1e9)
            times[Kind.I].append((t4 - t3) / 1e9)
            times[Kind.W].append((t5 - t4) / 1e9)
    module.zero_grad(set_to_none=False)
    medians = {kind: statistics.median(values) for kind, values in times.items()}
    forwards = times[Kind.F]
    spread = (max(forwards) - min(forwards)) / medians[Kind.F] if medians[Kind.F] > 0 else 0.0
    return StageProfile(
        forward_s=medians[Kind.F],
        backward_s=medians[Kind.B],
        input_grad_s=medians[Kind.I],
        weight_grad_s=medians[Kind.W],
        activation_bytes=float(stash),
        weight_grad_activation_bytes=float(min(stash_w, stash)),
        input_bytes=float(sample_input.numel() * sample_input.element_size()),
        output_bytes=output_bytes,
        parameter_bytes=float(sum(p.numel() * p.element_size() for p in module.parameters())),
        forward_spread=spread,
    )


def stage_inputs(stages: Sequence[nn.Module], sample: torch.Tensor) -> list[torch.Tensor]:
    """Each stage's input for one micro-batch (the previous stages run on ``sample``)."""
    inputs = []
    with torch.no_grad():
        x = sample
        for stage in stages:
            inputs.append(x.detach())
            device = next(iter(stage.parameters()), x).device
            x = stage(x.to(device))
    return inputs


def profile_link(
    peer: int,
    sizes: Sequence[int] = (64, 65536, 1 << 20, 4 << 20),
    repeats: int = 10,
    device: torch.device | None = None,
    statistic: Callable[[Sequence[float]], float] = statistics.median,
) -> LinkProfile:
    """Ping-pong with ``peer`` over torch.distributed (both ranks call this, naming each
    other; other ranks need not take part); returns the least-squares fit of one-way time
    against size, each size's time being ``statistic`` of its ``repeats`` round trips."""
    import torch.distributed as dist

    rank = dist.get_rank()
    first = rank < peer
    samples = []
    for size in sizes:
        buffer = torch.zeros(max(1, size // 4), dtype=torch.float32, device=device)
        one_way = []
        for round_ in range(repeats + 2):
            began = time.perf_counter_ns()
            if first:
                dist.send(buffer, peer)
                dist.recv(buffer, peer)
            else:
                dist.recv(buffer, peer)
                dist.send(buffer, peer)
            if round_ >= 2:
                one_way.append((time.perf_counter_ns() - began) / 2e9)
        samples.append((buffer.numel() * 4, statistic(one_way)))
    return fit_link(samples)


def fit_link(samples: Sequence[tuple[int, float]]) -> LinkProfile:
    """The link of ``(bytes, one-way seconds)`` samples: the least-squares line's intercept
    as latency (at least 0) and its slope's inverse as bandwidth."""
    latency, per_byte = _fit_line(samples)
    bandwidth = 1.0 / per_byte if per_byte > 0 else float("inf")
    return LinkProfile(max(latency, 0.0), bandwidth, tuple(samples))


def _fit_line(samples: Sequence[tuple[int, float]]) -> tuple[float, float]:
    """Least squares of time = a + b * size."""
    n = len(samples)
    mean_x = sum(s for s, _ in samples) / n
    mean_y = sum(t for _, t in samples) / n
    var = sum((s - mean_x) ** 2 for s, _ in samples)
    if var == 0:
        return mean_y, 0.0
    slope = sum((s - mean_x) * (t - mean_y) for s, t in samples) / var
    return mean_y - slope * mean_x, slope


def calibrated_costs(
    profiles: Sequence[StageProfile],
    link: LinkProfile,
    devices: int,
    *,
    samples_per_microbatch: float | None = None,
    memory_capacity_bytes: float = float("inf"),
    description: str = "calibrated",
) -> PipelineCosts:
    """The simulator's costs from measured stage profiles and link."""
    stages = tuple(
        StageCosts(
            forward_s=p.forward_s,
            input_grad_s=p.input_grad_s,
            weight_grad_s=p.weight_grad_s,
            activation_bytes=p.activation_bytes,
            weight_grad_activation_bytes=p.weight_grad_activation_bytes,
            input_bytes=p.input_bytes,
            output_bytes=p.output_bytes,
            parameter_bytes=p.parameter_bytes,
            full_backward_s=p.backward_s,
        )
        for p in profiles
    )
    network = Network(
        devices,
        Topology.ALL_TO_ALL,
        Link("measured", link.bandwidth_bytes_per_s, link.latency_s),
    )
    return PipelineCosts(
        stages,
        network,
        memory_capacity_bytes=memory_capacity_bytes,
        samples_per_microbatch=samples_per_microbatch,
        description=description,
    )


def action_samples(timelines: Sequence[Timeline]) -> dict[tuple[int, Kind], list[float]]:
    """Every compute action's duration in ``timelines``, by (stage, kind), in order."""
    samples: dict[tuple[int, Kind], list[float]] = {}
    for timeline in timelines:
        for record in timeline.compute:
            if record.action is not None:
                key = (record.action.stage, record.action.kind)
                samples.setdefault(key, []).append(record.duration_s)
    return samples


def in_situ_times(timelines: Sequence[Timeline]) -> dict[tuple[int, Kind], float]:
    """Median measured compute time per (stage, kind) over pipelined runs' timelines.

    A stage's actions cost a little more inside a running pipeline than alone (a neighbour's
    transfers, caches shared with its other chunks): timing them in a real, short pipelined
    run captures that, the way profiling a training iteration does.
    """
    return {key: statistics.median(v) for key, v in action_samples(timelines).items()}


def in_situ_latency(timelines: Sequence[Timeline], bandwidth_bytes_per_s: float) -> float | None:
    """The mean latency of transfers whose receiver was already waiting when they were sent
    (only those show their true duration), less the size over ``bandwidth_bytes_per_s``;
    None when no transfer was caught that way.

    The mean, not the median: on a machine whose cores are all computing, a transfer now and
    then waits milliseconds for the operating system to run the thread that moves it, and the
    expected cost of a transfer, which a step's time adds up, includes those waits.
    """
    latencies = latency_samples(timelines, bandwidth_bytes_per_s)
    return max(0.0, statistics.fmean(latencies)) if latencies else None


def latency_samples(timelines: Sequence[Timeline], bandwidth_bytes_per_s: float) -> list[float]:
    """Latencies (less size / bandwidth) of the transfers whose receiver was waiting first."""
    return [
        t.end_s - t.start_s - t.size_bytes / bandwidth_bytes_per_s
        for timeline in timelines
        for t in timeline.transfers
        if t.receiver_ready_s is not None and t.receiver_ready_s <= t.start_s
    ]


def with_times(
    profile: StageProfile, stage: int, times: Mapping[tuple[int, Kind], float]
) -> StageProfile:
    """``profile`` with the times measured in situ where there are some."""
    return dataclasses.replace(
        profile,
        forward_s=times.get((stage, Kind.F), profile.forward_s),
        backward_s=times.get((stage, Kind.B), profile.backward_s),
        input_grad_s=times.get((stage, Kind.I), profile.input_grad_s),
        weight_grad_s=times.get((stage, Kind.W), profile.weight_grad_s),
    )
