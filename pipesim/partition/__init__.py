"""Partitioning a layer sequence into contiguous pipeline stages, exactly.

* :func:`balanced`: the least slowest-stage time, boundary transfers and per-device speeds
  counted (dynamic programming).
* :func:`memory_aware`: the fastest partition whose every device fits its memory under a
  schedule's peak (the simulator's memory model in closed form, :mod:`.memory`).
* :mod:`.model`: problems built from a model on a hardware spec, and ``--partition`` objectives.
"""

from pipesim.costs.pipeline_costs import merge_layers
from pipesim.memory.forms import MemoryForm, memory_forms
from pipesim.partition.problem import PartitionProblem, RecomputeFirst
from pipesim.partition.solver import (
    BeyondComputeLimit,
    NoPartitionFits,
    Partition,
    balanced,
    device_peaks,
    memory_aware,
    partition_stage_costs,
    stage_times,
)

__all__ = [
    "BeyondComputeLimit",
    "MemoryForm",
    "NoPartitionFits",
    "Partition",
    "PartitionProblem",
    "RecomputeFirst",
    "balanced",
    "device_peaks",
    "memory_aware",
    "memory_forms",
    "merge_layers",
    "partition_stage_costs",
    "stage_times",
]
