"""Worker pools for a sweep's or a planner's evaluations: this process, a local process pool, or a
Dask cluster (the ``cluster`` extra), behind the library's one ``submit``
(:class:`pipesim.common.workers.Workers`).

A :class:`Workers` hands out futures with ``result()`` and ``cancel()``; :func:`ordered_map`
keeps a bounded window of them in flight and yields results in the order of the inputs, so
what runs the work never changes the rows, their order or what an interrupted run has saved.

Cluster addresses (``--cluster``):

* ``local``: start a Dask ``LocalCluster`` of ``jobs`` worker processes (capped at the CPUs
  and the work, as a pool is; at least two) for this run, its scratch files in a temporary
  folder of its own, and stop it after (Ctrl-C or a stop signal during its start-up stops it
  once started, exit 130);
* ``dask://HOST:PORT`` (or ``tcp://HOST:PORT``): connect to a running Dask scheduler, started
  for example with ``dask scheduler`` and ``dask worker tcp://HOST:8786`` on each machine that
  has pipesim installed. Whatever answers there has :data:`HANDSHAKE_S` seconds to show it is
  a Dask scheduler.

Dask distributed was chosen over Ray: it is pure Python (dask and distributed are about 2.5 MB
of wheels against Ray's 79 MB), a two-worker local cluster starts in about two seconds on a
2-core machine, and HPC users already run it under their batch systems (dask-jobqueue). A
worker lost mid-run is the scheduler's to handle: it runs the lost worker's tasks again
elsewhere, and the rows already finished were yielded (and saved) before. A scheduler that
goes away, or a cluster left without a worker for :data:`NO_WORKERS_S` seconds while a result is
awaited, fails the run (:class:`~pipesim.errors.RunFailed`) instead of waiting for ever.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import re
import shutil
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import resource_tracker
from typing import Any

from application.lifetime import stop_signals_deferred
from pipesim.common.limits import cap_jobs
from pipesim.common.workers import Future, InProcess, Workers
from pipesim.errors import PipesimError, RunFailed

CLUSTER_EXTRA = "pip install 'pipesim[cluster]'"
DASK_SCHEMES = ("dask://", "tcp://", "tls://")
# HOST:PORT after the scheme: a name or an IPv4 address, or an IPv6 address in brackets.
_HOST_PORT = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[^\s:/\[\]@?#]+):([0-9]{1,5})")
# Seconds a scheduler's address has to answer as a Dask scheduler (connection and handshake).
HANDSHAKE_S = 10.0
# Seconds a cluster may have no worker while a result is awaited before the run fails.
NO_WORKERS_S = 30.0
# Seconds between looks at the cluster while a result is awaited.
POLL_S = 1.0
# Seconds a local pool's running calls get to end after an interrupt before they are killed.
POOL_STOP_S = 1.0


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


def _stop_pool(pool: ProcessPoolExecutor) -> None:
    """Stop ``pool`` at once: calls not started are cancelled, and its processes still running
    after :data:`POOL_STOP_S` seconds are killed (an interrupted run keeps only the results it
    received; a batch system gives about 30 seconds between SIGTERM and SIGKILL)."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    deadline = time.monotonic() + POOL_STOP_S
    for process in processes:
        process.join(max(0.0, deadline - time.monotonic()))
    for process in processes:
        if process.is_alive():
            with contextlib.suppress(OSError, ValueError):
                process.kill()
    for process in processes:
        process.join(1.0)


