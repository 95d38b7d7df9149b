"""Hypothesis strategies for TOML documents: valid specs mutated field by field (a value
replaced by any TOML value, a key dropped, an unknown key added), serialized to text, plus raw
bytes and text. Shared by the hardware and model loader fuzzers."""

from __future__ import annotations

import math
from typing import Any

from hypothesis import strategies as st

Document = dict[str, Any]

_KEY = st.from_regex(r"[A-Za-z_][A-Za-z0-9_-]{0,12}", fullmatch=True)
_TEXT = st.text(
    st.characters(blacklist_categories=("Cs", "Cc")), max_size=20
)  # no surrogates or control characters: what a TOML basic string may hold unescaped
_SCALAR = st.one_of(
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.sampled_from([0, 1, 2, -1, 3, 2**31, 10**7, 10**8, 2**62]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, 0.5, 1.0, 1e-300, 1e308, 312e12]),
    st.booleans(),
    _TEXT,
    st.sampled_from(["bf16", "fp32", "all-to-all", "ring", "torus-2d", "hierarchical", ""]),
)
VALUES = st.recursive(
    _SCALAR,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(_KEY, inner, max_size=3)),
    max_leaves=6,
)


def _string(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


def _key(key: str) -> str:
    bare = key and all(c.isascii() and (c.isalnum() or c in "_-") for c in key)
    return key if bare else _string(key)


def inline(value: Any) -> str:
    """``value`` as an inline TOML value."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, list):
        return "[" + ", ".join(inline(v) for v in value) + "]"
    return "{" + ", ".join(f"{_key(k)} = {inline(v)}" for k, v in value.items()) + "}"


def _is_table(value: Any) -> bool:
    """A non-empty table, or a non-empty array of tables: written as sections."""
    if isinstance(value, dict):
        return bool(value)
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)


def to_toml(document: Document) -> str:
    """``document`` as TOML text: scalars first, then each table (and array of tables)."""
    lines = []
    tables = []
    for key, value in document.items():
        if _is_table(value):
            tables.append((key, value))
        else:
            lines.append(f"{_key(key)} = {inline(value)}")
    for key, value in tables:
        if isinstance(value, dict):
            lines.append(f"[{_key(key)}]")
            lines.extend(f"{_key(k)} = {inline(v)}" for k, v in value.items())
        else:
            for entry in value:
                lines.append(f"[[{_key(key)}]]")
                lines.extend(f"{_key(k)} = {inline(v)}" for k, v in entry.items())
    return "\n".join(lines) + "\n"


def _paths(document: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = []
    if isinstance(document, dict):
        for key, value in document.items():
            found.append((*prefix, key))
            found.extend(_paths(value, (*prefix, key)))
    elif isinstance(document, list):
        for index, value in enumerate(document):
            if isinstance(value, dict):
                found.extend(_paths(value, (*prefix, index)))
    return found


@st.composite
def mutated(draw: st.DrawFn, base: Document) -> Document:
    """``base`` with one to three mutations."""
    import copy

    document = copy.deepcopy(base)
    for _ in range(draw(st.integers(1, 3))):
        paths = _paths(document)
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent: Any = document
        for step in path[:-1]:
            parent = parent[step]
        action = draw(st.sampled_from(["replace", "replace", "drop", "add"]))
        if action == "replace":
            parent[path[-1]] = draw(VALUES)
        elif action == "drop" and isinstance(parent, dict):
            del parent[path[-1]]
        elif isinstance(parent, dict):
            parent[draw(_KEY)] = draw(VALUES)
    return document


def documents(*bases: Document) -> st.SearchStrategy[bytes]:
    """TOML files to try: the bases themselves, mutated bases, random text and bytes."""
    return st.one_of(
        st.sampled_from(bases).map(to_toml).map(str.encode),
        st.sampled_from(bases).flatmap(mutated).map(to_toml).map(str.encode),
        st.text(max_size=200).map(lambda text: text.encode("utf-8", "surrogatepass")),
        st.binary(max_size=200),
    )
