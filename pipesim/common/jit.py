"""Loops written once in plain Python and compiled with numba when it is installed.

A :class:`Kernel` wraps a function that only indexes arrays and does arithmetic, so that the
very same source runs in the interpreter (on lists, fast there) or compiled by numba (on numpy
arrays, cached on disk). Both give the same numbers: IEEE arithmetic in the same order.

Importing numba costs most of a second, and a cold compile several seconds (once per machine:
the compiled code is cached), so callers choose per call: :func:`numba_available` says whether
the ``fast`` extra is installed, and nothing imports numba before a kernel is asked to compile.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import Any


def numba_available() -> bool:
    """True when numba can be imported (the ``fast`` extra)."""
    return importlib.util.find_spec("numba") is not None


class Kernel:
    """A plain-Python loop, callable as is (:meth:`python`) or compiled (:meth:`compiled`).

    The compiled function is made once per process and kept (a memo of a pure function);
    :attr:`is_compiled` says whether that happened.
    """

    def __init__(self, function: Callable[..., Any]) -> None:
        self.python = function
        self._compiled: Callable[..., Any] | None = None

    @property
    def is_compiled(self) -> bool:
        """True once :meth:`compiled` has run in this process."""
        return self._compiled is not None

    def compiled(self) -> Callable[..., Any]:
        """The numba-compiled function (compiled or loaded from the cache on first use)."""
        if self._compiled is None:
            import numba

            self._compiled = numba.njit(cache=True, nogil=True)(self.python)
        return self._compiled


def kernel(function: Callable[..., Any]) -> Kernel:
    """Decorator: make ``function`` a :class:`Kernel`."""
    return Kernel(function)
