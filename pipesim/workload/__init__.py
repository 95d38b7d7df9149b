"""Workloads: models as sequences of layers, the papers' builders, partitions into stages.

Each name below loads its module on first use (:mod:`pipesim.common.lazy`): importing one
module of this package (a recipe's :class:`~pipesim.workload.architecture.Attention`) does not
build the catalogue's models.

``model`` is the catalogue's function, also once the submodule :mod:`pipesim.workload.model`
is loaded (which would otherwise take the package's attribute of that name for itself, as the
import system does for every submodule).
"""

import sys
from types import ModuleType
from typing import TYPE_CHECKING, Any

from pipesim.common.lazy import lazy_exports

if TYPE_CHECKING:
    from pipesim.workload.catalogue import FAMILIES, model, resolve_model
    from pipesim.workload.model import Layer, Model
    from pipesim.workload.stage_layers import check_partition, even_partition
    from pipesim.workload.toml_spec import load_model

__all__ = [
    "FAMILIES",
    "Layer",
    "Model",
    "check_partition",
    "even_partition",
    "load_model",
    "model",
    "resolve_model",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "FAMILIES": "pipesim.workload.catalogue",
        "model": "pipesim.workload.catalogue",
        "resolve_model": "pipesim.workload.catalogue",
        "Layer": "pipesim.workload.model",
        "Model": "pipesim.workload.model",
        "check_partition": "pipesim.workload.stage_layers",
        "even_partition": "pipesim.workload.stage_layers",
        "load_model": "pipesim.workload.toml_spec",
    },
)


class _Workload(ModuleType):
    """This package: its attribute ``model`` is never the submodule of that name."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "model" and isinstance(value, ModuleType):
            return  # the import system binding the submodule (it stays in sys.modules)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Workload
