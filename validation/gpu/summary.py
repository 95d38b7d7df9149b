"""``python -m validation.gpu.summary OUTDIR``: the prepared GPU check's short table.

Reads what ``run.sh`` left under OUTDIR (measured cases of the partitioned suite, the layer
record, the CUDA tests' log) and prints, for each measured run, predicted against measured
step time, speedup over one lane and memory (each lane's stash, the whole GPU's peak), then
the medians and the layer timing's block ratios. Needs no GPU: it reads files, so it also
prints a record brought back from a GPU machine.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

from executor.errors import first_line
from pipesim.errors import PipesimError
from pipesim.files.inputs import decode_text, read_input
from validation.compare import compare_case
from validation.schema import CaseMeasurement, Comparison


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1%}"


def read_record(path: Path) -> object:
    """A record's JSON, read as every input is (size-limited, a FIFO bounded, text decoded):
    anything unreadable is a one-line :class:`PipesimError` naming the file."""
    text = decode_text(read_input(path, "record"), f"record {str(path)!r}")
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as error:
        raise PipesimError(f"{str(path)!r} is not JSON ({first_line(error)})") from None


def measured_case(path: Path) -> CaseMeasurement:
    """A measured case, checked as ``--reuse`` checks it: its fields, and that the file is
    named for the case it holds."""
    data = read_record(path)
    try:
        measured = CaseMeasurement.from_json(data)
    except PipesimError as error:
        raise PipesimError(f"{str(path)!r}: {error}") from None
    expected = f"measured-{measured.case.name}.json"
    if path.name != expected:
        raise PipesimError(
            f"{str(path)!r} holds case {measured.case.name!r} (its file is named {expected})"
        )
    return measured


def partitioned_lines(folder: Path) -> list[str]:
    """The measured runs under ``folder`` against their predictions, as a Markdown table."""
    files = sorted(folder.glob("measured-*.json"))
    if not files:
        return [f"no partitioned measurements in {folder}"]
    records: list[Comparison] = []
    lines: list[str] = []
    for path in files:
        measured = measured_case(path)
        try:
            compared = compare_case(measured)
        except (ArithmeticError, KeyError, ValueError) as error:
            raise PipesimError(
                f"{str(path)!r} cannot be predicted: {type(error).__name__}: {first_line(error)}"
            ) from None
        if not lines:
            lines += [
                f"{measured.machine.gpu or measured.machine.processor}, torch "
                f"{measured.machine.torch}; {measured.machine.lanes}",
                "",
                "| K | schedule | M | predicted ms | measured ms | error | speedup p/m "
                "| error | stash error (max over lanes) | device peak p/m GiB | error |",
                "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
            ]
        for r in compared:
            records.append(r)
            peak = (
                f"{r.predicted_device_peak_bytes / 2**30:.2f} / "
                f"{r.measured_device_peak_bytes / 2**30:.2f}"
                if r.predicted_device_peak_bytes is not None and r.measured_device_peak_bytes
                else "-"
            )
            lines.append(
                f"| {r.devices} | {r.schedule} | {r.microbatches} | {r.predicted_time * 1e3:.1f} "
                f"| {r.measured_time * 1e3:.1f} | {_percent(r.time_error)} "
                f"| {r.predicted_speedup:.2f} / {r.measured_speedup:.2f} "
                f"| {_percent(r.speedup_error)} | {r.stash_memory_error:.1%} | {peak} "
                f"| {'-' if r.memory_error is None else f'{r.memory_error:.1%}'} |"
            )
    times = [abs(r.time_error) for r in records]
    speedups = [abs(r.speedup_error) for r in records]
    peaks = [r.memory_error for r in records if r.memory_error is not None]
    lines += [
        "",
        f"{len(records)} runs: median |step error| {statistics.median(times):.1%} (max "
        f"{max(times):.1%}), median |speedup error| {statistics.median(speedups):.1%}, largest "
        f"stash error {max(r.stash_memory_error for r in records):.1%}"
        + (
            f", median |device peak error| {statistics.median(peaks):.1%} (max {max(peaks):.1%})"
            if peaks
            else ""
        ),
    ]
    return lines


def layer_lines(path: Path) -> list[str]:
    """The layer record's block table beside pipesim's prediction for the GPU it ran on."""
    if not path.is_file():
        return [f"no layer record at {path}"]
    from pipesim.hardware import resolve_hardware
    from validation.layer_timing import report

    record = read_record(path)
    if not isinstance(record, dict) or not isinstance(record.get("cases"), list):
        raise PipesimError(f"{str(path)!r} is not a layer record (no list of cases)")
    name = "h100" if "H100" in str(record.get("device", "")) else "h200"
    try:
        lines = report(record, resolve_hardware(name).accelerator)
    except (ArithmeticError, KeyError, ValueError, TypeError, AttributeError) as error:
        raise PipesimError(
            f"{str(path)!r} is not a layer record this pipesim reads ({type(error).__name__}: "
            f"{first_line(error)})"
        ) from None
    start = next((i for i, line in enumerate(lines) if line.startswith("| block")), len(lines))
    title = f"layer timing on {record.get('device')}, predicted with the {name} entry"
    return [title, "", *lines[start:]]


def main(argv: list[str] | None = None) -> int:
    """Print the table; exit 2 in one line when OUTDIR is not a folder or a record is bad."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or not Path(args[0]).is_dir():
        sys.stderr.write("usage: python -m validation.gpu.summary OUTDIR (a folder run.sh wrote)\n")
        return 2
    out = Path(args[0])
    if not (out / "partitioned").is_dir() and not (out / "layers.json").exists():
        sys.stderr.write(
            f"summary: {str(out)!r} holds no records of run.sh (partitioned/, layers.json)\n"
        )
        return 2
    try:
        lines = [*partitioned_lines(out / "partitioned"), "", *layer_lines(out / "layers.json")]
    except PipesimError as error:
        sys.stderr.write(f"summary: {first_line(error)}\n")
        return 2
    tests = out / "cuda-tests.log"
    if tests.is_file():
        last = tests.read_text(encoding="utf-8", errors="replace").strip().splitlines()
        lines += ["", f"CUDA tests: {last[-1] if last else 'no output'}"]
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
