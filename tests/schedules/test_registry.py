"""The registry: names, defaults, and every refusal with its reason."""

from __future__ import annotations

import pytest

from pipesim.errors import ScheduleError
from pipesim.schedules import build, schedule_info, schedule_names, unsupported_reason

DESIGN_SCHEDULES = {
    "gpipe",
    "1f1b",
    "interleaved-1f1b",
    "looped-bfs",
    "zb-h1",
    "zb-h2",
    "zbv",
    "dualpipev",
    "pipedream-2bw",
    "pipedream",
}


def test_every_schedule_of_the_design_is_registered() -> None:
    assert set(schedule_names()) >= DESIGN_SCHEDULES
    for name in schedule_names():
        info = schedule_info(name)
        assert info.name == name and info.summary and info.reference


def test_unknown_name_lists_the_valid_ones() -> None:
    with pytest.raises(ScheduleError) as error:
        build("1F1B", 2, 2)
    assert str(error.value) == (
        "unknown schedule '1F1B'; choose one of: gpipe, 1f1b, interleaved-1f1b, "
        "interleaved-1f1b-flexible, looped-bfs, zb-h1, zb-h2, interleaved-zb, zbv, dualpipev, "
        "dualpipe, pipedream-2bw, pipedream"
    )


def test_chunks_default_to_the_schedules_own() -> None:
    assert build("zbv", 2, 4).chunks == 2
    assert build("interleaved-1f1b", 2, 4).chunks == 2
    assert build("1f1b", 2, 4).chunks == 1


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (("1f1b", 0, 2), "devices must be an integer >= 1, got 0"),
        (("1f1b", 2, -1), "microbatches must be an integer >= 1, got -1"),
        (("1f1b", 2, 2, 0), "chunks must be an integer >= 1, got 0"),
        (("1f1b", 2.0, 2), "devices must be an integer >= 1, got 2.0"),
        (
            ("gpipe", 2, 2, 2),
            "gpipe: chunks must be 1 (one stage per device; looped-bfs is GPipe with chunks), "
            "got 2",
        ),
        (
            ("1f1b", 2, 2, 3),
            "1f1b: chunks must be 1 (one stage per device; interleaved-1f1b takes chunks), got 3",
        ),
        (
            ("zb-h1", 2, 2, 2),
            "zb-h1: chunks must be 1 (one stage per device; interleaved-zb takes chunks), got 2",
        ),
        (("zb-h2", 2, 2, 2), "zb-h2: chunks must be 1 (one stage per device), got 2"),
        (("pipedream", 2, 2, 2), "pipedream: chunks must be 1 (one stage per device), got 2"),
        (
            ("zbv", 2, 2, 3),
            "zbv: chunks must be 2 (ZB-V places two stages per device in a V), got 3",
        ),
        (
            ("dualpipev", 2, 4, 1),
            "dualpipev: chunks must be 2 (DualPipeV places two stages per device in a V), got 1",
        ),
        (
            ("dualpipev", 3, 5),
            "dualpipev: microbatches must be >= 2 x devices = 6 (DualPipeV's reference "
            "implementation fills both arms of the V before its main phase), got 5",
        ),
        (
            ("dualpipe", 2, 4, 2),
            "dualpipe: chunks must be 1 (DualPipe holds one model stage of each of its two "
            "copies per device), got 2",
        ),
        (
            ("dualpipe", 3, 6),
            "dualpipe: devices must be even (DualPipe pairs device i with K-1-i), got 3",
        ),
        (
            ("dualpipe", 4, 6),
            "dualpipe: microbatches must be even and >= 2 x devices = 8 (half enter each copy; "
            "deepseek-ai/DualPipe asserts both), got 6",
        ),
        (
            ("dualpipe", 4, 9),
            "dualpipe: microbatches must be even and >= 2 x devices = 8 (half enter each copy; "
            "deepseek-ai/DualPipe asserts both), got 9",
        ),
        (
            ("interleaved-1f1b", 2, 4, 1),
            "interleaved-1f1b: chunks must be >= 2 (with one chunk per device this is 1f1b or "
            "zb-h1), got 1",
        ),
        (
            ("interleaved-1f1b", 4, 9, 2),
            "interleaved-1f1b: microbatches must split into max(1, M // K) = 2 equal rounds of "
            "about K micro-batches (any multiple of K works), got M=9 with K=4",
        ),
        (
            ("interleaved-1f1b-flexible", 4, 9, 1),
            "interleaved-1f1b-flexible: chunks must be >= 2 (with one chunk per device "
            "Megatron-Core runs 1f1b), got 1",
        ),
        (
            ("pipedream-2bw", 4, 3),
            "pipedream-2bw: microbatches must be >= devices (a new weight version every M >= K "
            "micro-batches keeps two versions enough, PipeDream-2BW §3), got M=3 with K=4",
        ),
        (
            ("pipedream-2bw", 2, 3, 2),
            "pipedream-2bw: chunks must be 1 (one stage per device), got 2",
        ),
    ],
)
def test_refusals_give_the_reason(call: tuple[object, ...], message: str) -> None:
    with pytest.raises(ScheduleError) as error:
        build(*call)  # type: ignore[arg-type]
    assert str(error.value) == message


