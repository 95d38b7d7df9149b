"""One accelerator: how fast it computes, how much it holds, how fast it reads memory."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from pipesim.common import checks
from pipesim.common.checks import SpecError


@dataclass(frozen=True, eq=True)
class Accelerator:
    """An accelerator as one pipeline device sees it.

    Attributes:
        name: catalogue name or the user's.
        peak_flops_per_s: dense peak FLOP/s per dtype ("bf16", "fp16", "fp32", ...).
        efficiency: the fraction of peak the model's kernels achieve (0 < e <= 1).
        memory_bytes: device memory capacity.
        memory_bandwidth_bytes_per_s: device memory bandwidth, for the roofline.
        kernel_overhead_s: a fixed cost per layer and pass (launch, dispatch); 0 by default.
        transfers_use_compute: True when the device's compute must issue its transfers, so a
            send occupies the device (no overlap of communication and compute).
    """

    name: str
    peak_flops_per_s: Mapping[str, float]
    efficiency: float
    memory_bytes: float
    memory_bandwidth_bytes_per_s: float
    kernel_overhead_s: float = 0.0
    transfers_use_compute: bool = False
    source: str = field(default="", compare=False)

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
        checks.fraction("accelerator.efficiency", self.efficiency)
        checks.positive_or_inf("accelerator.memory_bytes", self.memory_bytes)
        checks.rate("accelerator.memory_bandwidth_bytes_per_s", self.memory_bandwidth_bytes_per_s)
        checks.non_negative("accelerator.kernel_overhead_s", self.kernel_overhead_s)
        if not isinstance(self.transfers_use_compute, bool):
            raise SpecError(
                "accelerator.transfers_use_compute must be true or false, got "
                f"{self.transfers_use_compute!r}"
            )

    def achievable_flops_per_s(self, dtype: str) -> float:
        """Peak for ``dtype`` times the efficiency; an unknown dtype names the known ones."""
        try:
            peak = self.peak_flops_per_s[dtype]
        except KeyError:
            known = ", ".join(sorted(self.peak_flops_per_s))
            raise SpecError(
                f"dtype {dtype!r} has no peak FLOP/s on accelerator {self.name!r} (it has: {known})"
            ) from None
        return peak * self.efficiency

    def compute_time_s(self, flops: float, memory_traffic_bytes: float, dtype: str) -> float:
        """Roofline time of one kernel: the slower of compute and memory traffic, plus the
        fixed per-kernel overhead."""
        if flops <= 0 and memory_traffic_bytes <= 0:
            return 0.0
        compute = flops / self.achievable_flops_per_s(dtype)
        memory = memory_traffic_bytes / self.memory_bandwidth_bytes_per_s
        return max(compute, memory) + self.kernel_overhead_s
