"""Loops written once in plain Python and compiled with numba when it is installed.

A :class:`Kernel` wraps a function that only indexes arrays and does arithmetic, so that the
very same source runs in the interpreter (on lists, fast there) or compiled by numba (on numpy
arrays, cached on disk). Both give the same numbers: IEEE arithmetic in the same order.

Importing numba costs most of a second, and a cold compile several seconds (once per machine:
the compiled code is cached), so callers choose per call: :func:`numba_available` says whether
the ``fast`` extra is installed, and nothing imports numba before a kernel is asked to compile.

A kernel may call another kernel by its module-level name: in the interpreter the call goes to
the other's Python function; compiled, to the other's compiled function (:meth:`Kernel.compiled`
compiles the caller against globals where each kernel is replaced by its compiled form). So a
rule several loops share, such as the engines' channel booking, is written once.
"""

from __future__ import annotations

import importlib.util
import types
from collections.abc import Callable
from typing import Any


def numba_available() -> bool:
    """True when numba can be imported (the ``fast`` extra)."""
    return importlib.util.find_spec("numba") is not None


class Kernel:
    """A plain-Python loop, run in the interpreter (:attr:`python`) or compiled
    (:meth:`compiled`).

    Both forms are made once per process and kept (memos of a pure function); calls to other
    kernels inside them go straight to the other's form of the same kind, so sharing a rule
    costs no extra call layer. :attr:`is_compiled` says whether compiling happened.
    """

    def __init__(self, function: Callable[..., Any]) -> None:
        self.source = function
        self._python: Callable[..., Any] | None = None
        self._compiled: Callable[..., Any] | None = None
        self.__doc__ = function.__doc__
        self.__name__ = function.__name__

    def __call__(self, *arguments: Any) -> Any:
        """Run the interpreted form."""
        return self.python(*arguments)

    @property
    def python(self) -> Callable[..., Any]:
        """The function for the interpreter (on lists, fast there)."""
        if self._python is None:
            self._python = self._with_callees(lambda callee: callee.python)
        return self._python

    @property
    def is_compiled(self) -> bool:
        """True once :meth:`compiled` has run in this process."""
        return self._compiled is not None

    def compiled(self) -> Callable[..., Any]:
        """The numba-compiled function (compiled or loaded from the cache on first use)."""
        if self._compiled is None:
            import numba

            function = self._with_callees(lambda callee: callee.compiled())
            self._compiled = numba.njit(cache=True, nogil=True)(function)
        return self._compiled

    def _with_callees(self, form: Callable[[Kernel], Callable[..., Any]]) -> Callable[..., Any]:
        """The source function, or, when it names other kernels of its module, a copy whose
        globals hold ``form`` of each instead (numba can call a compiled function, not a
        :class:`Kernel`; the interpreter calls the plain function one frame sooner)."""
        function = self.source
        named = function.__code__.co_names
        callees = {
            name: form(value)
            for name, value in function.__globals__.items()
            if isinstance(value, Kernel) and value is not self and name in named
        }
        if not callees:
            return function
        copy = types.FunctionType(
            function.__code__,
            {**function.__globals__, **callees},
            function.__name__,
            function.__defaults__,
            function.__closure__,
        )
        copy.__qualname__ = function.__qualname__
        copy.__module__ = function.__module__
        copy.__doc__ = function.__doc__
        return copy


def kernel(function: Callable[..., Any]) -> Kernel:
    """Decorator: make ``function`` a :class:`Kernel`."""
    return Kernel(function)
