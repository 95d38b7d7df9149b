"""Reading a user's input file (a TOML spec, a schedule CSV): its bytes, size-limited, with
one-line errors naming the file."""

from __future__ import annotations

import errno
import os
import select
import stat
import time
from pathlib import Path

from pipesim.common.limits import Limit, check, limit
from pipesim.errors import PipesimError

# How long a pipe or device may keep its reader waiting for its next bytes (a named pipe that
# no program writes to would otherwise hold the command for ever).
PIPE_WAIT_S = 60.0
_CHUNK_BYTES = 1 << 16


class SilentPipe(OSError):
    """A pipe or device that sent nothing for :data:`PIPE_WAIT_S`: an :class:`OSError` whose
    ``strerror`` says so, for callers that report why a file cannot be read."""

    def __init__(self) -> None:
        super().__init__(
            errno.ETIMEDOUT,
            f"a pipe or device that sent nothing for {PIPE_WAIT_S:g} s; is a program writing "
            "to it?",
        )


def read_input(path: str | Path, what: str, error: type[PipesimError] = PipesimError) -> bytes:
    """The bytes of ``path``, refused beyond :attr:`Limit.INPUT_BYTES` (a device or a pipe is
    read up to the limit and no further, and refused when it sends nothing for
    :data:`PIPE_WAIT_S`: a named pipe without a writer). An unreadable file raises ``error``
    naming ``what`` file it is and why."""
    path = Path(path)
    bound = limit(Limit.INPUT_BYTES)
    try:
        data = read_at_most(path, bound + 1)
    except OSError as failure:
        reason = failure.strerror or str(failure)
        raise error(f"{what} file {str(path)!r}: cannot read it ({reason})") from None
    check(Limit.INPUT_BYTES, len(data), f"{what} file {str(path)!r}: more than {bound:,} bytes")
    return data


def read_at_most(path: str | Path, most: int) -> bytes:
    """Up to ``most`` bytes of ``path``: a regular file read at once, a FIFO or a character
    device as a stream, each wait for its next bytes bounded by :data:`PIPE_WAIT_S` (then
    :class:`SilentPipe`). Raises :class:`OSError` for a file that cannot be read."""
    path = Path(path)
    if _is_stream(path):
        return _read_stream(path, most)
    with path.open("rb") as handle:
        return handle.read(most)


def _is_stream(path: Path) -> bool:
    """A FIFO or a character device: read as a stream, each wait bounded."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return False  # the open that follows says why
    return stat.S_ISFIFO(mode) or stat.S_ISCHR(mode)


def _read_stream(path: Path, most: int) -> bytes:
    """Up to ``most`` bytes of a pipe or device, until its end; opened without blocking (a
    named pipe's open waits for a writer) and polled, at most :data:`PIPE_WAIT_S` per wait."""
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        poller = select.poll()
        poller.register(descriptor, select.POLLIN)
        chunks: list[bytes] = []
        size = 0
        waited_since = time.monotonic()
        while size < most:
            try:
                chunk = os.read(descriptor, min(_CHUNK_BYTES, most - size))
            except BlockingIOError:
                chunk = None
            if chunk == b"" and not _never_opened(poller):
                break  # the writer closed it: the end
            if chunk:
                chunks.append(chunk)
                size += len(chunk)
                waited_since = time.monotonic()
                continue
            left_s = PIPE_WAIT_S - (time.monotonic() - waited_since)
            if left_s <= 0:
                raise SilentPipe
            poller.poll(max(1, int(min(left_s, 1.0) * 1000)))
        return b"".join(chunks)
    finally:
        os.close(descriptor)


def _never_opened(poller: select.poll) -> bool:
    """A named pipe that no writer has opened yet reads as empty without being at its end
    (Linux reports no hang-up until a writer has come and gone)."""
    return not poller.poll(0)


def decode_text(data: bytes, where: str, error: type[PipesimError] = PipesimError) -> str:
    """``data`` as UTF-8 text; anything else raises ``error`` naming ``where`` and the first
    bad byte."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as failure:
        byte = data[failure.start : failure.start + 1]
        raise error(
            f"{where}: cannot read it (not UTF-8 text: {byte!r} at byte {failure.start})"
        ) from None
