"""TOML text from plain values: what pipesim writes (run files, model files, translated
configurations) is read back by :mod:`pipesim.files.toml_reader` to equal values.

Only what those files hold is written: strings, booleans, integers, floats (``inf`` included),
flat arrays of those, tables of those (``[name]``) and arrays of such tables (``[[name]]``),
in the order given. A key whose value is None is left out (absent means "the default"); an
empty table is left out too. Comments may be given per key, written on the line above it.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def number(value: float) -> str:
    """The shortest text that reads back to ``value`` exactly (``1e14`` rather than
    ``100000000000000.0``; ``inf`` and ``-inf`` as TOML spells them)."""
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if math.isnan(value):
        raise ValueError("NaN has no place in a pipesim file")
    plain = repr(float(value))
    for digits in range(17):
        short = f"{value:.{digits}e}".replace("e+", "e")
        if float(short) == value:
            return short if len(short) < len(plain) else plain
    return plain


def value_text(value: Any) -> str:
    """One value as TOML writes it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return number(value)
    if isinstance(value, str):
        # a TOML basic string is JSON's, but DEL must be escaped too
        return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(value_text(item) for item in value) + "]"
    raise TypeError(f"no TOML form for {type(value).__name__} {value!r}")


def key_text(key: str) -> str:
    """A key, bare where TOML allows it, else quoted."""
    return key if _BARE_KEY.fullmatch(key) else json.dumps(key, ensure_ascii=False)


def toml_text(
    document: Mapping[str, Any],
    comments: Mapping[str, str] | None = None,
    header: Sequence[str] = (),
) -> str:
    """``document`` as TOML: at each level its plain keys first, then its tables
    (``[a]``, ``[a.b]``), then its arrays of tables (``[[a.c]]``). ``comments`` maps a dotted
    key (``parallelism.tensor_parallel``) to a comment written above it; ``header`` lines open
    the file as comments."""
    notes = comments or {}
    lines = [f"# {line}".rstrip() for line in header]
    lines += _table(document, (), notes)
    while lines and not lines[0]:
        lines.pop(0)
    return "\n".join(lines) + "\n"


def _table(table: Mapping[str, Any], path: tuple[str, ...], notes: Mapping[str, str]) -> list[str]:
    """A table's plain keys, then its sub-tables and arrays of tables, under ``path``."""
    plain, tables, arrays = _split(table)
    prefix = "".join(f"{part}." for part in path)
    lines = _keys(plain, prefix, notes)
    for name, inner in tables:
        inner_path = (*path, name)
        body = _table(inner, inner_path, notes)
        if not body:
            continue
        dotted = ".".join(key_text(part) for part in inner_path)
        has_plain = bool(_split(inner)[0])
        heading = ["", *_comment(notes.get(prefix + name)), f"[{dotted}]"] if has_plain else []
        lines += heading + body
    for name, entries in arrays:
        dotted = ".".join(key_text(part) for part in (*path, name))
        for entry in entries:
            lines += ["", f"[[{dotted}]]", *_table(entry, (*path, name), notes)]
    return lines


def _split(
    table: Mapping[str, Any],
) -> tuple[
    list[tuple[str, Any]],
    list[tuple[str, Mapping[str, Any]]],
    list[tuple[str, Sequence[Mapping[str, Any]]]],
]:
    plain: list[tuple[str, Any]] = []
    tables: list[tuple[str, Mapping[str, Any]]] = []
    arrays: list[tuple[str, Sequence[Mapping[str, Any]]]] = []
    for key, value in table.items():
        if value is None:
            continue
        if isinstance(value, Mapping):
            tables.append((key, value))
        elif (
            isinstance(value, (list, tuple))
            and value
            and all(isinstance(item, Mapping) for item in value)
        ):
            arrays.append((key, value))
        else:
            plain.append((key, value))
    return plain, tables, arrays


def _keys(pairs: list[tuple[str, Any]], prefix: str, notes: Mapping[str, str]) -> list[str]:
    lines = []
    for key, value in pairs:
        lines += _comment(notes.get(prefix + key))
        lines.append(f"{key_text(key)} = {value_text(value)}")
    return lines


def _comment(text: str | None) -> list[str]:
    return [f"# {line}".rstrip() for line in text.splitlines()] if text else []
