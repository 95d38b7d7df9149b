"""Reading a user's input file (a TOML spec, a schedule CSV): its bytes, size-limited, with
one-line errors naming the file."""

from __future__ import annotations

from pathlib import Path

from pipesim.common.limits import Limit, check, limit
from pipesim.errors import PipesimError


def read_input(path: str | Path, what: str, error: type[PipesimError] = PipesimError) -> bytes:
    """The bytes of ``path``, refused beyond :attr:`Limit.INPUT_BYTES` (a device or a pipe is
    read up to the limit and no further). An unreadable file raises ``error`` naming ``what``
    file it is and why."""
    path = Path(path)
    bound = limit(Limit.INPUT_BYTES)
    try:
        with path.open("rb") as handle:
            data = handle.read(bound + 1)
    except OSError as failure:
        reason = failure.strerror or str(failure)
        raise error(f"{what} file {str(path)!r}: cannot read it ({reason})") from None
    check(Limit.INPUT_BYTES, len(data), f"{what} file {str(path)!r}: more than {bound:,} bytes")
    return data


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
