"""A device's memory form summed over every level at once (pipesim.memory.forms) gives, bit for
bit, what the per-level rule (level_bytes, stage by stage) gives on its largest level."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipesim.costs.pipeline_costs import StageCosts, merge_layers
from pipesim.memory import forms as forms_module
from pipesim.memory.forms import SLOT, level_bytes, memory_forms, stage_sizes
from pipesim.schedules import build

SHAPES = [
    ("gpipe", 1),
    ("1f1b", 1),
    ("zb-h1", 1),
    ("zb-h2", 1),
    ("interleaved-1f1b", 2),
    ("zbv", 2),
    ("pipedream-2bw", 1),
    ("dualpipev", 2),
]


@st.composite
def stage(draw: st.DrawFn) -> StageCosts:
    finite = st.integers(0, 40).map(lambda n: n * 0.37)
    size = finite  # StageCosts refuses an infinite transient
    stash = draw(finite)
    return StageCosts(
        1.0,
        1.0,
        1.0,
        activation_bytes=stash,
        weight_grad_activation_bytes=stash * draw(st.sampled_from([0.0, 0.5, 1.0])),
        input_bytes=draw(finite),
        output_bytes=1.0,
        parameter_bytes=draw(finite),
        gradient_bytes=draw(finite),
        forward_transient_bytes=draw(size),
        input_grad_transient_bytes=draw(size),
        weight_grad_transient_bytes=draw(size),
        optimizer_transient_bytes=draw(size),
    )


def _reference(form: object, stages: list[StageCosts]) -> float:
    """The largest level by the per-level rule (0 if none is positive)."""
    best = 0.0
    for counts in form.levels:  # type: ignore[attr-defined]
        total = 0.0
        for position, index in enumerate(form.stages):  # type: ignore[attr-defined]
            sizes = stage_sizes(stages[index], form.rematerialize)  # type: ignore[attr-defined]
            total = total + level_bytes(counts[SLOT * position : SLOT * (position + 1)], sizes)
        best = max(best, total)
    return best


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(SHAPES),
    st.integers(2, 4),
    st.integers(1, 3),
    st.booleans(),
    st.data(),
)
def test_every_level_at_once_is_the_per_level_rule(
    shape: tuple[str, int], devices: int, rounds: int, remat: bool, data: st.DataObject
) -> None:
    name, chunks = shape
    remat = remat and name == "gpipe"
    rounds = max(rounds, 2) if name.startswith("dualpipe") else rounds
    schedule = build(name, devices, devices * rounds, chunks, remat=remat)
    stages = [data.draw(stage()) for _ in range(schedule.stages)]
    for form in memory_forms(schedule, 1 if name != "pipedream-2bw" else 3):
        for cells in (0, 10**9):  # summed as arrays, and level by level on Python floats
            with pytest.MonkeyPatch.context() as patched:
                patched.setattr(forms_module, "PYTHON_LEVEL_CELLS", cells)
                assert form.peak_level_bytes(stages) == _reference(form, stages)


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # the arrays'
@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(SHAPES),
    st.integers(2, 3),
    st.lists(st.sampled_from([0.0, 1.0, 3.5, 1e308]), min_size=8, max_size=8),
    st.lists(st.booleans(), min_size=8, max_size=8),
)
def test_a_peak_on_python_floats_is_the_arrays_bit_for_bit_with_huge_sizes(
    shape: tuple[str, int], devices: int, values: list[float], merged: list[bool]
) -> None:
    """Sizes of 1e308 (their sums overflow to inf), and stashes of inf (two such layers
    merged: 0 x inf is a NaN level, passed over): the level-by-level sum gives the arrays'
    peak exactly."""
    name, chunks = shape
    schedule = build(name, devices, 2 * devices, chunks)
    stages = []
    for s in range(schedule.stages):
        layer = StageCosts(
            1.0,
            1.0,
            1.0,
            activation_bytes=values[s % 8],
            weight_grad_activation_bytes=min(values[(s + 1) % 8], values[s % 8]),
            input_bytes=values[(s + 2) % 8],
            forward_transient_bytes=values[(s + 3) % 8],
            optimizer_transient_bytes=values[(s + 4) % 8],
        )
        stages.append(merge_layers([layer, layer], layer.input_bytes) if merged[s % 8] else layer)
    for form in memory_forms(schedule, 1):
        peaks = []
        for cells in (0, 10**9):
            with pytest.MonkeyPatch.context() as patched:
                patched.setattr(forms_module, "PYTHON_LEVEL_CELLS", cells)
                peaks.append(form.peak_level_bytes(stages))
        assert peaks[0] == peaks[1]


def test_sizes_given_as_integers_are_summed_as_the_arrays_sum_them() -> None:
    """A size may be an int (StageCosts keeps it as given): each term is a float, as in the
    arrays, so 2**53 + 1 rounds as there, and 10**308 stashed twice overflows to inf instead
    of failing to convert."""
    schedule = build("1f1b", 2, 4)
    for stash in (2**53 + 1, 10**308):
        stages = [
            StageCosts(
                1.0,
                1.0,
                1.0,
                activation_bytes=stash,
                weight_grad_activation_bytes=0,
                input_bytes=0,
                forward_transient_bytes=1,
            )
        ] * 2
        for form in memory_forms(schedule, 1):
            peaks = []
            for cells in (0, 10**9):
                with pytest.MonkeyPatch.context() as patched:
                    patched.setattr(forms_module, "PYTHON_LEVEL_CELLS", cells)
                    with np.errstate(over="ignore"):
                        peaks.append(form.peak_level_bytes(stages))
            assert peaks[0] == peaks[1]
            assert isinstance(peaks[1], float)
