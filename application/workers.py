"""Worker pools for a sweep's or a planner's evaluations: this process, a local process pool, or a
Dask cluster (the ``cluster`` extra), behind the library's one ``submit``
(:class:`pipesim.common.workers.Workers`).

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
import signal
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from pipesim.common.limits import cap_jobs
from pipesim.common.workers import Future, InProcess, Workers
from pipesim.errors import PipesimError

CLUSTER_EXTRA = "pip install 'pipesim[cluster]'"
DASK_SCHEMES = ("dask://", "tcp://", "tls://")


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
