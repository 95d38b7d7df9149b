"""Where each rank of a hybrid-parallel job sits: tensor-parallel ranks innermost (inside a
node), then context-parallel ranks, then pipeline stages, then data-parallel replicas, as
Megatron-LM numbers them (Megatron-Core's ``tp-cp-...`` order keeps CP next to TP).

Rank ``t + T * (c + C * (p + P * d))`` holds tensor rank t of context rank c of pipeline device
p in replica d. So a tensor-parallel group is T consecutive ranks (one node when T divides the
node's size), a context-parallel group takes one rank every T, a pipeline's consecutive devices
are T x C ranks apart, and a data-parallel group takes one rank every T x C x P.

The weights of a dense layer are the same on every context rank and every replica: its
gradients are reduced over the D x C ranks of :meth:`RankLayout.data_group`. A mixture-of-
experts layer divides its experts over E of those ranks (:meth:`RankLayout.expert_group`, E
consecutive members of the data group: the context ranks first, as Megatron-Core folds EP
over CP x DP); the D x C / E ranks holding the same experts reduce their gradients
(:meth:`RankLayout.expert_data_group`).
"""

from __future__ import annotations

from dataclasses import dataclass

from pipesim.common import checks
from pipesim.common.checks import SpecError


@dataclass(frozen=True)
class RankLayout:
    """T x C x P x D ranks in Megatron's order (see the module docstring)."""

    tensor: int
    pipeline: int
    data: int
    context: int = 1
    expert: int = 1

    def __post_init__(self) -> None:
        checks.positive_int("tensor-parallel size", self.tensor)
        checks.positive_int("pipeline devices", self.pipeline)
        checks.positive_int("data-parallel size", self.data)
        checks.positive_int("context-parallel size", self.context)
        checks.positive_int("expert-parallel size", self.expert)
        if (self.data * self.context) % self.expert:
            raise SpecError(
                f"expert-parallel size {self.expert} must divide data x context = "
                f"{self.data * self.context}"
            )

    @property
    def devices(self) -> int:
        """T x C x P x D, every rank of the job."""
        return self.tensor * self.context * self.pipeline * self.data

    def rank(
        self, tensor_rank: int, pipeline_rank: int, data_rank: int = 0, context_rank: int = 0
    ) -> int:
        """The global rank of (t, c, p, d)."""
        return tensor_rank + self.tensor * (
            context_rank + self.context * (pipeline_rank + self.pipeline * data_rank)
        )

    def tensor_group(
        self, pipeline_rank: int, data_rank: int = 0, context_rank: int = 0
    ) -> list[int]:
        """The ranks that split pipeline device ``pipeline_rank``'s layers T ways."""
        return [self.rank(t, pipeline_rank, data_rank, context_rank) for t in range(self.tensor)]

    def context_group(
        self, pipeline_rank: int, data_rank: int = 0, tensor_rank: int = 0
    ) -> list[int]:
        """The ranks that split each sample's sequence C ways."""
        return [self.rank(tensor_rank, pipeline_rank, data_rank, c) for c in range(self.context)]

    def data_group(self, pipeline_rank: int, tensor_rank: int = 0) -> list[int]:
        """The ranks that hold the same dense weights of pipeline device ``pipeline_rank``:
        every context rank of every replica, the group a gradient reduction runs over."""
        return [
            self.rank(tensor_rank, pipeline_rank, d, c)
            for d in range(self.data)
            for c in range(self.context)
        ]

    def expert_group(self, pipeline_rank: int, tensor_rank: int = 0, index: int = 0) -> list[int]:
        """The E ranks that divide a mixture-of-experts layer's experts (the ``index``-th
        such group of the data group): its tokens' all-to-alls run over them."""
        group = self.data_group(pipeline_rank, tensor_rank)
        return group[index * self.expert : (index + 1) * self.expert]

    def expert_data_group(
        self, pipeline_rank: int, tensor_rank: int = 0, slot: int = 0
    ) -> list[int]:
        """The D x C / E ranks holding the same experts (the ``slot``-th of each expert
        group): what their gradients are reduced over."""
        group = self.data_group(pipeline_rank, tensor_rank)
        return group[slot :: self.expert]
