"""Benchmarks (``pytest -m bench``): measured and printed, never asserted against a time."""

from __future__ import annotations

import json

import pytest

from application.bench import (
    engine_rates,
    model_benchmark,
    peak_memory_bytes,
    sweep_benchmark,
    table_2_benchmark,
)


@pytest.mark.bench
def test_sweep_throughput() -> None:
    result = sweep_benchmark(1000)
    assert result.configs == 1000
    print(json.dumps(result.to_json(), indent=2))


@pytest.mark.bench
def test_model_sweep_throughput() -> None:
    result = model_benchmark(100)
    assert result.configs == 100
    print(json.dumps(result.to_json(), indent=2))


@pytest.mark.bench
def test_engine_rates_and_table_2() -> None:
    rates = engine_rates(engines=("simpy", "interpreted", "numba"), repeats=1)
    # Actions really played: ZB-H1 splits every backward, three actions per stage and batch.
    assert [r.actions for r in rates] == [2 * 8 * 32, 2 * 64 * 1024, 2 * 64 * 256, 3 * 32 * 512]
    table = table_2_benchmark()
    assert table.configs == 18
    print(json.dumps([r.to_json() for r in rates] + [table.to_json()], indent=2))


# The memory target of the 131,072-action 1F1B run (build, validate, simulate, JSON); 84 MB
# was measured when it was set, 219 MiB before the fast engine.
PEAK_MEMORY_BUDGET_BYTES = 160 * 2**20


@pytest.mark.bench
def test_peak_memory() -> None:
    """The 131,072-action run stays within its memory budget, and the figure measures the run:
    a run 32 times smaller holds less."""
    large = peak_memory_bytes()
    small = peak_memory_bytes(devices=16, microbatches=128)
    print(
        f"peak memory at 1F1B K=64 M=1024: {large / 1e6:.0f} MB (K=16 M=128: {small / 1e6:.0f} MB)"
    )
    assert 0 < small < large <= PEAK_MEMORY_BUDGET_BYTES


def test_bench_command_runs_small(capsys: pytest.CaptureFixture[str]) -> None:
    """The command itself, on a tiny grid (not a benchmark: it only has to run)."""
    from application import bench

    cases = (("gpipe", 2, 4, 1), ("zb-h1", 2, 2, 1))
    rates = bench.engine_rates(cases, engines=("simpy", "interpreted"), repeats=1)
    assert [r.actions for r in rates] == [16, 12]
    assert set(rates[0].to_json()["actions_per_s"]) == {"simpy", "fast (interpreted)"}
    sweep = bench.sweep_benchmark(5, engine="fast")
    assert sweep.configs == 5 and sweep.to_json()["configs_per_s"] > 0
    reused = bench.sweep_benchmark(5, engine="fast", reuse_schedules=True)
    assert reused.actions == sweep.actions and "built once per shape" in reused.name


def test_the_plain_longest_path_agrees_with_the_engine_on_small_cases() -> None:
    """The bench's independent longest path (no channel booking) gives the engine's makespan
    where no link is contended, so the two loops it times compute the same thing."""
    from application import bench

    cases = (
        ("gpipe", 3, 4, 1),
        ("1f1b", 4, 8, 1),
        ("interleaved-1f1b", 2, 4, 2),
        ("zb-h1", 3, 6, 1),
    )
    for rate in bench.path_rates(cases, repeats=1):
        assert rate.makespan_s == rate.engine_makespan_s > 0
        assert rate.to_json()["items_per_s"]["plain longest path (python)"] > 0


@pytest.mark.bench
def test_end_to_end_and_cluster_sweep() -> None:
    from application import bench

    print(f"131,072-action 1F1B end to end in one process: {bench.end_to_end_s():.3f} s")
    print(json.dumps(bench.command_end_to_end(), indent=2))
    for rate in bench.cluster_sweep(200):
        assert rate.configs == 200
        print(json.dumps(rate.to_json(), indent=2))
