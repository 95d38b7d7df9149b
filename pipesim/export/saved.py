"""The saved-result formats: a saved run written here, and every saved result read back for
``pipesim plot``, checked against its schema on load.

Three kinds of file: a run (``pipesim simulate --save``, written by :func:`saved_run`:
``result``, ``compute``, ``transfers``, ``memory``), a sweep (``pipesim sweep --out FILE.json``:
``results``) and a validation (``pipesim validate``'s ``results.json``: ``records``). Every
field a figure uses is checked for its type and for being a finite number where it is one, so a
corrupted or hand-edited file (a label that is a list, ``"speedup": "fast"``, NaN, a missing
key, a result of overflowing costs) is refused with one line naming the file, the field and the
value, a :class:`pipesim.errors.PipesimError`, and never reaches matplotlib as a TypeError or as
NaN axis limits. Whatever these loaders accept, the figures draw.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pipesim.common import limits
from pipesim.common.limits import Limit, limit
from pipesim.common.units import format_percent, format_seconds
from pipesim.engine.memory_over_time import BREAKDOWN_TERMS
from pipesim.errors import PipesimError, named
from pipesim.files.inputs import read_at_most
from pipesim.files.strict_json import LARGEST, SMALLEST

# The range a plotted number may take is pipesim.files.strict_json's LARGEST and SMALLEST
# (what simulate and sweep save), and the most devices (rows) a file may hold is pipesim's
# limit on K (Limit.DEVICES, raised by PIPESIM_MAX_DEVICES), so that whatever pipesim saves,
# plot reads.
# The most micro-batches a row may claim (an axis label, never a loop).
MAX_MICROBATCHES = 10**9
# The largest file read: a saved run of K=64, M=1024 is about 10 MB.
MAX_FILE_BYTES = 256 * 2**20
# What writes each kind of file, as fields (:func:`pipesim.errors.named`): a refusal says
# "expected the output of" it, as the application spells it (the command line: its command).
RUN_FROM = "saved_run"

# A compute bar: (device, label, start_s, end_s); a transfer bar: (source, destination, label,
# start_s, end_s). Labels are action strings (``2F0``) or ``opt`` for an optimizer step.
ComputeBar = tuple[int, str, float, float]
TransferBar = tuple[int, int, str, float, float]
SWEEP_FROM = "saved_sweep"
RECORDS_FROM = "saved_records"


def _show(value: Any) -> str:
    """The offending value, short enough for a one-line message."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


class _Checker:
    """Field checks that name the file and the field in their one-line errors."""

    def __init__(self, path: str) -> None:
        self.path = path

    def fail(self, where: str, what: str, value: Any) -> PipesimError:
        return PipesimError(f"FILE {self.path!r}: {where} must be {what}, got {_show(value)}")

    def field(self, data: Any, key: str, where: str, made_by: str) -> Any:
        if not isinstance(data, dict) or key not in data:
            place = f"{where} has" if where else "has"
            raise PipesimError(
                f"FILE {self.path!r} {place} no {key!r}: expected the output of {named(made_by)}"
            )
        return data[key]

    def integer(self, value: Any, where: str, low: int, high: int = MAX_MICROBATCHES) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise self.fail(where, f"an integer from {low} to {high}", value)
        return value

    def number(
        self, value: Any, where: str, *, low: float | None = None, positive: bool = False
    ) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.fail(where, "a number", value)
        number = float(value) if abs(value) < 1e308 or isinstance(value, float) else math.inf
        if not math.isfinite(number):
            raise self.fail(where, "a finite number", value)
        if positive and number <= 0:
            raise self.fail(where, "a number > 0", value)
        if low is not None and number < low:
            raise self.fail(where, f"a number >= {low:g}", value)
        if abs(number) > LARGEST or (positive and number < SMALLEST):
            raise self.fail(
                where, f"a number from {SMALLEST if positive else -LARGEST:g} to {LARGEST:g}", value
            )
        return number

    def optional_number(
        self, row: dict[str, Any], key: str, where: str, **bounds: Any
    ) -> float | None:
        value = row.get(key)
        return None if value is None else self.number(value, f"{where}.{key}", **bounds)

    def text(self, value: Any, where: str) -> str:
        if not isinstance(value, str) or not value.strip():
            raise self.fail(where, "a non-empty string", value)
        return value

    def flag(self, row: dict[str, Any], key: str, where: str) -> bool:
        value = row.get(key, False)
        if not isinstance(value, bool):
            raise self.fail(f"{where}.{key}", "true or false", value)
        return value

    def objects(self, data: Any, key: str, made_by: str) -> list[dict[str, Any]]:
        rows = self.field(data, key, "", made_by)
        if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
            raise PipesimError(
                f"FILE {self.path!r}: {key!r} must be a list of objects ({named(made_by)})"
            )
        return rows


