"""A sweep's output file: rows saved as they complete, read back to resume.

The file is a CSV of :data:`COLUMNS` (one row per point) or, for a ``.json`` path, the object
``{"results": [...], "skipped": [...]}`` that ``pipesim plot`` reads. It is rewritten through
:mod:`application.outputs` (atomically) as rows complete, at most every :data:`SAVE_INTERVAL_S`,
and always at the end or on Ctrl-C: at any moment it is a complete, valid file holding every
row finished up to its last save, in the order of the sweep's points. ``--resume`` reads it
back, keeps its rows and runs only the points it lacks; the file it leaves is then the one an
uninterrupted sweep writes, row for row.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import stat
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from application.outputs import write_text_atomically
from pipesim.errors import PipesimError, few
from pipesim.files.inputs import decode_text, read_input
from pipesim.files.strict_json import json_text, non_finite_fields

# A row's columns: the schedule, its counts, its numbers, whether it ran out of memory and the
# error (if any); reading a row back checks each group as such.
_COUNTS = ("devices", "microbatches", "chunks")
_NUMBERS = (
    "iteration_time",
    "bubble_fraction",
    "analytic_bubble_fraction",
    "throughput",
    "speedup",
    "max_peak_memory_bytes",
)
COLUMNS = ("schedule", *_COUNTS, *_NUMBERS, "oom", "error")
# The numbers a row without an error always has (the closed-form bubble may be unknown).
_MEASURED = tuple(n for n in _NUMBERS if n != "analytic_bubble_fraction")

# Seconds between saves while rows complete; a save also waits SAVE_COST_FACTOR times as long
# as the last one took, so a huge file is not rewritten more than a few percent of the time.
SAVE_INTERVAL_S = 0.5
SAVE_COST_FACTOR = 20

Key = tuple[str, int, int, int]


def key_of(entry: dict[str, Any]) -> Key:
    """The point a result or row is for: (schedule, K, M, v)."""
    return (entry["schedule"], entry["devices"], entry["microbatches"], entry["chunks"])


def row_of(result: dict[str, Any]) -> dict[str, Any]:
    """The CSV row of a result object (a row read back from a CSV is its own row)."""
    row = {key: result.get(key) for key in COLUMNS}
    if "per_device" in result:
        peaks = (d["peak_memory_bytes"] for d in result["per_device"])
        row["max_peak_memory_bytes"] = max(peaks, default=None)
    return row


def csv_text(rows: Iterable[dict[str, Any]]) -> str:
    """The CSV of ``rows`` with a header line."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def is_json(path: str | Path) -> bool:
    """Whether ``path`` takes the JSON form (by its suffix)."""
    return str(path).lower().endswith(".json")


