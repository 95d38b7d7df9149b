"""argparse plumbing shared by both command lines (pipesim's and the executor's): one-line errors,
exit codes, argument types. JSON on stdout is :func:`pipesim.files.strict_json.write_json`."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import NoReturn

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


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return value


def positive_ints(text: str) -> tuple[int, ...] | None:
    """The integers of a comma-separated list (``"1,2,4"``), or None when the list is empty or
    an item is not an integer >= 1; the caller words the error for its own flag."""
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
