"""Hand-worked timelines for tiny cases, with communication, as literal lists (both engines)."""

from __future__ import annotations

import math
from typing import Any

import pytest

from pipesim.costs import PipelineCosts, StageCosts, synthetic_costs
from pipesim.engine import SimulationResult
from pipesim.engine import simulate as simulate_with
from pipesim.hardware import Link, Network, Topology
from pipesim.schedules import build


@pytest.fixture(params=["simpy", "fast"], autouse=True)
def engine(request: pytest.FixtureRequest) -> str:
    return str(request.param)


_ENGINE: list[str] = []


@pytest.fixture(autouse=True)
def _use_engine(engine: str) -> Any:
    _ENGINE.append(engine)
    yield
    _ENGINE.pop()


def simulate(*args: Any, **kwargs: Any) -> SimulationResult:
    result = simulate_with(*args, engine=_ENGINE[-1], **kwargs)
    assert result.engine == _ENGINE[-1]
    return result


def compute_of(result: SimulationResult) -> list[tuple[int, str, float, float]]:
    return sorted(
        (r.device, r.label, r.start_s, r.end_s) for r in result.compute if r.action is not None
    )


def transfers_of(result: SimulationResult) -> list[tuple[str, float, float, float]]:
    return sorted((t.label, t.queued_s, t.start_s, t.end_s) for t in result.transfers)


def test_1f1b_two_devices_two_microbatches() -> None:
    # F=1, B=2 per micro-batch and device; each transfer 0.5.
    result = simulate(build("1f1b", 2, 2), synthetic_costs(2, 1, 1.0, 2.0, comm_s=0.5))
    assert compute_of(result) == [
        (0, "0B0", 5.0, 7.0),
        (0, "0B1", 8.0, 10.0),
        (0, "0F0", 0.0, 1.0),
        (0, "0F1", 1.0, 2.0),
        (1, "1B0", 2.5, 4.5),
        (1, "1B1", 5.5, 7.5),
        (1, "1F0", 1.5, 2.5),
        (1, "1F1", 4.5, 5.5),
    ]
    assert transfers_of(result) == [
        ("0F0->1F0", 1.0, 1.0, 1.5),
        ("0F1->1F1", 2.0, 2.0, 2.5),
        ("1B0->0B0", 4.5, 4.5, 5.0),
        ("1B1->0B1", 7.5, 7.5, 8.0),
    ]
    assert result.iteration_time_s == 10.0
    # busy 6 on each device: bubble (4 + 4) / (2 * 10)
    assert result.bubble_fraction == 0.4


def test_gpipe_two_devices_two_microbatches() -> None:
    result = simulate(build("gpipe", 2, 2), synthetic_costs(2, 1, 1.0, 2.0, comm_s=0.5))
    assert compute_of(result) == [
        (0, "0B0", 8.0, 10.0),
        (0, "0B1", 6.0, 8.0),
        (0, "0F0", 0.0, 1.0),
        (0, "0F1", 1.0, 2.0),
        (1, "1B0", 5.5, 7.5),
        (1, "1B1", 3.5, 5.5),
        (1, "1F0", 1.5, 2.5),
        (1, "1F1", 2.5, 3.5),
    ]
    assert transfers_of(result) == [
        ("0F0->1F0", 1.0, 1.0, 1.5),
        ("0F1->1F1", 2.0, 2.0, 2.5),
        ("1B0->0B0", 7.5, 7.5, 8.0),
        ("1B1->0B1", 5.5, 5.5, 6.0),
    ]
    assert result.iteration_time_s == 10.0


def test_zb_h1_two_devices_two_microbatches() -> None:
    # F = I = W = 1, transfers 0.5; device 1 defers its first W behind its second I.
    result = simulate(build("zb-h1", 2, 2), synthetic_costs(2, 1, 1.0, 1.0, 1.0, comm_s=0.5))
    assert compute_of(result) == [
        (0, "0F0", 0.0, 1.0),
        (0, "0F1", 1.0, 2.0),
        (0, "0I0", 4.0, 5.0),
        (0, "0I1", 6.0, 7.0),
        (0, "0W0", 5.0, 6.0),
        (0, "0W1", 7.0, 8.0),
        (1, "1F0", 1.5, 2.5),
        (1, "1F1", 3.5, 4.5),
        (1, "1I0", 2.5, 3.5),
        (1, "1I1", 4.5, 5.5),
        (1, "1W0", 5.5, 6.5),
        (1, "1W1", 6.5, 7.5),
    ]
    assert result.iteration_time_s == 8.0


