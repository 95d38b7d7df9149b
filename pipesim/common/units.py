"""Human-readable quantities for terminal output (JSON always carries raw SI numbers)."""

from __future__ import annotations

import math


def format_seconds(value: float) -> str:
    """``1.23 s``, ``45.6 ms``, ``7.8 us``."""
    if value == 0 or not math.isfinite(value):
        return f"{value:g} s"
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "us"), (1e-9, "ns")):
        if abs(value) >= scale:
            return f"{value / scale:.4g} {unit}"
    return f"{value:.3g} s"


def format_bytes(value: float) -> str:
    """Binary units: ``12.5 GiB``, ``3.0 MiB``; ``unlimited`` for infinity."""
    if math.isinf(value):
        return "unlimited"
    for exponent, unit in ((40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")):
        if abs(value) >= 2**exponent:
            scaled = value / 2**exponent
            # three significant digits, but never 1e+03: 1000 to 1023 of a unit in full
            return f"{scaled:.0f} {unit}" if abs(scaled) >= 999.5 else f"{scaled:.3g} {unit}"
    return f"{value:.0f} B"


def format_percent(fraction: float) -> str:
    """``17.9 %``."""
    return f"{100 * fraction:.3g} %"


def format_count(value: float) -> str:
    """A count of parameters in words: ``8.03 B``, ``525.3 M``, ``4,096``."""
    if value >= 1e9:
        return f"{value / 1e9:.2f} B"
    if value >= 1e6:
        return f"{value / 1e6:.1f} M"
    return f"{value:,.0f}"
