"""Hybrid parallelism besides the pipeline: the configuration (tensor, sequence, recompute,
optimizer sharding, data) and where each rank sits."""

from pipesim.parallel.config import (
    IDENTITY,
    NO_RECOMPUTE,
    Parallelism,
    Recompute,
    RecomputeMode,
)
from pipesim.parallel.ranks import RankLayout
from pipesim.parallel.sharding import ReshardPolicy, Sharding

__all__ = [
    "IDENTITY",
    "NO_RECOMPUTE",
    "Parallelism",
    "RankLayout",
    "Recompute",
    "RecomputeMode",
    "ReshardPolicy",
    "Sharding",
]
