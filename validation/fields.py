"""Reading a field of a JSON record: present, or a one-line error naming it.

Its own module so that every record type (suites, host, measurements, results) can use it
without importing the others.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pipesim.errors import PipesimError


def require(data: object, key: str, where: str) -> Any:
    """``data[key]``, or a one-line error naming the record and the missing field."""
    if not isinstance(data, Mapping):
        raise PipesimError(f"{where}: expected a JSON object, got {type(data).__name__}")
    if key not in data:
        raise PipesimError(
            f"{where}: field {key!r} is missing (written by an older pipesim? measure again)"
        )
    return data[key]