class DaskWorkers:
    """A Dask ``distributed`` client: every call a task (``pure=False``: never deduplicated).

    Its futures' ``result()`` fails with :class:`RunFailed` naming ``address`` when the
    scheduler goes away, or when the cluster has had no worker for :data:`NO_WORKERS_S`
    seconds while it waits."""

    def __init__(self, client: Any, width: int, address: str = "local") -> None:
        self._client = client
        self.width = width
        self.address = address

    def submit(self, function: Callable[..., Any], *arguments: Any) -> Future:
        """Queue ``function(*arguments)`` on the cluster."""
        try:
            future = self._client.submit(function, *arguments, pure=False)
        except Exception as error:
            raise self._gone(_reason(error)) from None
        return _DaskFuture(self, future)

    def share(self, value: Any) -> Any:
        """A future of ``value`` on every worker (a task given it receives the value)."""
        try:
            return self._client.scatter(value, broadcast=True, hash=False)
        except Exception as error:
            raise self._gone(_reason(error)) from None

    def result(self, future: Any) -> Any:
        """``future``'s result: the task's own error raised as it is, the cluster's failures
        as :class:`RunFailed`."""
        without_workers: float | None = None  # since when the cluster has had no worker
        while True:
            try:
                return future.result(timeout=POLL_S)
            except Exception as error:
                if future.status == "error":  # the task's own error
                    raise
                if not isinstance(error, TimeoutError):
                    raise self._gone(_reason(error)) from None
                if future.status != "pending":  # lost, cancelled: its connection went first
                    raise self._gone(f"the task is {future.status}") from None
            workers = self._workers_now()
            if workers:
                without_workers = None
                continue
            now = time.monotonic()
            without_workers = now if without_workers is None else without_workers
            if now - without_workers >= NO_WORKERS_S:
                if workers is None:
                    raise RunFailed(
                        f"--cluster {self.address}: the scheduler went away (no answer for "
                        f"{NO_WORKERS_S:g} s)"
                    )
                raise RunFailed(
                    f"--cluster {self.address}: the cluster has had no worker for "
                    f"{NO_WORKERS_S:g} s (every worker stopped?), and the run cannot go on"
                )

    def _workers_now(self) -> int | None:
        """How many workers the scheduler has now; None when it does not answer in time."""
        try:
            info = self._client.sync(
                self._client.scheduler.identity, n_workers=-1, callback_timeout=POLL_S
            )
        except Exception:
            return None
        return len(info.get("workers", {})) if isinstance(info, dict) else None

    def _gone(self, reason: str) -> RunFailed:
        return RunFailed(f"--cluster {self.address}: the scheduler went away ({reason})")


class _DaskFuture:
    """A Dask future whose ``result()`` turns the cluster's failures into :class:`RunFailed`."""

    def __init__(self, workers: DaskWorkers, future: Any) -> None:
        self._workers = workers
        self._future = future

    def result(self) -> Any:
        return self._workers.result(self._future)

    def cancel(self) -> Any:
        with contextlib.suppress(Exception):
            return self._future.cancel()
        return False


def _reason(error: BaseException) -> str:
    """``error`` in a few words, on one line."""
    cancelled = getattr(error, "reason", None)  # a Dask future's cancellation says why
    if isinstance(cancelled, str) and cancelled:
        return f"its tasks were cancelled: {cancelled}"
    lines = str(error).strip().splitlines()
    text = lines[0] if lines else ""
    name = type(error).__name__
    return f"{name}: {text}" if text else name