def test_latency_is_shared_by_messages_in_flight() -> None:
    # Forwards of 1 s and a latency of 3 s (0 bytes): the second activation does not wait for
    # the first (alpha-beta: only bytes occupy a channel), so nothing queues.
    result = simulate(build("gpipe", 2, 2), synthetic_costs(2, 1, 1.0, 1.0, comm_s=3.0))
    assert transfers_of(result) == [
        ("0F0->1F0", 1.0, 1.0, 4.0),
        ("0F1->1F1", 2.0, 2.0, 5.0),
        ("1B0->0B0", 8.0, 8.0, 11.0),
        ("1B1->0B1", 7.0, 7.0, 10.0),
    ]
    assert compute_of(result) == [
        (0, "0B0", 11.0, 12.0),
        (0, "0B1", 10.0, 11.0),
        (0, "0F0", 0.0, 1.0),
        (0, "0F1", 1.0, 2.0),
        (1, "1B0", 7.0, 8.0),
        (1, "1B1", 6.0, 7.0),
        (1, "1F0", 4.0, 5.0),
        (1, "1F1", 5.0, 6.0),
    ]
    assert result.iteration_time_s == 12.0


def bytes_costs(bandwidth: float, latency: float, output_bytes: float) -> PipelineCosts:
    """Two devices, F = B = 1 s per stage, each transfer ``output_bytes`` over one link."""
    stage = StageCosts(1.0, 1.0, 0.0, output_bytes=output_bytes)
    network = Network(2, Topology.ALL_TO_ALL, Link("l", bandwidth, latency))
    return PipelineCosts((stage, stage), network)


def test_bytes_occupy_the_channel_and_queue_first_come_first_served() -> None:
    # 300 bytes at 100 B/s hold the channel 3 s; latency 0.5 s follows the last byte.
    # 0F1's message is requested at 2 but starts when 0F0's bytes have left, at 4.
    result = simulate(build("gpipe", 2, 2), bytes_costs(100.0, 0.5, 300.0))
    forward = [t for t in transfers_of(result) if t[0].startswith("0F")]
    assert forward == [("0F0->1F0", 1.0, 1.0, 4.5), ("0F1->1F1", 2.0, 4.0, 7.5)]
    gradients = [t for t in transfers_of(result) if t[0].startswith("1B")]
    # GPipe's backwards run last micro-batch first: 1B1 ends at 9.5 and holds the gradient
    # channel until 12.5, so 1B0's gradient (requested at 10.5) waits for it.
    assert gradients == [("1B0->0B0", 10.5, 12.5, 16.0), ("1B1->0B1", 9.5, 9.5, 13.0)]
    assert result.iteration_time_s == 17.0


def test_an_infinite_link_moves_any_size_in_its_latency() -> None:
    result = simulate(build("gpipe", 2, 2), bytes_costs(math.inf, 0.5, 1e12))
    assert [t[3] - t[2] for t in transfers_of(result)] == [0.5] * 4


def test_optimizer_step_follows_each_devices_last_action() -> None:
    costs = synthetic_costs(2, 1, 1.0, 2.0, comm_s=0.5, optimizer_s=0.25)
    result = simulate(build("1f1b", 2, 2), costs)
    optimizer = sorted((r.device, r.start_s, r.end_s) for r in result.compute if r.action is None)
    assert optimizer == [(0, 10.0, 10.25), (1, 7.5, 7.75)]
    assert result.iteration_time_s == 10.25


def test_steady_state_over_steps_lets_devices_run_ahead() -> None:
    # 1F1B: device 0 ends each step last and starts the next first, so steps do not overlap.
    one = simulate(build("1f1b", 2, 2), synthetic_costs(2, 1, 1.0, 2.0))
    three = simulate(build("1f1b", 2, 2), synthetic_costs(2, 1, 1.0, 2.0), steps=3)
    assert three.iteration_time_s == one.iteration_time_s == 9.0
    assert three.makespan_s == 27.0
    # ZB-H2 forms a parallelogram: back-to-back steps hide the last device's start.
    costs = synthetic_costs(2, 1, 1.0, 1.0, 1.0)
    single = simulate(build("zb-h2", 2, 3), costs)
    steady = simulate(build("zb-h2", 2, 3), costs, steps=3)
    assert (single.iteration_time_s, steady.iteration_time_s) == (10.0, 9.0)
    assert steady.bubble_fraction == 0.0


def test_transfers_that_use_compute_block_the_sender() -> None:
    import dataclasses

    costs = dataclasses.replace(
        synthetic_costs(2, 1, 1.0, 2.0, comm_s=0.5), transfers_use_compute=True
    )
    result = simulate(build("gpipe", 2, 2), costs)
    # device 0 sends 0F0 during [1, 1.5] and cannot start 0F1 before 1.5.
    starts = {r.label: r.start_s for r in result.compute if r.device == 0}
    assert starts["0F1"] == 1.5
