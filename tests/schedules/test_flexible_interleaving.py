"""interleaved-1f1b-flexible: Llama 3's interleaved 1F1B for any M (arXiv 2407.21783 §3.3.2),
as Megatron-Core builds it from a micro-batch group size N.

The reference below is Megatron-Core's own construction, transcribed (not imported): its
schedule table, its warm-up count and its conversion of the table to a per-rank order. Each
per-device order pipesim builds must equal it, for every group size Megatron-Core accepts.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipesim.costs import synthetic_costs
from pipesim.engine import simulate
from pipesim.errors import ScheduleError
from pipesim.schedules import Kind, Schedule, build, parse_action, unsupported_reason
from pipesim.schedules.looped_schedules import (
    flexible_group_size,
    group_size_reason,
    interleaved_flexible,
)

from .strategies import in_flight_peaks, reference_runs_to_completion

NAME = "interleaved-1f1b-flexible"

# --- Megatron-Core, transcribed -------------------------------------------------------------
# From NVIDIA/Megatron-LM at d98e8a64dd (the group size arrived in 4295be1a6c, 2024-11-01):
# megatron/core/pipeline_parallel/schedules.py: get_schedule_table, and the interleaved branch
# of get_pp_rank_microbatches (forward_only=False, no MoE overlap);
# megatron/core/transformer/cuda_graphs.py: convert_schedule_table_to_order.


def get_schedule_table(
    num_microbatches: int, num_model_chunks: int, microbatch_group_size_per_vp_stage: int
) -> list[tuple[int, int]]:
    schedule_table = []
    for min_microbatch_id_in_group in range(
        0, num_microbatches, microbatch_group_size_per_vp_stage
    ):
        if min_microbatch_id_in_group + microbatch_group_size_per_vp_stage >= num_microbatches:
            # Construct schedule for the last microbatch group
            schedule_table.extend(
                [
                    (microbatch_id, model_chunk_id)
                    for model_chunk_id in range(num_model_chunks)
                    for microbatch_id in range(min_microbatch_id_in_group, num_microbatches)
                ]
            )
        else:
            # Construct schedule for other microbatch groups
            schedule_table.extend(
                [
                    (microbatch_id, model_chunk_id)
                    for model_chunk_id in range(num_model_chunks)
                    for microbatch_id in range(
                        min_microbatch_id_in_group,
                        min_microbatch_id_in_group + microbatch_group_size_per_vp_stage,
                    )
                ]
            )
    return schedule_table


def get_num_warmup_microbatches(
    num_microbatches: int,
    num_model_chunks: int,
    microbatch_group_size_per_vp_stage: int,
    pipeline_parallel_size: int,
    pipeline_parallel_rank: int,
) -> int:
    total_num_microbatches = num_microbatches * num_model_chunks
    num_warmup_microbatches = (pipeline_parallel_size - pipeline_parallel_rank - 1) * 2
    num_warmup_microbatches += (num_model_chunks - 1) * microbatch_group_size_per_vp_stage
    if num_warmup_microbatches >= total_num_microbatches:
        num_warmup_microbatches = total_num_microbatches
    return num_warmup_microbatches


def convert_schedule_table_to_order(
    num_warmup_microbatches: int, num_model_chunks: int, schedule_table: list[tuple[int, int]]
) -> list[int]:
    _, model_chunk_id_table = zip(*schedule_table, strict=True)
    forward_order = [chunk_id + 1 for chunk_id in model_chunk_id_table]
    backward_order = [chunk_id - num_model_chunks for chunk_id in model_chunk_id_table]
    order = forward_order[:num_warmup_microbatches]
    for i in range(num_warmup_microbatches, len(forward_order)):
        order.append(forward_order[i])
        order.append(backward_order[i - num_warmup_microbatches])
    if num_warmup_microbatches > 0:
        order.extend(backward_order[-num_warmup_microbatches:])
    return order


def megatron_accepts(devices: int, microbatches: int, group: int) -> bool:
    """The two checks of forward_backward_pipelining_with_interleaving on the group size."""
    if group > microbatches or group < devices:
        return False
    final_microbatch_group_size = microbatches % group
    return not 0 < final_microbatch_group_size < devices


# --- end of the transcription ---------------------------------------------------------------


def megatron_rows(devices: int, microbatches: int, chunks: int, group: int) -> list[list[str]]:
    """Each rank's order as pipesim actions. Megatron's order names chunks (1-indexed, negative
    for a backward); its runtime takes each chunk's micro-batches first in, first out, so the
    n-th forward (or backward) of chunk c is micro-batch n. Chunk c of rank d is stage cK + d."""
    table = get_schedule_table(microbatches, chunks, group)
    rows = []
    for rank in range(devices):
        warmup = get_num_warmup_microbatches(microbatches, chunks, group, devices, rank)
        taken: dict[int, int] = {}
        row = []
        for entry in convert_schedule_table_to_order(warmup, chunks, table):
            microbatch = taken.get(entry, 0)
            taken[entry] = microbatch + 1
            kind = "F" if entry > 0 else "B"
            stage = (abs(entry) - 1) * devices + rank
            row.append(f"{stage}{kind}{microbatch}")
        rows.append(row)
    return rows


def text_rows(schedule: Schedule) -> list[list[str]]:
    return [[str(a) for a in row] for row in schedule.device_actions]


def test_megatron_cores_documented_example_literally() -> None:
    """PP=2, VP=2, M=5, N=3: Megatron-Core's docstrings give the forward table
    0 1 2 0 1 2 3 4 3 4 over chunks 0 0 0 1 1 1 0 0 1 1; N=3 is also the default here (N=2
    would leave a last group of 1 < K). Warm-up: (v-1)N + 2(K-1-d) = 5 on device 0, 3 on
    device 1, then one forward one backward."""
    expected = [
        "0F0 0F1 0F2 2F0 2F1 2F2 2B0 0F3 2B1 0F4 2B2 2F3 0B0 2F4 0B1 0B2 2B3 2B4 0B3 0B4",
        "1F0 1F1 1F2 3F0 3B0 3F1 3B1 3F2 3B2 1F3 1B0 1F4 1B1 3F3 1B2 3F4 3B3 3B4 1B3 1B4",
    ]
    schedule = build(NAME, 2, 5, 2)
    assert text_rows(schedule) == [row.split() for row in expected]
    assert text_rows(schedule) == megatron_rows(2, 5, 2, 3)
    forwards = [a for a in schedule.device_actions[0] if a.kind is Kind.F]
    assert [a.microbatch for a in forwards] == [0, 1, 2, 0, 1, 2, 3, 4, 3, 4]
    assert [a.stage // 2 for a in forwards] == [0, 0, 0, 1, 1, 1, 0, 0, 1, 1]
    assert schedule.placement == (0, 1, 0, 1)
    assert [parse_action(cell) for cell in expected[1].split()] == list(schedule.device_actions[1])


@pytest.mark.parametrize(("devices", "chunks"), list(itertools.product(range(2, 6), range(2, 5))))
def test_every_order_equals_megatron_cores(devices: int, chunks: int) -> None:
    """Every M in K..20 and every group size N Megatron-Core accepts (M not a multiple of K
    included), and the default N: pipesim's per-device order is Megatron-Core's."""
    compared = 0
    for microbatches in range(devices, 21):
        for group in range(devices, microbatches + 1):
            accepted = megatron_accepts(devices, microbatches, group)
            assert (group_size_reason(devices, microbatches, group) is None) == accepted
            if not accepted:
                continue
            ours = interleaved_flexible(devices, microbatches, chunks, group_size=group)
            assert text_rows(ours) == megatron_rows(devices, microbatches, chunks, group), (
                microbatches,
                group,
            )
            compared += 1
        default = flexible_group_size(devices, microbatches)
        assert megatron_accepts(devices, microbatches, default)
        assert text_rows(build(NAME, devices, microbatches, chunks)) == megatron_rows(
            devices, microbatches, chunks, default
        )
    assert compared >= 20


def test_the_default_group_is_k_where_k_divides_m_and_else_the_smallest_allowed() -> None:
    assert [flexible_group_size(4, m) for m in range(1, 17)] == [
        1, 2, 3, 4, 5, 6, 7, 4, 5, 5, 6, 4, 7, 5, 5, 4,
    ]  # fmt: skip
    assert flexible_group_size(8, 8 * 12) == 8
    assert flexible_group_size(1, 7) == 1


@pytest.mark.parametrize(
    ("devices", "microbatches", "group", "message"),
    [
        (4, 9, 4, "group_size must leave a last group of 0 or >= K = 4 micro-batches, got 4: "
                  "M=9 leaves 1"),
        (4, 9, 3, "group_size must be in [min(K, M), M] = [4, 9] with M=9 and K=4, got 3"),
        (4, 9, 10, "group_size must be in [min(K, M), M] = [4, 9] with M=9 and K=4, got 10"),
        (4, 3, 4, "group_size must be in [min(K, M), M] = [3, 3] with M=3 and K=4, got 4"),
        (4, 9, 0, "group_size must be an integer >= 1, got 0"),
    ],
)  # fmt: skip
def test_a_group_size_megatron_core_refuses_is_refused(
    devices: int, microbatches: int, group: int, message: str
) -> None:
    with pytest.raises(ScheduleError) as error:
        interleaved_flexible(devices, microbatches, 2, group_size=group)
    assert str(error.value).removeprefix(f"{NAME}: ") == message


def test_any_m_builds_where_interleaved_1f1b_refuses() -> None:
    assert unsupported_reason("interleaved-1f1b", 4, 9, 2) is not None
    assert unsupported_reason(NAME, 4, 9, 2) is None
    for microbatches in range(1, 40):
        assert unsupported_reason(NAME, 4, microbatches, 3) is None


@st.composite
def flexible_shapes(draw: st.DrawFn) -> tuple[int, int, int, int]:
    """K, M, v and a group size N that Megatron-Core (or, for M < K, pipesim) allows."""
    devices = draw(st.integers(1, 6))
    microbatches = draw(st.integers(1, 24))
    chunks = draw(st.integers(2, 4))
    allowed = [
        n for n in range(1, microbatches + 1) if group_size_reason(devices, microbatches, n) is None
    ]
    return devices, microbatches, chunks, draw(st.sampled_from(allowed))


@given(flexible_shapes())
def test_every_grouping_is_a_complete_deadlock_free_schedule(
    shape: tuple[int, int, int, int],
) -> None:
    devices, microbatches, chunks, group = shape
    schedule = interleaved_flexible(devices, microbatches, chunks, group_size=group)
    seen = sorted((a.stage, a.kind.value, a.microbatch) for a in schedule.actions())
    assert seen == sorted(
        itertools.product(range(devices * chunks), ("B", "F"), range(microbatches))
    )
    assert reference_runs_to_completion(
        schedule.stages, schedule.placement, schedule.device_actions
    )


@given(flexible_shapes())
def test_in_flight_micro_batches_are_the_warm_up_plus_one(
    shape: tuple[int, int, int, int],
) -> None:
    """Device d keeps (v-1)N + 2(K-1-d) + 1 (stage, micro-batch) pairs in flight at most, all
    v·M when that is fewer: a larger group costs activation memory."""
    devices, microbatches, chunks, group = shape
    schedule = interleaved_flexible(devices, microbatches, chunks, group_size=group)
    assert in_flight_peaks(schedule, Kind.B) == [
        min((chunks - 1) * group + 2 * (devices - 1 - d) + 1, chunks * microbatches)
        for d in range(devices)
    ]


@given(flexible_shapes(), st.tuples(st.integers(1, 3), st.integers(1, 3), st.integers(0, 2)))
def test_bubble_is_interleaved_1f1bs_for_every_grouping_once_m_reaches_k(
    shape: tuple[int, int, int, int], fiw: tuple[int, int, int]
) -> None:
    """Equal stages, no transfer time, M >= K: each device idles (K-1)(F+B)/v per step, the
    interleaved schedule's bubble (Megatron-LM §2.2) whatever the grouping; with M < K never
    less (the registry's closed form is claimed for M >= K only)."""
    devices, microbatches, chunks, group = shape
    schedule = interleaved_flexible(devices, microbatches, chunks, group_size=group)
    f, i, w = fiw
    result = simulate(schedule, synthetic_costs(devices, chunks, f, i, w))
    idle_s = result.iteration_time_s - microbatches * (f + i + w)
    ideal_s = (devices - 1) * (f + i + w) / chunks
    if microbatches >= devices:
        assert idle_s == pytest.approx(ideal_s, abs=1e-9)
    else:
        assert idle_s >= ideal_s - 1e-9


@given(st.integers(1, 8), st.integers(1, 32), st.integers(2, 4))
def test_equals_interleaved_1f1b_wherever_that_builds(
    devices: int, microbatches: int, chunks: int
) -> None:
    """Where M splits into PyTorch's equal rounds, the smallest allowed group is the round: the
    flexible schedule is interleaved-1f1b (and so PyTorch's order) there, a strict extension."""
    flexible = build(NAME, devices, microbatches, chunks)
    if unsupported_reason("interleaved-1f1b", devices, microbatches, chunks) is None:
        plain = build("interleaved-1f1b", devices, microbatches, chunks)
        assert plain.action_arrays.same_as(flexible.action_arrays)
        assert plain.placement == flexible.placement


def test_the_registry_entry() -> None:
    from pipesim.schedules import schedule_info

    info = schedule_info(NAME)
    assert info.default_chunks == 2 and info.supports_remat and info.torch_class is None
    schedule = build(NAME, 4, 9)
    assert schedule.chunks == 2 and schedule.generator == NAME
    remat = build(NAME, 3, 4, 2, remat=True)
    assert remat.rematerialize
