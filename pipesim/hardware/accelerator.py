"""One accelerator: how fast it computes, how much it holds, how fast it reads memory.

Two time models read it. A layer given by its totals is timed by one roofline per pass at
``efficiency``. A layer described kernel by kernel (:mod:`pipesim.workload.work`) is timed
kernel by kernel (:mod:`pipesim.costs.kernel_time`) when the accelerator has a
``matmul_efficiency`` curve: each matrix multiply at the fraction of peak that a multiply of its
size reaches (measured cuBLAS figures, cited in the catalogue), memory-bound kernels at
``memory_bandwidth_efficiency`` of the memory bandwidth.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from pipesim.common import checks
from pipesim.common.checks import SpecError


@dataclass(frozen=True, eq=True)
class Accelerator:
    """An accelerator as one pipeline device sees it.

    Attributes:
        name: catalogue name or the user's.
        peak_flops_per_s: dense peak FLOP/s per dtype ("bf16", "fp16", "fp32", ...).
        efficiency: the fraction of peak the model's kernels achieve (0 < e <= 1), for layers
            timed by one roofline per pass (models given as layers, and every layer on an
            accelerator without a ``matmul_efficiency`` curve); None: not given, which only an
            accelerator with a curve may leave out.
        memory_bytes: device memory capacity.
        memory_bandwidth_bytes_per_s: device memory bandwidth, for the roofline.
        kernel_overhead_s: a fixed cost per layer and pass (launch, dispatch); 0 by default.
            In the kernel-level model, per kernel.
        transfers_use_compute: True when the device's compute must issue its transfers, so a
            send occupies the device (no overlap of communication and compute).
        matmul_efficiency: points (FLOPs of one matrix multiply, fraction of peak it reaches),
            interpolated in log(FLOPs) and held flat beyond the ends; empty: no curve, every
            layer timed by the per-pass roofline at ``efficiency``.
        memory_bandwidth_efficiency: the fraction of ``memory_bandwidth_bytes_per_s`` that
            elementwise memory-bound kernels reach (STREAM-like measurements), in the
            kernel-level model.
        reduction_bandwidth_fraction: the fraction of that achievable bandwidth that kernels
            reducing along rows reach (softmax, norms and their backwards, the loss).
        random_bandwidth_fraction: the same for kernels that draw random numbers (dropout).
        runtime_reserve_bytes: memory the runtime holds before the model (CUDA context,
            communication buffers); added to every device's peak.
        fragmentation_fraction: the allocator's slack, as a fraction of the model's peak
            (weights, gradients, optimizer state, activations and transients) added on top.
        efficiency_given: a user's file gave ``efficiency`` (a run whose every layer is timed
            on the curve warns that nothing reads it); False for the catalogue's entries.
        host_link_bandwidth_bytes_per_s: the link between the device and its host's memory,
            per direction (PCIe), for an optimizer offloaded to the host; None: not given, and
            offloading is refused on this accelerator.
        host_memory_bandwidth_bytes_per_s: the host memory bandwidth one device's share of
            its host gets (the server's over its devices), for the host's optimizer step;
            None: not given, and offloading is refused.
    """

    name: str
    peak_flops_per_s: Mapping[str, float] = field(hash=False)
    efficiency: float | None
    memory_bytes: float
    memory_bandwidth_bytes_per_s: float
    kernel_overhead_s: float = 0.0
    transfers_use_compute: bool = False
    source: str = field(default="", compare=False)
    matmul_efficiency: tuple[tuple[float, float], ...] = ()
    memory_bandwidth_efficiency: float = 1.0
    runtime_reserve_bytes: float = 0.0
    fragmentation_fraction: float = 0.0
    reduction_bandwidth_fraction: float = 1.0
    random_bandwidth_fraction: float = 1.0
    efficiency_given: bool = field(default=False, compare=False)
    host_link_bandwidth_bytes_per_s: float | None = None
    host_memory_bandwidth_bytes_per_s: float | None = None

    def __post_init__(self) -> None:
        checks.name("accelerator.name", self.name)
        if not isinstance(self.peak_flops_per_s, Mapping) or not self.peak_flops_per_s:
            raise SpecError(
                "accelerator.peak_flops_per_s must map dtypes to FLOP/s, e.g. {bf16 = 312e12}, "
                f"got {self.peak_flops_per_s!r}"
            )
        peaks = {
            str(dtype): checks.rate(f"accelerator.peak_flops_per_s.{dtype}", value)
            for dtype, value in self.peak_flops_per_s.items()
        }
        object.__setattr__(self, "peak_flops_per_s", MappingProxyType(peaks))
        if self.efficiency is not None:
            checks.fraction("accelerator.efficiency", self.efficiency)
        checks.positive_or_inf("accelerator.memory_bytes", self.memory_bytes)
        checks.rate("accelerator.memory_bandwidth_bytes_per_s", self.memory_bandwidth_bytes_per_s)
        checks.non_negative("accelerator.kernel_overhead_s", self.kernel_overhead_s)
        if not isinstance(self.transfers_use_compute, bool):
            raise SpecError(
                "accelerator.transfers_use_compute must be true or false, got "
                f"{self.transfers_use_compute!r}"
            )
        object.__setattr__(self, "matmul_efficiency", _curve(self.matmul_efficiency))
        if self.efficiency is None and not self.matmul_efficiency:
            raise SpecError(
                "accelerator.efficiency is needed without a matmul_efficiency curve: every "
                "layer is timed by one roofline at that fraction of peak"
            )
        checks.fraction("accelerator.memory_bandwidth_efficiency", self.memory_bandwidth_efficiency)
        checks.fraction(
            "accelerator.reduction_bandwidth_fraction", self.reduction_bandwidth_fraction
        )
        checks.fraction("accelerator.random_bandwidth_fraction", self.random_bandwidth_fraction)
        checks.non_negative("accelerator.runtime_reserve_bytes", self.runtime_reserve_bytes)
        checks.slack("accelerator.fragmentation_fraction", self.fragmentation_fraction)
        for host in ("host_link_bandwidth_bytes_per_s", "host_memory_bandwidth_bytes_per_s"):
            if getattr(self, host) is not None:
                checks.rate(f"accelerator.{host}", getattr(self, host))

    def __reduce__(self) -> tuple[Any, tuple[dict[str, Any]]]:
        """Pickled as its fields, the peaks a plain dict (a mapping proxy does not pickle): a
        worker process rebuilds the same accelerator."""
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        fields["peak_flops_per_s"] = dict(self.peak_flops_per_s)
        return _rebuilt, (fields,)

    @property
    def kernel_level(self) -> bool:
        """True when layers described kernel by kernel are timed that way (a curve is
        given)."""
        return bool(self.matmul_efficiency)

    def matmul_fraction(self, flops: float) -> float:
        """The fraction of peak a matrix multiply of ``flops`` reaches on the curve."""
        points = self.matmul_efficiency
        if not points:
            assert self.efficiency is not None  # required without a curve
            return self.efficiency
        if flops <= points[0][0]:
            return points[0][1]
        if flops >= points[-1][0]:
            return points[-1][1]
        sizes = [size for size, _ in points]
        right = bisect.bisect_right(sizes, flops)
        (x0, y0), (x1, y1) = points[right - 1], points[right]
        share = (math.log(flops) - math.log(x0)) / (math.log(x1) - math.log(x0))
        return y0 + share * (y1 - y0)

    def peak(self, dtype: str) -> float:
        """The datasheet peak for ``dtype``; an unknown dtype names the known ones."""
        try:
            return self.peak_flops_per_s[dtype]
        except KeyError:
            known = ", ".join(sorted(self.peak_flops_per_s))
            raise SpecError(
                f"dtype {dtype!r} has no peak FLOP/s on accelerator {self.name!r} (it has: {known})"
            ) from None

    def achievable_flops_per_s(self, dtype: str) -> float:
        """Peak for ``dtype`` times the efficiency; an unknown dtype names the known ones, and
        an accelerator that gives no efficiency says so."""
        peak = self.peak(dtype)
        if self.efficiency is None:
            raise SpecError(
                f"accelerator {self.name!r} gives no efficiency, and a layer here is timed by "
                "one roofline at that fraction of peak (a model given as layers, or a layer "
                "not described kernel by kernel): give accelerator.efficiency"
            )
        return peak * self.efficiency

    def compute_time_s(self, flops: float, memory_traffic_bytes: float, dtype: str) -> float:
        """Roofline time of one kernel: the slower of compute and memory traffic, plus the
        fixed per-kernel overhead."""
        if flops <= 0 and memory_traffic_bytes <= 0:
            return 0.0
        compute = flops / self.achievable_flops_per_s(dtype)
        memory = memory_traffic_bytes / self.memory_bandwidth_bytes_per_s
        return max(compute, memory) + self.kernel_overhead_s


def _rebuilt(fields: dict[str, Any]) -> Accelerator:
    return Accelerator(**fields)


def _curve(points: object) -> tuple[tuple[float, float], ...]:
    """``points`` checked: (FLOPs > 0, fraction in (0, 1]) pairs in increasing FLOPs."""
    if not isinstance(points, (tuple, list)):
        raise SpecError(
            "accelerator.matmul_efficiency must be a list of [flops, fraction] pairs, got "
            f"{points!r}"
        )
    curve: list[tuple[float, float]] = []
    for index, pair in enumerate(points):
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise SpecError(
                f"accelerator.matmul_efficiency[{index}] must be a [flops, fraction] pair, got "
                f"{pair!r}"
            )
        flops = checks.positive(f"accelerator.matmul_efficiency[{index}] flops", pair[0])
        share = checks.fraction(f"accelerator.matmul_efficiency[{index}] fraction", pair[1])
        if curve and flops <= curve[-1][0]:
            raise SpecError(
                f"accelerator.matmul_efficiency must list increasing FLOPs, got {flops:g} after "
                f"{curve[-1][0]:g}"
            )
        curve.append((flops, share))
    return tuple(curve)
