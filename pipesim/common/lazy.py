"""Packages whose names load on first use (PEP 562).

A package's ``__init__`` that imported every submodule would make importing any one of them
(``pipesim.schedules.action`` for ``UpdateRule``, ``pipesim.workload.architecture`` for a
recipe's ``Attention``) pay for all of them: the model and hardware catalogues, numpy. Such a
package names where each of its exports lives, and :func:`lazy_exports` gives it the
``__getattr__`` and ``__dir__`` that import that submodule when the name is first read (then
keep it, so the second read is an ordinary one). The package states the same imports under
``if TYPE_CHECKING:`` for the type checker and the reader; the tests check that each name in
``__all__`` is the object its submodule defines.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(
    package: str, where: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``, whose export ``name`` is the
    attribute of the same name of the module ``where[name]``."""

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)  # the next read finds it without this
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *where})

    return __getattr__, __dir__
