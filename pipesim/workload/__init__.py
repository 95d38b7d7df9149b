"""Workloads: models as sequences of layers, the papers' builders, partitions into stages."""

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
