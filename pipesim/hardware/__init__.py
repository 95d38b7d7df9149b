"""Hardware specs: accelerators, links, topologies, the catalogue and user TOML files.

Each name below loads its module on first use (:mod:`pipesim.common.lazy`), so importing one
module of this package (an accelerator's spec) does not load the catalogue and numpy.
"""

from typing import TYPE_CHECKING

from pipesim.common.lazy import lazy_exports

if TYPE_CHECKING:
    from pipesim.hardware.accelerator import Accelerator
    from pipesim.hardware.catalogue import CATALOGUE, HardwareSpec, hardware, hardware_names
    from pipesim.hardware.network import Cluster, Link, Network, Route, Topology
    from pipesim.hardware.toml_spec import load_hardware, resolve_hardware

__all__ = [
    "CATALOGUE",
    "Accelerator",
    "Cluster",
    "HardwareSpec",
    "Link",
    "Network",
    "Route",
    "Topology",
    "hardware",
    "hardware_names",
    "load_hardware",
    "resolve_hardware",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "Accelerator": "pipesim.hardware.accelerator",
        "CATALOGUE": "pipesim.hardware.catalogue",
        "HardwareSpec": "pipesim.hardware.catalogue",
        "hardware": "pipesim.hardware.catalogue",
        "hardware_names": "pipesim.hardware.catalogue",
        "Cluster": "pipesim.hardware.network",
        "Link": "pipesim.hardware.network",
        "Network": "pipesim.hardware.network",
        "Route": "pipesim.hardware.network",
        "Topology": "pipesim.hardware.network",
        "load_hardware": "pipesim.hardware.toml_spec",
        "resolve_hardware": "pipesim.hardware.toml_spec",
    },
)