def check_cluster_address(address: str, option: str = "--cluster") -> str:
    """``address`` if it names a cluster this module can reach (``local``, or a scheme of
    :data:`DASK_SCHEMES` and HOST:PORT, PORT 1 to 65535), else a one-line refusal."""
    if address == "local":
        return address
    if address.startswith(DASK_SCHEMES) and address.isprintable():
        match = _HOST_PORT.fullmatch(address.split("://", 1)[1])
        if match is not None and 1 <= int(match[2]) <= 65535:
            return address
    raise PipesimError(
        f"{option} must be 'local' or a Dask scheduler address such as dask://HOST:8786 "
        f"(HOST:PORT, PORT 1 to 65535), got {address!r}"
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
        except BaseException:  # an interrupt, or the caller done early: no waiting for calls
            _stop_pool(pool)
            raise
        pool.shutdown(wait=True, cancel_futures=True)
        return
    address = check_cluster_address(cluster)
    if not dask_available():
        raise PipesimError(
            f"--cluster {address} needs dask distributed, which is not installed: {CLUSTER_EXTRA}"
        )
    # a local cluster's workers: as many as a local pool's processes (at least two)
    local_workers = max(2, cap_jobs(jobs, work_items if work_items is not None else jobs))
    with _dask_client(address, local_workers) as (client, width):
        yield DaskWorkers(client, width, address)


@contextlib.contextmanager
def _dask_client(address: str, local_workers: int) -> Iterator[tuple[Any, int]]:
    """A connected client and the cluster's worker count (a local cluster: started here)."""
    import logging

    from distributed import Client

    # its start-up chatter, a stopping worker's complaints that the scheduler left first, and
    # the client's own words when it did (its loggers set apart by dask's configuration too)
    for name in [*logging.root.manager.loggerDict, "distributed", "tornado", "asyncio"]:
        if name.split(".")[0] in ("distributed", "tornado", "asyncio"):
            logging.getLogger(name).setLevel(logging.CRITICAL)
    if address == "local":
        import dask

        # its scratch files (the scheduler's and the workers'): here, not in the shared
        # dask-scratch-space of the system's temporary folder
        scratch = tempfile.mkdtemp(prefix="pipesim-dask-")
        try:
            with (
                dask.config.set({"temporary-directory": scratch}),
                _local_cluster(local_workers, scratch) as local_client,
            ):
                yield local_client, local_workers
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        return
    target = (
        "tcp://" + address.removeprefix("dask://") if address.startswith("dask://") else address
    )
    workers = _handshake(address, target)
    client: Any = None
    failure: RunFailed | None = None
    with stop_signals_deferred() as stops:  # cut half-way, Dask's client prints tracebacks
        try:
            client = Client(target, timeout=f"{HANDSHAKE_S}s")  # type: ignore[no-untyped-call]
        except Exception as error:
            failure = RunFailed(
                f"--cluster {address}: no Dask scheduler answered ({_reason(error)})"
            )
    if stops:
        with stop_signals_deferred():
            _close_quietly(client)
        raise stops.interrupt() from None
    if failure is not None:
        raise failure
    try:
        yield client, max(1, workers)
    finally:
        _close_then_stop(client)


@contextlib.contextmanager
def _local_cluster(workers: int, scratch: str) -> Iterator[Any]:
    """A client of a ``LocalCluster`` of ``workers`` processes started here, its files in
    ``scratch``; stopped on leaving. Ctrl-C and the stop signals are held back while it starts
    (cut half-way, Dask prints pages of tracebacks): the cluster's processes start with Ctrl-C
    blocked (a terminal's Ctrl-C, sent to the whole process group, is the parent's to handle, as
    for a pool's workers), and a signal that came meanwhile stops the cluster once started and
    is raised then (exit 130)."""
    import logging

    from distributed import Client, LocalCluster

    # multiprocessing's resource tracker unblocks Ctrl-C in the thread that first starts a
    # process: started now, it leaves the block below alone
    resource_tracker.ensure_running()
    cluster = client = None
    failure: BaseException | None = None
    with stop_signals_deferred() as stops:
        try:
            # its HTTP server moves off a busy port with a warning: nothing the user asked for
            warnings.filterwarnings("ignore", message="Port .* is already in use")
            # a SIGHUP to every process ends multiprocessing's helper, which comes back
            warnings.filterwarnings("ignore", message="resource_tracker: process died")
            cluster = LocalCluster(  # type: ignore[no-untyped-call]
                n_workers=workers,
                threads_per_worker=1,
                processes=True,
                dashboard_address=None,
                silence_logs=logging.CRITICAL,
                local_directory=scratch,
            )
            client = Client(cluster)  # type: ignore[no-untyped-call]
        except BaseException as error:  # a stop signal to every process may fail the start
            _close_quietly(client, cluster)
            failure = error
    if stops:
        with stop_signals_deferred():
            _close_quietly(client, cluster)
        raise stops.interrupt() from None
    if failure is not None:
        raise failure
    try:
        yield client
    finally:
        _close_then_stop(client, cluster)


def _close_then_stop(*things: Any) -> None:
    """Close ``things`` with the stop signals held back (a Ctrl-C does not cut the goodbye
    short), then act on one that came meanwhile: raised as the interrupt it was, unless one
    is already on its way out (a second Ctrl-C during the stop of an interrupted run)."""
    with stop_signals_deferred() as stops:
        _close_quietly(*things)
    if stops and sys.exc_info()[0] is None:
        raise stops.interrupt() from None


def _close_quietly(*things: Any) -> None:
    """Close each of ``things`` (None: nothing), whatever they raise."""
    for thing in things:
        if thing is not None:
            with contextlib.suppress(Exception):
                thing.close()


def _handshake(address: str, target: str) -> int:
    """The number of workers of the Dask scheduler at ``target``, which must answer within
    :data:`HANDSHAKE_S` seconds, connection and handshake included; else :class:`RunFailed`
    (a refused connection, a listener that is not a Dask scheduler, one that never answers)."""
    from distributed.comm.core import connect
    from distributed.security import Security

    # TLS settings from dask's configuration, as the client takes them
    options = Security().get_connection_args("client")  # type: ignore[no-untyped-call]

    async def identity() -> Any:
        comm = await connect(  # type: ignore[no-untyped-call]
            target, timeout=HANDSHAKE_S, **options
        )
        try:
            await comm.write({"op": "identity", "n_workers": -1, "reply": True})
            return await comm.read()
        finally:
            comm.abort()

    try:
        info = asyncio.run(asyncio.wait_for(identity(), HANDSHAKE_S))
    except Exception as error:
        reason = "" if isinstance(error, TimeoutError) else f" ({_reason(error)})"
        raise RunFailed(
            f"--cluster {address}: no Dask scheduler answered within {HANDSHAKE_S:g} s{reason}"
        ) from None
    if not (isinstance(info, dict) and info.get("type") == "Scheduler"):
        raise RunFailed(
            f"--cluster {address}: what answered is not a Dask scheduler (it said "
            f"{str(info)[:60]!r})"
        )
    workers = info.get("workers", {})
    return len(workers) if isinstance(workers, dict) else 0
