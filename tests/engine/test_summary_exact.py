"""The engine's summaries, optimised for sweeps (a schedule's cost-independent tables kept on
it, change tables per (slot, stage, kind), the curves kept in one block for every device),
against the straightforward forms they replaced, copied here: every number bit for bit, on
random schedules (reorderings and re-materialization included), costs (transients, the
runtime reserve and fragmentation, overlapped communication) and steps."""

from __future__ import annotations

import dataclasses
import math
import pickle

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipesim.costs import PipelineCosts, StageCosts, synthetic_costs
from pipesim.engine import durations, fast, memory_over_time, result, simulate
from pipesim.engine.arrays import OPTIMIZER, FloatArray, RunArrays, running_totals
from pipesim.engine.memory_over_time import device_memory
from pipesim.engine.run_layout import run_layout
from pipesim.engine.simulate import costs_on_stages
from pipesim.engine.simulate import simulate as simulated
from pipesim.errors import PipesimError
from pipesim.hardware.network import Link, Network, Topology
from pipesim.memory import rules
from pipesim.schedules import Schedule, build
from pipesim.schedules.dualpipe import overlapped_pairs
from pipesim.schedules.encoded import KINDS
from pipesim.schedules.encoded import B as B_CODE
from pipesim.schedules.registry import clear_build_memo

from .strategies import any_schedule, costs_for

# -- the straightforward forms -------------------------------------------------------------


def _change_table(remat: bool) -> tuple[tuple[FloatArray, ...], ...]:
    """The rules' change table (unchanged by the summary's rewrite: the module's own)."""
    return memory_over_time._change_table(remat)


def _bytes(counts: tuple[FloatArray, ...], sizes: tuple[FloatArray, ...]) -> FloatArray:
    total = np.zeros(len(sizes[0]))
    for count, size in zip(counts, sizes, strict=True):
        total = np.where(
            count == 1, total + size, np.where(count == -1, total - size, total + count * size)
        )
    return total


def reference_memory(schedule: Schedule, costs: PipelineCosts, run: RunArrays) -> list[dict]:
    """Per device: what the memory module computed before it was optimised."""
    stages = costs.stages
    remat = schedule.rematerialize
    stash = np.array([s.activation_bytes for s in stages] + [0.0])
    keep = np.array([s.weight_grad_activation_bytes for s in stages] + [0.0])
    inputs = np.array([s.input_bytes for s in stages] + [0.0])
    transient = np.zeros((len(stages) + 1, len(KINDS) + 1))
    for index, stage in enumerate(stages):
        for code, action_kind in enumerate(KINDS):
            transient[index, code] = rules.transient_bytes(stage, action_kind, remat)
    optimizer = np.array(
        [
            rules.optimizer_transient_bytes(stages, schedule.stages_on(device))
            for device in range(schedule.devices)
        ]
    )
    step_transient = np.where(
        run.kind == OPTIMIZER, optimizer[run.device], transient[run.stage, run.kind]
    )
    sizes = (stash[run.stage], keep[run.stage], inputs[run.stage])
    kind, start, end = run.kind, run.start_s, run.end_s
    count = len(kind)
    times = np.empty(2 * count)
    act_deltas, trans_deltas = np.empty(2 * count), np.empty(2 * count)
    valid = np.empty(2 * count, dtype=bool)
    for slot, (happens, at_start, *counts) in enumerate(_change_table(remat)):
        times[slot::2] = np.where(at_start[kind], start, end)
        act_deltas[slot::2] = _bytes(tuple(c[kind] for c in counts[:3]), sizes)
        trans_deltas[slot::2] = _bytes((counts[3][kind],), (step_transient,))
        moves_activations = (counts[0][kind] != 0) | (counts[1][kind] != 0) | (counts[2][kind] != 0)
        valid[slot::2] = happens[kind] & (moves_activations | (trans_deltas[slot::2] != 0))
    record = np.repeat(np.arange(count), 2)[valid]
    devices = np.repeat(run.device, 2)[valid]
    times, act_deltas, trans_deltas = times[valid], act_deltas[valid], trans_deltas[valid]
    order = np.lexsort((act_deltas + trans_deltas > 0, times, devices))
    times, devices, record = times[order], devices[order], record[order]
    act_deltas, trans_deltas = act_deltas[order], trans_deltas[order]
    activations = running_totals(act_deltas, devices, schedule.devices)
    transients = running_totals(trans_deltas, devices, schedule.devices)
    bounds = np.searchsorted(devices, np.arange(schedule.devices + 1)).tolist()
    out = []
    for device in range(schedule.devices):
        width = bounds[device + 1] - bounds[device]
        act = activations[device, :width]
        trans = transients[device, :width]
        if width:
            at = int(np.argmax(act + trans))
            peak_total = float(act[at] + trans[at])
        else:
            at, peak_total = -1, 0.0
        if peak_total > 0:
            at_act, at_trans = float(act[at]), float(trans[at])
            peak_record = int(record[bounds[device] + at])
        else:
            at_act, at_trans, peak_record = 0.0, 0.0, -1
        static = rules.static_breakdown(
            costs.stages,
            schedule.stages_on(device),
            rules.weight_versions(schedule, device),
            schedule.model_stages if schedule.copies > 1 else None,
        )
        out.append(
            {
                "static": static,
                "peak_activation": max(float(act.max()) if width else 0.0, 0.0),
                "at_peak": (at_act, at_trans),
                "peak_record": peak_record,
                "times": times[bounds[device] : bounds[device + 1]].tobytes(),
                "activations": act.tobytes(),
                "transients": trans.tobytes(),
            }
        )
    return out


