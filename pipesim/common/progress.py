"""Progress bars for long commands: shown on a terminal, silent everywhere else.

Every long command (sweep, plan, validate, the executor's launcher) reports progress through
:func:`progress`, so the rule of when a bar appears lives in one place: only when standard
error is a terminal, never in CI (``CI`` set), never under ``--json`` (the caller passes
``enabled=False``), and never when ``PIPESIM_PROGRESS=0``. ``PIPESIM_PROGRESS=1`` forces it on.
The bar is tqdm's, written to standard error so standard output stays machine-readable.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol


class Progress(Protocol):
    """What a command may do with a bar: advance it and say what it is doing now."""

    def update(self, n: int = 1) -> Any:
        """Advance by ``n`` items."""

    def set_postfix_str(self, text: str) -> Any:
        """Show ``text`` after the counter (the item in hand, a running figure)."""


class _Silent:
    """A bar that draws nothing."""

    def update(self, n: int = 1) -> None:
        return None

    def set_postfix_str(self, text: str) -> None:
        return None


# A bar that draws nothing, for callers that take an optional one.
SILENT: Progress = _Silent()


def progress_wanted(enabled: bool = True) -> bool:
    """Whether a bar should be drawn: the caller allows it and a person is watching."""
    forced = os.environ.get("PIPESIM_PROGRESS")
    if forced is not None:
        return forced.strip() not in ("", "0", "false", "no")
    if not enabled or os.environ.get("CI"):
        return False
    return sys.stderr.isatty()


@contextmanager
def progress(total: int | None, description: str, *, enabled: bool = True) -> Iterator[Progress]:
    """A bar over ``total`` items (None: unknown), drawn only when :func:`progress_wanted`."""
    if not progress_wanted(enabled):
        yield _Silent()
        return
    from tqdm import tqdm

    bar = tqdm(total=total, desc=description, unit="item", file=sys.stderr, leave=False)
    try:
        yield bar
    finally:
        bar.close()
