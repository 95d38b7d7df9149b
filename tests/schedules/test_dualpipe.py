"""DualPipe: two copies of the model in the IR, DeepSeek's own order, and its closed forms.

The reference order is a transcription of ``DualPipe.step`` in deepseek-ai/DualPipe,
``dualpipe/dualpipe.py`` at commit 3da1bbea53606543d7f5f232338fc58096db30e3 (its eight steps,
with the communication left out: only what each rank computes, in order), written here
independently of the generator.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Sequence

import pytest

from pipesim.costs import PipelineCosts, StageCosts, synthetic_costs
from pipesim.engine import simulate
from pipesim.errors import ScheduleError
from pipesim.hardware import Link, Network, Topology
from pipesim.parallel.placement import v_shape
from pipesim.schedules import Action, Kind, Schedule, build, from_csv, parse_action, to_csv
from pipesim.schedules.dualpipe import overlapped_pairs

# -- deepseek-ai/DualPipe's schedule loop, transcribed --------------------------------------


def deepseek_order(
    num_ranks: int, num_chunks: int, pairs: list[list[int]] | None = None
) -> list[list[tuple[str, int, int]]]:
    """Per rank, what ``DualPipe.step`` computes: ("F" | "B" | "I" | "W", direction, chunk id
    within the direction). A backward with ``enable_zb`` computes the input gradient only and
    puts its weight gradient in ``WeightGradStore`` (I); ``_weight_chunk`` pops the oldest (W).
    ``_forward_backward_chunk(p0, p1)`` is the forward of p0 then the full backward of p1;
    ``pairs``, when given, gets per rank the positions of the forwards it overlaps
    (``overlapped_forward_backward``: the backward is the next position)."""
    assert num_ranks % 2 == 0
    assert num_chunks > 0 and num_chunks % 2 == 0 and num_chunks >= num_ranks * 2
    orders = []
    for rank in range(num_ranks):
        is_in_second_half = rank >= num_ranks // 2
        num_half_ranks = num_ranks // 2
        half_rank = min(rank, num_ranks - 1 - rank)
        half_num_chunks = num_chunks // 2
        current_f_chunk_id = [0, 0]
        current_b_chunk_id = [0, 0]
        store: deque[tuple[str, int, int]] = deque()
        out: list[tuple[str, int, int]] = []
        overlapped: list[int] = []

        def forward_chunk(phase: int) -> None:
            phase ^= is_in_second_half  # noqa: B023 - the loop's rank, as in DualPipe
            out.append(("F", phase, current_f_chunk_id[phase]))  # noqa: B023
            current_f_chunk_id[phase] += 1  # noqa: B023

        def backward_chunk(phase: int, enable_zb: bool = False) -> None:
            phase ^= is_in_second_half  # noqa: B023
            chunk_id = current_b_chunk_id[phase]  # noqa: B023
            current_b_chunk_id[phase] += 1  # noqa: B023
            out.append(("I" if enable_zb else "B", phase, chunk_id))  # noqa: B023
            if enable_zb:
                store.append(("W", phase, chunk_id))  # noqa: B023

        def forward_backward_chunk(phase0: int, phase1: int) -> None:
            overlapped.append(len(out))  # noqa: B023
            forward_chunk(phase0)  # not overlapped_forward_backward: F, then B
            backward_chunk(phase1)

        def weight_chunk() -> None:
            out.append(store.popleft())  # noqa: B023 - "Assume FIFO"

        # Step 1: nF0
        for _ in range((num_half_ranks - half_rank - 1) * 2):
            forward_chunk(0)
        # Step 2: nF0F1
        for _ in range(half_rank + 1):
            forward_chunk(0)
            forward_chunk(1)
        # Step 3: nB1W1F1 (Use zero bubble)
        for _ in range(num_half_ranks - half_rank - 1):
            backward_chunk(1, enable_zb=True)
            weight_chunk()
            forward_chunk(1)
        # Step 4 (Main step): nF0B1F1B0
        for i in range(half_num_chunks - num_ranks + half_rank + 1):
            if i == 0 and half_rank == num_half_ranks - 1:  # is_middle_rank: not overlapped
                forward_chunk(0)
                backward_chunk(1)
            else:
                forward_backward_chunk(0, 1)
            forward_backward_chunk(1, 0)
        # Step 5: nB1F1B0
        for _ in range(num_half_ranks - half_rank - 1):
            backward_chunk(1)
            forward_backward_chunk(1, 0)
        # Step 6: nB1B0 (The second half of the chunks use zero bubble)
        step_6 = half_rank + 1
        enable_zb = False
        for i in range(step_6):
            if i == step_6 // 2 and half_rank % 2 == 1:
                enable_zb = True
            backward_chunk(1, enable_zb=enable_zb)
            if i == step_6 // 2 and half_rank % 2 == 0:
                enable_zb = True
            backward_chunk(0, enable_zb=enable_zb)
        # Step 7: nWB0 (Use zero bubble)
        for _ in range(num_half_ranks - half_rank - 1):
            weight_chunk()
            backward_chunk(0, enable_zb=True)
        # Step 8: nW
        for _ in range(half_rank + 1):
            weight_chunk()
        assert not store
        orders.append(out)
        if pairs is not None:
            pairs.append(overlapped)
    return orders


def as_ir(num_ranks: int, num_chunks: int) -> list[list[Action]]:
    """DeepSeek's order in the IR: direction 0 (inputs at rank 0) is copy 0, stage = rank,
    micro-batches 0..M/2-1 (the first half of the batch); direction 1 is copy 1, stage
    2K-1-rank, micro-batches M/2..M-1."""
    kinds = {"F": Kind.F, "B": Kind.B, "I": Kind.I, "W": Kind.W}
    rows = []
    for rank, order in enumerate(deepseek_order(num_ranks, num_chunks)):
        stage_of = (rank, 2 * num_ranks - 1 - rank)
        rows.append(
            [
                Action(stage_of[direction], kinds[kind], direction * num_chunks // 2 + chunk)
                for kind, direction, chunk in order
            ]
        )
    return rows


def rows(*texts: str) -> list[list[Action]]:
    return [[parse_action(cell) for cell in text.split()] for text in texts]


# -- the order -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("devices", "microbatches"),
    [(k, m) for k in (2, 4, 6, 8) for m in range(2 * k, 2 * k + 8, 2)] + [(8, 20), (16, 40)],
)
def test_every_rank_runs_deepseeks_order(devices: int, microbatches: int) -> None:
    built = build("dualpipe", devices, microbatches)
    assert [list(r) for r in built.device_actions] == as_ir(devices, microbatches)


def test_four_devices_eight_microbatches_literally() -> None:
    """Worked by hand from ``DualPipe.step`` (rank 0: two F0; F0 F1; B1 as I, its W, F1; the
    main pair F0 B1 F1 B0; B1 F1 B0; B1, then B0 as I; W, B0 as I; W)."""
    schedule = build("dualpipe", 4, 8)
    assert [list(r) for r in schedule.device_actions] == rows(
        "0F0 0F1 0F2 7F4 7I4 7W4 7F5 0F3 7B5 7F6 0B0 7B6 7F7 0B1 7B7 0I2 0W2 0I3 0W3",
        "1F0 6F4 1F1 6F5 1F2 6B4 6F6 1B0 1F3 6B5 6F7 1B1 6B6 1B2 6I7 1I3 6W7 1W3",
        "5F4 2F0 5F5 2F1 5F6 2B0 2F2 5B4 5F7 2B1 2F3 5B5 2B2 5B6 2I3 5I7 2W3 5W7",
        "4F4 4F5 4F6 3F0 3I0 3W0 3F1 4F7 3B1 3F2 4B4 3B2 3F3 4B5 3B3 4I6 4W6 4I7 4W7",
    )


def test_two_devices_four_microbatches_literally() -> None:
    schedule = build("dualpipe", 2, 4)
    assert [list(r) for r in schedule.device_actions] == rows(
        "0F0 3F2 0F1 3B2 3F3 0B0 3B3 0I1 0W1",
        "2F2 1F0 2F3 1B0 1F1 2B2 1B1 2I3 2W3",
    )


def test_the_ir_states_two_copies_each_micro_batch_through_one() -> None:
    schedule = build("dualpipe", 4, 8)
    assert (schedule.copies, schedule.model_stages, schedule.stages, schedule.chunks) == (
        2,
        4,
        8,
        1,
    )
    assert schedule.placement == v_shape(4) == (0, 1, 2, 3, 3, 2, 1, 0)
    assert schedule.routes == (0, 0, 0, 0, 1, 1, 1, 1)
    # device i holds model stage i of copy 0 and model stage K-1-i of copy 1
    for device in range(4):
        held = schedule.stages_on(device)
        assert [(schedule.copy_of_stage(s), schedule.model_stage(s)) for s in held] == [
            (0, device),
            (1, 3 - device),
        ]
    for action in schedule.actions():
        assert schedule.copy_of_stage(action.stage) == schedule.routes[action.microbatch]
    # dependencies stop at a copy's ends: copy 1's first stage takes the input
    assert schedule.dependencies(Action(4, Kind.F, 5)) == ()
    assert schedule.dependencies(Action(3, Kind.B, 1)) == (Action(3, Kind.F, 1),)
    assert schedule.dependencies(Action(5, Kind.F, 5)) == (Action(4, Kind.F, 5),)


def test_csv_round_trip_states_copies_by_the_stages_each_micro_batch_names() -> None:
    schedule = build("dualpipe", 4, 8)
    text = to_csv(schedule)
    assert text.splitlines()[0] == ",".join(map(str, schedule.device_actions[0]))
    loaded = from_csv(text, name="dualpipe")
    assert loaded == schedule
    assert (loaded.copies, loaded.routes) == (2, schedule.routes)
    assert to_csv(loaded) == text
    one = from_csv(to_csv(build("1f1b", 2, 2)))
    assert (one.copies, one.routes) == (1, (0, 0))


# -- the validator ---------------------------------------------------------------------------


def two_copies(*texts: str, routes: Sequence[int] = (0, 1)) -> Schedule:
    """K=2, two copies of a two-stage model (stages 0, 1 and 2, 3) in a V."""
    return Schedule("c", len(routes), v_shape(2), rows(*texts), copies=2, routes=routes)


def test_a_hand_made_two_copy_schedule_is_valid() -> None:
    schedule = two_copies("0F0 3F1 0B0 3B1", "1F0 1B0 2F1 2B1")
    assert [str(a) for a in schedule.execution_order()][:2] == ["0F0", "1F0"]


@pytest.mark.parametrize(
    ("texts", "routes", "message"),
    [
        (
            ("0F0 3F1 0B0 3B1 3F0 3B0", "1F0 1B0 2F1 2B1"),
            (0, 1),
            "device 0 step 4: 3F0 runs micro-batch 0 on stage 3 of copy 1, but the micro-batch "
            "goes through copy 0 (stages 0..1)",
        ),
        (
            ("0F0 0B0 3B1", "1F0 1B0 2F1 2B1"),
            (0, 1),
            "stage 3 micro-batch 1 has no forward: 3F1 is missing",
        ),
        (
            ("0F0 3F1 0B0 3B1", "1F0 1B0 2F1 2B1"),
            (0, 2),
            "routes: micro-batch 1 goes through copy 2, but the schedule has 2 (0..1)",
        ),
        (
            ("0F0 0B0 0F1 0B1", "1F0 1B0 1F1 1B1"),
            (0, 0),
            "routes: no micro-batch goes through copy 1",
        ),
    ],
)
def test_the_validator_holds_each_micro_batch_to_its_copy(
    texts: tuple[str, str], routes: tuple[int, ...], message: str
) -> None:
    with pytest.raises(ScheduleError) as error:
        two_copies(*texts, routes=routes)
    assert str(error.value).startswith(message)


def test_routes_name_one_copy_per_micro_batch() -> None:
    with pytest.raises(ScheduleError, match=r"^routes: one copy per micro-batch, 2, got 1$"):
        Schedule("c", 2, v_shape(2), rows("0F0", "1F0"), copies=2, routes=(0,))
    default = Schedule(
        "c",
        4,
        v_shape(2),
        rows("0F0 3F2 0B0 3B2 0F1 0B1 3F3 3B3", "1F0 1B0 2F2 2B2 1F1 1B1 2F3 2B3"),
        copies=2,
    )
    assert default.routes == (0, 0, 1, 1)  # by default, halves


def test_copies_must_share_each_devices_stages() -> None:
    """Each device holds as many stages of every copy (so v, the model chunks a device holds
    of each copy, is whole): two copies of a one-stage model on two devices are refused."""
    with pytest.raises(ScheduleError, match="cannot share equally"):
        Schedule("c", 2, (0, 1), rows("0F0 0B0", "1F1 1B1"), copies=2, routes=(0, 1))
    with pytest.raises(ScheduleError, match="copies must be an integer >= 1, got 0"):
        Schedule("c", 1, (0,), rows("0F0 0B0"), copies=0)


def test_replace_and_pickle_keep_the_copies() -> None:
    import pickle

    schedule = build("dualpipe", 2, 4)
    assert pickle.loads(pickle.dumps(schedule)) == schedule
    renamed = schedule.replace(name="x")
    assert (renamed.copies, renamed.routes) == (2, schedule.routes)
    assert "copies=2" in repr(schedule) and "copies" not in repr(build("1f1b", 2, 2))


# -- the closed forms (DeepSeek-V3 report, Table 2) -----------------------------------------


def table_2_bubble(devices: int, f: float, i: float, w: float) -> float:
    """(PP/2-1)(F&B + B - 3W) with B = I + W the full backward and F&B = F + B: an overlapped
    pair that overlaps nothing."""
    b = i + w
    return (devices / 2 - 1) * ((f + b) + b - 3 * w)


def fused_pair_idle(devices: int, microbatches: int, f: float, i: float, w: float) -> float:
    """Idle per device when each pair DualPipe overlaps (a forward followed by a full backward
    of the other direction) runs as one unit, started once both its inputs are in, as
    DualPipe's runtime does (``_forward_backward_chunk`` receives both, then computes);
    no communication time. An independent little simulator, not the engine."""
    schedule = build("dualpipe", devices, microbatches)
    duration = {Kind.F: f, Kind.I: i, Kind.W: w, Kind.B: i + w}
    units = []
    for row in schedule.device_actions:
        grouped, index = [], 0
        while index < len(row):
            a = row[index]
            pair = index + 1 < len(row) and a.kind is Kind.F and row[index + 1].kind is Kind.B
            grouped.append((a, row[index + 1]) if pair else (a,))
            index += 2 if pair else 1
        units.append(grouped)
    end: dict[Action, float] = {}
    free, head = [0.0] * devices, [0] * devices
    moved = True
    while moved:
        moved = False
        for d in range(devices):
            while head[d] < len(units[d]):
                unit = units[d][head[d]]
                needs = [n for a in unit for n in schedule.dependencies(a) if n not in unit]
                if any(n not in end for n in needs):
                    break
                t = max([free[d], *(end[n] for n in needs)])
                for a in unit:
                    t += duration[a.kind]
                    end[a] = t
                free[d], head[d] = t, head[d] + 1
                moved = True
    assert len(end) == len(schedule.actions())
    return max(free) - microbatches * (f + i + w)


HALVES = [0.5 * n for n in range(1, 9)]


def test_table_2_is_the_idle_of_pairs_run_as_one_unit() -> None:
    """With F&B = F + B, (PP/2-1)(F&B+B-3W) is exact for pairs that wait for both inputs,
    wherever W <= I and F <= I (costs in halves up to 4, K up to 8)."""
    checked = 0
    for f, i, w in itertools.product(HALVES, HALVES, [0.0, *HALVES]):
        if not (w <= i and f <= i):
            continue
        for k, m in ((2, 4), (4, 8), (6, 14), (8, 16)):
            assert fused_pair_idle(k, m, f, i, w) == pytest.approx(table_2_bubble(k, f, i, w))
            checked += 1
    assert checked > 500


def test_the_engine_idles_table_2_less_one_input_gradient_per_device_pair() -> None:
    """The IR runs a pair's forward as soon as its activation is in (as the executor does),
    which hides one I per device pair: idle = (K/2-1)(F+B-2W) = Table 2 - (K/2-1)·I, for
    W <= I <= F <= I + W, on every device, one step or three back to back. The registered
    closed form is this one."""
    checked = 0
    for f, i, w in itertools.product(HALVES, HALVES, [0.0, *HALVES]):
        if not w <= i <= f <= i + w:
            continue
        for k, m, steps in ((2, 6, 1), (4, 8, 3), (6, 12, 1), (8, 18, 1), (12, 24, 1)):
            checked += 1
            result = simulate(build("dualpipe", k, m), synthetic_costs(k, 1, f, i, w), steps)
            expected = table_2_bubble(k, f, i, w) - (k / 2 - 1) * i
            for device in result.per_device:
                assert device.idle_time_s == pytest.approx(expected, abs=1e-9)
            assert result.analytic_bubble_fraction == pytest.approx(result.bubble_fraction)
    assert checked > 400


def test_no_closed_form_outside_its_conditions() -> None:
    schedule = build("dualpipe", 4, 8)
    for f, i, w in ((1, 2, 1), (3, 1, 1), (1, 1, 2)):  # I > F, F > B, W > I
        assert simulate(schedule, synthetic_costs(4, 1, f, i, w)).analytic_bubble_fraction is None


@pytest.mark.parametrize(("devices", "microbatches"), [(2, 4), (4, 8), (6, 16), (8, 20)])
def test_parameters_twice_and_activations_pp_plus_one(devices: int, microbatches: int) -> None:
    """Table 2: DualPipe holds 2x parameters and PP+1 micro-batches of activations per device
    (one model stage's stash each), 1F1B 1x and at most PP."""
    stage = StageCosts(
        1.0, 1.0, 1.0, activation_bytes=10.0, weight_grad_activation_bytes=4.0,
        parameter_bytes=1000.0, gradient_bytes=100.0,
    )  # fmt: skip
    network = Network(devices, Topology.ALL_TO_ALL, Link("l", float("inf"), 0.0))
    costs = PipelineCosts((stage,) * devices, network)  # per model stage
    dualpipe = simulate(build("dualpipe", devices, microbatches), costs)
    one_f_one_b = simulate(build("1f1b", devices, microbatches), costs)
    for d, (two, one) in enumerate(zip(dualpipe.per_device, one_f_one_b.per_device, strict=True)):
        assert two.memory.static.weights == 2 * 1000.0 == 2 * one.memory.static.weights
        assert two.memory.static.gradients == 2 * 100.0
        assert two.peak_activation_bytes == (devices + 1) * 10.0
        assert one.peak_activation_bytes == (devices - d) * 10.0


# -- the computation-communication overlap of a forward-backward pair ------------------------


@pytest.mark.parametrize(
    ("devices", "microbatches"),
    [(k, m) for k in (2, 4, 6, 8) for m in range(2 * k, 2 * k + 6, 2)] + [(16, 40)],
)
def test_the_overlapped_pairs_are_deepseeks(devices: int, microbatches: int) -> None:
    """The rule (an F followed by a B or I of the other copy, but a device's first backward)
    finds exactly the pairs ``DualPipe.step`` hands ``overlapped_forward_backward``."""
    pairs: list[list[int]] = []
    deepseek_order(devices, microbatches, pairs)
    schedule = build("dualpipe", devices, microbatches)
    starts = schedule.action_arrays.row_starts
    expected = [int(starts[rank]) + p for rank, ranks in enumerate(pairs) for p in ranks]
    forwards, backwards = overlapped_pairs(schedule)
    assert forwards.tolist() == expected
    assert backwards.tolist() == [p + 1 for p in expected]


def test_dualpipev_overlaps_its_main_and_fifth_phases_but_the_last_ranks_first_pair() -> None:
    """DualPipeV's ``step``: phase 4 (M-2K+d+1 times F0 B1, F1 B0) and phase 5 (K-d-1 times
    F1 B0), less the last rank's first F0 B1 (``is_last_rank``: run apart)."""
    k, m = 4, 10
    schedule = build("dualpipev", k, m)
    forwards, _ = overlapped_pairs(schedule)
    starts = schedule.action_arrays.row_starts.tolist()
    per_device = [sum(starts[d] <= f < starts[d + 1] for f in forwards.tolist()) for d in range(k)]
    assert per_device == [2 * (m - 2 * k + d + 1) + (k - d - 1) - (d == k - 1) for d in range(k)]


def test_table_2_with_forward_backward_overlap() -> None:
    """Each overlapped pair hides s = min(F's comm, B's compute) + min(B's comm, F's compute).
    The step falls by (M-K-1)·s, the pairs of the most-paired devices (the two on each side of
    the middle); their idle stays (K/2-1)(F+B-2W), Table 2 with F&B = F + B less (K/2-1)·I,
    not Table 2 with F&B = F + B - s; a device with n pairs idles (M-K-1-n)·s less than that
    (W <= I <= F <= I + W, comm a quarter or a half of each pass)."""
    checked = 0
    for f, i, w in itertools.product(HALVES[:6], HALVES[:6], HALVES[:6]):
        if not w <= i <= f <= i + w:
            continue
        for fraction, (k, m) in itertools.product((0.25, 0.5), ((4, 8), (6, 14), (8, 16))):
            stage = StageCosts(f, i, w, forward_comm_s=fraction * f, input_grad_comm_s=fraction * i)
            network = Network(k, Topology.ALL_TO_ALL, Link("l", float("inf"), 0.0))
            costs = PipelineCosts((stage,) * k, network)
            schedule = build("dualpipe", k, m)
            result = simulate(schedule, costs)
            b = i + w
            saving = fraction * f + fraction * i  # both comm parts fit the other's compute
            forwards, _ = overlapped_pairs(schedule)
            starts = schedule.action_arrays.row_starts.tolist()
            plain = table_2_bubble(k, f, i, w) - (k / 2 - 1) * i
            assert result.makespan_s == pytest.approx(m * (f + b) + plain - (m - k - 1) * saving)
            for d, device in enumerate(result.per_device):
                n = sum(starts[d] <= x < starts[d + 1] for x in forwards.tolist())
                assert device.idle_time_s == pytest.approx(plain - (m - k - 1 - n) * saving)
            checked += 1
    assert checked > 50