def reference_savings(schedule: Schedule, costs: PipelineCosts) -> FloatArray:
    """overlap_savings_s pair by pair."""
    arrays = schedule.action_arrays
    savings = np.zeros(len(arrays.kind))
    if schedule.name not in durations.OVERLAPPED_SCHEDULES:
        return savings
    forwards, backwards = overlapped_pairs(schedule)
    stages = costs.stages
    for f, x in zip(forwards.tolist(), backwards.tolist(), strict=True):
        full = int(arrays.kind[x]) == B_CODE
        backward = stages[int(arrays.stage[x])]
        if full:
            recompute = backward.forward_s if schedule.rematerialize else 0.0
            duration = recompute + backward.backward_s
        else:
            duration = backward.input_grad_s
        savings[x] = durations.overlap_saving_s(
            stages[int(arrays.stage[f])], backward, duration, full, schedule.rematerialize
        )
    return savings


# -- strategies ------------------------------------------------------------------------------

_SIZES = st.one_of(st.sampled_from([0.0, 50.0, 100.0]), st.floats(1.0, 500.0))


@st.composite
def with_extras(draw: st.DrawFn, costs: PipelineCosts) -> PipelineCosts:
    """``costs`` with transients, overlapped communication and allowances, sometimes."""
    if draw(st.booleans()):
        stages = tuple(
            dataclasses.replace(
                stage,
                forward_transient_bytes=draw(_SIZES),
                input_grad_transient_bytes=draw(_SIZES),
                weight_grad_transient_bytes=draw(_SIZES),
                optimizer_transient_bytes=draw(_SIZES),
                forward_comm_s=draw(st.sampled_from([0.0, 0.25, 1.0])),
                input_grad_comm_s=draw(st.sampled_from([0.0, 0.5, 2.0])),
            )
            for stage in costs.stages
        )
        costs = dataclasses.replace(costs, stages=stages)
    return dataclasses.replace(
        costs,
        runtime_reserve_bytes=draw(st.sampled_from([0.0, 64.0])),
        fragmentation_fraction=draw(st.sampled_from([0.0, 0.1])),
    )


@st.composite
def cases(draw: st.DrawFn) -> tuple[Schedule, PipelineCosts, int]:
    schedule = draw(st.one_of(any_schedule(), any_schedule(names=["dualpipe", "dualpipev"])))
    costs = draw(with_extras(draw(costs_for(schedule))))
    return schedule, costs_on_stages(schedule, costs), draw(st.sampled_from([1, 1, 2, 3]))


def _same(a: float, b: float) -> bool:
    return math.copysign(1.0, a) == math.copysign(1.0, b) and (a == b or (a != a and b != b))


def _check_memory(schedule: Schedule, costs: PipelineCosts, run: RunArrays) -> None:
    expected = reference_memory(schedule, costs, run)
    for memory, want in zip(device_memory(schedule, costs, run), expected, strict=True):
        assert repr(memory.static) == repr(want["static"])  # signed zeros too
        assert _same(memory.peak_activation_bytes, want["peak_activation"])
        got = (memory.activations_at_peak_bytes, memory.transient_at_peak_bytes)
        assert all(map(_same, got, want["at_peak"]))
        assert memory.peak_record == want["peak_record"]
        assert memory.change_times_s.tobytes() == want["times"]
        assert memory.activation_levels_bytes.tobytes() == want["activations"]
        assert memory.transient_levels_bytes.tobytes() == want["transients"]


# -- the tests -------------------------------------------------------------------------------


