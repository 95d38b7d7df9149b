"""Results must be finite: a NaN or an infinity in a result is an error, not a number to print.

Finite costs can still overflow (``--costs 1e308,1e308`` sums to infinity, and infinity over
infinity is NaN), and JSON cannot hold either: a result that says "iteration time inf s,
speedup nanx" or writes ``Infinity`` into a file no reader accepts is refused instead, with the
first offending field named.
"""

from __future__ import annotations

import contextlib
import json
import math
import warnings
from collections.abc import Iterator
from typing import Any

from pipesim.errors import PipesimError


def non_finite_fields(payload: Any, where: str = "") -> Iterator[tuple[str, float]]:
    """Each (dotted path, value) in ``payload`` (nested dicts and lists) that is a float NaN
    or infinity, in document order."""
    if isinstance(payload, float):
        if not math.isfinite(payload):
            yield where or "value", payload
    elif isinstance(payload, dict):
        for key, value in payload.items():
            yield from non_finite_fields(value, f"{where}.{key}" if where else str(key))
    elif isinstance(payload, (list, tuple)):
        for index, value in enumerate(payload):
            yield from non_finite_fields(value, f"{where}[{index}]")


def require_finite(payload: Any, what: str) -> None:
    """Raise :class:`PipesimError` naming the first non-finite field of ``payload``."""
    for field, value in non_finite_fields(payload):
        raise PipesimError(
            f"{what}: {field} is {value} (the costs overflow a float): give smaller costs"
        )


def json_text(payload: Any, indent: int | None = None) -> str:
    """``payload`` as strict JSON text: a NaN or infinity, which JSON cannot hold, is a
    :class:`PipesimError` naming the field, never ``NaN``/``Infinity`` in a file."""
    require_finite(payload, "JSON output")
    return json.dumps(payload, indent=indent, allow_nan=False)


@contextlib.contextmanager
def overflow_checked() -> Iterator[None]:
    """Silence numpy's overflow and invalid-value warnings inside the block, for a caller that
    checks the result itself (:func:`require_finite`) and reports it in one line: the warnings
    would only add lines of source code above that error."""
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore",
            message="(overflow|invalid value) encountered",
            category=RuntimeWarning,
        )
        yield
