"""Pieces of the measuring session that need no second process: the probes the registry
chooses, and the resident-memory measurement that checks the executor's stash count."""

from __future__ import annotations

import sys

import pytest
import torch

from executor.backends import DeviceKind
from validation.rounds import Stability, keep_measuring, probe_runs
from validation.session import rss_rise
from validation.suites import Case, ModelKind, ModelSpec

MiB = 2**20


def _case(devices: int) -> Case:
    model = ModelSpec(ModelKind.MLP, width=8, layers=4, microbatch_size=2)
    return Case("c", model, devices, (1, 2), ("1f1b",), DeviceKind.CPU)


def test_probes_are_the_registry_s_at_three_k_microbatches() -> None:
    assert probe_runs(_case(2), 1) == [("1f1b", 6), ("zb-h1", 6)]
    assert probe_runs(_case(2), 2) == [("interleaved-1f1b", 6), ("zbv", 6)]
    assert probe_runs(_case(4), 3) == [("interleaved-1f1b", 12), ("interleaved-zb", 12)]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_rss_rise_sees_what_a_block_allocates_and_not_more() -> None:
    with rss_rise() as rise:
        kept = torch.ones(40 * MiB // 4)  # 40 MiB, touched
    assert kept.sum() > 0
    measured = rise()
    assert measured is not None and 38 * MiB <= measured < 48 * MiB
    del kept
    with rss_rise() as rise:
        small = torch.ones(1024)
    assert small.sum() > 0
    measured = rise()
    assert measured is not None and measured < 4 * MiB
    # Memory freed inside the block still counts: the high-water mark, not the end (less the
    # free pages the allocator kept, which a new tensor reuses: a few hundred KiB alone, but
    # 20 MiB or more after a whole suite's tests in one process, where a 20 MiB tensor once
    # measured 0; so the tensor is larger than anything kept, and the bound leaves room).
    with rss_rise() as rise:
        transient = torch.ones(160 * MiB // 4)
        del transient
    measured = rise()
    assert measured is not None and measured >= 100 * MiB


def test_measuring_goes_on_while_noisy_and_within_budget() -> None:
    stability = Stability(target_uncertainty=0.025, budget_s=60.0)
    quiet = [[1.0, 1.01, 1.02], [2.0, 2.02, 2.01], [3.0, 3.0, 3.3]]
    noisy = [[1.0, 1.2, 1.3], [2.0, 2.5, 2.2], [3.0, 3.0, 3.01]]
    assert not keep_measuring(quiet, stability, 10.0)
    assert keep_measuring(noisy, stability, 10.0)
    assert not keep_measuring(noisy, stability, 60.0)
    assert not keep_measuring([], stability, 0.0)