def read_json(path: str) -> Any:
    """The file's JSON (NaN and Infinity are read, and refused later by the field checks)."""
    try:
        raw = read_at_most(path, MAX_FILE_BYTES + 1)
    except OSError as error:
        raise PipesimError(f"FILE {path!r}: cannot read it ({error.strerror})") from None
    if len(raw) > MAX_FILE_BYTES:
        raise PipesimError(f"FILE {path!r}: larger than {MAX_FILE_BYTES // 2**20} MiB")
    try:
        return json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise PipesimError(f"FILE {path!r}: not JSON (not UTF-8 text)") from None
    except RecursionError:
        raise PipesimError(f"FILE {path!r}: not JSON (nested too deeply)") from None
    except ValueError as error:
        raise PipesimError(f"FILE {path!r}: not JSON ({error})") from None


@dataclass(frozen=True)
class SavedRun:
    """One simulated (or measured) run as ``pipesim plot timeline`` and ``memory`` need it."""

    schedule: str
    devices: int
    microbatches: int
    chunks: int
    iteration_time_s: float
    bubble_fraction: float
    oom: bool
    capacity_bytes: float | None
    compute: tuple[ComputeBar, ...]
    transfers: tuple[TransferBar, ...]
    memory: tuple[tuple[tuple[float, float], ...], ...]
    layout: str = ""

    @property
    def title(self) -> str:
        """``zbv, K=4, M=8, v=2: step 13.2 s, bubble 8.06%`` (and ``, out of memory``); a run
        of a model on hardware with its other dimensions: ``1f1b, K=4, M=8, T=2 SP D=4 b=1:
        ...``, so that panels of two hybrid runs say every dimension they differ in."""
        chunks = f", v={self.chunks}" if self.chunks > 1 else ""
        layout = f", {self.layout}" if self.layout else ""
        oom = ", out of memory" if self.oom else ""
        return (
            f"{self.schedule}, K={self.devices}, M={self.microbatches}{chunks}{layout}: step "
            f"{format_seconds(self.iteration_time_s)}, bubble "
            f"{format_percent(self.bubble_fraction)}{oom}"
        )


def layout_label(layout: Any) -> str:
    """A result's ``layout`` in a few words, ``T=2 SP D=4 b=1 recompute=full ZeRO-1`` ("" when
    the result has none: synthetic costs, or a file saved before it had one); anything but a
    well-formed layout reads as none, since a title is no place to refuse a file."""
    if not isinstance(layout, dict):
        return ""
    tensor, data = layout.get("tensor_parallel"), layout.get("data_parallel")
    size = layout.get("microbatch_size")
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (tensor, data)):
        return ""
    words = [f"T={tensor}"]
    if layout.get("sequence_parallel") is True:
        words.append("SP")
    words.append(f"D={data}")
    if isinstance(size, (int, float)) and not isinstance(size, bool) and size > 0:
        words.append(f"b={size:g}")
    recompute = layout.get("recompute")
    if isinstance(recompute, str) and recompute not in ("", "none") and len(recompute) < 20:
        words.append(f"recompute={recompute}")
    if layout.get("zero") == 1:
        words.append("ZeRO-1")
    return " ".join(words)


