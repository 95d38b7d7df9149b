"""The memory model against the papers' closed forms."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from pipesim.analysis.paper_memory import (
    gpipe_remat_peak_activation_bytes,
    one_f_one_b_in_flight,
    zb_h2_in_flight,
)
from pipesim.costs import PipelineCosts, StageCosts, synthetic_costs
from pipesim.engine import simulate
from pipesim.hardware import Link, Network, Topology
from pipesim.schedules import build

ACT = 1000.0


def costs_with(
    devices: int,
    *,
    weights: float = 0.0,
    capacity: float = float("inf"),
    input_bytes: float = 0.0,
    keep_for_w: float = ACT,
) -> PipelineCosts:
    stage = StageCosts(
        1.0,
        2.0,
        1.0,
        activation_bytes=ACT,
        weight_grad_activation_bytes=keep_for_w,
        input_bytes=input_bytes,
        parameter_bytes=weights,
        gradient_bytes=weights,
        optimizer_bytes=2 * weights,
    )
    network = Network(devices, Topology.ALL_TO_ALL, Link("l", float("inf"), 0.0))
    return PipelineCosts((stage,) * devices, network, memory_capacity_bytes=capacity)


devices_and_microbatches = st.tuples(st.integers(1, 8), st.integers(1, 24))


@given(devices_and_microbatches)
def test_gpipe_stashes_every_microbatch_on_every_device(km: tuple[int, int]) -> None:
    k, m = km
    result = simulate(build("gpipe", k, m), costs_with(k))
    assert [d.peak_activation_bytes for d in result.per_device] == [m * ACT] * k


@given(devices_and_microbatches)
def test_1f1b_stashes_k_minus_d_on_device_d(km: tuple[int, int]) -> None:
    k, m = km
    result = simulate(build("1f1b", k, m), costs_with(k))
    assert [d.peak_activation_bytes for d in result.per_device] == [
        one_f_one_b_in_flight(k, d, m) * ACT for d in range(k)
    ]


@given(devices_and_microbatches)
def test_remat_stashes_stage_inputs_only(km: tuple[int, int]) -> None:
    k, m = km
    result = simulate(build("gpipe", k, m, remat=True), costs_with(k, input_bytes=10.0))
    expected = gpipe_remat_peak_activation_bytes(m, 10.0, ACT)
    assert [d.peak_activation_bytes for d in result.per_device] == [expected] * k


@given(devices_and_microbatches)
def test_zb_h2_holds_at_most_2k_minus_1_microbatches(km: tuple[int, int]) -> None:
    k, m = km
    result = simulate(build("zb-h2", k, m), costs_with(k))
    peaks = [d.peak_activation_bytes for d in result.per_device]
    assert peaks[0] == zb_h2_in_flight(k, m) * ACT
    assert max(peaks) <= (2 * k - 1) * ACT


def test_split_backward_frees_the_input_gradient_part_early() -> None:
    # ZB-H1 on one device: F stashes 1000, I frees 600, W frees the 400 W needs.
    result = simulate(build("zb-h1", 1, 1), costs_with(1, keep_for_w=400.0))
    assert result.per_device[0].memory.timeline == (
        (0.0, 0.0),
        (0.0, 1000.0),
        (3.0, 400.0),
        (4.0, 0.0),
    )


def test_weight_versions_by_update_rule() -> None:
    k = 4
    flush = simulate(build("1f1b", k, 4), costs_with(k, weights=100.0))
    two_bw = simulate(build("pipedream-2bw", k, 4), costs_with(k, weights=100.0))
    stash = simulate(build("pipedream", k, 4), costs_with(k, weights=100.0))
    # weights x versions + gradients (100) + optimizer state (200)
    assert [d.memory.static_bytes for d in flush.per_device] == [400.0] * k
    assert [d.memory.static_bytes for d in two_bw.per_device] == [500.0] * k
    assert [d.memory.static_bytes for d in stash.per_device] == [
        100.0 * (k - d) + 300.0 for d in range(k)
    ]


def test_out_of_memory_is_reported_not_raised() -> None:
    result = simulate(build("gpipe", 2, 4), costs_with(2, capacity=3500.0))
    assert result.oom
    assert [d.oom for d in result.per_device] == [True, True]
    assert result.to_json()["oom"] is True
    fits = simulate(build("1f1b", 2, 4), costs_with(2, capacity=3500.0))
    assert not fits.oom


def test_synthetic_activation_bytes_split_over_chunks() -> None:
    costs = synthetic_costs(2, 2, 1.0, 1.0, activation_bytes=800.0)
    assert {s.activation_bytes for s in costs.stages} == {400.0}


def test_devices_sharing_one_memory_peak_together_in_gpipe() -> None:
    """GPipe runs every forward before the last device's first backward: devices sharing one
    memory (lanes of one GPU) hold all K x M stashes at once, on top of every static term."""
    from pipesim.engine.memory_over_time import shared_peak_bytes

    for devices, microbatches in ((2, 2), (3, 4)):
        result = simulate(build("gpipe", devices, microbatches), costs_with(devices, weights=7.0))
        memories = [d.memory for d in result.per_device]
        assert shared_peak_bytes(memories, static=False) == devices * microbatches * ACT
        assert shared_peak_bytes(memories) == devices * microbatches * ACT + devices * 4 * 7.0


@given(st.sampled_from(["1f1b", "zb-h1", "interleaved-1f1b", "gpipe"]), st.integers(1, 4))
def test_a_shared_memory_peaks_between_the_largest_device_and_the_sum_of_all(
    name: str, devices: int
) -> None:
    from pipesim.engine.memory_over_time import shared_peak_bytes

    chunks = 2 if name == "interleaved-1f1b" else 1
    schedule = build(name, devices, 2 * devices, chunks)
    base = costs_with(devices)
    stage_costs = PipelineCosts(base.stages * chunks, base.network)
    result = simulate(schedule, stage_costs)
    memories = [d.memory for d in result.per_device]
    shared = shared_peak_bytes(memories, static=False)
    own = [m.activations_at_peak_bytes + m.transient_at_peak_bytes for m in memories]
    assert max(own) <= shared + 1e-9
    assert shared <= sum(own) + 1e-9
    if devices == 1:
        assert shared == own[0]
