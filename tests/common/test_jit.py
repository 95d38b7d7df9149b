"""pipesim.common.jit: one source, interpreted or compiled, and a kernel calling another kernel
reaches the other's Python function in the interpreter and its compiled function under numba."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from pipesim.common.jit import Kernel, kernel, numba_available


@kernel
def _add_scaled(values: Any, scale: float) -> float:
    total = 0.0
    for value in values:
        total += value * scale
    return total


@kernel
def _twice_the_sum(values: Any) -> float:
    twice: float = 2.0 * _add_scaled(values, 1.0)
    return twice


def test_a_kernel_is_callable_and_keeps_its_name_and_docstring() -> None:
    assert isinstance(_add_scaled, Kernel)
    assert _add_scaled([1.0, 2.0], 3.0) == 9.0
    assert _add_scaled.python([1.0, 2.0], 3.0) == 9.0
    assert _add_scaled.__name__ == "_add_scaled"
    assert kernel(_add_scaled.python).__doc__ == _add_scaled.python.__doc__


def test_a_kernel_calling_a_kernel_runs_in_the_interpreter() -> None:
    assert _twice_the_sum.python([1.0, 2.5]) == 7.0
    assert _twice_the_sum([1.0, 2.5]) == 7.0
    # the interpreted caller calls the callee's plain function; the module keeps the kernel
    assert _twice_the_sum.python.__globals__["_add_scaled"] is _add_scaled.python
    assert _twice_the_sum.source.__globals__["_add_scaled"] is _add_scaled


@pytest.mark.skipif(not numba_available(), reason="the fast extra (numba) is not installed")
def test_a_kernel_calling_a_kernel_compiles_against_the_callee_compiled() -> None:
    compiled = _twice_the_sum.compiled()
    assert compiled(np.array([1.0, 2.5])) == 7.0
    assert _add_scaled.is_compiled  # compiled as the caller's callee
    assert _twice_the_sum.source.__globals__["_add_scaled"] is _add_scaled  # module untouched
