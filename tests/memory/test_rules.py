"""The memory model's rules (pipesim.memory.rules), and both of their consumers reading them.

The table is literal; the consumers are held to it: the engine's memory over time
(engine.memory_over_time) and the closed form of the partitioner and planner (memory.forms).
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipesim.costs import StageCosts, synthetic_costs
from pipesim.engine import simulate
from pipesim.memory import rules
from pipesim.memory.forms import memory_forms
from pipesim.memory.rules import At, Change
from pipesim.schedules import Kind, build

A, W_PART, X = 7.0, 3.0, 2.0  # stash, keep (W's part), stage input

# kind, remat: [(at, bytes)] for the sizes above, literally.
EXPECTED = {
    (Kind.F, False): [(At.START, A)],
    (Kind.F, True): [(At.START, A), (At.END, X - A)],
    (Kind.B, False): [(At.END, -A)],
    (Kind.B, True): [(At.START, A), (At.END, -A - X)],
    (Kind.I, False): [(At.END, W_PART - A)],
    (Kind.W, False): [(At.END, -W_PART)],
}


@pytest.mark.parametrize(("kind", "remat"), sorted(EXPECTED, key=str))
def test_each_kind_changes_the_activations_as_the_table_says(kind: Kind, remat: bool) -> None:
    got = [(c.at, c.bytes(A, W_PART, X)) for c in rules.changes(kind, remat)]
    assert got == EXPECTED[(kind, remat)]


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
