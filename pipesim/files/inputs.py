"""Reading a user's input file (a TOML spec, a schedule CSV): its bytes, size-limited, with
one-line errors naming the file."""

from __future__ import annotations

import errno
import os
import select
import stat
import sys
import time
from pathlib import Path

from pipesim.common.limits import Limit, check, limit
from pipesim.errors import PipesimError

# How long a command waits for the program at the other end of a named pipe to open it (for
# writing, when pipesim reads it; for reading, when pipesim writes it): a pipe that nobody
# opens would otherwise hold the command for ever, as `cat` would. Once that program is there,
# its pace is its own: one that computes a schedule for minutes before it writes is waited
# for, and Ctrl-C ends the wait.
PIPE_OPEN_WAIT_S = 30.0
# After this long with a writer that has opened the pipe and written nothing, the command says
# on stderr, once, what it is waiting for and how to stop it: a wait without a bound is one
# the user can see.
SILENT_WRITER_NOTE_S = 10.0
_CHUNK_BYTES = 1 << 16


class NoWriter(OSError):
    """A named pipe that no program opened for writing within :data:`PIPE_OPEN_WAIT_S`: an
    :class:`OSError` whose ``strerror`` says so, for callers that report why a file cannot be
    read."""

    def __init__(self) -> None:
        super().__init__(
            errno.ETIMEDOUT,
            f"a named pipe that no program opened for writing in {PIPE_OPEN_WAIT_S:g} s",
        )


def read_input(path: str | Path, what: str, error: type[PipesimError] = PipesimError) -> bytes:
    """The bytes of ``path``, refused beyond :attr:`Limit.INPUT_BYTES` (a device or a pipe is
    read up to the limit and no further; a named pipe that no program opens for writing within
    :data:`PIPE_OPEN_WAIT_S` is refused). An unreadable file raises ``error`` naming ``what`` file
    it is and why."""
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
    device as a stream (a named pipe that no program opens for writing within
    :data:`PIPE_OPEN_WAIT_S`: :class:`NoWriter`). Raises :class:`OSError` for a file that cannot
    be read."""
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
    """Up to ``most`` bytes of a pipe or device, until its end. Opened without blocking (the
    open of a named pipe waits for a writer, without a bound) and polled: a writer must appear
    within :data:`PIPE_OPEN_WAIT_S`; one that has appeared is waited for as long as it stays
    (Ctrl-C ends the wait), with a line on stderr once it has been silent for
    :data:`SILENT_WRITER_NOTE_S`."""
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        poller = select.poll()
        poller.register(descriptor, select.POLLIN)
        chunks: list[bytes] = []
        size = 0
        writer_seen = False
        noted = False  # the note on a silent writer, once
        started = quiet_since = time.monotonic()
        while size < most:
            try:
                chunk = os.read(descriptor, min(_CHUNK_BYTES, most - size))
            except BlockingIOError:  # a writer holds it open and has not written yet
                writer_seen = True
                if not noted and time.monotonic() - quiet_since >= SILENT_WRITER_NOTE_S:
                    noted = True
                    sys.stderr.write(
                        f"pipesim: note: waiting for the program writing {str(path)!r}: it "
                        f"opened the pipe and has written nothing for {SILENT_WRITER_NOTE_S:g} "
                        "s (Ctrl-C stops)\n"
                    )
                    sys.stderr.flush()
                poller.poll(1000)
                continue
            if chunk:
                writer_seen = True
                quiet_since = time.monotonic()
                chunks.append(chunk)
                size += len(chunk)
                continue
            # Empty: the end, unless no writer has opened it yet (Linux then reports no
            # hang-up, where a writer that came and went leaves one).
            if writer_seen:
                break
            if poller.poll(0):
                # A writer came since the read (its data, or its hang-up, are there): read
                # again, which returns them or, at a real end, nothing.
                writer_seen = True
                continue
            if time.monotonic() - started >= PIPE_OPEN_WAIT_S:
                raise NoWriter
            poller.poll(200)
        return b"".join(chunks)
    finally:
        os.close(descriptor)


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