@given(cases())
def test_device_memory_is_the_straightforward_one(
    case: tuple[Schedule, PipelineCosts, int],
) -> None:
    """From the fast engine's run (records that know their layout item) and from the same run
    without that (the SimPy engine's form), the memory is the reference's, bit for bit."""
    schedule, costs, steps = case
    try:
        run, _ = fast.run_fast(schedule, costs, steps)
    except PipesimError:  # a reordering that deadlocks when run back to back
        return
    assert run.item is not None
    _check_memory(schedule, costs, run)
    _check_memory(schedule, costs, dataclasses.replace(run, item=None))


def _scaled_times(costs: PipelineCosts, factor: float) -> PipelineCosts:
    stages = tuple(
        dataclasses.replace(
            s,
            forward_s=s.forward_s * factor,
            input_grad_s=s.input_grad_s * factor,
            weight_grad_s=s.weight_grad_s * factor,
        )
        for s in costs.stages
    )
    return dataclasses.replace(costs, stages=stages)


def _negative_zeros(costs: PipelineCosts) -> PipelineCosts:
    """``costs`` with every zero size written -0.0 (equal to 0.0 as a key)."""
    names = [f.name for f in dataclasses.fields(costs.stages[0]) if f.name.endswith("_bytes")]
    stages = tuple(
        dataclasses.replace(
            s, **{n: -0.0 for n in names if getattr(s, n) is not None and getattr(s, n) == 0}
        )
        for s in costs.stages
    )
    return dataclasses.replace(costs, stages=stages)


@given(cases(), st.sampled_from([0.5, 2.0, 3.0]))
def test_kept_size_tables_serve_other_times_and_signed_zeros(
    case: tuple[Schedule, PipelineCosts, int], factor: float
) -> None:
    """Points that differ only in times (or in the sign of a zero size) reuse the size tables
    kept on the schedule, and still get the reference's memory bit for bit."""
    schedule, costs, steps = case
    for variant in (costs, _scaled_times(costs, factor), _negative_zeros(costs)):
        try:
            run, _ = fast.run_fast(schedule, variant, steps)
        except PipesimError:
            return
        _check_memory(schedule, variant, run)


@given(cases(), st.booleans())
def test_busy_times_in_layout_order_are_the_sorted_ones(
    case: tuple[Schedule, PipelineCosts, int], events: bool
) -> None:
    """Each device's busy time added up in its list order (the fast engine's records know
    their layout items) equals the sum in completion order, bit for bit, whichever kernel
    played the run."""
    schedule, costs, steps = case
    try:
        run, _ = fast.run_fast(schedule, costs, steps, force_events=events)
    except PipesimError:
        return
    got = result._last_step_busy_s(run, steps, schedule.devices, schedule)
    plain = result._last_step_busy_s(dataclasses.replace(run, item=None), steps, schedule.devices)
    assert np.array(got).tobytes() == np.array(plain).tobytes()
    _check_memory(schedule, costs, run)


@given(cases())
def test_overlap_savings_are_the_pairwise_ones(case: tuple[Schedule, PipelineCosts, int]) -> None:
    schedule, costs, _ = case
    got = durations.overlap_savings_s(schedule, costs)
    assert got.tobytes() == reference_savings(schedule, costs).tobytes()


