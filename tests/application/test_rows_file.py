"""The sweep's output file: written only once a row without an error exists."""

from __future__ import annotations

from pathlib import Path

from application.rows_file import SweepFile

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
