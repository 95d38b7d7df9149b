"""Hypothesis strategies and an independent reference checker for schedule tests."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import assume
from hypothesis import strategies as st

from pipesim.costs.pipeline_costs import PipelineCosts, StageCosts
from pipesim.hardware.network import Link, Network, Topology
from pipesim.parallel.placement import looped, v_shape
from pipesim.schedules import Action, Kind, Schedule, build, schedule_names, unsupported_reason


@st.composite
def schedules(
    draw: st.DrawFn,
    names: Sequence[str] | None = None,
    max_devices: int = 8,
    max_microbatches: int = 32,
    max_chunks: int = 4,
) -> Schedule:
    """Any registered schedule at any (K, M, v) its constraints allow."""
    name = draw(st.sampled_from(list(names or schedule_names())))
    if name == "dualpipe":  # K and M even, M >= 2K, v = 1: drawn so, not filtered down to
        assume(max_devices >= 2 and max_microbatches >= 4)
        devices = 2 * draw(st.integers(1, max_devices // 2))
        assume(2 * devices <= max_microbatches)
        microbatches = 2 * draw(st.integers(devices, max_microbatches // 2))
        return build(name, devices, microbatches, 1)
    devices = draw(st.integers(1, max_devices))
    microbatches = draw(st.integers(1, max_microbatches))
    chunks = draw(st.integers(1, max_chunks))
    assume(unsupported_reason(name, devices, microbatches, chunks) is None)
    return build(name, devices, microbatches, chunks)


def reference_runs_to_completion(
    stages: int,
    placement: Sequence[int],
    rows: Sequence[Sequence[Action]],
    model_stages: int | None = None,
) -> bool:
    """A deliberately naive dry run, independent of the validator: keep sweeping the devices,
    running each one's next action when the actions it needs are done, until nothing moves.

    Needs: F(s,m) <- F(s-1,m); B/I(s,m) <- F(s,m) and the B or I of (s+1,m); W(s,m) <- I(s,m).
    With copies of the model (``model_stages`` stages each, numbered copy by copy), a copy's
    first stage needs no F before it and its last no backward after it.
    Also checks that each (stage, micro-batch) has F and B, or F, I and W, each once, and that
    every action sits on its stage's device.
    """
    per_copy = stages if model_stages is None else model_stages
    seen: dict[tuple[int, int], list[Kind]] = {}
    for device, row in enumerate(rows):
        for a in row:
            if placement[a.stage] != device:
                return False
            seen.setdefault((a.stage, a.microbatch), []).append(a.kind)
    for kinds in seen.values():
        if sorted(k.value for k in kinds) not in (["B", "F"], ["F", "I", "W"]):
            return False
    done: set[tuple[int, str, int]] = set()

    def ready(a: Action) -> bool:
        s, m = a.stage, a.microbatch
        if a.kind is Kind.F:
            return s % per_copy == 0 or (s - 1, "F", m) in done
        if a.kind is Kind.W:
            return (s, "I", m) in done
        if (s, "F", m) not in done:
            return False
        last = s % per_copy == per_copy - 1
        return last or (s + 1, "B", m) in done or (s + 1, "I", m) in done

    heads = [0] * len(rows)
    moved = True
    while moved:
        moved = False
        for device, row in enumerate(rows):
            while heads[device] < len(row) and ready(row[heads[device]]):
                a = row[heads[device]]
                done.add((a.stage, a.kind.value, a.microbatch))
                heads[device] += 1
                moved = True
    return all(heads[d] == len(rows[d]) for d in range(len(rows)))


def in_flight_peaks(schedule: Schedule, until: Kind) -> list[int]:
    """Per device, the most (stage, micro-batch) pairs whose F ran and whose ``until`` pass
    (B/I, or the last backward piece B/W) has not, scanning the device's list in order."""
    peaks = []
    for row in schedule.device_actions:
        live: set[tuple[int, int]] = set()
        peak = 0
        for a in row:
            key = (a.stage, a.microbatch)
            if a.kind is Kind.F:
                live.add(key)
                peak = max(peak, len(live))
            elif a.kind is Kind.B or a.kind is until:
                live.discard(key)
        peaks.append(peak)
    return peaks


@st.composite
def pipeline_costs(draw: st.DrawFn, max_devices: int = 4) -> PipelineCosts:
    """Random per-stage F, I, W (whole seconds, W may be 0) and a link with a latency."""
    devices = draw(st.integers(1, max_devices))
    stages = tuple(
        StageCosts(
            forward_s=float(draw(st.integers(1, 5))),
            input_grad_s=float(draw(st.integers(1, 5))),
            weight_grad_s=float(draw(st.integers(0, 5))),
            output_bytes=1.0,
            input_bytes=1.0,
        )
        for _ in range(devices)
    )
    latency = draw(st.sampled_from([0.0, 0.5, 2.0]))
    return PipelineCosts(stages, Network(devices, Topology.ALL_TO_ALL, Link("l", 1e9, latency)))


@st.composite
def placed_pipeline_costs(draw: st.DrawFn) -> tuple[PipelineCosts, tuple[int, ...]]:
    """Random per-stage costs for a V (two stages per device) or a looped placement over 2
    or 3 chunks, with a link latency."""
    devices = draw(st.integers(1, 3))
    shape = draw(st.sampled_from(["v", "looped-2", "looped-3"]))
    placement = v_shape(devices) if shape == "v" else looped(devices, int(shape[-1]))
    stages = tuple(
        StageCosts(
            float(draw(st.integers(1, 4))),
            float(draw(st.integers(1, 4))),
            float(draw(st.integers(0, 4))),
            output_bytes=1.0,
        )
        for _ in placement
    )
    latency = draw(st.sampled_from([0.0, 0.5]))
    network = Network(devices, Topology.ALL_TO_ALL, Link("l", 1e9, latency))
    return PipelineCosts(stages, network), placement