class SweepFile:
    """The rows of one sweep, saved to ``path`` in the order of ``order`` (the sweep's points)
    as they complete."""

    def __init__(
        self,
        path: str | Path,
        order: Sequence[Key],
        skipped: list[dict[str, Any]],
        field: str = "--out",
    ) -> None:
        self._path = path
        self._field = field
        self._order = {key: index for index, key in enumerate(order)}
        self._skipped = skipped
        self._entries: dict[Key, dict[str, Any]] = {}
        self._has_result = False  # a row without an error: only then is the file written
        self._last_save = time.monotonic()
        self._save_cost_s = 0.0
        # A FIFO or a device (/dev/stdout) takes the file once, at the end: it cannot be
        # rewritten as rows complete, nor read back.
        self._stream = _special(path)

    def __len__(self) -> int:
        return len(self._entries)

    def keys(self) -> set[Key]:
        """The points that have a row."""
        return set(self._entries)

    def entries(self) -> list[dict[str, Any]]:
        """The results (or, read back from a CSV, rows) in the sweep's order."""
        return [self._entries[k] for k in sorted(self._entries, key=self._order.__getitem__)]

    def resume(self) -> int:
        """Take the rows already in the file (none if it does not exist); return how many.
        A file that is not this sweep's (another format, rows of other points) is refused."""
        path = Path(self._path)
        if self._stream:
            raise PipesimError(f"--resume: {str(path)!r} is not a regular file to read back")
        if not path.exists():
            return 0
        text = decode_text(read_input(path, "--resume"), f"--resume file {str(path)!r}")
        loaded = _read_json(text, path) if is_json(path) else _read_csv(text, path)
        foreign = [k for k in loaded if k not in self._order]
        if foreign:
            named = few(f"{s} K={k} M={m} v={v}" for s, k, m, v in foreign)
            raise PipesimError(
                f"--resume: {str(path)!r} holds rows of points not in this sweep ({named}); "
                "resume with the arguments of the sweep that wrote it"
            )
        self._entries.update(loaded)
        self._has_result = self._has_result or any(not e.get("error") for e in loaded.values())
        return len(loaded)

    def check_same_sweep(self, recompute: Callable[[Key], dict[str, Any]]) -> None:
        """Refuse resumed rows that this sweep's arguments would not write. The first and the
        last saved point are computed again (``recompute``) and their rows compared: other
        costs, model, hardware, steps or options change every row, so a file written by
        another sweep (or cut from one) is caught at the cost of two points."""
        saved = self.entries()
        for entry in saved[:1] + saved[1:][-1:]:  # the first, and the last if another
            key = key_of(entry)
            again = recompute(key)
            want, got = row_of(entry), row_of(again)
            differ = [c for c in COLUMNS if not _same(want[c], got[c])]
            # a layout that costs the same time (ZeRO-2/3 inside a pipeline are ZeRO-1's) is
            # told apart by the layout a JSON row states
            layout = entry.get("layout")
            if not differ and isinstance(layout, dict) and layout != again.get("layout"):
                want, got = {"layout": layout}, {"layout": again.get("layout")}
                differ = ["layout"]
            if differ:
                column = differ[0]
                raise PipesimError(
                    f"--resume: {str(self._path)!r} was written by another sweep: its row for "
                    f"{key[0]} K={key[1]} M={key[2]} v={key[3]} has {column} {want[column]!r}, "
                    f"these arguments give {got[column]!r}; resume with the arguments that "
                    "wrote it"
                )

    def add(self, result: dict[str, Any]) -> None:
        """Record a finished point; save when the last save is old enough."""
        self._entries[key_of(result)] = result
        self._has_result = self._has_result or not result.get("error")
        now = time.monotonic()
        due = max(SAVE_INTERVAL_S, SAVE_COST_FACTOR * self._save_cost_s)
        if not self._stream and now - self._last_save >= due:
            self.save()

    def save(self) -> bool:
        """Write every row recorded so far (atomically); return whether it wrote. Rows that
        are all errors are not written: a sweep whose every point failed (bad input) leaves
        the file there as it was, instead of replacing a good one with nothing but errors."""
        if not self._has_result:
            return False
        started = time.monotonic()
        write_text_atomically(self._path, self.text(), field=self._field)
        self._last_save = time.monotonic()
        self._save_cost_s = self._last_save - started
        return True

    def text(self) -> str:
        """The file's content now."""
        entries = self.entries()
        if is_json(self._path):
            return json_text({"results": entries, "skipped": self._skipped}, indent=2)
        return csv_text(row_of(e) for e in entries)


def _same(saved: Any, fresh: Any) -> bool:
    """A saved cell equals a fresh one (numbers to 1e-12 relative: the engines agree exactly,
    the margin only absorbs a float printed and read back)."""
    if isinstance(saved, (int, float)) and isinstance(fresh, (int, float)):
        if isinstance(saved, bool) or isinstance(fresh, bool):
            return saved is fresh
        return math.isclose(saved, fresh, rel_tol=1e-12, abs_tol=0.0)
    return bool(saved == fresh)


