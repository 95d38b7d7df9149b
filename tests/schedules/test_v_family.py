"""V-Min and V-Half from their building blocks: the memory 2405.15362 states, valid orders, and
literal step times with one time unit per chunk pass."""

from __future__ import annotations

import pytest

from pipesim.costs.synthetic import synthetic_costs
from pipesim.engine import simulate
from pipesim.errors import ScheduleError
from pipesim.parallel.placement import v_shape
from pipesim.schedules.v_family import block_offsets, v_block_schedule
from pipesim.synthesis.synthesis import in_flight_peaks, largest_stage_span_s

from .strategies import reference_runs_to_completion


@pytest.mark.parametrize("devices", range(2, 11))
def test_the_peaks_are_the_papers_thirds_and_halves_of_1f1b(devices: int) -> None:
    """In half-size stage pairs: V-Min 2·⌊(p+4)/3⌋, V-Half 2·⌊(p+2)/2⌋ (1F1B's memory is 2p)."""
    for microbatches in (2 * devices, 3 * devices + 1):
        v_min = v_block_schedule("v-min", devices, microbatches)
        v_half = v_block_schedule("v-half", devices, microbatches)
        assert max(in_flight_peaks(v_min)) == 2 * ((devices + 4) // 3)
        assert max(in_flight_peaks(v_half)) == 2 * ((devices + 2) // 2)
        for schedule in (v_min, v_half):
            assert schedule.placement == v_shape(devices)
            assert reference_runs_to_completion(
                schedule.stages, schedule.placement, schedule.device_actions
            )


def test_the_building_blocks_literally() -> None:
    """p = 4, device 1: V-Min's F0, F1, I1, I0 at 1, 6, 9, 14; V-Half's at 2, 9, 16, 24."""
    assert block_offsets("v-min", 4, 1) == (1, 6, 9, 14)
    assert block_offsets("v-half", 4, 1) == (2, 9, 16, 24)
    with pytest.raises(ScheduleError, match="no building block named 'v-zb'"):
        block_offsets("v-zb", 4, 1)


@pytest.mark.parametrize(
    ("devices", "microbatches", "v_min_s", "v_half_s"),
    [(4, 8, 59, 60), (4, 12, 83, 84), (4, 16, 107, 108), (8, 16, 123, 122), (8, 24, 171, 170)],
)
def test_step_times_with_one_unit_per_chunk_pass(
    devices: int, microbatches: int, v_min_s: float, v_half_s: float
) -> None:
    """F = I = W = 1 per chunk (2 per device), no transfer time: the ideal is 6M. V-Min's
    times equal those of the authors' scheduler for these shapes (59, 83, 107, 123, 171);
    V-Half's are 7 to 9 units above theirs (53, 77, 101, 113, 161), whose cool-down is reordered
    and pipesim's is not."""
    costs = synthetic_costs(devices, 2, 2.0, 2.0, 2.0)
    for name, expected in (("v-min", v_min_s), ("v-half", v_half_s)):
        result = simulate(v_block_schedule(name, devices, microbatches), costs)
        assert largest_stage_span_s(result) == pytest.approx(expected), name
        assert result.iteration_time_s == pytest.approx(expected), name
