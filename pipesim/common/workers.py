"""Where a sweep's or a planner's evaluations run: this process, a local process pool, or a Dask
cluster (the ``cluster`` extra), behind one ``submit``.

A :class:`Workers` hands out futures with ``result()`` and ``cancel()``; :func:`ordered_map`
keeps a bounded window of them in flight and yields results in the order of the inputs, so
what runs the work never changes the rows, their order or what an interrupted run has saved.

Cluster addresses (``--cluster``):

* ``local``: start a Dask ``LocalCluster`` of ``jobs`` worker processes (two when ``jobs`` is 1)
  for this run, and stop it after;
* ``dask://HOST:PORT`` (or ``tcp://HOST:PORT``): connect to a running Dask scheduler, started
  for example with ``dask scheduler`` and ``dask worker tcp://HOST:8786`` on each machine that
  has pipesim installed.

Dask distributed was chosen over Ray: it is pure Python (dask and distributed are about 2.5 MB
of wheels against Ray's 79 MB), a two-worker local cluster starts in about two seconds on a
2-core machine, and HPC users already run it under their batch systems (dask-jobqueue). A
worker lost mid-run is the scheduler's to handle: it runs the lost worker's tasks again
elsewhere, and the rows already finished were yielded (and saved) before.
"""

from __future__ import annotations

import contextlib
import importlib.util
import itertools
import signal
import warnings
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from typing import Any, Protocol, TypeVar

from pipesim.common.limits import cap_jobs
from pipesim.errors import PipesimError

_In = TypeVar("_In")
_Out = TypeVar("_Out")

CLUSTER_EXTRA = "pip install 'pipesim[cluster]'"
DASK_SCHEMES = ("dask://", "tcp://", "tls://")


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


class ProcessPool:
    """A local process pool (``--jobs N``)."""

    def __init__(self, pool: ProcessPoolExecutor, width: int) -> None:
        self._pool = pool
        self.width = width

    def submit(self, function: Callable[..., Any], *arguments: Any) -> Future:
        """Queue ``function(*arguments)`` on the pool."""
        return self._pool.submit(function, *arguments)

    def share(self, value: Any) -> Any:
        """The value itself (pickled with every call)."""
        return value


class DaskWorkers:
    """A Dask ``distributed`` client: every call a task (``pure=False``: never deduplicated)."""

    def __init__(self, client: Any, width: int) -> None:
        self._client = client
        self.width = width

    def submit(self, function: Callable[..., Any], *arguments: Any) -> Future:
        """Queue ``function(*arguments)`` on the cluster."""
        return self._client.submit(function, *arguments, pure=False)  # type: ignore[no-any-return]

    def share(self, value: Any) -> Any:
        """A future of ``value`` on every worker (a task given it receives the value)."""
        return self._client.scatter(value, broadcast=True, hash=False)


def check_cluster_address(address: str, option: str = "--cluster") -> str:
    """``address`` if it names a cluster this module can reach, else a one-line refusal."""
    if address == "local" or (
        address.startswith(DASK_SCHEMES) and len(address) > len(address.split("://")[0]) + 3
    ):
        return address
    raise PipesimError(
        f"{option} must be 'local' or a Dask scheduler address such as dask://HOST:8786, "
        f"got {address!r}"
    )


def dask_available() -> bool:
    """True when the ``cluster`` extra (dask distributed) is installed."""
    return importlib.util.find_spec("distributed") is not None


@contextlib.contextmanager
def open_workers(
    jobs: int,
    cluster: str | None,
    *,
    initializer: Callable[[], None] | None = None,
    work_items: int | None = None,
) -> Iterator[Workers]:
    """The workers for ``jobs`` and ``cluster`` (None: this machine), closed on exit.

    Without a cluster: this process for one job, else a process pool of ``jobs`` (capped at
    the CPUs and ``work_items``). ``initializer`` runs in each local pool worker.
    """
    if cluster is None:
        width = cap_jobs(jobs, work_items if work_items is not None else jobs)
        if width == 1:
            yield InProcess()
            return
        pool = ProcessPoolExecutor(max_workers=width, initializer=initializer)
        try:
            yield ProcessPool(pool, width)
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
        return
    address = check_cluster_address(cluster)
    if not dask_available():
        raise PipesimError(
            f"--cluster {address} needs dask distributed, which is not installed: {CLUSTER_EXTRA}"
        )
    with _dask_client(address, max(2, jobs)) as (client, width):
        yield DaskWorkers(client, width)


@contextlib.contextmanager
def _dask_client(address: str, local_workers: int) -> Iterator[tuple[Any, int]]:
    """A connected client and the cluster's worker count (a local cluster: started here)."""
    import logging

    from distributed import Client, LocalCluster

    # its start-up chatter, and a stopping worker's complaints that the scheduler left first
    logging.getLogger("distributed").setLevel(logging.CRITICAL)
    if address == "local":
        # Started with SIGINT ignored, its processes keep ignoring it: Ctrl-C (which a terminal
        # sends to the whole process group) is the parent's to handle, as for a pool's workers.
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            # its HTTP server moves off a busy port with a warning: nothing the user asked for
            warnings.filterwarnings("ignore", message="Port .* is already in use")
            cluster = LocalCluster(  # type: ignore[no-untyped-call]
                n_workers=local_workers,
                threads_per_worker=1,
                processes=True,
                dashboard_address=None,
                silence_logs=logging.CRITICAL,
            )
        finally:
            signal.signal(signal.SIGINT, previous)
        try:
            with Client(cluster) as client:  # type: ignore[no-untyped-call]
                yield client, local_workers
        finally:
            cluster.close()
        return
    target = (
        "tcp://" + address.removeprefix("dask://") if address.startswith("dask://") else address
    )
    try:
        client = Client(target, timeout="10s")  # type: ignore[no-untyped-call]
    except (OSError, TimeoutError) as error:
        raise PipesimError(f"--cluster {address}: no Dask scheduler answered ({error})") from None
    try:
        width = max(1, len(client.scheduler_info().get("workers", {})))
        yield client, width
    finally:
        client.close()  # type: ignore[no-untyped-call]


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
    queue = _chunks(iter(items), max(1, chunk))
    pending: deque[Future] = deque()
    try:
        for part in itertools.islice(queue, window):
            pending.append(workers.submit(_run_chunk, function, part, *arguments))
        while pending:
            results = pending.popleft().result()
            for part in itertools.islice(queue, 1):
                pending.append(workers.submit(_run_chunk, function, part, *arguments))
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


def _run_chunk(function: Callable[..., _Out], part: list[_In], *arguments: Any) -> list[_Out]:
    """A worker's task: ``function`` on each item of ``part``, in order."""
    return [function(item, *arguments) for item in part]
