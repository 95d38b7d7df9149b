"""Rank groups: where a parallel dimension's collectives run on the job's network."""

from __future__ import annotations

from dataclasses import dataclass

from pipesim.hardware.network import Network


@dataclass(frozen=True)
class TensorGroup:
    """Where a layer's tensor-parallel collectives run: ranks of the job's network."""

    network: Network
    ranks: tuple[int, ...]

    @classmethod
    def first(cls, network: Network, tensor: int) -> TensorGroup | None:
        """The job's first T ranks (every group is alike: T consecutive ranks in a node), or
        None without tensor parallelism."""
        return None if tensor == 1 else cls(network, tuple(range(tensor)))
