"""The sweep's output file: written only once a row without an error exists."""

from __future__ import annotations

from pathlib import Path

import pytest

from application.rows_file import SweepFile
from pipesim.errors import PipesimError

KEYS = [("1f1b", 2, 2, 1), ("1f1b", 2, 4, 1)]


def _row(key: tuple[str, int, int, int], error: str = "") -> dict[str, object]:
    schedule, devices, microbatches, chunks = key
    row: dict[str, object] = {
        "schedule": schedule,
        "devices": devices,
        "microbatches": microbatches,
        "chunks": chunks,
    }
    if error:
        row["error"] = error
    else:
        row.update(
            iteration_time=9.0,
            bubble_fraction=0.25,
            analytic_bubble_fraction=0.25,
            throughput=0.2,
            speedup=1.5,
            max_peak_memory_bytes=0.0,
            oom=False,
        )
    return row


def test_rows_that_are_all_errors_are_not_written(tmp_path: Path) -> None:
    out = tmp_path / "sw.json"
    sweep = SweepFile(out, KEYS, [])
    sweep.add(_row(KEYS[0], error="overflow"))
    assert sweep.save() is False and not out.exists()
    sweep.add(_row(KEYS[1]))
    assert sweep.save() is True and '"error": "overflow"' in out.read_text()


def test_a_resumed_file_with_results_is_written_even_when_new_rows_fail(tmp_path: Path) -> None:
    out = tmp_path / "sw.json"
    first = SweepFile(out, KEYS, [])
    first.add(_row(KEYS[0]))
    assert first.save()
    resumed = SweepFile(out, KEYS, [])
    assert resumed.resume() == 1
    resumed.add(_row(KEYS[1], error="overflow"))
    assert resumed.save() is True
    assert '"error": "overflow"' in out.read_text() and '"iteration_time": 9.0' in out.read_text()


def _saved_json(tmp_path: Path) -> tuple[Path, str]:
    """A sweep's JSON file of two rows, as a sweep writes them (per_device included)."""
    import json

    out = tmp_path / "sw.json"
    rows = [_row(key) for key in KEYS]
    for row in rows:
        row["per_device"] = [{"device": 0, "peak_memory_bytes": 0.0}]
    out.write_text(json.dumps({"results": rows, "skipped": []}))
    return out, out.read_text()


@pytest.mark.parametrize(
    ("old", "new", "problem"),
    [
        (
            '"per_device": [{"device": 0, "peak_memory_bytes": 0.0}]',
            '"per_device": null',
            "results[0]: per_device None is not a list of devices",
        ),
        (
            '"per_device": [{"device": 0, "peak_memory_bytes": 0.0}]',
            '"per_device": [7]',
            "results[0]: per_device[0] 7 is not an object",
        ),
        (
            '"peak_memory_bytes": 0.0',
            '"peak_memory_bytes": "x"',
            "results[0]: per_device[0].peak_memory_bytes 'x' is not a number >= 0",
        ),
        ('"speedup": 1.5', '"speedup": null', "results[0]: speedup is missing"),
        ('"oom": false', '"oom": null', "results[0]: oom is missing"),
        ('"throughput": 0.2', '"throughput": NaN', "results[0]: throughput nan is not a finite"),
        ('"chunks": 1', '"chunks": 1, "extra": [Infinity]', "results[0]: extra[0] inf is not a"),
    ],
)
def test_a_resumed_json_row_with_a_bad_field_is_refused_naming_file_row_and_field(
    tmp_path: Path, old: str, new: str, problem: str
) -> None:
    out, text = _saved_json(tmp_path)
    out.write_text(text.replace(old, new, 1))
    with pytest.raises(PipesimError) as error:
        SweepFile(out, KEYS, []).resume()
    assert str(error.value).startswith(f"--resume: {str(out)!r} {problem}")


def test_a_resumed_csv_result_without_its_numbers_is_refused(tmp_path: Path) -> None:
    from application.rows_file import COLUMNS

    out = tmp_path / "sw.csv"
    out.write_text(",".join(COLUMNS) + "\n1f1b,2,2,1,,0.25,0.25,0.2,1.5,0.0,False,\n")
    with pytest.raises(PipesimError, match=r"line 2: iteration_time is missing"):
        SweepFile(out, KEYS, []).resume()


def test_a_resumed_json_file_of_good_rows_is_taken(tmp_path: Path) -> None:
    out, _ = _saved_json(tmp_path)
    assert SweepFile(out, KEYS, []).resume() == 2