def saved_run(result: Any) -> dict[str, Any]:
    """The saved-run file of a :class:`~pipesim.engine.result.SimulationResult`: what
    ``pipesim simulate --save`` writes and :func:`load_run` reads back.

    ``result`` is the result's JSON; ``compute`` one ``[device, label, start_s, end_s]`` per
    action or optimizer step; ``transfers`` one ``[source, destination, label, start_s,
    end_s]`` per message; ``memory`` per device the ``[time_s, bytes]`` points of its memory
    curve.
    """
    return {
        "result": result.to_json(),
        "compute": [[r.device, r.label, r.start_s, r.end_s] for r in result.compute],
        "transfers": [
            [t.source_device, t.destination_device, t.label, t.start_s, t.end_s]
            for t in result.transfers
        ],
        "memory": [list(map(list, d.memory.timeline)) for d in result.per_device],
    }


def load_run(path: str, *, timeline: bool = True, memory: bool = True) -> SavedRun:
    """A saved run with its timeline bars (``timeline``) and memory curves (``memory``)
    checked; the parts not asked for are left empty."""
    check = _Checker(path)
    data = read_json(path)
    result = check.field(data, "result", "", RUN_FROM)
    if not isinstance(result, dict):
        raise check.fail("'result'", "an object (a simulation result)", result)
    where = "result"
    per_device = check.field(result, "per_device", where, RUN_FROM)
    if not isinstance(per_device, list) or not per_device or not isinstance(per_device[0], dict):
        raise check.fail("result.per_device", "a non-empty list of objects", per_device)
    devices = check.integer(
        check.field(result, "devices", where, RUN_FROM), "result.devices", 1, limit(Limit.DEVICES)
    )
    capacity = check.optional_number(
        per_device[0], "memory_capacity_bytes", "result.per_device[0]", positive=True
    )
    run = SavedRun(
        schedule=check.text(check.field(result, "schedule", where, RUN_FROM), "result.schedule"),
        devices=devices,
        microbatches=check.integer(
            check.field(result, "microbatches", where, RUN_FROM), "result.microbatches", 1
        ),
        chunks=check.integer(result.get("chunks", 1), "result.chunks", 1),
        iteration_time_s=check.number(
            check.field(result, "iteration_time", where, RUN_FROM),
            "result.iteration_time",
            positive=True,
        ),
        bubble_fraction=check.number(
            check.field(result, "bubble_fraction", where, RUN_FROM), "result.bubble_fraction"
        ),
        oom=check.flag(result, "oom", "result"),
        capacity_bytes=capacity,
        compute=tuple(_compute(check, data, devices)) if timeline else (),
        transfers=tuple(_transfers(check, data, devices)) if timeline else (),
        memory=tuple(_memory(check, data, devices)) if memory else (),
        layout=layout_label(result.get("layout")),
    )
    return run


def _times(check: _Checker, start: Any, end: Any, where: str) -> tuple[float, float]:
    begin = check.number(start, f"{where} start", low=0)
    finish = check.number(end, f"{where} end")
    if finish < begin:
        raise check.fail(f"{where} end", f"at least its start {begin:g}", end)
    return begin, finish


def _compute(check: _Checker, data: Any, devices: int) -> list[ComputeBar]:
    from pipesim.schedules import parse_action

    rows = check.field(data, "compute", "", RUN_FROM)
    shape = "a list of [device, label, start, end]"
    if not isinstance(rows, list) or not rows:
        raise check.fail("'compute'", f"a non-empty {shape}", rows)
    _check_count(check, rows, "compute")
    bars = []
    for index, row in enumerate(rows):
        where = f"compute[{index}]"
        if not isinstance(row, list) or len(row) != 4:
            raise check.fail(f"'compute' ({where})", shape, row)
        device, label, start, end = row
        device = check.integer(device, f"{where} device", 0, devices - 1)
        if label != "opt":
            try:
                label = str(parse_action(label))
            except (PipesimError, TypeError, AttributeError):
                raise PipesimError(
                    f"FILE {check.path!r}: {_show(label)} in 'compute' is no action such as 2F0"
                ) from None
        bars.append((device, label, *_times(check, start, end, where)))
    return bars


