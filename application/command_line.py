"""argparse plumbing shared by both command lines (pipesim's and the executor's): one-line errors,
exit codes, argument types, and a standard output whose failures are one line too. JSON on
stdout is :func:`pipesim.files.strict_json.write_json`."""

from __future__ import annotations

import argparse
import errno
import os
import sys
from collections.abc import Callable, Iterable
from typing import Any, NoReturn, TextIO

from pipesim.errors import short_values

Handler = Callable[[argparse.Namespace], int]

EXIT_OK = 0
EXIT_CHECK_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for Ctrl-C


class ArgumentParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line on stderr (exit 2), with no usage dump."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"{self.prog}: error: {short_values(message)} (see {self.prog} --help)\n")
        sys.exit(EXIT_BAD_INPUT)

    def _get_value(self, action: argparse.Action, arg_string: str) -> Any:
        """A number given to an ``int`` or ``float`` option in ASCII only: Python's ``int``
        reads every script's digits (``-K ４`` was 4, where ``--partition ６`` is refused)."""
        if action.type in (int, float) and not arg_string.isascii():
            raise argparse.ArgumentError(
                action, f"invalid {action.type.__name__} value: {arg_string!r} (ASCII digits only)"
            )
        return super()._get_value(action, arg_string)


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1, in ASCII digits."""
    try:
        if not text.isascii():  # int() reads every script's digits
            raise ValueError(text)
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return value


def positive_ints(text: str) -> tuple[int, ...] | None:
    """The integers of a comma-separated list (``"1,2,4"``), or None when the list is empty or
    an item is not an integer >= 1; the caller words the error for its own flag."""
    if not text.isascii():  # int() reads every script's digits
        return None
    try:
        values = tuple(int(v) for v in text.split(","))
    except ValueError:
        return None
    return values if values and all(v >= 1 for v in values) else None


def add_cluster_argument(parser: argparse.ArgumentParser, what: str) -> None:
    """--cluster ADDRESS: run the command's ``what`` on a Dask cluster (sweep and plan)."""
    parser.add_argument(
        "--cluster",
        metavar="ADDRESS",
        help=f"run the {what} on a Dask cluster: 'local' starts one here (--jobs workers, at "
        "least 2), dask://HOST:PORT joins a running scheduler; the same results in the same "
        "order as without it (needs pip install 'pipesim[cluster]')",
    )


def watching_stdout(run: Callable[[], int], prog: str) -> int:
    """``run()``'s exit status, with standard output watched: output that cannot be written
    (a full disk, ``/dev/full``, a closed descriptor, an I/O error) is a failure of the
    machine, ``PROG: failed: cannot write the output: REASON``, exit 1; a reader that went
    away (``... | head``) is not an error, exit 0. Either way the output is flushed here,
    inside the handler, and what could not be written is then discarded, so the
    interpreter's own flush at exit has nothing to fail on (no traceback, no "Exception
    ignored")."""
    stdout = _WatchedStdout(sys.stdout)
    sys.stdout = stdout
    try:
        status = run()
        try:
            stdout.flush()  # the last output is written here, not at exit outside any handler
        except OSError:
            if status == 0:
                raise
            _discard_output(stdout)  # a failure is already reported: it stays the one line
    except BrokenPipeError:  # `... | head` is not an error
        _discard_output(stdout)
        return 0
    except OSError as error:
        if error is not stdout.failure:
            raise
        _discard_output(stdout)
        reason = error.strerror or str(error)
        sys.stderr.write(f"{prog}: failed: cannot write the output: {reason}\n")
        return EXIT_CHECK_FAILED
    finally:
        if sys.stdout is stdout:
            sys.stdout = stdout.stream
    return status


class _WatchedStdout:
    """``sys.stdout`` while a command runs: writes go to the real stream, and the latest
    failure to write it is remembered, so :func:`main` tells a failed write of the output
    from any other ``OSError``. A closed standard output (``sys.stdout`` is None: the script
    was started with ``>&-``) fails every write with EBADF instead of printing nothing."""

    def __init__(self, stream: TextIO | None) -> None:
        self.stream = stream
        self.failure: OSError | None = None

    def _real(self) -> TextIO:
        if self.stream is None:
            self.failure = OSError(errno.EBADF, os.strerror(errno.EBADF))
            raise self.failure
        return self.stream

    def write(self, text: str) -> int:
        try:
            return self._real().write(text)
        except OSError as error:
            self.failure = error
            raise

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        try:
            if self.stream is not None:
                self.stream.flush()
        except OSError as error:
            self.failure = error
            raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real(), name)


def _discard_output(stdout: _WatchedStdout) -> None:
    """Point standard output at the null device, as Python's documentation recommends after
    a SIGPIPE: what is still buffered then goes nowhere at exit, instead of failing again
    outside any handler (a traceback-like "Exception ignored" and exit status 120)."""
    stream = stdout.stream
    if stream is None:
        return
    try:
        descriptor = stream.fileno()
        null = os.open(os.devnull, os.O_WRONLY)
    except (OSError, ValueError, AttributeError):  # not a real file (a test's capture)
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - lives until the process ends
        return
    try:
        os.dup2(null, descriptor)
    except OSError:
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - lives until the process ends
    finally:
        os.close(null)
