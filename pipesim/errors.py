"""The exception classes of pipesim, and how a message names many offending items.

Every error a user can cause (a bad name, a bad value, an unreadable or invalid file, a request
beyond a size limit) is a :class:`PipesimError`, which is a :class:`ValueError`: the CLI turns it
into one line on stderr and exit status 2. A failure of the machine while doing work that was
asked for properly (a full disk, an I/O error while writing an output, a crashed run) is an
:class:`OutputError` or :class:`RunFailed`: one line, exit status 1. Anything else escaping the
library is a bug.

The first line of every message stands on its own; a :class:`ScheduleError` may add the marked
device-by-step grid on the lines after it.

A message names the field at fault as the library spells it (``tensor_parallel 3 must divide
the model's heads``), through :func:`named`. An application that owns the process may spell the
library's fields its own way while it runs (:func:`fields_spelled`): the command line names
them as its flags (``--tensor-parallel 3 must divide ...``) from one table,
:data:`cli.flags.FLAGS`, so the library never speaks a command line's vocabulary.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable, Iterator, Mapping

# How many offending items an error message names before it says "and N more".
NAMED_ITEMS = 5
# How many characters of an offending value an error message shows.
SHOWN_CHARACTERS = 80


# The spelling of fields in messages while an application's :func:`fields_spelled` runs; empty:
# every field by its own name. One per process (a pool's forked workers inherit it), not per
# thread, so a message reads the same whichever thread builds it.
_SPELLING: dict[str, str] = {}


def named(field: str) -> str:
    """How a message names one of the library's fields: ``named("tensor_parallel")`` is
    ``tensor_parallel``, or the spelling the running application gave it (the command line's
    ``--tensor-parallel``)."""
    return _SPELLING.get(field, field)


def spelling() -> dict[str, str]:
    """The spelling of fields now in force (a copy; empty: every field by its own name): work
    sent to another process takes it along (:func:`spell_fields`)."""
    return dict(_SPELLING)


def spell_fields(spelling: Mapping[str, str]) -> None:
    """From now on, in this whole process, messages name each field of ``spelling`` as it
    says: a worker process (a Dask worker's, whose threads may run several tasks at once)
    speaks as the application that sent it work, with nothing to restore."""
    _SPELLING.clear()
    _SPELLING.update(spelling)


@contextlib.contextmanager
def fields_spelled(spelling: Mapping[str, str]) -> Iterator[None]:
    """While the block runs, messages name each field of ``spelling`` as it says (and the
    others by their own names); the spelling before it is restored after."""
    before = dict(_SPELLING)
    spell_fields(spelling)
    try:
        yield
    finally:
        spell_fields(before)


class PipesimError(ValueError):
    """Bad input to pipesim: the message names the field and the offending value."""


class ScheduleError(PipesimError):
    """A schedule that cannot run: incomplete, misplaced, out of order or deadlocked.

    The message's first line says what is wrong on its own; the lines after it render the
    device-by-step grid with the offending action marked, so the reader sees where the schedule
    goes wrong, not just that it does.
    """


class LimitError(PipesimError):
    """A request beyond a documented size limit; the message names the limit and how to raise
    it (see :mod:`pipesim.common.limits`)."""


class RunFailed(Exception):
    """A run that was asked for properly but failed (a validation process crashed): the CLI
    reports it in one line with exit status 1, not as bad input."""


class OutputError(RunFailed):
    """Writing an output failed part-way (disk full, I/O error): the previous file, if any, is
    left as it was, and the CLI reports one line with exit status 1."""


class Interrupted(Exception):
    """Ctrl-C, after the command saved what had finished: the message says what was kept and
    how to go on (``--resume``). The CLI prints it in one line with exit status 130."""


def few(items: Iterable[object], limit: int = NAMED_ITEMS, separator: str = ", ") -> str:
    """``items`` joined by ``separator``, naming at most ``limit`` and then "and N more", so a
    message about millions of offending items stays one short line."""
    named: list[str] = []
    more = 0
    for item in items:
        if len(named) < limit:
            named.append(str(item))
        else:
            more += 1
    text = separator.join(named)
    return f"{text} and {more:,} more" if more else text


def shown(value: object, limit: int = SHOWN_CHARACTERS) -> str:
    """``repr(value)``, cut to about ``limit`` characters with "..." and the full length, so a
    64 MB string or a million-element list in a file makes a short error line."""
    text = repr(value)
    if len(text) <= limit:
        return text
    return f"{text[: limit - 3]}... ({len(text):,} characters)"


# A quoted value this long in a message is user input echoed back (a 5,000-digit -K, a
# pasted file as --schedule), never a path or a name anyone needs whole.
LONG_QUOTED_CHARACTERS = 200
# A value as repr quotes it: in '...' or, when it holds a ', in "..." (a backslash escapes the
# quote inside). A quote opens where no word character stands before it, so an apostrophe
# ("transformer's") opens nothing.
_LONG_QUOTED = re.compile(
    rf"(?<!\w)(?:'((?:[^'\\\n]|\\.){{{LONG_QUOTED_CHARACTERS + 1},}})'"
    rf"|\"((?:[^\"\\\n]|\\.){{{LONG_QUOTED_CHARACTERS + 1},}})\")"
)


def short_values(message: str) -> str:
    """``message`` with each quoted value longer than :data:`LONG_QUOTED_CHARACTERS` cut as
    :func:`shown` cuts one: every error line stays short whatever a user typed."""
    return _LONG_QUOTED.sub(
        lambda match: f"{match[0][: SHOWN_CHARACTERS - 3]}... ({len(match[0]):,} characters)",
        message,
    )
