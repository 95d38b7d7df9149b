"""Issue 14's refusals of simulate, sweep, schedule, bench, plan and partition in one table:
each is the documented exit status with exactly one line on stderr (no traceback, no warning
lines above it) holding the expected fragment, and nothing on stdout. ``{tmp}`` in an argument
is the test's folder, which holds ``binary.toml`` (not UTF-8) for the file cases."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipesim.plan.space import candidates, divisors

from .test_schedule_cli import run

SIM = ["simulate", "--schedule", "1f1b", "-K", "2", "-M", "2"]
SWEEP = ["sweep", "--schedules", "1f1b", "-K", "2", "-M", "2"]
PLAN = ["plan", "--model", "uniform-4", "--hardware", "a100"]
MANY_LAYERS = ",".join(["1"] * 5000)
LIMIT = "; set PIPESIM_MAX_{}S to raise it"

CASES: list[tuple[list[str], int, str]] = [
    # simulate: values no run can use, results pipesim could not save, size limits
    ([*SIM, "--costs", "nan,1"], 2, "costs F must be a number >= 0, got nan"),
    ([*SIM, "--costs", "1,1", "--comm", "inf"], 2, "comm must be a number >= 0, got inf"),
    ([*SIM, "--costs", "1e308,1e308"], 2, "iteration_time is inf (the costs overflow a float)"),
    ([*SIM, "--costs", "0,0"], 2, "iteration_time is 0 s (every cost is zero)"),
    ([*SIM, "--costs", "1e300,1e300"], 2, "iteration_time is 6e+300, beyond 1e+15"),
    ([*SIM, "--model", "nope", "--hardware", "a100"], 2, "unknown model 'nope'"),
    ([*SIM, "--model", "{tmp}/binary.toml", "--hardware", "a100"], 2, "(not UTF-8 text"),
    ([*SIM, "--model", "uniform-4", "--hardware", "{tmp}/binary.toml"], 2, "(not UTF-8 text"),
    ([*SIM, "--costs", "1,1", "--steps", "0"], 2, "--steps must be an integer >= 1, got 0"),
    (
        ["simulate", "--schedule", "1f1b", "-K", "8", "-M", "1000000000", "--costs", "1,1"],
        2,
        "16,000,000,000 actions: beyond the limit of 1,048,576 actions" + LIMIT.format("ACTION"),
    ),
    (
        [*SIM, "--costs", "1,1", "--save", "{tmp}/missing/s.json"],
        2,
        "--save: directory '{tmp}/missing' does not exist",
    ),
    # sweep: a bad global input is exit 2 before any work; limits; options
    ([*SWEEP, "--costs", "nan,nan"], 2, "costs F must be a number >= 0, got nan"),
    ([*SWEEP, "--model", "nope", "--hardware", "a100"], 2, "unknown model 'nope'"),
    ([*SWEEP, "--model", "uniform-4", "--hardware", "{tmp}/binary.toml"], 2, "(not UTF-8 text"),
    (
        ["sweep", "--schedules", "1f1b,nope", "-K", "2", "-M", "2", "--costs", "1,1"],
        2,
        "unknown schedule 'nope'",
    ),
    (
        ["sweep", "--schedules", "1f1b", "-K", "2", "-M", "1000000000", "--costs", "1,1"],
        2,
        "4,000,000,000 actions: beyond the limit of 1,048,576 actions",
    ),
    ([*SWEEP, "--costs", "1,1", "--jobs", "0"], 2, "--jobs must be an integer >= 1, got 0"),
    ([*SWEEP, "--costs", "1,1", "--resume"], 2, "--resume needs --out FILE"),
    (
        [*SWEEP, "-v", "2,x", "--costs", "1,1"],
        2,
        "-v/--chunks: expected a comma-separated list of integers >= 1, got '2,x'",
    ),
    # schedule
    (
        ["schedule", "show", "--schedule", "1f1b", "-K", "8", "-M", "1000000000"],
        2,
        "beyond the limit of 1,048,576 actions" + LIMIT.format("ACTION"),
    ),
    (
        ["schedule", "export", "--schedule", "1f1b", "-K", "2", "-M", "2", "--out", "{tmp}"],
        2,
        "--out: '{tmp}' is a directory",
    ),
    (["schedule", "check", "{tmp}/binary.toml"], 2, "(not UTF-8 text: b'\\x89' at byte 11)"),
    # bench
    (["bench", "--configs", "0"], 2, "argument --configs: expected an integer >= 1, got '0'"),
    (
        ["bench", "--configs", "1000000000"],
        2,
        "beyond the limit of 100,000 configurations" + LIMIT.format("CONFIG"),
    ),
    # plan
    ([*PLAN, "--devices", "0"], 2, "--devices must be an integer >= 1, got 0"),
    ([*PLAN, "--devices", "8", "--top", "0"], 2, "--top must be an integer >= 1, got 0"),
    (
        [*PLAN, "--devices", "8", "--chunks", "1,0"],
        2,
        "--chunks must be integers >= 1 separated by commas, got '1,0'",
    ),
    (
        ["plan", "--model", "{tmp}/binary.toml", "--hardware", "a100", "--devices", "8"],
        2,
        "(not UTF-8 text",
    ),
    ([*PLAN, "--devices", "8", "--plot", "p.txt"], 2, "--plot 'p.txt' must end in .png or .svg"),
    # partition
    (
        ["partition", "--costs", "1,1e308,1e308", "-K", "2"],
        2,
        "--costs: the per-layer seconds overflow a float: give smaller ones",
    ),
    (
        ["partition", "--costs", MANY_LAYERS, "-K", "100"],
        2,
        "partition of 5,000 layers into 100 stages: 2,501,000,100 table cells: beyond the "
        "limit of 67,108,864 table cells; set PIPESIM_MAX_PARTITION_CELLS to raise it",
    ),
    (
        ["partition", "--costs", MANY_LAYERS + ",x", "-K", "2"],
        2,
        "(10,003 characters)",
    ),
    (["partition", "--costs", "1,2,3", "-K", "4"], 2, "4 stages need at least 4 layers"),
    (["partition", "--model", "uniform-4", "-K", "2"], 2, "--hardware is required with --model"),
]


@pytest.mark.filterwarnings("error::RuntimeWarning")  # no numpy warning lines above the error
@pytest.mark.parametrize(("argv", "status", "fragment"), CASES, ids=lambda v: str(v)[:60])
def test_a_refusal_is_one_line_with_its_exit_status(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    argv: list[str],
    status: int,
    fragment: str,
) -> None:
    (tmp_path / "binary.toml").write_bytes(b"name = 'a'\n\x89PNG\r\n\x1a\n\x00\xff")
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    got, out, err = run(capsys, *argv)
    assert got == status and out == "", err
    assert err.count("\n") == 1 and err.endswith("\n") and "Traceback" not in err, err
    assert err.startswith("pipesim"), err
    assert fragment.replace("{tmp}", str(tmp_path)) in err, err
    assert len(err) < 400, err


def test_no_partition_table_is_allocated_beyond_the_limit(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The limit is estimated first: 10 layers on 2 stages is 2 x 11**2 = 242 cells."""
    argv = ["partition", "--costs", ",".join(["1"] * 10), "-K", "2"]
    monkeypatch.setenv("PIPESIM_MAX_PARTITION_CELLS", "241")
    status, _, err = run(capsys, *argv)
    assert status == 2 and "242 table cells: beyond the limit of 241 table cells" in err
    monkeypatch.setenv("PIPESIM_MAX_PARTITION_CELLS", "242")
    status, out, _ = run(capsys, *argv)
    assert status == 0 and out.startswith("balanced partition: 5,5")


