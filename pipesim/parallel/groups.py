"""Rank groups: where a parallel dimension's collectives run on the job's network."""

from __future__ import annotations

from dataclasses import dataclass

from pipesim.hardware.network import Network


@dataclass(frozen=True)
class TensorGroup:
    """Where a layer's tensor-parallel collectives run: ranks of the job's network; and
    whether the software overlaps them with the matrix multiplies beside them (Transformer
    Engine's userbuffers: a recipe's ``tp_comm_overlap``)."""

    network: Network
    ranks: tuple[int, ...]
    overlap_collectives: bool = False

    @classmethod
    def first(
        cls, network: Network, tensor: int, overlap_collectives: bool = False
    ) -> TensorGroup | None:
        """The job's first T ranks (every group is alike: T consecutive ranks in a node), or
        None without tensor parallelism."""
        if tensor == 1:
            return None
        return cls(network, tuple(range(tensor)), overlap_collectives)