def _check_count(check: _Checker, rows: list[Any], field: str) -> None:
    """Refuse a timeline with more bars than a run of the actions limit has (its actions, and
    an optimizer step per device), before reading any: a bigger one was not made by pipesim
    with these limits, and costs time and memory in proportion."""
    limits.check(
        Limit.ACTIONS,
        len(rows) - limit(Limit.DEVICES),
        f"FILE {check.path!r}: {len(rows):,} bars in {field!r}",
    )


def _transfers(check: _Checker, data: Any, devices: int) -> list[TransferBar]:
    rows = check.field(data, "transfers", "", RUN_FROM)
    shape = "a list of [source, destination, label, start, end]"
    if not isinstance(rows, list):
        raise check.fail("'transfers'", shape, rows)
    _check_count(check, rows, "transfers")
    bars = []
    for index, row in enumerate(rows):
        where = f"transfers[{index}]"
        if not isinstance(row, list) or len(row) != 5:
            raise check.fail(f"'transfers' ({where})", shape, row)
        source, destination, label, start, end = row
        bars.append(
            (
                check.integer(source, f"{where} source", 0, devices - 1),
                check.integer(destination, f"{where} destination", 0, devices - 1),
                check.text(label, f"{where} label"),
                *_times(check, start, end, where),
            )
        )
    return bars


def _memory(check: _Checker, data: Any, devices: int) -> list[tuple[tuple[float, float], ...]]:
    curves = check.field(data, "memory", "", RUN_FROM)
    shape = "a list of [time, bytes] lists, one per device"
    if not isinstance(curves, list) or not curves or len(curves) > devices:
        raise check.fail("'memory'", shape, curves)
    out = []
    for device, curve in enumerate(curves):
        if not isinstance(curve, list):
            raise check.fail(f"memory[{device}]", "a list of [time, bytes]", curve)
        points = []
        for index, point in enumerate(curve):
            where = f"memory[{device}][{index}]"
            if not isinstance(point, list) or len(point) != 2:
                raise check.fail(where, "[time, bytes]", point)
            points.append(
                (
                    check.number(point[0], f"{where} time"),
                    check.number(point[1], f"{where} bytes", low=0),
                )
            )
        out.append(tuple(points))
    return out


# The fields each sweep figure reads, and how each is checked.
RowCheck = Callable[[_Checker, dict[str, Any], str], None]


def _positive(key: str) -> RowCheck:
    return lambda check, row, where: _set(
        row,
        key,
        check.number(check.field(row, key, where, SWEEP_FROM), f"{where}.{key}", positive=True),
    )


def _finite(key: str) -> RowCheck:
    return lambda check, row, where: _set(
        row, key, check.number(check.field(row, key, where, SWEEP_FROM), f"{where}.{key}")
    )


def _optional(key: str, **bounds: Any) -> RowCheck:
    return lambda check, row, where: _set(
        row, key, check.optional_number(row, key, where, **bounds)
    )


def _set(row: dict[str, Any], key: str, value: Any) -> None:
    if value is not None or key in row:
        row[key] = value


