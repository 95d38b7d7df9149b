"""The validator's fast pass (integer encoding, numpy checks, one integer dry run) against its
readable checks: the same verdict on valid and broken schedules alike, and the compiled dry run
against the interpreted one."""

from __future__ import annotations

import random
import sys
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipesim.common.jit import numba_available
from pipesim.errors import ScheduleError
from pipesim.schedules import Action, Schedule
from pipesim.schedules.dry_run import dry_run_kernel

from .strategies import schedules

validate_module = sys.modules["pipesim.schedules.validator"]


def broken(schedule: Schedule, rng: random.Random) -> Any:
    """``schedule``'s fields with one random fault, or none (a stand-in the checks can read)."""
    rows = [list(r) for r in schedule.device_actions]
    device = rng.randrange(len(rows))
    row = rows[device]
    fault = rng.choice(["swap", "drop", "duplicate", "move", "rename", "recopy", "none"])
    if fault == "swap" and len(row) > 1:
        i, j = rng.sample(range(len(row)), 2)
        row[i], row[j] = row[j], row[i]
    elif fault == "drop" and row:
        row.pop(rng.randrange(len(row)))
    elif fault == "duplicate" and row:
        row.insert(rng.randrange(len(row) + 1), rng.choice(row))
    elif fault == "move" and row and len(rows) > 1:
        action = row.pop(rng.randrange(len(row)))
        rows[(device + 1) % len(rows)].append(action)
    elif fault == "rename" and row:
        a = row[rng.randrange(len(row))]
        row[row.index(a)] = Action(a.stage, a.kind, a.microbatch + rng.choice([0, 1]))
    elif fault == "recopy" and row and schedule.copies > 1:  # the other copy's stage
        a = row[rng.randrange(len(row))]
        other = (a.stage + schedule.model_stages) % schedule.stages
        row[row.index(a)] = Action(other, a.kind, a.microbatch)
    return SimpleNamespace(
        name="broken",
        microbatches=schedule.microbatches,
        placement=schedule.placement,
        device_actions=tuple(tuple(r) for r in rows),
        rematerialize=schedule.rematerialize,
        copies=schedule.copies,
        routes=schedule.routes,
    )


def readable_verdict(candidate: Any) -> bool:
    """Whether the readable checks (2 to 4) pass."""
    try:
        validate_module.check_readably(candidate)
    except ScheduleError:
        return False
    return True


@given(schedules(max_devices=5, max_microbatches=8), st.randoms(use_true_random=False))
@settings(max_examples=150)
def test_the_fast_pass_and_the_readable_checks_agree(
    schedule: Schedule, rng: random.Random
) -> None:
    candidate = broken(schedule, rng)
    encoded = validate_module.encode(candidate)
    # None: checks 2 to 4 failed; a deadlock or an encoding: they passed.
    assert (encoded is not None) == readable_verdict(candidate)
    if isinstance(encoded, validate_module.Deadlock):
        error = validate_module.deadlock_error(candidate, encoded)
        assert str(error).startswith("deadlock: no device can go on; device ")


@pytest.mark.skipif(not numba_available(), reason="the fast extra (numba) is not installed")
@given(schedules(max_devices=5, max_microbatches=8), st.randoms(use_true_random=False))
@settings(max_examples=60)
def test_the_compiled_dry_run_walks_as_the_interpreted_one(
    schedule: Schedule, rng: random.Random
) -> None:
    encoded = schedule.encoded
    rows = encoded.row_starts
    needs = encoded.upstream.copy()
    if rng.random() < 0.5:  # a random extra wait, which may deadlock
        i, j = rng.randrange(len(needs)), rng.randrange(len(needs))
        needs[i] = j
    walked, stopped = [0] * len(needs), [0] * (len(rows) - 1)
    ran = dry_run_kernel.python(rows.tolist(), needs.tolist(), walked, stopped)
    order = np.zeros(len(needs), dtype=np.int64)
    stopped_at = np.zeros(len(rows) - 1, dtype=np.int64)
    assert dry_run_kernel.compiled()(rows, needs, order, stopped_at) == ran
    assert order[:ran].tolist() == walked[:ran]
    assert stopped_at.tolist() == stopped
