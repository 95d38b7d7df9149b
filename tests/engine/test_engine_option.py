"""``--engine simpy|fast|auto`` on simulate and sweep: the result names the engine that ran,
and the issue's two cases give the alpha-beta figures of the zero-bubble authors' timers."""

from __future__ import annotations

import json

import pytest

from ..cli.test_schedule_cli import run


@pytest.mark.parametrize(
    ("engine", "expected"), [("simpy", "simpy"), ("fast", "fast"), ("auto", "fast"), (None, "fast")]
)
def test_simulate_names_the_engine(
    capsys: pytest.CaptureFixture[str], engine: str | None, expected: str
) -> None:
    option = [] if engine is None else ["--engine", engine]
    argv = ["--schedule", "gpipe", "-K", "4", "-M", "8", "--costs", "1,1", "--comm", "1.5"]
    status, out, _ = run(capsys, "simulate", *argv, "--json", *option)
    assert status == 0
    result = json.loads(out)
    assert (result["engine"], result["iteration_time"]) == (expected, 31.0)


@pytest.mark.parametrize("engine", ["simpy", "fast"])
def test_latency_does_not_serialize_messages(
    capsys: pytest.CaptureFixture[str], engine: str
) -> None:
    argv = ["--schedule", "looped-bfs", "-K", "2", "-M", "32", "-v", "3", "--costs", "1,1,0.5"]
    status, out, _ = run(capsys, "simulate", *argv, "--comm", "1.5", "--json", "--engine", engine)
    assert status == 0
    assert json.loads(out)["iteration_time"] == pytest.approx(83.83333333333333, rel=1e-12)


def test_sweep_takes_the_engine(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--schedules", "1f1b,zb-h1", "-K", "2,4", "-M", "8", "--costs", "1,2,1", "--json"]
    results = {}
    for engine in ("simpy", "fast"):
        status, out, _ = run(capsys, "sweep", *argv, "--engine", engine)
        assert status == 0
        rows = json.loads(out)["results"]
        assert {r["engine"] for r in rows} == {engine}
        results[engine] = [(r["schedule"], r["devices"], r["iteration_time"]) for r in rows]
    assert results["simpy"] == results["fast"]