def _per_device(check: _Checker, row: dict[str, Any], where: str) -> None:
    devices = check.field(row, "per_device", where, SWEEP_FROM)
    if (
        not isinstance(devices, list)
        or not devices
        or not all(isinstance(d, dict) for d in devices)
    ):
        raise check.fail(f"{where}.per_device", "a non-empty list of objects", devices)
    most = limit(Limit.DEVICES)
    if len(devices) > most:
        raise check.fail(f"{where}.per_device", f"at most {most} devices", len(devices))
    cleaned = []
    for index, device in enumerate(devices):
        place = f"{where}.per_device[{index}]"
        entry: dict[str, float | bool | None] = {
            key: check.number(check.field(device, key, place, SWEEP_FROM), f"{place}.{key}", low=0)
            for key in ("static_memory_bytes", "peak_activation_bytes")
        }
        for key in ("peak_memory_bytes",):
            if device.get(key) is not None:
                entry[key] = check.number(device[key], f"{place}.{key}", low=0)
        entry["memory_capacity_bytes"] = check.optional_number(
            device, "memory_capacity_bytes", place, positive=True
        )
        entry["oom"] = check.flag(device, "oom", place)
        terms = device.get("memory_breakdown")
        if terms is not None:
            if not isinstance(terms, dict) or set(terms) - set(BREAKDOWN_TERMS):
                raise check.fail(
                    f"{place}.memory_breakdown",
                    f"an object of {', '.join(BREAKDOWN_TERMS)}",
                    terms,
                )
            entry["memory_breakdown"] = {  # type: ignore[assignment]
                key: check.number(terms[key], f"{place}.memory_breakdown.{key}", low=0)
                for key in BREAKDOWN_TERMS
                if key in terms
            }
        cleaned.append(entry)
    row["per_device"] = cleaned


SWEEP_CHECKS: dict[str, tuple[RowCheck, ...]] = {
    "speedup": (_positive("speedup"), _optional("throughput", positive=True)),
    "throughput": (_positive("throughput"), _optional("speedup", positive=True)),
    "bubble": (_finite("bubble_fraction"), _optional("analytic_bubble_fraction")),
    "peak-memory": (_per_device,),
}


def load_sweep(path: str, kind: str) -> list[dict[str, Any]]:
    """The successful runs of a saved sweep, each checked for what figure ``kind`` (a key of
    :data:`SWEEP_CHECKS`) reads: ``schedule``, ``devices``, ``microbatches``, the quantity.
    Runs that failed in the sweep (an ``error`` field) are left out; none left is an error."""
    check = _Checker(path)
    rows = check.objects(read_json(path), "results", SWEEP_FROM)
    out = []
    for index, raw in enumerate(rows):
        if "error" in raw:
            continue
        where = f"results[{index}]"
        row = _common(check, raw, where, SWEEP_FROM)
        for key in ("costs", "throughput_unit"):
            if key in raw:
                row[key] = check.text(raw[key], f"{where}.{key}") if raw[key] is not None else ""
        row["oom"] = check.flag(raw, "oom", where)
        for rule in SWEEP_CHECKS[kind]:
            rule(check, row, where)
        out.append(row)
    if not out:
        raise PipesimError(f"FILE {path!r}: no successful runs to plot")
    return out


def load_records(path: str) -> list[dict[str, Any]]:
    """The records of a validation's ``results.json``, checked: step times > 0, speedups
    finite."""
    check = _Checker(path)
    rows = check.objects(read_json(path), "records", RECORDS_FROM)
    out = []
    for index, raw in enumerate(rows):
        where = f"records[{index}]"
        row = _common(check, raw, where, RECORDS_FROM)
        for key in ("predicted_time", "measured_time"):
            row[key] = check.number(
                check.field(raw, key, where, RECORDS_FROM), f"{where}.{key}", positive=True
            )
        for key in ("predicted_speedup", "measured_speedup"):
            row[key] = check.number(check.field(raw, key, where, RECORDS_FROM), f"{where}.{key}")
        out.append(row)
    if not out:
        raise PipesimError(f"FILE {path!r}: no records to plot")
    return out


def _common(check: _Checker, raw: dict[str, Any], where: str, made_by: str) -> dict[str, Any]:
    """A copy of the row's fields, with ``schedule``, ``devices`` and ``microbatches``
    checked."""
    row = dict(raw)
    row["schedule"] = check.text(check.field(raw, "schedule", where, made_by), f"{where}.schedule")
    row["devices"] = check.integer(
        check.field(raw, "devices", where, made_by), f"{where}.devices", 1, limit(Limit.DEVICES)
    )
    row["microbatches"] = check.integer(
        check.field(raw, "microbatches", where, made_by), f"{where}.microbatches", 1
    )
    return row
