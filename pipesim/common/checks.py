"""Argument checks that raise with the field and the value in the message (never ``assert``)."""

from __future__ import annotations

import math

from pipesim.errors import PipesimError, shown


class SpecError(PipesimError):
    """A hardware, model or cost specification with a bad field."""


def _number(value: object) -> float | None:
    """``value`` as a float when it is an int or float (not a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def positive(field: str, value: object) -> float:
    """``value`` as a finite float > 0."""
    number = _number(value)
    if number is None or not math.isfinite(number) or number <= 0:
        raise SpecError(f"{field} must be a number > 0, got {shown(value)}")
    return number


def positive_or_inf(field: str, value: object) -> float:
    """``value`` as a float > 0, infinity allowed (an ideal link, unlimited memory)."""
    number = _number(value)
    if number is None or math.isnan(number) or number <= 0:
        raise SpecError(f"{field} must be a number > 0, got {shown(value)}")
    return number


MIN_RATE_PER_S = 1.0
"""The slowest rate a spec may state (1 byte or FLOP per second): slower ones are typos, and
they only overflow every time computed from them (a message of 1 GB over 1e-300 B/s)."""


def rate(field: str, value: object) -> float:
    """``value`` as a rate per second: at least :data:`MIN_RATE_PER_S`, infinity allowed."""
    number = _number(value)
    if number is None or math.isnan(number) or number < MIN_RATE_PER_S:
        raise SpecError(
            f"{field} must be a number >= {MIN_RATE_PER_S:g} (per second), got {shown(value)}"
        )
    return number


def non_negative(field: str, value: object) -> float:
    """``value`` as a finite float >= 0."""
    number = _number(value)
    if number is None or not math.isfinite(number) or number < 0:
        raise SpecError(f"{field} must be a number >= 0, got {shown(value)}")
    return number


def slack(field: str, value: object) -> float:
    """``value`` as a float in [0, 1): a share added on top of something (an allocator's
    fragmentation), never as large as the thing itself."""
    number = _number(value)
    if number is None or not 0 <= number < 1:
        raise SpecError(f"{field} must be a number in [0, 1), got {shown(value)}")
    return number


def fraction(field: str, value: object) -> float:
    """``value`` as a float in (0, 1]."""
    number = _number(value)
    if number is None or not 0 < number <= 1:
        raise SpecError(f"{field} must be a number in (0, 1], got {shown(value)}")
    return number


def positive_int(field: str, value: object, *, error: type[PipesimError] = SpecError) -> int:
    """``value`` as an int >= 1; a bad one raises ``error`` (a spec's field by default; a
    schedule's K, M, v or step count passes :class:`~pipesim.errors.ScheduleError`)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise error(f"{field} must be an integer >= 1, got {shown(value)}")
    return value


def non_negative_int(field: str, value: object) -> int:
    """``value`` as an int >= 0."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise SpecError(f"{field} must be an integer >= 0, got {shown(value)}")
    return value


def name(field: str, value: object) -> str:
    """A non-empty string."""
    if not isinstance(value, str) or not value.strip():
        raise SpecError(f"{field} must be a non-empty string, got {shown(value)}")
    return value
