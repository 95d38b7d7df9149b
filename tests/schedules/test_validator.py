"""Every error the validator can raise, pinned: message first line and the marked grid."""

from __future__ import annotations

import pytest

from pipesim.errors import ScheduleError
from pipesim.schedules import Action, Kind, Schedule, UpdateRule, build, parse_action


def rows(*texts: str) -> tuple[tuple[Action, ...], ...]:
    return tuple(tuple(parse_action(c) for c in t.split()) for t in texts)


def error_of(*args: object, **kwargs: object) -> str:
    with pytest.raises(ScheduleError) as caught:
        Schedule(*args, **kwargs)  # type: ignore[arg-type]
    return str(caught.value)


def test_backward_before_forward_renders_the_marked_grid() -> None:
    message = error_of("t", 2, (0, 1), rows("0F0 0F1 0B1 0B0", "1B0 1F0 1F1 1B1"))
    assert message == (
        "device 1 runs 1B0 at step 0 before 1F0 at step 1: a backward needs its forward first\n"
        "step          0     1     2     3\n"
        "device 0    0F0   0F1   0B1   0B0\n"
        "device 1  >1B0< >1F0<   1F1   1B1"
    )


def test_weight_before_input_gradient() -> None:
    message = error_of("t", 1, (0,), rows("0F0 0W0 0I0"))
    assert message.splitlines()[0] == (
        "device 0 runs 0W0 at step 1 before 0I0 at step 2: a weight gradient needs its input "
        "gradient first"
    )


def test_deadlock_names_every_waiting_device() -> None:
    message = error_of("t", 2, (0, 1), rows("0F0 0B0 0F1 0B1", "1F1 1B1 1F0 1B0"))
    assert message == (
        "deadlock: no device can go on; device 0 waits at step 1 (0B0) for 1B0 (device 1 step "
        "3); device 1 waits at step 0 (1F1) for 0F1 (device 0 step 2)\n"
        "step          0     1     2     3\n"
        "device 0    0F0 >0B0<   0F1   0B1\n"
        "device 1  >1F1<   1B1   1F0   1B0"
    )


def test_long_schedules_show_a_window_around_the_error() -> None:
    schedule = build("1f1b", 2, 32)
    bad = [list(r) for r in schedule.device_actions]
    bad[1][40] = Action(1, Kind.F, 40)
    message = error_of("t", 32, schedule.placement, bad)
    lines = message.splitlines()
    assert (
        lines[0] == "device 1 step 40: 1F40 names micro-batch 40, but the schedule has 32 (0..31)"
    )
    assert lines[1].split()[1:3] == ["32", "33"]  # 16 columns from step 32
    assert lines[3].startswith("device 1  ... ") and lines[3].endswith(" ...")
    assert ">1F40<" in lines[3]
    assert len(lines) == 4


@pytest.mark.parametrize(
    ("args", "first_line"),
    [
        (("", 1, (0,), rows("0F0 0B0")), "schedule name must be a non-empty string, got ''"),
        (("t", 0, (0,), rows("0F0 0B0")), "microbatches must be an integer >= 1, got 0"),
        (("t", 1, (0,), []), "a schedule needs at least one device, got 0 rows of actions"),
        (
            ("t", 1, (), rows("0F0 0B0")),
            "placement must place at least one stage, got an empty placement",
        ),
        (
            ("t", 1, (0, 5), rows("0F0 0B0", "1F0 1B0")),
            "placement: stage 1 is on device 5, but the schedule has 2 device(s) (0..1)",
        ),
        (
            ("t", 1, (0, 0, 1), rows("0F0 1F0 1B0 0B0", "2F0 2B0")),
            "placement: every device must hold the same number of stages, got device 0: 2, "
            "device 1: 1",
        ),
        (("t", 1, 5, rows("0F0 0B0")), "placement must be a sequence, got 5"),
        (("t", 1, (0,), [["0F0"]]), "device 0 step 0: '0F0' is not an Action"),
        (
            ("t", 1, (0, 1), rows("0F0 0B0", "2F0 1B0")),
            "device 1 step 0: 2F0 names stage 2, but the schedule has 2 stage(s) (0..1)",
        ),
        (
            ("t", 1, (0, 1), rows("0F0 1F0 0B0", "1B0")),
            "device 0 step 1: 1F0 belongs on device 1, which holds stage 1",
        ),
        (("t", 1, (0,), rows("0F0 0F0 0B0")), "0F0 appears twice: device 0 steps 0 and 1"),
        (
            ("t", 2, (0,), rows("0F0 0B0 0B1")),
            "stage 0 micro-batch 1 has no forward: 0F1 is missing",
        ),
        (
            ("t", 1, (0,), rows("0F0 0I0 0B0 0W0")),
            "stage 0 micro-batch 0 has both a full backward 0B0 and a split one (0I0/0W0); it "
            "needs one or the other",
        ),
        (
            ("t", 1, (0,), rows("0F0 0I0")),
            "stage 0 micro-batch 0 has 0I0 but no 0W0: the weight gradient is never computed",
        ),
        (("t", 1, (0,), rows("0F0 0W0")), "stage 0 micro-batch 0 has 0W0 but no 0I0"),
        (
            ("t", 1, (0,), rows("0F0")),
            "stage 0 micro-batch 0 has no backward: 0B0 is missing (or 0I0 and 0W0)",
        ),
    ],
)
def test_each_check_names_the_problem(args: tuple[object, ...], first_line: str) -> None:
    assert error_of(*args).splitlines()[0] == first_line


