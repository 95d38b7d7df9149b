"""Rank groups: where a parallel dimension's collectives run on the job's network."""

from __future__ import annotations

from dataclasses import dataclass

from pipesim.hardware.network import Network
from pipesim.parallel.ranks import RankLayout


@dataclass(frozen=True)
class TensorGroup:
    """Where a layer's collectives run: the tensor-parallel group's ranks of the job's network
    (and, with context or expert parallelism, the first context group's and expert group's;
    with experts split over ranks of their own, ETP != T, the first expert-tensor group's);
    and whether the software overlaps the tensor-parallel collectives with the matrix
    multiplies beside them (Transformer Engine's userbuffers: a recipe's
    ``tp_comm_overlap``)."""

    network: Network
    ranks: tuple[int, ...]
    overlap_collectives: bool = False
    context_ranks: tuple[int, ...] = ()
    expert_ranks: tuple[int, ...] = ()
    expert_tensor_ranks: tuple[int, ...] = ()

    @classmethod
    def first(
        cls, network: Network, tensor: int, overlap_collectives: bool = False
    ) -> TensorGroup | None:
        """The job's first T ranks (every group is alike: T consecutive ranks in a node), or
        None without tensor parallelism."""
        if tensor == 1:
            return None
        return cls(network, tuple(range(tensor)), overlap_collectives)

    @classmethod
    def of(
        cls, network: Network, layout: RankLayout, overlap_collectives: bool = False
    ) -> TensorGroup | None:
        """Pipeline device 0's groups in ``layout`` (every device's are alike), or None when
        there is no tensor, context or expert parallelism. The expert-tensor ranks are given
        only where they differ from the tensor group (ETP != T): at ETP = T the experts'
        tensor-parallel collectives are the block's, on the tensor group."""
        folded = layout.expert_tensor_size != layout.tensor
        split = folded and layout.expert_tensor_size > 1  # an expert-tensor group of its own
        if layout.tensor == layout.context == layout.expert == 1 and not split:
            return None
        return cls(
            network,
            tuple(layout.tensor_group(0)),
            overlap_collectives,
            tuple(layout.context_group(0)) if layout.context > 1 else (),
            tuple(layout.expert_group(0)) if layout.expert > 1 else (),
            tuple(layout.expert_tensor_group(0)) if split else (),
        )
