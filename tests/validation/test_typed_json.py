"""Strict reading of JSON into typed records: what is accepted, and each refusal's one line."""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

import pytest

from pipesim.errors import PipesimError
from validation.typed_json import FieldRules, decode


class Colour(Enum):
    RED = "red"


@dataclass(frozen=True)
class Inner:
    times_s: tuple[float, ...]
    offset_s: float


@dataclass(frozen=True)
class Outer:
    name: str
    count: int
    colour: Colour
    inner: Inner
    by_size: dict[int, tuple[int, float]]
    note: str | None
    flag: bool = False


RULES = FieldRules(
    signed=frozenset({"offset_s"}), positive=frozenset({"count"}), non_empty=frozenset({"times_s"})
)
GOOD = {
    "name": "x",
    "count": 2,
    "colour": "red",
    "inner": {"times_s": [1, 0.5], "offset_s": -0.25},
    "by_size": {"4": [4, 0.0]},
    "note": None,
}


def test_a_good_record_is_read_with_its_types() -> None:
    assert decode(GOOD, Outer, "top", RULES) == Outer(
        "x", 2, Colour.RED, Inner((1.0, 0.5), -0.25), {4: (4, 0.0)}, None, False
    )
    assert decode({**GOOD, "flag": True}, Outer, "top", RULES).flag is True


BAD = [
    ({"count": 0}, "top.count must be a whole number > 0, got 0"),
    ({"count": 2.0}, "top.count must be a whole number > 0, got 2.0"),
    ({"count": True}, "top.count must be a whole number > 0, got True"),
    ({"count": "2"}, "top.count must be a whole number > 0, got '2'"),
    ({"name": 3}, "top.name must be a string, got 3"),
    ({"colour": "blue"}, "top.colour must be one of red, got 'blue'"),
    ({"flag": 1}, "top.flag must be true or false, got 1"),
    ({"inner": []}, "top.inner: expected a JSON object, got list"),
    ({"inner": {"offset_s": 0}}, "top.inner: field 'times_s' is missing"),
    ({"inner": {"times_s": [], "offset_s": 0}}, "top.inner.times_s must not be empty"),
    ({"inner": {"times_s": [math.nan], "offset_s": 0}}, "top.inner.times_s[0] must be a finite"),
    (
        {"inner": {"times_s": [-1], "offset_s": 0}},
        "times_s[0] must be a finite number >= 0, got -1",
    ),
    (
        {"inner": {"times_s": [1], "offset_s": math.inf}},
        "offset_s must be a finite number, got inf",
    ),
    ({"inner": {"times_s": "abc", "offset_s": 0}}, "top.inner.times_s must be a list, got 'abc'"),
    ({"by_size": {"x": [1, 1.0]}}, "top.by_size key must be a whole number, got 'x'"),
    ({"by_size": {"4": [1]}}, "top.by_size[4] must be a list of 2, got [1]"),
    ({"by_size": []}, "top.by_size must be an object, got []"),
    ({"note": 5}, "top.note must be a string, got 5"),
    ({"count": 10**400}, "top.count must be a whole number > 0 below 2^63, got 1000"),
]


@pytest.mark.parametrize(("change", "message"), BAD)
def test_each_wrong_value_is_one_line_naming_its_path(
    change: dict[str, object], message: str
) -> None:
    with pytest.raises(PipesimError) as caught:
        decode({**GOOD, **change}, Outer, "top", RULES)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_a_long_value_is_shortened_in_the_message() -> None:
    with pytest.raises(PipesimError, match=r"got 'xxxx+\.\.\.$"):
        decode({**GOOD, "count": "x" * 1000}, Outer, "top", RULES)
