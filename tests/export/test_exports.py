"""Chrome trace (Trace Event Format, loads in Perfetto) and timeline CSV."""

from __future__ import annotations

import csv
import io
import json
import numbers
from typing import Any

from pipesim.costs import synthetic_costs
from pipesim.engine import simulate
from pipesim.export import chrome_trace, timeline_csv
from pipesim.schedules import build

REQUIRED = {
    # Trace Event Format: fields each phase needs (Google's "Trace Event Format" document).
    "X": {"name", "ph", "ts", "dur", "pid", "tid"},
    "M": {"name", "ph", "pid", "args"},
    "C": {"name", "ph", "ts", "pid", "args"},
}


def sample_trace() -> dict[str, Any]:
    result = simulate(
        build("interleaved-1f1b", 2, 4, 2),
        synthetic_costs(2, 2, 1.0, 2.0, comm_s=0.1, activation_bytes=100.0),
        steps=2,
    )
    memory = [d.memory.timeline for d in result.per_device]
    return chrome_trace(result.compute, result.transfers, 2, title="t", memory=memory)


def test_trace_events_have_the_formats_required_fields() -> None:
    trace = json.loads(json.dumps(sample_trace()))  # JSON round trip: no exotic values
    events = trace["traceEvents"]
    assert events and trace["displayTimeUnit"] == "ms"
    for event in events:
        assert REQUIRED[event["ph"]] <= set(event), event
        if event["ph"] == "X":
            assert isinstance(event["ts"], numbers.Real) and event["dur"] >= 0
        if event["ph"] == "C":
            assert all(isinstance(v, numbers.Real) for v in event["args"].values())


def test_trace_has_a_track_per_device_and_per_link_channel() -> None:
    events = sample_trace()["traceEvents"]
    names = {e["tid"]: e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert names[0] == "device 0" and names[1] == "device 1"
    # Synthetic costs name their one link "link": each direction is a track of its own,
    # named once (not "link link 0->1").
    assert sorted(v for v in names.values() if not v.startswith("device")) == [
        "link 0->1",
        "link 1->0",
    ]
    compute = [e for e in events if e["ph"] == "X" and e["tid"] in (0, 1)]
    assert len(compute) == 2 * (2 * 4 * 2 * 2 + 2)  # 2 steps x (32 actions + 2 optimizer)
    assert {e["cat"] for e in compute} == {"forward", "backward", "optimizer"}
    assert any(e["ph"] == "C" for e in events)


def test_timeline_csv_has_one_row_per_action_and_transfer() -> None:
    result = simulate(build("1f1b", 2, 2), synthetic_costs(2, 1, 1.0, 2.0, comm_s=0.5))
    rows = list(csv.DictReader(io.StringIO(timeline_csv(result.compute, result.transfers))))
    assert len(rows) == len(result.compute) + len(result.transfers)
    first = rows[0]
    assert (first["type"], first["device"], first["action"], first["start_s"]) == (
        "compute",
        "0",
        "0F0",
        "0.0",
    )
    transfer = next(r for r in rows if r["type"] == "transfer")
    assert (transfer["action"], transfer["source_device"], transfer["destination_device"]) == (
        "0F0->1F0",
        "0",
        "1",
    )


def test_dualpipe_exports_both_directions_and_the_saved_run_loads(tmp_path: Any) -> None:
    """Two copies of the model: transfers run both ways on every link at once (each
    direction its own channel), every action and transfer is a row, and the saved run
    (its JSON naming the copies) loads back."""
    from pipesim.export.saved import load_run, saved_run

    schedule = build("dualpipe", 4, 8)
    result = simulate(schedule, synthetic_costs(4, 1, 1.0, 1.0, 1.0, comm_s=0.1))
    assert result.to_json()["copies"] == 2
    one_copy = simulate(build("1f1b", 4, 8), synthetic_costs(4, 1, 1.0, 1.0))
    assert "copies" not in one_copy.to_json()
    events = chrome_trace(result.compute, result.transfers, 4, title="t")["traceEvents"]
    names = {e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert {"link 0->1", "link 1->0", "link 2->3", "link 3->2"} <= names
    rows = list(csv.DictReader(io.StringIO(timeline_csv(result.compute, result.transfers))))
    assert sum(r["type"] == "compute" for r in rows) == len(schedule.actions()) + 4
    # each micro-batch crosses K-1 links forward and back, in its own copy's direction
    assert sum(r["type"] == "transfer" for r in rows) == 8 * 3 * 2
    path = tmp_path / "run.json"
    path.write_text(json.dumps(saved_run(result)))
    loaded = load_run(str(path))
    assert (loaded.schedule, loaded.devices, loaded.microbatches) == ("dualpipe", 4, 8)
