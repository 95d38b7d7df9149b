"""The saved-result loaders: every input loads or raises the documented one-line PipesimError,
and whatever loads, draws."""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipesim.errors import PipesimError
from pipesim.export.saved import SWEEP_CHECKS, load_records, load_run, load_sweep
from plots import memory_timeline_figure, save, timeline_figure

from ..plots.test_plot_cli import valid_run

# JSON values, NaN and infinities included (Python's json reads and writes them).
LEAVES = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**20), max_value=10**20)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=6)
    | st.sampled_from(["0F0", "1B0", "opt", "2F0", "gpipe", ""])
    | st.sampled_from([1.7e308, -1e308, 1e16, 1e-300, 5e-324, 2**70])
)
VALUES = st.recursive(
    LEAVES,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                [
                    "result",
                    "compute",
                    "transfers",
                    "memory",
                    "results",
                    "records",
                    "schedule",
                    "devices",
                    "microbatches",
                    "speedup",
                    "per_device",
                    "x",
                ]
            ),
            children,
            max_size=5,
        )
    ),
    max_leaves=20,
)


def write(tmp_path: Path, data: Any) -> str:
    path = tmp_path / "saved.json"
    path.write_text(json.dumps(data, allow_nan=True))
    return str(path)


def one_line(error: PipesimError, path: str) -> None:
    message = str(error)
    assert "\n" not in message and message.startswith(f"FILE {path!r}"), message


LOADERS: list[tuple[str, Callable[[str], object]]] = [
    ("run", lambda p: load_run(p)),
    *[(kind, lambda p, k=kind: load_sweep(p, k)) for kind in SWEEP_CHECKS],
    ("records", load_records),
]


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=VALUES)
def test_any_json_loads_or_is_refused_in_one_line(tmp_path: Path, data: Any) -> None:
    path = write(tmp_path, data)
    for _, load in LOADERS:
        try:
            load(path)
        except PipesimError as error:
            one_line(error, path)


def paths_of(data: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value inside ``data``."""
    found = [prefix] if prefix else []
    if isinstance(data, dict):
        for key, value in data.items():
            found += paths_of(value, (*prefix, key))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            found += paths_of(value, (*prefix, index))
    return found


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(choice=st.integers(min_value=0, max_value=10**6), value=VALUES)
def test_a_corrupted_saved_run_is_refused_or_draws(tmp_path: Path, choice: int, value: Any) -> None:
    """One value of a good file replaced by anything: the loader refuses it in one line, or
    the timeline and memory figures draw and save without an error."""
    data = valid_run()
    places = paths_of(data)
    place = places[choice % len(places)]
    target: Any = data
    for key in place[:-1]:
        target = target[key]
    target[place[-1]] = copy.deepcopy(value)
    path = write(tmp_path, data)
    try:
        run = load_run(path)
    except PipesimError as error:
        one_line(error, path)
        return
    assert all(math.isfinite(t) for bar in run.compute for t in bar[2:])
    save(timeline_figure(run.compute, run.transfers, title=run.title), tmp_path / "t.png", dpi=30)
    try:
        figure = memory_timeline_figure(run.memory, run.capacity_bytes)
    except PipesimError:
        return  # memory zero throughout: refused, by design
    save(figure, tmp_path / "m.png", dpi=30)


def test_the_sample_loads_with_its_title(tmp_path: Path) -> None:
    run = load_run(write(tmp_path, valid_run()))
    assert run.title == "1f1b, K=2, M=1: step 3 s, bubble 50 %"
    assert run.compute[0] == (0, "0F0", 0.0, 1.0) and run.capacity_bytes is None
    assert run.memory == (((0.0, 0.0), (1.0, 10.0)), ((0.0, 5.0),))


@pytest.mark.parametrize(
    ("layout", "title"),
    [
        (
            {
                "tensor_parallel": 2,
                "sequence_parallel": True,
                "data_parallel": 4,
                "microbatch_size": 1.0,
                "recompute": "selective",
                "zero": 1,
            },
            "1f1b, K=2, M=1, T=2 SP D=4 b=1 recompute=selective ZeRO-1: step 3 s, bubble 50 %",
        ),
        (
            {
                "tensor_parallel": 1,
                "sequence_parallel": False,
                "data_parallel": 8,
                "microbatch_size": 4.0,
                "recompute": "none",
                "zero": 0,
            },
            "1f1b, K=2, M=1, T=1 D=8 b=4: step 3 s, bubble 50 %",
        ),
        (None, "1f1b, K=2, M=1: step 3 s, bubble 50 %"),  # synthetic costs, or an old file
        ({"tensor_parallel": "2", "data_parallel": 4}, "1f1b, K=2, M=1: step 3 s, bubble 50 %"),
    ],
)
def test_a_hybrid_runs_title_states_its_other_dimensions(
    tmp_path: Path, layout: Any, title: str
) -> None:
    """Two hybrid runs side by side differ in T, D or b as often as in K or M: the panel title
    says them all."""
    data = valid_run()
    data["result"]["layout"] = layout
    assert load_run(write(tmp_path, data)).title == title


def test_sweep_rows_are_checked_and_failed_runs_left_out(tmp_path: Path) -> None:
    good = {"schedule": "gpipe", "devices": 2, "microbatches": 4, "speedup": 1.6, "oom": False}
    path = write(tmp_path, {"results": [good, {"error": "boom", "schedule": 3}]})
    assert load_sweep(path, "speedup") == [good]
    path = write(tmp_path, {"results": [{**good, "oom": "yes"}]})
    with pytest.raises(PipesimError, match=r"results\[0\]\.oom must be true or false, got 'yes'"):
        load_sweep(path, "speedup")
    path = write(tmp_path, {"results": [{**good, "speedup": 1e400}]})
    with pytest.raises(PipesimError, match=r"results\[0\]\.speedup must be a finite number"):
        load_sweep(path, "speedup")


def test_the_device_bound_is_pipesims_limit_on_k(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """K=2048 is refused at the default limit (1,024) and read once PIPESIM_MAX_DEVICES
    allows it, as simulate does: whatever simulate may run, plot reads."""
    data = valid_run()
    data["result"]["devices"] = 2048
    path = write(tmp_path, data)
    with pytest.raises(PipesimError, match=r"result\.devices must be an integer from 1 to 1024"):
        load_run(path)
    monkeypatch.setenv("PIPESIM_MAX_DEVICES", "2048")
    assert load_run(path).title.startswith("1f1b, K=2048, M=1")
    sweep_row = {
        "schedule": "gpipe",
        "devices": 2048,
        "microbatches": 4,
        "speedup": 1.6,
        "oom": False,
    }
    assert load_sweep(write(tmp_path, {"results": [sweep_row]}), "speedup") == [sweep_row]
