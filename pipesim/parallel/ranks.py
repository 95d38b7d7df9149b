"""Where each rank of a hybrid-parallel job sits: tensor-parallel ranks innermost (inside a
node), then context-parallel ranks, then pipeline stages, then data-parallel replicas, as
Megatron-LM numbers them (Megatron-Core's ``tp-cp-...`` order keeps CP next to TP).

Rank ``t + T * (c + C * (p + P * d))`` holds tensor rank t of context rank c of pipeline device
p in replica d. So a tensor-parallel group is T consecutive ranks (one node when T divides the
node's size), a context-parallel group takes one rank every T, a pipeline's consecutive devices
are T x C ranks apart, and a data-parallel group takes one rank every T x C x P.

The weights of a dense layer are the same on every context rank and every replica: its
gradients are reduced over the D x C ranks of :meth:`RankLayout.data_group`.

A mixture-of-experts layer has a layout of its own over the same ranks (Megatron-Core's
expert rank generator, "parallel folding", arXiv 2504.14960): the T x C x D ranks of one
pipeline device, taken in the order above (local index ``t + T * (c + C * d)``), are folded
as ETP x EP x EDP with the expert-tensor ranks innermost, then the expert-parallel ranks,
then the expert data ranks (parallel_state's expert order ``tp-ep-dp-pp``: local index
``et + ETP * (ep + EP * edp)``). So an expert-tensor group (:meth:`RankLayout.expert_tensor_group`)
is ETP consecutive local ranks, an expert-parallel group (:meth:`RankLayout.expert_group`)
takes one every ETP, and the EDP ranks holding the same experts
(:meth:`RankLayout.expert_data_group`, what their gradients are reduced over) one every
ETP x EP. At ETP = T (Megatron's default) the expert-tensor group is the tensor group and EP
takes consecutive members of the data group, the context ranks first, as Megatron-Core folds
EP over CP x DP.

Within a pipeline device this is Megatron-Core's placement under its default order
(``tp-cp-ep-dp-pp``, the pipeline outermost, where a device's ranks are consecutive). pipesim
numbers the pipeline inside the replicas (``tp-cp-pp-dp``, Megatron's
``--use-tp-pp-dp-mapping``), under which Megatron-Core asserts in addition that EDP = D when
the pipeline has more than one stage ('When not using pp-last rank ordering, the data parallel
size of the attention and moe layers must be the same'); pipesim folds each device's ranks as
the default order does and does not refuse it.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

from pipesim.common import checks
from pipesim.common.checks import SpecError
from pipesim.common.sized_memo import SizedMemo


@dataclass(frozen=True)
class RankLayout:
    """T x C x P x D ranks in Megatron's order, and each pipeline device's T x C x D ranks
    folded as ETP x EP x EDP for the mixture-of-experts layers (see the module docstring);
    ``expert_tensor`` None: ETP = T."""

    tensor: int
    pipeline: int
    data: int
    context: int = 1
    expert: int = 1
    expert_tensor: int | None = None

    def __post_init__(self) -> None:
        checks.positive_int("tensor-parallel size", self.tensor)
        checks.positive_int("pipeline devices", self.pipeline)
        checks.positive_int("data-parallel size", self.data)
        checks.positive_int("context-parallel size", self.context)
        checks.positive_int("expert-parallel size", self.expert)
        if self.expert_tensor is not None:
            checks.positive_int("expert tensor-parallel size", self.expert_tensor)
        if self.expert_tensor is None or self.expert_tensor == self.tensor:
            if (self.data * self.context) % self.expert:
                raise SpecError(
                    f"expert-parallel size {self.expert} must divide data x context = "
                    f"{self.data * self.context}"
                )
        elif self.stage_ranks % (self.expert * self.expert_tensor):
            raise SpecError(
                f"expert tensor-parallel size {self.expert_tensor} x expert-parallel size "
                f"{self.expert} must divide tensor x context x data = {self.stage_ranks}"
            )

    @property
    def stage_ranks(self) -> int:
        """T x C x D: the ranks of one pipeline device, over which both layouts fold."""
        return self.tensor * self.context * self.data

    @property
    def expert_tensor_size(self) -> int:
        """ETP: T unless given."""
        return self.tensor if self.expert_tensor is None else self.expert_tensor

    @property
    def expert_data(self) -> int:
        """EDP = T x C x D / (ETP x EP): the ranks holding the same experts."""
        return self.stage_ranks // (self.expert_tensor_size * self.expert)

    @property
    def experts_apart(self) -> bool:
        """The experts' groups differ from the dense layers': EP > 1 or ETP != T."""
        return self.expert > 1 or self.expert_tensor_size != self.tensor

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
        # rank(t, p, d, c) = t + T·c + T·C·p + T·C·P·d, in (d, c) order
        first = self.rank(tensor_rank, pipeline_rank)
        across = self.tensor * self.context * self.pipeline
        return [
            first + d * across + c * self.tensor
            for d in range(self.data)
            for c in range(self.context)
        ]

    def stage_rank(self, pipeline_rank: int, local: int) -> int:
        """The global rank of pipeline device ``pipeline_rank``'s ``local``-th rank, counted
        ``t + T * (c + C * d)``."""
        tensor_rank, rest = local % self.tensor, local // self.tensor
        context_rank, data_rank = rest % self.context, rest // self.context
        return self.rank(tensor_rank, pipeline_rank, data_rank, context_rank)

    def _expert_rank(
        self, pipeline_rank: int, expert_tensor_rank: int, expert_rank: int, expert_data_rank: int
    ) -> int:
        """The global rank of (et, ep, edp) of pipeline device ``pipeline_rank``'s experts."""
        local = expert_tensor_rank + self.expert_tensor_size * (
            expert_rank + self.expert * expert_data_rank
        )
        return self.stage_rank(pipeline_rank, local)

    def expert_group(self, pipeline_rank: int, tensor_rank: int = 0, index: int = 0) -> list[int]:
        """The EP ranks that divide a mixture-of-experts layer's experts: expert-tensor rank
        ``tensor_rank`` of the ``index``-th expert data rank; its tokens' all-to-alls run
        over them."""
        return [
            self._expert_rank(pipeline_rank, tensor_rank, ep, index) for ep in range(self.expert)
        ]

    def expert_data_group(
        self, pipeline_rank: int, tensor_rank: int = 0, slot: int = 0
    ) -> list[int]:
        """The EDP ranks holding the same experts (expert-tensor rank ``tensor_rank`` of the
        ``slot``-th of each expert group): what their gradients are reduced over."""
        return [
            self._expert_rank(pipeline_rank, tensor_rank, slot, edp)
            for edp in range(self.expert_data)
        ]

    def expert_tensor_group(
        self, pipeline_rank: int, expert_rank: int = 0, index: int = 0
    ) -> list[int]:
        """The ETP ranks that split the same experts (expert-parallel rank ``expert_rank`` of
        the ``index``-th expert data rank): the dispatched tokens are gathered over them
        before the experts and reduce-scattered after."""
        return [
            self._expert_rank(pipeline_rank, et, expert_rank, index)
            for et in range(self.expert_tensor_size)
        ]


# the ranks the remembered groups may hold together: about 8 MB, whatever the groups' sizes (a
# data group of a 65,536-GPU job has thousands of ranks)
_GROUPS: SizedMemo[tuple[RankLayout, bool, int], tuple[int, ...]] = SizedMemo(1_000_000)


def reduction_group(
    layout: RankLayout, pipeline_rank: int, experts: bool = False
) -> tuple[int, ...]:
    """``layout``'s data group (or, with ``experts``, expert data group) of pipeline device
    ``pipeline_rank`` at tensor rank 0, as a tuple, remembered: a planner costs the gradient
    reduction of every stage of thousands of configurations, most of them over the same
    groups."""
    rank = operator.index(pipeline_rank)  # 1.0 would key 1's group

    def made() -> tuple[int, ...]:
        return tuple(layout.expert_data_group(rank) if experts else layout.data_group(rank))

    return _GROUPS.get((layout, experts, rank), made, len)
