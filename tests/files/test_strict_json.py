"""pipesim.files.strict_json: which fields of a result are named as non-finite or out of range."""

from __future__ import annotations

import math
from typing import Any

from pipesim.files.strict_json import non_finite_fields, result_problem

NESTED: dict[str, Any] = {
    "a": 1.0,
    "b": [0, math.nan, {"c": -math.inf}],
    "d": (True, "inf", None, 10**400),
    "e": {"f": math.inf},
}


def test_non_finite_fields_in_document_order() -> None:
    found = [(field, str(value)) for field, value in non_finite_fields(NESTED)]
    assert found == [("b[1]", "nan"), ("b[2].c", "-inf"), ("e.f", "inf")]
    assert list(non_finite_fields(math.inf)) == [("value", math.inf)]
    assert [f for f, _ in non_finite_fields([math.nan], "r")] == ["r[0]"]
    assert list(non_finite_fields({"n": 10**400, "s": "nan", "t": True})) == []


def test_result_problem_names_the_first_field_out_of_range() -> None:
    ok = {"iteration_time": 2.0, "throughput": 1.0, "speedup": 1.5}
    assert result_problem(ok) is None
    assert result_problem({**ok, "per_device": [{"peak": 10**400}]}) == (
        "per_device[0].peak is inf, beyond 1e+15, the largest number pipesim saves and plots: "
        "give smaller costs or sizes"
    )
    assert result_problem({**ok, "x": [1.0, math.nan]}) == (
        "x[1] is nan (the costs overflow a float): give smaller costs"
    )
    assert result_problem({**ok, "throughput": 1e-13}) == (
        "throughput is 1e-13, below 1e-12, the smallest positive number pipesim saves and "
        "plots: give smaller costs"
    )
