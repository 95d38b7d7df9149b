"""With equal stage costs and no communication, the simulated bubble equals the closed form,
for every schedule that has one, over hypothesis-drawn K, M, v and costs."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from pipesim.analysis.bubble import analytic_bubble_fraction
from pipesim.costs import synthetic_costs
from pipesim.engine import simulate
from pipesim.schedules import Schedule, build

from ..schedules.strategies import schedules

costs = st.tuples(st.integers(1, 4), st.integers(1, 4), st.integers(0, 4))


@given(schedules(max_devices=6, max_microbatches=20), costs, st.sampled_from([1, 3]))
def test_simulated_bubble_equals_the_closed_form(
    schedule: Schedule, fiw: tuple[int, int, int], steps: int
) -> None:
    f, i, w = fiw
    pipeline = synthetic_costs(schedule.devices, schedule.chunks, f, i, w)
    result = simulate(schedule, pipeline, steps=steps)
    closed_form = result.analytic_bubble_fraction
    if closed_form is not None:
        assert abs(result.bubble_fraction - closed_form) < 1e-12


def check(
    name: str,
    k: int,
    m: int,
    v: int,
    fiw: tuple[float, float, float],
    steps: int,
    expected: float,
    remat: bool = False,
) -> None:
    schedule = build(name, k, m, v, remat=remat)
    result = simulate(schedule, synthetic_costs(k, v, *fiw), steps=steps)
    assert result.analytic_bubble_fraction is not None
    assert abs(result.analytic_bubble_fraction - expected) < 1e-12
    assert abs(result.bubble_fraction - expected) < 1e-12


def test_the_closed_forms_cover_the_papers_regimes() -> None:
    """Not vacuous: each form applies, and agrees, where its paper states it."""
    check("gpipe", 4, 8, 1, (1, 2, 0), 1, 3 / 11)
    check("gpipe", 4, 8, 1, (1, 2, 0), 1, 3 / 11, remat=True)
    check("1f1b", 8, 32, 1, (1, 1, 1), 3, 7 / 39)
    check("interleaved-1f1b", 4, 8, 2, (1, 2, 0), 1, 1.5 / 9.5)
    check("looped-bfs", 4, 8, 4, (1, 2, 0), 1, 0.75 / 8.75)
    # ZB-H1: (K-1)(F+I-W) against M(F+I+W): 3 * 2 / (8 * 4 + 6)
    check("zb-h1", 4, 8, 1, (1.5, 1.5, 1.0), 1, 6 / 38)
    # ZB-H2 with T_F = T_I = T_W: zero back to back, the last device's start in one step.
    check("zb-h2", 4, 8, 1, (1, 1, 1), 3, 0.0)
    check("zb-h2", 4, 8, 1, (1, 1, 1), 1, 3 / 27)
    check("zbv", 4, 8, 2, (1, 1, 1), 3, 0.0)
    check("pipedream-2bw", 4, 8, 1, (1, 2, 0), 3, 0.0)
    check("pipedream", 4, 8, 1, (1, 2, 0), 1, 3 / 11)


def test_no_closed_form_outside_its_conditions() -> None:
    for name, k, m, v, fiw in [
        ("interleaved-1f1b", 4, 6, 2, (1, 1, 0)),  # M not a multiple of K
        ("zb-h2", 4, 6, 1, (1, 1, 1)),  # M < 2K-1
        ("zb-h1", 4, 8, 1, (1, 1, 2)),  # W > F
        ("zbv", 4, 8, 2, (1, 2, 1)),  # unequal passes
        ("dualpipev", 2, 4, 2, (1, 1, 1)),
        ("interleaved-zb", 2, 4, 2, (1, 1, 1)),
    ]:
        schedule = build(name, k, m, v)
        assert analytic_bubble_fraction(schedule, synthetic_costs(k, v, *fiw), 1) is None


def test_a_schedule_named_like_a_registered_one_gets_no_closed_form_unless_it_is_one() -> None:
    """A hand-made order called "1f1b" is simulated, but no paper's form is claimed for it."""
    gpipe = build("gpipe", 2, 2)
    rows = [list(row) for row in gpipe.device_actions]
    rows[0][0], rows[0][1] = rows[0][1], rows[0][0]  # 0F1 before 0F0: valid, nobody's order
    custom = Schedule("1f1b", 2, gpipe.placement, tuple(tuple(row) for row in rows))
    pipeline = synthetic_costs(2, 1, 1, 1, 0)
    assert simulate(custom, pipeline).analytic_bubble_fraction is None
    renamed = Schedule("1f1b", 2, gpipe.placement, gpipe.device_actions)
    # Proven equal to GPipe: GPipe's form (K-1)/(M+K-1) = 1/3.
    assert simulate(renamed, pipeline).analytic_bubble_fraction == 1 / 3
