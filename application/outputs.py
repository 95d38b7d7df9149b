"""Output files: checked before any work is done, written so that a failure never leaves half a
file, and never destroying what the path is.

* A regular file (or a new one) is written to a temporary file beside it and renamed over it,
  so an interrupted or failed write (a full disk, Ctrl-C) leaves the previous file untouched.
  The new file keeps the previous file's permission bits, or gets those the umask gives a new
  file (0644 under umask 022), never the temporary file's 0600.
* A symbolic link is followed: the file it points to is replaced, the link stays a link.
* A character device or a FIFO (``/dev/null``, ``/dev/stdout``, a named pipe) is written
  through in place, as a shell redirection would; it is never renamed over. Block devices,
  sockets and directories are refused.

Errors: a path that cannot be an output (a directory, a missing folder, no permission to
write, a read-only file system, a wrong suffix) is bad input, :class:`PipesimError` (exit 2),
found where possible before the command computes anything. A failure of the machine while
writing (disk full, quota, I/O error) is an :class:`OutputError` (exit 1). Both are one line
naming the option and the path.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any

from pipesim.errors import OutputError, PipesimError
from pipesim.files import inputs

_NEW_FILE_MODE = 0o666


def output_path(path: str | Path, field: str, suffixes: Sequence[str] = ()) -> Path:
    """``path`` as a file the command may write: not empty, not a directory, block device or
    socket, in a directory that exists and may be written, and ending in one of ``suffixes``
    when they are given. Commands call it before they compute, so bad output options cost
    nothing and lose nothing."""
    text = str(path)
    if not text.strip():
        raise PipesimError(f"{field} must name a file, got {text!r}")
    if text.endswith(("/", os.sep)):
        raise PipesimError(f"{field} {text!r} ends in a slash: it names a folder, not a file")
    target = Path(text)
    if suffixes and target.suffix.lower() not in suffixes:
        allowed = " or ".join(suffixes)
        raise PipesimError(
            f"{field} {text!r} must end in {allowed}, got {target.suffix or 'none'!r}"
        )
    real = Path(os.path.realpath(target))
    try:
        # Through the link itself, not its resolved name: /dev/stdout on a pipe resolves to
        # "/proc/PID/fd/pipe:[N]", a name that does not exist, while the link opens fine.
        mode = os.stat(target).st_mode
    except FileNotFoundError:
        mode = None
    except OSError as error:
        raise PipesimError(f"{field}: cannot use {text!r} ({error.strerror})") from None
    if mode is not None:
        if stat.S_ISDIR(mode):
            raise PipesimError(f"{field}: {text!r} is a directory")
        if not (stat.S_ISREG(mode) or stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)):
            raise PipesimError(
                f"{field}: {text!r} is a block device or socket, not a file to write"
            )
        if not stat.S_ISREG(mode):
            return target  # written through in place: its folder is not written
    directory = real.parent
    if not directory.is_dir():
        # A dangling link names the folder its target needs, not the link's own folder.
        missing = Path(os.readlink(target)).parent if target.is_symlink() else target.parent
        if target.is_symlink() and not missing.is_absolute():
            missing = target.parent / missing
        raise PipesimError(f"{field}: directory {str(missing)!r} does not exist")
    _require_writable(directory, field)
    return target


def output_directory(path: str | Path, field: str, *, create: bool = True) -> Path:
    """``path`` as a folder to write into, created with its parents where missing; with
    ``create`` False only checked (it, or the nearest folder above it that exists, must be
    writable), so a command can refuse a bad one before work without leaving a folder."""
    text = str(path)
    if not text.strip():
        raise PipesimError(f"{field} must name a directory, got {text!r}")
    try:
        return _output_directory(Path(text), text, field, create)
    except OSError as error:  # a name too long for the file system, a loop of links
        raise PipesimError(f"{field}: cannot use {text!r} ({error.strerror or error})") from None


def _output_directory(target: Path, text: str, field: str, create: bool) -> Path:
    """:func:`output_directory`'s checks; the file system's own refusals raise ``OSError``."""
    if target.exists() and not target.is_dir():
        raise PipesimError(f"{field}: {text!r} exists and is not a directory")
    if create:
        try:
            target.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise PipesimError(f"{field}: cannot create {text!r} ({error.strerror})") from None
    existing = target.absolute()
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise PipesimError(f"{field}: {str(existing)!r} is not a directory")
    _require_writable(existing, field)
    return target


@contextlib.contextmanager
def new_output_directory(path: str | Path, field: str) -> Iterator[Path]:
    """:func:`output_directory` for the length of a ``with`` block: the folders it had to
    create are removed again if the block fails (bad input found late, Ctrl-C) while they are
    still empty, so a refused command leaves no empty folder behind; anything written into
    them stays."""
    target = Path(str(path))
    missing = []
    folder = target.absolute()
    while not folder.exists():
        missing.append(folder)
        folder = folder.parent
    try:
        yield output_directory(path, field)  # inside: a folder made, then refused, goes too
    except BaseException:
        for folder in missing:  # deepest first
            try:
                folder.rmdir()
            except OSError:
                break  # not empty (something was written), or not ours to remove
        raise


@contextlib.contextmanager
def atomic_output(path: str | Path, *, field: str, binary: bool = False) -> Iterator[IO[Any]]:
    """A handle to write ``path``'s new content into (text in UTF-8, or ``binary``), made
    visible only when the ``with`` block ends without an error (see the module's rules). An
    exception inside the block leaves the previous file as it was and re-raises; an
    :class:`OSError` becomes one :class:`OutputError`."""
    target = output_path(path, field)
    real = Path(os.path.realpath(target))
    open_mode = "wb" if binary else "w"
    encoding = None if binary else "utf-8"
    try:
        existing = os.stat(target)  # through the link, as in output_path
    except FileNotFoundError:
        existing = None
    except OSError as error:
        raise _failure(field, target, error) from None
    if existing is not None and not stat.S_ISREG(existing.st_mode):
        try:
            if stat.S_ISFIFO(existing.st_mode):
                descriptor = _open_pipe_for_writing(target)
            else:
                descriptor = os.open(target, os.O_WRONLY)
            with os.fdopen(descriptor, open_mode, encoding=encoding) as handle:
                yield handle
        except OSError as error:
            raise _failure(field, target, error) from None
        return
    temporary: str | None = None
    try:
        fd, temporary = tempfile.mkstemp(prefix=f".{real.name}.", suffix=".tmp", dir=real.parent)
        with os.fdopen(fd, open_mode, encoding=encoding) as handle:
            yield handle
            handle.flush()
            _keep_mode_and_owner(handle.fileno(), existing)
            os.fsync(handle.fileno())
        os.replace(temporary, real)
        temporary = None
    except OSError as error:
        raise _failure(field, target, error) from None
    finally:
        if temporary is not None:
            with contextlib.suppress(OSError):
                os.unlink(temporary)


def _open_pipe_for_writing(path: Path) -> int:
    """A named pipe opened for writing once a program has it open for reading, within
    :data:`~pipesim.files.inputs.PIPE_OPEN_WAIT_S` (a plain open would wait for ever)."""
    started = time.monotonic()
    while True:
        try:
            descriptor = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as error:
            if error.errno != errno.ENXIO:  # ENXIO: no reader yet
                raise
            if time.monotonic() - started >= inputs.PIPE_OPEN_WAIT_S:
                raise OSError(
                    errno.ETIMEDOUT,
                    f"a named pipe that no program opened for reading in "
                    f"{inputs.PIPE_OPEN_WAIT_S:g} s",
                ) from None
            time.sleep(0.2)
            continue
        os.set_blocking(descriptor, True)  # the reader's pace from here on
        return descriptor


def write_text_atomically(path: str | Path, text: str, *, field: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` by the module's rules."""
    with atomic_output(path, field=field) as handle:
        handle.write(text)


def write_bytes_atomically(path: str | Path, data: bytes, *, field: str) -> None:
    """Write ``data`` to ``path`` by the module's rules."""
    with atomic_output(path, field=field, binary=True) as handle:
        handle.write(data)


def write_with(path: str | Path, write: Callable[[IO[bytes]], object], *, field: str) -> None:
    """Let ``write`` fill a binary handle (``figure.savefig`` say) for ``path``, by the
    module's rules."""
    with atomic_output(path, field=field, binary=True) as handle:
        write(handle)


def umask() -> int:
    """The process's umask, read without changing it where the OS allows (Linux's
    /proc/self/status); elsewhere set and restored at once."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text(encoding="ascii").splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    current = os.umask(0o022)
    os.umask(current)
    return current


def _keep_mode_and_owner(fd: int, existing: os.stat_result | None) -> None:
    """Give the temporary file the permission bits (and, where allowed, the owner) of the file
    it replaces, or a new file's mode under the umask."""
    if existing is None:
        os.fchmod(fd, _NEW_FILE_MODE & ~umask())
        return
    os.fchmod(fd, stat.S_IMODE(existing.st_mode))
    if hasattr(os, "fchown"):
        with contextlib.suppress(OSError):  # only root may give a file away; others keep theirs
            if (existing.st_uid, existing.st_gid) != (os.geteuid(), os.getegid()):
                os.fchown(fd, existing.st_uid, existing.st_gid)


def _require_writable(directory: Path, field: str) -> None:
    """Refuse a folder this process cannot create files in, saying why (read-only file
    system, permission denied, or the file system's own reason). The test is a real one: a
    probe file is created and removed, since permission bits alone say yes to root and to
    folders such as /proc that take no new files, and a command writing several outputs must
    not find that out after it has replaced the first."""
    if not os.access(directory, os.W_OK | os.X_OK):
        reason = "read-only file system" if _read_only(directory) else "permission denied"
        raise PipesimError(f"{field}: cannot write into {str(directory)!r} ({reason})")
    try:
        fd, probe = tempfile.mkstemp(prefix=".pipesim-probe.", dir=directory)
    except OSError as error:
        reason = "read-only file system" if _read_only(directory) else str(error.strerror)
        message = f"{field}: cannot write into {str(directory)!r} ({reason})"
        if error.errno in _MACHINE_ERRNOS:  # a full disk is the machine's failure (exit 1)
            raise OutputError(message) from None
        raise PipesimError(message) from None
    os.close(fd)
    with contextlib.suppress(OSError):
        os.unlink(probe)


def _read_only(directory: Path) -> bool:
    try:
        return bool(os.statvfs(directory).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):
        return False


# Errors that say the path cannot be written at all (bad input, exit 2), as opposed to a
# failure of the machine while writing (disk full, I/O error: exit 1).
_PATH_ERRNOS = frozenset(
    {
        errno.EACCES,
        errno.EPERM,
        errno.ENOENT,
        errno.EROFS,
        errno.ENOTDIR,
        errno.EISDIR,
        errno.ENAMETOOLONG,
        errno.ETIMEDOUT,  # a named pipe nobody opened for reading
        errno.ELOOP,
        errno.EXDEV,
    }
)


# A full disk or quota: the machine's failure, not the user's path.
_MACHINE_ERRNOS = frozenset({errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)})


def _failure(field: str, target: Path, error: OSError) -> PipesimError | OutputError:
    reason = error.strerror or str(error)
    if error.errno in _PATH_ERRNOS:
        return PipesimError(f"{field}: cannot write {str(target)!r} ({reason})")
    return OutputError(
        f"{field}: cannot write {str(target)!r} ({reason}); any previous file there is unchanged"
    )