def test_semantics_fields_are_checked() -> None:
    assert error_of("t", 1, (0,), rows("0F0 0B0"), "flush") == (
        "update_rule must be an UpdateRule (flush, 2bw, async), got 'flush'"
    )
    assert error_of("t", 1, (0,), rows("0F0 0B0"), UpdateRule.FLUSH, 1) == (
        "rematerialize must be True or False, got 1"
    )


def test_rematerialization_needs_full_backwards() -> None:
    message = error_of("t", 1, (0,), rows("0F0 0I0 0W0"), UpdateRule.FLUSH, True)
    assert message.splitlines()[0] == (
        "rematerialize: re-materialization is modelled for full backwards (B), but stage 0 "
        "micro-batch 0 splits its backward into 0I0 and 0W0"
    )
    with pytest.raises(ScheduleError):
        build("zb-h1", 2, 2).replace(rematerialize=True)


def test_dependencies_follow_the_ir_rule() -> None:
    schedule = build("zbv", 2, 2)  # stages 0,1 down, 2,3 up; every backward split into I+W
    a = parse_action
    assert schedule.dependencies(a("0F0")) == ()
    assert schedule.dependencies(a("2F1")) == (a("1F1"),)
    assert schedule.dependencies(a("3I0")) == (a("3F0"),)  # the last stage: its own loss
    assert schedule.dependencies(a("1I0")) == (a("1F0"), a("2I0"))
    assert schedule.dependencies(a("1W0")) == (a("1I0"),)
    one_f_one_b = build("1f1b", 2, 2)
    assert one_f_one_b.dependencies(a("0B1")) == (a("0F1"), a("1B1"))
    with pytest.raises(ScheduleError, match=r"^5F0 is not an action of schedule '1f1b'$"):
        one_f_one_b.dependencies(a("5F0"))
    # The inverse, device by device in list order: 2I0 feeds its own 2W0 and 1I0 (a gradient),
    # both on device 1, whose list runs 2W0 first; 0F0 feeds 0I0 (device 0) and 1F0 (device 1).
    assert schedule.consumers(a("2I0")) == (a("2W0"), a("1I0"))
    assert schedule.consumers(a("0F0")) == (a("0I0"), a("1F0"))
    assert schedule.consumers(a("0W0")) == ()
    with pytest.raises(ScheduleError, match=r"^5F0 is not an action of schedule '1f1b'$"):
        one_f_one_b.consumers(a("5F0"))


def test_mixed_full_and_split_backwards_are_valid() -> None:
    schedule = Schedule("mixed", 2, (0, 1), rows("0F0 0F1 0B0 0I1 0W1", "1F0 1I0 1F1 1B1 1W0"))
    assert schedule.backward_kind(1, 0) is Kind.I
    assert schedule.backward_kind(1, 1) is Kind.B
    assert schedule.dependencies(parse_action("0B0")) == (parse_action("0F0"), parse_action("1I0"))
    assert schedule.uses_split_backward()


def test_staleness_by_update_rule() -> None:
    assert [build("1f1b", 3, 3).weight_staleness_steps(d) for d in range(3)] == [0, 0, 0]
    assert [build("pipedream-2bw", 3, 3).weight_staleness_steps(d) for d in range(3)] == [1, 1, 1]
    assert [build("pipedream", 3, 3).weight_staleness_steps(d) for d in range(3)] == [2, 1, 0]
