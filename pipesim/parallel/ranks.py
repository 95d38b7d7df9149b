"""Where each rank of a hybrid-parallel job sits: tensor-parallel ranks innermost (inside a
node), then pipeline stages, then data-parallel replicas, as Megatron-LM numbers them.

Rank ``t + T * (p + P * d)`` holds tensor rank t of pipeline device p in replica d. So a
tensor-parallel group is T consecutive ranks (one node when T divides the node's size), a
pipeline's consecutive devices are T ranks apart (across nodes when T fills a node), and a
data-parallel group takes one rank every T * P.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipesim.common import checks


@dataclass(frozen=True)
class RankLayout:
    """T x P x D ranks in Megatron's order (see the module docstring)."""

    tensor: int
    pipeline: int
    data: int

    def __post_init__(self) -> None:
        checks.positive_int("tensor-parallel size", self.tensor)
        checks.positive_int("pipeline devices", self.pipeline)
        checks.positive_int("data-parallel size", self.data)

    @property
    def devices(self) -> int:
        """T x P x D, every rank of the job."""
        return self.tensor * self.pipeline * self.data

    def rank(self, tensor_rank: int, pipeline_rank: int, data_rank: int = 0) -> int:
        """The global rank of (t, p, d)."""
        return tensor_rank + self.tensor * (pipeline_rank + self.pipeline * data_rank)

    def tensor_group(self, pipeline_rank: int, data_rank: int = 0) -> list[int]:
        """The ranks that split pipeline device ``pipeline_rank``'s layers T ways."""
        return [self.rank(t, pipeline_rank, data_rank) for t in range(self.tensor)]

    def data_group(self, pipeline_rank: int, tensor_rank: int = 0) -> list[int]:
        """The ranks that hold the same shard of pipeline device ``pipeline_rank`` in each
        replica: the group a gradient reduction runs over."""
        return [self.rank(tensor_rank, pipeline_rank, d) for d in range(self.data)]
