"""The memory model's rules (pipesim.memory.rules), and both of their consumers reading them.

The table is literal; the consumers are held to it: the engine's memory over time
(engine.memory_over_time) and the closed form of the partitioner and planner (memory.forms).
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipesim.costs import PipelineCosts, StageCosts, synthetic_costs
from pipesim.engine import simulate
from pipesim.memory import rules
from pipesim.memory.forms import memory_forms
from pipesim.memory.rules import At, Change
from pipesim.schedules import Kind, build

A, W_PART, X, T = 7.0, 3.0, 2.0, 0.5  # stash, keep (W's part), stage input, transient

# kind, remat: [(at, bytes)] for the sizes above, literally: every action holds its transient
# from its start to its end.
EXPECTED = {
    (Kind.F, False): [(At.START, A + T), (At.END, -T)],
    (Kind.F, True): [(At.START, A + T), (At.END, X - A - T)],
    (Kind.B, False): [(At.START, T), (At.END, -A - T)],
    (Kind.B, True): [(At.START, A + T), (At.END, -A - X - T)],
    (Kind.I, False): [(At.START, T), (At.END, W_PART - A - T)],
    (Kind.W, False): [(At.START, T), (At.END, -W_PART - T)],
}


@pytest.mark.parametrize(("kind", "remat"), sorted(EXPECTED, key=str))
def test_each_kind_changes_the_activations_as_the_table_says(kind: Kind, remat: bool) -> None:
    got = [(c.at, c.bytes(A, W_PART, X, T)) for c in rules.changes(kind, remat)]
    assert got == EXPECTED[(kind, remat)]  # exact: every size is a dyadic fraction
    assert sum(c.transient for c in rules.changes(kind, remat)) == 0  # freed by the end


def test_a_full_backward_holds_the_larger_transient_of_its_parts() -> None:
    stage = StageCosts(
        1,
        1,
        1,
        forward_transient_bytes=9.0,
        input_grad_transient_bytes=4.0,
        weight_grad_transient_bytes=6.0,
    )
    assert rules.transient_bytes(stage, Kind.F, False) == 9.0
    assert rules.transient_bytes(stage, Kind.I, False) == 4.0
    assert rules.transient_bytes(stage, Kind.W, False) == 6.0
    assert rules.transient_bytes(stage, Kind.B, False) == 6.0
    assert rules.transient_bytes(stage, Kind.B, True) == 9.0  # it re-runs the forward


def test_re_materialization_leaves_split_backwards_as_they_are() -> None:
    assert rules.changes(Kind.I, True) == rules.changes(Kind.I, False)
    assert rules.changes(Kind.W, True) == rules.changes(Kind.W, False)


@given(st.floats(0, 1e12), st.floats(0, 1e12), st.floats(0, 1e12))
def test_a_change_in_bytes_is_the_exact_signed_sum(a: float, w: float, x: float) -> None:
    assert Change(At.END, -1, 1, 0).bytes(a, w, x) == -(a - w)
    assert Change(At.END, -1, 0, 1).bytes(a, w, x) == x - a
    assert Change(At.END, -1, 0, -1).bytes(a, w, x) == -a - x
    assert Change(At.END, 2, 0, 0).bytes(a, w, x) == 2 * a


def test_static_memory_counts_weight_versions_gradients_and_optimizer_state() -> None:
    stages = [
        StageCosts(1, 1, 0, parameter_bytes=10, gradient_bytes=10, optimizer_bytes=20),
        StageCosts(1, 1, 0, parameter_bytes=5, gradient_bytes=5, optimizer_bytes=10),
    ]
    assert rules.static_bytes(stages, [0, 1], versions=1) == 60.0
    assert rules.static_bytes(stages, [1], versions=2) == 25.0


def test_a_device_holding_both_ends_keeps_one_copy_of_tied_embeddings() -> None:
    """Stage 0 holds the embeddings (8 bytes of weights); the last stage's output layer
    copies them (8 of its 10 weight bytes are shared). Each byte of weights brings one of
    gradients, two of optimizer state and one of master weights."""
    first = StageCosts(
        1, 1, 0, parameter_bytes=8, gradient_bytes=8, optimizer_bytes=16, master_weight_bytes=8
    )
    last = StageCosts(
        1,
        1,
        0,
        parameter_bytes=10,
        gradient_bytes=10,
        optimizer_bytes=20,
        master_weight_bytes=10,
        shared_parameter_bytes=8,
    )
    middle = StageCosts(1, 1, 0, parameter_bytes=4, gradient_bytes=4)
    stages = [first, middle, last]
    assert rules.static_bytes(stages, [0], 1) == 40.0
    assert rules.static_bytes(stages, [2], 1) == 50.0  # on its own device: a real copy
    assert rules.static_bytes(stages, [0, 2], 1) == 40.0 + 50.0 - 40.0  # a V: held once
    breakdown = rules.static_breakdown(stages, [0, 2], 1)
    assert (breakdown.weights, breakdown.gradients) == (10.0, 10.0)
    assert (breakdown.optimizer_state, breakdown.master_weights) == (20.0, 10.0)
    assert breakdown.total == rules.static_bytes(stages, [0, 2], 1)
    assert rules.static_bytes([last], [0], 2) == 60.0 - 48.0  # one stage holds both ends
    assert rules.weight_versions(build("1f1b", 4, 4), 0) == 1
    assert rules.weight_versions(build("pipedream-2bw", 4, 4), 0) == 2
    assert rules.weight_versions(build("pipedream", 4, 4), 0) == 4


@pytest.mark.parametrize(
    ("name", "remat"), [("gpipe", False), ("gpipe", True), ("1f1b", False), ("zb-h1", False)]
)
def test_the_engine_and_the_closed_form_read_the_same_rules(name: str, remat: bool) -> None:
    """Per device, the simulated peak equals the closed form's, to the byte, with sizes that
    make every term visible (stash, W's part and input all differ)."""
    schedule = build(name, 3, 5, remat=remat)
    costs = synthetic_costs(3, 1, 1.0, 2.0, 1.0, activation_bytes=A * 1e6)
    stage_costs = [
        StageCosts(
            s.forward_s,
            s.input_grad_s,
            s.weight_grad_s,
            activation_bytes=A * 1e6,
            weight_grad_activation_bytes=W_PART * 1e6,
            input_bytes=X * 1e6,
            output_bytes=X * 1e6,
            parameter_bytes=1e6,
            gradient_bytes=1e6,
        )
        for s in costs.stages
    ]
    costs = costs.__class__(tuple(stage_costs), costs.network)
    result = simulate(schedule, costs)
    forms = memory_forms(schedule)
    assert [d.peak_memory_bytes for d in result.per_device] == [
        form.peak_bytes(stage_costs) for form in forms
    ]


def test_copies_of_the_model_keep_their_own_tied_embeddings() -> None:
    """Two copies of a two-stage model in a V (DualPipe at K=2): device 0 holds copy 0's
    first stage and copy 1's last, device 1 the other two. Each device holds the first stage
    of one copy and the last of the other: no copy is held twice."""
    first = StageCosts(1, 1, 0, parameter_bytes=8, gradient_bytes=8)
    last = StageCosts(1, 1, 0, parameter_bytes=10, gradient_bytes=10, shared_parameter_bytes=8)
    stages = [first, last, first, last]  # copy 0's stages, then copy 1's
    assert rules.static_bytes(stages, [0, 3], 1, model_stages=2) == 36.0
    assert rules.static_bytes(stages, [0, 3], 1) == 36.0 - 16.0  # read as one 4-stage model
    assert rules.static_bytes(stages, [2, 3], 1, model_stages=2) == 36.0 - 16.0  # one copy's ends


@pytest.mark.parametrize("per_model_stage", [True, False])
def test_dualpipe_reads_the_same_rules_in_the_engine_and_the_closed_form(
    per_model_stage: bool,
) -> None:
    """DualPipe's forms over its copies' stages, given the costs per model stage (as the
    partitioner and the planner have them) or per stage of each copy, against the engine:
    the same peak on every device, to the byte (with unequal stages, so a copy's stage that
    took another model stage's costs would show)."""
    schedule = build("dualpipe", 4, 8)
    model = [
        StageCosts(
            1.0,
            2.0,
            1.0,
            activation_bytes=(s + 1) * A * 1e6,
            weight_grad_activation_bytes=W_PART * 1e6,
            input_bytes=X * 1e6,
            output_bytes=X * 1e6,
            parameter_bytes=(s + 1) * 1e6,
            gradient_bytes=1e6,
        )
        for s in range(4)
    ]
    network = synthetic_costs(4, 1, 1.0, 1.0).network
    given = model if per_model_stage else [model[s % 4] for s in range(8)]
    result = simulate(schedule, PipelineCosts(tuple(given), network))
    forms = memory_forms(schedule)
    assert [d.peak_memory_bytes for d in result.per_device] == [
        form.peak_bytes(given) for form in forms
    ]
    # device d: model stage d of copy 0 and K-1-d of copy 1, their weights both held
    assert [d.memory.static.weights for d in result.per_device] == [5e6] * 4
