"""Reading JSON into typed records, strictly: every value is checked against the record's type
hints as it is read, and a value of the wrong kind is a one-line error naming its path
(``measurements.runs[0].step_times_s[2] must be a finite number >= 0, got nan``), never a
``ValueError`` deep in a statistic or a NaN carried into a report.

The rules a type cannot say (a time that may be negative, a count that must be positive, a
list that must not be empty) are given by field name in :class:`FieldRules`; a field's rule
holds for everything inside it.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, TypeVar

from pipesim.errors import PipesimError
from validation.fields import require

T = TypeVar("T")


@dataclass(frozen=True)
class FieldRules:
    """Rules by field name, beyond the type: ``signed`` numbers may be negative (every other
    number is >= 0), ``positive`` numbers must be > 0, ``non_empty`` lists and mappings must
    hold something."""

    signed: frozenset[str] = frozenset()
    positive: frozenset[str] = frozenset()
    non_empty: frozenset[str] = frozenset()


@dataclass(frozen=True)
class _Context:
    rules: FieldRules
    signed: bool = False
    positive: bool = False

    def entering(self, field: str) -> _Context:
        return _Context(
            self.rules,
            self.signed or field in self.rules.signed,
            self.positive or field in self.rules.positive,
        )


def decode(value: object, hint: type[T], where: str, rules: FieldRules = FieldRules()) -> T:
    """``value`` (parsed JSON) as a ``hint``: a dataclass (from an object with its fields; a
    field with a default may be absent), a ``tuple[X, ...]`` or fixed tuple (from a list), a
    ``dict[int | str, X]`` (from an object), an Enum (from its value), ``X | None``, or a
    float, int, bool or str. Numbers must be finite; a bool is not a number."""
    return typing.cast(T, _decode(value, hint, where, _Context(rules)))


def _decode(value: object, hint: Any, where: str, context: _Context) -> Any:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        options = [a for a in args if a is not type(None)]
        if len(options) != 1:
            raise TypeError(f"{where}: cannot decode {hint}")
        return _decode(value, options[0], where, context)
    if origin is tuple:
        return _tuple(value, args, where, context)
    if origin is dict:
        return _mapping(value, args, where, context)
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        return _record(value, hint, where, context)
    if isinstance(hint, type) and issubclass(hint, Enum):
        choices = [member.value for member in hint]
        if value not in choices:
            raise _wrong(where, f"one of {', '.join(map(str, choices))}", value)
        return hint(value)
    if hint is bool:
        if not isinstance(value, bool):
            raise _wrong(where, "true or false", value)
        return value
    if hint is str:
        if not isinstance(value, str):
            raise _wrong(where, "a string", value)
        return value
    if hint is int:
        return _number(value, where, context, whole=True)
    if hint is float:
        return float(_number(value, where, context, whole=False))
    raise TypeError(f"{where}: cannot decode {hint}")


def _number(value: object, where: str, context: _Context, *, whole: bool) -> int | float:
    kind = "a whole number" if whole else "a finite number"
    bound = "> 0" if context.positive else "" if context.signed else ">= 0"
    expected = f"{kind} {bound}".strip()
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _wrong(where, expected, value)
    if whole and not isinstance(value, int):
        raise _wrong(where, expected, value)
    if isinstance(value, int) and abs(value) > 2**63:
        raise _wrong(where, f"{expected} below 2^63", value)  # no measurement is that large
    if not math.isfinite(value):
        raise _wrong(where, expected, value)
    if (context.positive and value <= 0) or (not context.signed and value < 0):
        raise _wrong(where, expected, value)
    return value


def _tuple(value: object, args: tuple[Any, ...], where: str, context: _Context) -> tuple[Any, ...]:
    if not isinstance(value, list):
        raise _wrong(where, "a list", value)
    if len(args) == 2 and args[1] is Ellipsis:
        return tuple(_decode(v, args[0], f"{where}[{i}]", context) for i, v in enumerate(value))
    if len(value) != len(args):
        raise _wrong(where, f"a list of {len(args)}", value)
    return tuple(
        _decode(v, hint, f"{where}[{i}]", context)
        for i, (v, hint) in enumerate(zip(value, args, strict=True))
    )


def _mapping(value: object, args: tuple[Any, ...], where: str, context: _Context) -> dict[Any, Any]:
    if not isinstance(value, Mapping):
        raise _wrong(where, "an object", value)
    key_hint, value_hint = args
    decoded = {}
    for key, item in value.items():
        if key_hint is int:
            if not (isinstance(key, str) and key.isdigit()):
                raise _wrong(f"{where} key", "a whole number", key)
            decoded[int(key)] = _decode(item, value_hint, f"{where}[{key}]", context)
        else:
            decoded[key] = _decode(item, value_hint, f"{where}[{key!r}]", context)
    return decoded


def _record(value: object, cls: type[Any], where: str, context: _Context) -> Any:
    hints = typing.get_type_hints(cls)
    values = {}
    for field in dataclasses.fields(cls):
        required = field.default is dataclasses.MISSING and (
            field.default_factory is dataclasses.MISSING
        )
        if not required and isinstance(value, Mapping) and field.name not in value:
            continue
        raw = require(value, field.name, where)
        inner = context.entering(field.name)
        path = f"{where}.{field.name}"
        if field.name in context.rules.non_empty and isinstance(raw, list | dict) and not raw:
            raise PipesimError(f"{path} must not be empty")
        values[field.name] = _decode(raw, hints[field.name], path, inner)
    return cls(**values)


def _wrong(where: str, expected: str, value: object) -> PipesimError:
    shown = repr(value)
    if len(shown) > 60:
        shown = shown[:57] + "..."
    return PipesimError(f"{where} must be {expected}, got {shown}")
