"""Records with every field filled in, for tests that care about a few of them."""

from __future__ import annotations

from typing import Any

from validation.schema import Comparison


def comparison(**overrides: Any) -> Comparison:
    """A compared run of 1f1b at K=2, M=4 with zero errors, except what ``overrides`` says."""
    fields: dict[str, Any] = {
        "case": "fake",
        "schedule": "1f1b",
        "devices": 2,
        "microbatches": 4,
        "chunks": 1,
        "predicted_time": 0.1,
        "measured_time": 0.1,
        "measured_time_min": 0.1,
        "measured_time_max": 0.1,
        "measured_time_spread": 0.0,
        "measured_time_uncertainty": 0.0,
        "predicted_time_uncertainty": 0.0,
        "measured_wall_time": 0.1,
        "time_error": 0.0,
        "predicted_speedup": 1.6,
        "measured_speedup": 1.6,
        "speedup_error": 0.0,
        "predicted_peak_memory_bytes": (1.0, 1.0),
        "measured_peak_memory_bytes": (1, 1),
        "stash_peak_memory_bytes": (1, 1),
        "memory_error": 0.0,
        "stash_memory_error": 0.0,
        "predicted_bubble_fraction": 0.2,
        "analytic_bubble_fraction": 0.2,
    }
    fields.update(overrides)
    return Comparison(**fields)