@settings(max_examples=30)
@given(n=st.integers(min_value=1, max_value=5000))
def test_divisors_match_trial_division(n: int) -> None:
    assert divisors(n) == [d for d in range(1, n + 1) if n % d == 0]


@settings(max_examples=15)
@given(devices=st.sampled_from([1, 2, 4, 6, 8]), batch=st.integers(min_value=1, max_value=2000))
def test_plan_candidates_are_what_every_divisor_of_the_batch_gave(devices: int, batch: int) -> None:
    """The micro-batch counts (at most the cap) that divide the per-replica batch, in order
    of increasing micro-batch size: what walking every divisor of the batch gave."""
    found = list(  # one entry per shape, in order (each shape comes with and without remat)
        dict.fromkeys(
            (c.devices, c.microbatches, c.microbatch_size)
            for c in candidates(devices, batch, 8, schedules=("gpipe",), max_microbatches=64)
        )
    )
    expected: list[tuple[int, int, int]] = []
    for k in (k for k in range(1, devices + 1) if devices % k == 0):
        if batch % (devices // k):
            continue
        per_replica = batch // (devices // k)
        for b in (b for b in range(1, per_replica + 1) if per_replica % b == 0):
            if per_replica // b <= 64:
                expected.append((k, per_replica // b, b))
    assert found == expected


def test_a_huge_plan_batch_enumerates_only_the_capped_micro_batch_counts() -> None:
    """``plan --batch 10**18`` walked every divisor candidate up to the batch (a hang)."""
    found = {c.microbatches for c in candidates(8, 10**18, 4)}
    assert found and max(found) <= 512
    assert all(10**18 % m == 0 for m in found)