@given(cases())
def test_transfers_are_the_straightforward_ones(case: tuple[Schedule, PipelineCosts, int]) -> None:
    """The per-layout plan and the per-network routes, kept, give what working them out each
    time gives (asked twice: the second answer comes from what was kept)."""
    schedule, costs, steps = case
    try:
        layout = run_layout(schedule, steps)
    except PipesimError:
        return
    items, stage, consumer = layout.items, layout.stage, layout.consumer
    network = costs.network
    has = consumer >= 0
    sender, receiver = items.device[has], items.device[consumer[has]]
    pairs = np.unique(sender * network.devices + receiver)
    routes = [network.route(p // network.devices, p % network.devices) for p in pairs.tolist()]
    route = np.full(len(items.device), -1, dtype=np.int64)
    route[has] = np.searchsorted(pairs, sender * network.devices + receiver)
    size = np.zeros(len(items.device))
    output = np.array([s.output_bytes for s in costs.stages])
    size[has] = output[np.minimum(stage[has], stage[consumer[has]])]
    for _ in range(2):
        got = fast._transfers(costs, items, stage, layout.source, consumer)
        assert got[0].tolist() == route.tolist()
        assert got[6] == [r.channels for r in routes]
        for index in np.flatnonzero(has).tolist():
            r = routes[int(route[index])]
            assert _same(float(got[1][index]), r.occupancy_s(float(size[index])))
            assert _same(float(got[2][index]), r.transfer_time_s(float(size[index])))


@given(cases())
def test_results_match_the_simpy_engine_memory(case: tuple[Schedule, PipelineCosts, int]) -> None:
    """The fast engine's per-device JSON equals the SimPy engine's summarised the plain way
    (records without layout items), field for field."""
    schedule, costs, steps = case
    try:
        fast_json = simulate(schedule, costs, steps, engine="fast").to_json()
    except PipesimError:
        return
    simpy_json = simulate(schedule, costs, steps, engine="simpy").to_json()
    for a, b in zip(fast_json["per_device"], simpy_json["per_device"], strict=True):
        assert a["memory_breakdown"] == b["memory_breakdown"]
        assert a["peak_action"] == b["peak_action"]
        assert a["peak_activation_bytes"] == b["peak_activation_bytes"]


def test_schedules_of_one_shape_share_their_tables() -> None:
    """A sweep's points of one shape reuse the schedule's kept tables; results still follow
    each point's costs."""
    schedule = build("1f1b", 4, 8)
    light = simulate(schedule, _uniform(4, 100.0)).to_json()
    heavy = simulate(schedule, _uniform(4, 300.0)).to_json()
    assert [d["peak_activation_bytes"] for d in light["per_device"]] == [400.0, 300.0, 200.0, 100.0]
    assert [d["peak_activation_bytes"] for d in heavy["per_device"]] == [
        1200.0,
        900.0,
        600.0,
        300.0,
    ]


def _uniform(devices: int, stash: float) -> PipelineCosts:
    from pipesim.costs import synthetic_costs

    return synthetic_costs(devices, 1, 1.0, 2.0, activation_bytes=stash)


# -- what a review found the kept tables must not share (and what results must keep) ---------


def _two_stage_costs(**sizes: float) -> PipelineCosts:
    """Two stages on a 1 B/s link (a byte takes a second)."""
    network = Network(2, Topology.ALL_TO_ALL, Link("l", 1.0, 0.0))
    return PipelineCosts(tuple(StageCosts(1.0, 1.0, 1.0, **sizes) for _ in range(2)), network)


def test_integer_and_float_output_sizes_with_the_same_bytes_are_not_one_kept_entry() -> None:
    """An int64 array of 1s has the bytes of float64 5e-324s: each run's transfers are its
    own (1 s, then 0 s), whichever ran first."""
    schedule = build("1f1b", 2, 2)
    one = simulated(schedule, _two_stage_costs(output_bytes=1), engine="fast")
    tiny = simulated(schedule, _two_stage_costs(output_bytes=5e-324), engine="fast")
    assert (
        one.iteration_time_s
        == simulated(schedule, _two_stage_costs(output_bytes=1), engine="simpy").iteration_time_s
    )
    assert (
        tiny.iteration_time_s
        == simulated(
            schedule, _two_stage_costs(output_bytes=5e-324), engine="simpy"
        ).iteration_time_s
    )
    assert one.iteration_time_s > tiny.iteration_time_s


def test_integer_and_float_sizes_of_equal_value_are_not_one_kept_size_table() -> None:
    """2**53 + 1 + 1 summed as integers is exact, as floats it rounds: the static bytes of the
    float costs are the same whether the integer costs ran before them or not."""
    schedule = build("interleaved-1f1b", 2, 4, 3)
    network = Network(2, Topology.ALL_TO_ALL, Link("l", 1e9, 0.0))
    params = [2**53, 1, 1, 2**53, 1, 1]

    def static(convert: type) -> float:
        stages = tuple(StageCosts(1.0, 1.0, 1.0, parameter_bytes=convert(p)) for p in params)
        result = simulated(schedule, PipelineCosts(stages, network), engine="fast")
        return result.per_device[0].memory.static_bytes

    clear_build_memo()  # a schedule of its own: nothing kept for it yet
    alone = static(float)
    clear_build_memo()
    exact = static(int)  # kept first, then the float costs
    assert static(float) == alone != exact


def test_results_memory_crosses_processes_with_its_curves() -> None:
    """A device's memory and summary pickle (their curves made and carried), as before."""
    result = simulated(
        build("1f1b", 2, 4), synthetic_costs(2, 1, 1.0, 2.0, activation_bytes=100.0), 1
    )
    for summary in result.per_device:
        back = pickle.loads(pickle.dumps(summary))
        for name in ("change_times_s", "activation_levels_bytes", "transient_levels_bytes"):
            assert getattr(back.memory, name).tolist() == getattr(summary.memory, name).tolist()
        assert back.peak_memory_bytes == summary.peak_memory_bytes


def test_a_finished_run_is_read_only() -> None:
    """The memory curves are made from the run when first read: the run cannot change first."""
    result = simulated(build("1f1b", 2, 4), synthetic_costs(2, 1, 1.0, 2.0), 1)
    with pytest.raises(ValueError, match="read-only"):
        result.run.start_s[0] += 100.0