def test_remat_is_refused_where_backwards_are_split() -> None:
    with pytest.raises(ScheduleError) as error:
        build("zb-h1", 2, 2, remat=True)
    assert str(error.value) == (
        "zb-h1: remat is not supported: the schedule splits backwards into I and W, and "
        "re-materialization is modelled for full backwards only"
    )
    assert build("gpipe", 2, 2, remat=True).rematerialize
    assert not build("gpipe", 2, 2).rematerialize


def test_unsupported_reason_is_none_where_build_succeeds() -> None:
    assert unsupported_reason("interleaved-1f1b", 4, 8, 2) is None
    assert unsupported_reason("interleaved-1f1b", 4, 3, 2) is None  # one round of 3
    assert unsupported_reason("interleaved-1f1b", 4, 10, 2) is None  # two rounds of 5
    assert unsupported_reason("interleaved-1f1b-flexible", 4, 9, 2) is None  # groups of 5, 4
    assert unsupported_reason("dualpipev", 2, 3) is not None


def test_a_loaded_schedule_gets_a_closed_form_only_when_proven_equal() -> None:
    """A hand-made schedule named "1f1b" whose order is GPipe's is GPipe, not 1F1B; one named
    "1f1b" that no generator makes has no entry at all."""
    from pipesim.schedules import Schedule, from_csv, to_csv
    from pipesim.schedules.registry import registered_info

    built = build("1f1b", 4, 8)
    assert built.generator == "1f1b"
    built_info = registered_info(built)
    assert built_info is not None and built_info.name == "1f1b"

    loaded = from_csv(to_csv(build("1f1b", 4, 8)), name="my-file.csv")
    assert loaded.generator is None
    loaded_info = registered_info(loaded)
    assert loaded_info is not None and loaded_info.name == "1f1b"

    gpipe = build("gpipe", 2, 2)
    impostor = Schedule("1f1b", 2, gpipe.placement, gpipe.device_actions)
    info = registered_info(impostor)
    assert info is not None and info.name == "gpipe"

    # device 0 runs its two forwards in the opposite order: valid, but nobody's generator.
    rows = [list(row) for row in gpipe.device_actions]
    rows[0][0], rows[0][1] = rows[0][1], rows[0][0]
    odd = Schedule("1f1b", 2, gpipe.placement, tuple(tuple(row) for row in rows))
    assert registered_info(odd) is None


def test_probe_schedules_pick_one_full_and_one_split_backward() -> None:
    from pipesim.schedules.registry import probe_schedules

    assert probe_schedules(2, 6, 1) == ("1f1b", "zb-h1")
    assert probe_schedules(2, 6, 2) == ("interleaved-1f1b", "zbv")
    assert probe_schedules(2, 6, 3) == ("interleaved-1f1b", "interleaved-zb")
    # 5 micro-batches do not split into interleaved rounds of K=2: looped BFS takes the role.
    assert probe_schedules(2, 5, 3)[0] == "looped-bfs"