def _special(path: str | Path) -> bool:
    """Whether ``path`` is an existing FIFO or device (written through, not replaced)."""
    try:
        return not stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def _read_csv(text: str, path: Path) -> dict[Key, dict[str, Any]]:
    reader = csv.reader(io.StringIO(text))
    header = next(reader, None)
    if header is None:
        return {}
    if tuple(header) != COLUMNS:
        raise PipesimError(
            f"--resume: {str(path)!r} is not a sweep CSV (its header is not {','.join(COLUMNS)})"
        )
    rows: dict[Key, dict[str, Any]] = {}
    for line, cells in enumerate(reader, start=2):
        if len(cells) != len(COLUMNS):
            raise PipesimError(
                f"--resume: {str(path)!r} line {line} has {len(cells)} cells, not {len(COLUMNS)}"
            )
        row = {column: _cell(cell) for column, cell in zip(COLUMNS, cells, strict=True)}
        row["schedule"] = cells[0]
        if row["error"] is not None:
            row["error"] = cells[-1]
        problem = row_problem(row)
        if problem is not None:
            raise PipesimError(f"--resume: {str(path)!r} line {line}: {problem}")
        rows[key_of(row)] = row
    return rows


def row_problem(row: dict[str, Any]) -> str | None:
    """What is wrong with a row read back, or None: a schedule name, whole counts >= 1 (not
    true/false), numbers that are finite and >= 0 or empty, oom true/false or empty, error
    text or empty; a row without an error has every number but the closed-form bubble, and
    oom. A row that fails was not written by pipesim (edited, or cut mid-value)."""
    if not isinstance(row.get("schedule"), str) or not row["schedule"]:
        return f"schedule {row.get('schedule')!r} is not a schedule name"
    for column in _COUNTS:
        value = row.get(column)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            return f"{column} {value!r} is not a whole number >= 1"
    for column in _NUMBERS:
        value = row.get(column)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"{column} {value!r} is not a number"
        if not math.isfinite(value) or value < 0:
            return f"{column} {value!r} is not a finite number >= 0"
    if row.get("oom") is not None and not isinstance(row["oom"], bool):
        return f"oom {row['oom']!r} is not True or False"
    if row.get("error") is not None and not isinstance(row["error"], str):
        return f"error {row['error']!r} is not text"
    if not row.get("error"):  # a result: printed and compared as numbers
        for column in (*_MEASURED, "oom"):
            if row.get(column) is None:
                return f"{column} is missing (empty or null) in a row without an error"
    return None


def result_problem(result: dict[str, Any]) -> str | None:
    """What is wrong with a result object read back from a sweep's JSON, or None: no NaN or
    infinity anywhere in it, ``per_device`` (when present) a list of objects whose
    ``peak_memory_bytes`` are numbers >= 0, and its row (:func:`row_of`) as
    :func:`row_problem` wants it. Every field is checked before any is used."""
    try:
        for field, value in non_finite_fields(result):
            return f"{field} {value!r} is not a finite number"
    except RecursionError:
        return "its values are nested too deeply"
    if "per_device" in result:
        devices = result["per_device"]
        if not isinstance(devices, list):
            return f"per_device {devices!r} is not a list of devices"
        for index, device in enumerate(devices):
            if not isinstance(device, dict):
                return f"per_device[{index}] {device!r} is not an object"
            peak = device.get("peak_memory_bytes")
            if isinstance(peak, bool) or not isinstance(peak, (int, float)) or peak < 0:
                return f"per_device[{index}].peak_memory_bytes {peak!r} is not a number >= 0"
    return row_problem(row_of(result))


def _cell(text: str) -> Any:
    """A CSV cell back to the value that wrote it: "" None, True/False, int, float, text."""
    if text == "":
        return None
    if text in ("True", "False"):
        return text == "True"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _read_json(text: str, path: Path) -> dict[Key, dict[str, Any]]:
    try:
        payload = json.loads(text)
        results = payload["results"]
        if not isinstance(results, list) or not all(isinstance(r, dict) for r in results):
            raise TypeError
    except (ValueError, KeyError, TypeError, RecursionError):
        raise PipesimError(
            f'--resume: {str(path)!r} is not a sweep\'s JSON (an object whose "results" '
            "list objects with schedule, devices, microbatches and chunks)"
        ) from None
    rows: dict[Key, dict[str, Any]] = {}
    for index, result in enumerate(results):
        problem = result_problem(result)
        if problem is not None:
            raise PipesimError(f"--resume: {str(path)!r} results[{index}]: {problem}")
        rows[key_of(result)] = result
    return rows
