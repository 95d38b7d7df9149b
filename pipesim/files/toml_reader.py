"""Reading a user's TOML file field by field: every error names the file, the key and the value.

The generic reader under the two spec formats (:mod:`pipesim.hardware.toml_spec`,
:mod:`pipesim.workload.toml_spec`). Any file at all (binary, not UTF-8, too large, nested too
deep, malformed) gives a :class:`SpecError`, never another exception.
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from pipesim.common import checks
from pipesim.common.checks import SpecError
from pipesim.errors import few, shown
from pipesim.files.inputs import decode_text, read_input

T = TypeVar("T")
_MISSING = object()


def read_toml(path: str | Path, what: str) -> dict[str, Any]:
    """Parse ``path``; unreadable, oversized or malformed files raise :class:`SpecError`."""
    data = read_input(path, what, SpecError)
    return parse_toml(data, f"{what} file {str(path)!r}")


def parse_toml(data: bytes, where: str) -> dict[str, Any]:
    """``data`` parsed as TOML; not UTF-8, malformed or nested too deep is a :class:`SpecError`
    naming ``where``."""
    text = decode_text(data, where, SpecError)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise SpecError(f"{where}: not valid TOML ({error})") from None
    except RecursionError:
        raise SpecError(f"{where}: not valid TOML (nested too deep)") from None


class Fields:
    """A TOML table read key by key; :meth:`done` refuses keys nobody asked for."""

    def __init__(self, table: object, where: str) -> None:
        if not isinstance(table, dict):
            raise SpecError(f"{where} must be a table, got {shown(table)}")
        self._table: dict[str, Any] = table
        self._where = where
        self._used: set[str] = set()

    def field(self, key: str) -> str:
        """The dotted name of ``key`` for messages."""
        return f"{self._where}.{key}" if self._where else key

    def has(self, key: str) -> bool:
        """True when ``key`` is present."""
        return key in self._table

    def take(self, key: str, check: Callable[[str, Any], T], default: Any = _MISSING) -> T:
        """``check(field name, value)`` of ``key``; a missing key without a default is an
        error naming it."""
        self._used.add(key)
        if key not in self._table:
            if default is _MISSING:
                raise SpecError(f"{self.field(key)} is required")
            return default  # type: ignore[no-any-return]
        return check(self.field(key), self._table[key])

    def table(self, key: str) -> Fields:
        """The sub-table ``key`` as :class:`Fields`."""
        self._used.add(key)
        if key not in self._table:
            raise SpecError(f"{self.field(key)} is required (a [{self.field(key)}] table)")
        return Fields(self._table[key], self.field(key))

    def done(self) -> None:
        """Refuse unknown keys (a typo must not be silently ignored)."""
        unknown = sorted(set(self._table) - self._used)
        if unknown:
            raise SpecError(f"unknown key(s) in {self._where or 'the file'}: {few(unknown)}")


def boolean(field: str, value: Any) -> bool:
    """A TOML boolean."""
    if not isinstance(value, bool):
        raise SpecError(f"{field} must be true or false, got {shown(value)}")
    return value


# A non-empty TOML string: the same rule as every name in the specs.
string = checks.name
