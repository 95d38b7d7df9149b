"""A memo bounded by the total size of what it holds, the oldest entries forgotten first.

A planner asks for the same rank groups' figures many times, and a group of a 65,536-GPU job
holds thousands of ranks: bounding such a memo by its entries' count would bound nothing, so
each entry is counted by its size (its ranks) and the whole by their sum.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

_K = TypeVar("_K", bound=Hashable)
_V = TypeVar("_V")


class SizedMemo(Generic[_K, _V]):
    """Values by key, made on first use; once their sizes add up to more than ``most``, the
    oldest are forgotten (never the newest, however large)."""

    def __init__(self, most: int) -> None:
        self.most = most
        self.held = 0  # the sizes of the entries held, summed
        self._entries: dict[_K, tuple[_V, int]] = {}

    def get(self, key: _K, make: Callable[[], _V], size: Callable[[_V], int]) -> _V:
        """``key``'s value: remembered, or ``make()`` remembered with ``size`` of it."""
        found = self._entries.get(key)
        if found is not None:
            return found[0]
        value = make()
        counted = size(value)
        self._entries[key] = (value, counted)
        self.held += counted
        while self.held > self.most and len(self._entries) > 1:
            oldest = next(iter(self._entries))
            self.held -= self._entries.pop(oldest)[1]
        return value

    def __len__(self) -> int:
        return len(self._entries)

    def oldest_first(self) -> list[_K]:
        """The keys held, oldest first."""
        return list(self._entries)
