"""Where a sweep's or a planner's evaluations run, as the library sees it: anything with one
``submit`` that hands out futures (``result()``, ``cancel()``), and :func:`ordered_map`, which
keeps a bounded window of them in flight and yields results in the order of the inputs, so what
runs the work never changes the rows, their order or what an interrupted run has saved.

The library runs everything in this process (:class:`InProcess`) unless its caller hands it
workers; process pools and Dask clusters are the application's (:mod:`application.workers`).
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol, TypeVar

from pipesim.errors import spell_fields, spelling

_In = TypeVar("_In")
_Out = TypeVar("_Out")


class Future(Protocol):
    """What :meth:`Workers.submit` returns (a concurrent.futures or a Dask future)."""

    def result(self) -> Any: ...

    def cancel(self) -> Any: ...


class Workers(Protocol):
    """Somewhere to run calls: ``submit(function, *arguments)`` returns a :class:`Future`."""

    width: int

    def submit(self, function: Callable[..., Any], *arguments: Any) -> Future: ...

    def share(self, value: Any) -> Any:
        """``value`` as an argument to pass to :meth:`submit` many times: sent to the workers
        once where they can keep it (a Dask cluster), the value itself elsewhere."""


class _Done:
    """A future already resolved (this process's own work)."""

    def __init__(self, value: Any) -> None:
        self._value = value

    def result(self) -> Any:
        return self._value

    def cancel(self) -> bool:
        return False


class InProcess:
    """Run each call at once, here (one job: nothing to start)."""

    width = 1

    def submit(self, function: Callable[..., Any], *arguments: Any) -> Future:
        """Call ``function(*arguments)`` now."""
        return _Done(function(*arguments))

    def share(self, value: Any) -> Any:
        """The value itself."""
        return value


def ordered_map(
    workers: Workers,
    function: Callable[..., _Out],
    items: Iterable[_In],
    *arguments: Any,
    chunk: int = 1,
) -> Iterator[_Out]:
    """``function(item, *arguments)`` for each item, in the items' order, each yielded as soon
    as it and those before it are done. Elsewhere than in this process, items go out ``chunk``
    at a time (one task per chunk: a Dask task costs about a millisecond of scheduling, a
    small sweep point less), at most four chunks per worker in flight. Closing the iterator
    early (Ctrl-C in the caller) cancels what has not started."""
    if isinstance(workers, InProcess):  # nothing runs ahead: an interrupt loses no result
        for item in items:
            yield function(item, *arguments)
        return
    window = 4 * workers.width
    spelled = spelling()  # a worker of another process names fields as this one does
    queue = _chunks(iter(items), max(1, chunk))
    pending: deque[Future] = deque()
    try:
        for part in itertools.islice(queue, window):
            pending.append(workers.submit(_run_chunk, spelled, function, part, *arguments))
        while pending:
            results = pending.popleft().result()
            for part in itertools.islice(queue, 1):
                pending.append(workers.submit(_run_chunk, spelled, function, part, *arguments))
            yield from results
    finally:
        for future in pending:
            future.cancel()


def chunk_size(items: int, width: int) -> int:
    """Items per task for ``items`` spread over ``width`` workers: about eight tasks per
    worker, at most 16 items each (a lost worker re-runs little)."""
    return max(1, min(16, items // (8 * max(1, width))))


def _chunks(items: Iterator[_In], size: int) -> Iterator[list[_In]]:
    while part := list(itertools.islice(items, size)):
        yield part


def _run_chunk(
    spelled: dict[str, str], function: Callable[..., _Out], part: list[_In], *arguments: Any
) -> list[_Out]:
    """A worker's task: ``function`` on each item of ``part``, in order, its messages naming
    fields as the caller's do (``spelled``: a Dask worker's process starts with its own)."""
    if spelling() != spelled:
        spell_fields(spelled)
    return [function(item, *arguments) for item in part]
