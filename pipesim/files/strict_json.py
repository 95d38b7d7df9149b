"""Results must be finite: a NaN or an infinity in a result is an error, not a number to print.

Finite costs can still overflow (``--costs 1e308,1e308`` sums to infinity, and infinity over
infinity is NaN), and JSON cannot hold either: a result that says "iteration time inf s,
speedup nanx" or writes ``Infinity`` into a file no reader accepts is refused instead, with the
first offending field named.

A result must also fit the range of numbers pipesim saves and plots back (:data:`LARGEST`,
:data:`SMALLEST`; ``pipesim.export.saved`` refuses what lies outside it): ``--costs
1e300,1e300`` is finite but gives a file ``pipesim plot`` could not read, and all-zero costs
give an iteration time of 0 (a throughput of infinity). :func:`result_problem` says what is
wrong with such a result, so that ``simulate`` refuses it and ``sweep`` reports it as the
point's error.
"""

from __future__ import annotations

import contextlib
import json
import math
import sys
import warnings
from collections.abc import Iterator, Mapping
from typing import Any

from pipesim.errors import PipesimError

# The range of the numbers pipesim saves: far beyond any real run (seconds, bytes, ratios), yet
# far enough inside a float's range that no axis, tick or ratio drawn from them overflows.
# ``pipesim.export.saved`` imports them, so that it reads back exactly this range.
LARGEST = 1e15
SMALLEST = 1e-12
# A result's fields that must be > 0: figures divide by them or draw them on log axes.
POSITIVE_FIELDS = ("iteration_time", "throughput", "speedup")
# Counts of FLOPs, which large models reach far beyond LARGEST; reported, never plotted.
FLOP_FIELDS = ("model_flops_per_step", "hardware_flops_per_step", "achieved_flops_per_device")


def _leaves(payload: Any, where: str = "") -> Iterator[tuple[str, Any]]:
    """Each (dotted path, value) of the values in ``payload`` that are not dicts, lists or
    tuples, in document order; the path of a bare value is "value"."""
    if isinstance(payload, dict):
        for key, value in payload.items():
            yield from _leaves(value, f"{where}.{key}" if where else str(key))
    elif isinstance(payload, (list, tuple)):
        for index, value in enumerate(payload):
            yield from _leaves(value, f"{where}[{index}]")
    else:
        yield where or "value", payload


def non_finite_fields(payload: Any, where: str = "") -> Iterator[tuple[str, float]]:
    """Each (dotted path, value) in ``payload`` (nested dicts and lists) that is a float NaN
    or infinity, in document order."""
    for field, value in _leaves(payload, where):
        if isinstance(value, float) and not math.isfinite(value):
            yield field, value


def require_finite(payload: Any, what: str) -> None:
    """Raise :class:`PipesimError` naming the first non-finite field of ``payload``."""
    for field, value in non_finite_fields(payload):
        raise PipesimError(
            f"{what}: {field} is {value} (the costs overflow a float): give smaller costs"
        )


def result_problem(result: Mapping[str, Any]) -> str | None:
    """Why ``result`` (a simulation result's JSON object) cannot be reported or saved, in a
    few words naming the field, the value and what to change; None when it can."""
    if result.get("iteration_time") == 0:
        return "iteration_time is 0 s (every cost is zero): give costs that take time"
    for field, value in non_finite_fields(result):
        return f"{field} is {value} (the costs overflow a float): give smaller costs"
    tiny = [
        (key, float(number))
        for key in POSITIVE_FIELDS
        if isinstance(number := result.get(key), int | float) and 0 < number < SMALLEST
    ]
    if tiny and tiny[0][0] == "iteration_time":
        return _below(*tiny[0], "larger costs")
    for field, value in _numbers(result):
        if abs(value) > LARGEST and field not in FLOP_FIELDS:
            change = "larger costs" if field == "throughput" else "smaller costs or sizes"
            return (
                f"{field} is {value:g}, beyond {LARGEST:g}, the largest number pipesim saves "
                f"and plots: give {change}"
            )
    if tiny:
        return _below(*tiny[0], "smaller costs")
    return None


def _below(key: str, value: float, change: str) -> str:
    return (
        f"{key} is {value:g}, below {SMALLEST:g}, the smallest positive number pipesim saves "
        f"and plots: give {change}"
    )


def require_reportable(result: Mapping[str, Any], what: str) -> None:
    """Raise :class:`PipesimError` with :func:`result_problem`'s reason, if there is one."""
    problem = result_problem(result)
    if problem is not None:
        raise PipesimError(f"{what}: {problem}")


def _numbers(payload: Any) -> Iterator[tuple[str, float]]:
    """Each (dotted path, value) of the numbers in ``payload`` (not booleans), in document
    order; an int too large for a float is infinity."""
    for where, value in _leaves(payload):
        if isinstance(value, int | float) and not isinstance(value, bool):
            huge = isinstance(value, int) and abs(value) > LARGEST  # float() may overflow
            yield where, math.inf if huge else float(value)


def json_text(payload: Any, indent: int | None = None) -> str:
    """``payload`` as strict JSON text: a NaN or infinity, which JSON cannot hold, is a
    :class:`PipesimError` naming the field, never ``NaN``/``Infinity`` in a file."""
    require_finite(payload, "JSON output")
    return json.dumps(payload, indent=indent, allow_nan=False)


def write_json(payload: Any) -> None:
    """Print ``payload`` as indented JSON on stdout (strict JSON: NaN and infinities, which
    JSON cannot hold, are refused, so no reader ever chokes on pipesim's output)."""
    sys.stdout.write(json_text(payload, indent=2) + "\n")


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
