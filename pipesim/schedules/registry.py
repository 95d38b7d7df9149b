"""Schedule generators by name: ``build("1f1b", devices=4, microbatches=8)``.

Each entry is the one home of every fact about a schedule: its pure generator
``(devices, microbatches, chunks) -> Schedule``, the constraints it has and why (so a sweep can
ask :func:`unsupported_reason` before building and a user gets the reason instead of a broken
schedule), its closed-form bubble, the class that runs it in ``torch.distributed.pipelining``,
and the role it plays when validation calibrates a machine.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from pipesim.common import checks
from pipesim.common.limits import Limit, check
from pipesim.errors import ScheduleError
from pipesim.schedules import closed_forms, dualpipe, v_shaped
from pipesim.schedules import looped_schedules as looped
from pipesim.schedules.closed_forms import BubbleTerms, ClosedForm
from pipesim.schedules.schedule import Schedule

Generator = Callable[[int, int, int], Schedule]
Constraint = Callable[[int, int, int], "str | None"]


class ProbeRole(Enum):
    """What a schedule measures when validation calibrates stage times in situ: one probe runs
    full backwards (F and B), the other split ones (F, I and W)."""

    FULL_BACKWARD = "full-backward"
    SPLIT_BACKWARD = "split-backward"


@dataclass(frozen=True)
class ScheduleInfo:
    """A registered schedule: its generator, what it is, where it comes from, what it needs.

    Attributes:
        closed_form: the idle time per device per step for equal stages and no communication,
            or None where no paper gives one (see :mod:`pipesim.schedules.closed_forms`).
        torch_class: the ``torch.distributed.pipelining`` class that runs the same order, and
            None where PyTorch has no such schedule (ZB-H1 is its interleaved zero bubble with
            one stage per rank).
        probe_role: whether validation may use this schedule to calibrate full or split
            backwards; ``probe_priority`` orders the candidates of one role (lowest first).
    """

    name: str
    generate: Generator
    summary: str
    reference: str
    default_chunks: int
    constraint: Constraint
    supports_remat: bool
    closed_form: ClosedForm | None = None
    torch_class: str | None = None
    probe_role: ProbeRole | None = None
    probe_priority: int = 0


def _chunks_exactly(required: int, why: str) -> Constraint:
    def check(devices: int, microbatches: int, chunks: int) -> str | None:
        if chunks != required:
            return f"chunks must be {required} ({why}), got {chunks}"
        return None

    return check


def _chunks_at_least(required: int, why: str) -> Constraint:
    def check(devices: int, microbatches: int, chunks: int) -> str | None:
        if chunks < required:
            return f"chunks must be >= {required} ({why}), got {chunks}"
        return None

    return check


def _interleaved_constraint(devices: int, microbatches: int, chunks: int) -> str | None:
    reason = _chunks_at_least(2, "with one chunk per device this is 1f1b or zb-h1")(
        devices, microbatches, chunks
    )
    if reason:
        return reason
    rounds = max(1, microbatches // devices)
    if microbatches % rounds:
        return (
            f"microbatches must split into max(1, M // K) = {rounds} equal rounds of about K "
            f"micro-batches (any multiple of K works), got M={microbatches} with K={devices}"
        )
    return None


def _two_bw_constraint(devices: int, microbatches: int, chunks: int) -> str | None:
    reason = _chunks_exactly(1, "one stage per device")(devices, microbatches, chunks)
    if reason:
        return reason
    if microbatches < devices:
        return (
            f"microbatches must be >= devices (a new weight version every M >= K micro-batches "
            f"keeps two versions enough, PipeDream-2BW §3), got M={microbatches} with K={devices}"
        )
    return None


def _dualpipev_constraint(devices: int, microbatches: int, chunks: int) -> str | None:
    reason = _chunks_exactly(2, "DualPipeV places two stages per device in a V")(
        devices, microbatches, chunks
    )
    if reason:
        return reason
    if microbatches < 2 * devices:
        return (
            f"microbatches must be >= 2 x devices = {2 * devices} (DualPipeV's reference "
            f"implementation fills both arms of the V before its main phase), got {microbatches}"
        )
    return None


def _dualpipe_constraint(devices: int, microbatches: int, chunks: int) -> str | None:
    reason = _chunks_exactly(
        1, "DualPipe holds one model stage of each of its two copies per device"
    )(devices, microbatches, chunks)
    if reason:
        return reason
    if devices % 2:
        return f"devices must be even (DualPipe pairs device i with K-1-i), got {devices}"
    if microbatches % 2 or microbatches < 2 * devices:
        return (
            f"microbatches must be even and >= 2 x devices = {2 * devices} (half enter each "
            f"copy; deepseek-ai/DualPipe asserts both), got {microbatches}"
        )
    return None


def _any_chunks(devices: int, microbatches: int, chunks: int) -> str | None:
    return None


_ONE_CHUNK = "one stage per device"
_REGISTRY: dict[str, ScheduleInfo] = {
    info.name: info
    for info in (
        ScheduleInfo(
            "gpipe",
            looped.gpipe,
            "fill-drain: all forwards, then all backwards; optional re-materialization",
            "Huang et al., GPipe, arXiv 1811.06965 §2.2",
            1,
            _chunks_exactly(1, f"{_ONE_CHUNK}; looped-bfs is GPipe with chunks"),
            True,
            closed_form=closed_forms.fill_drain,
            torch_class="ScheduleGPipe",
        ),
        ScheduleInfo(
            "1f1b",
            looped.one_f_one_b,
            "PipeDream-Flush: K-d warm-up forwards on device d, then one forward one backward",
            "Narayanan et al., PipeDream-2BW, arXiv 2006.09503 §3; Megatron-LM, arXiv 2104.04473",
            1,
            _chunks_exactly(1, f"{_ONE_CHUNK}; interleaved-1f1b takes chunks"),
            True,
            closed_form=closed_forms.fill_drain,
            torch_class="Schedule1F1B",
            probe_role=ProbeRole.FULL_BACKWARD,
            probe_priority=0,
        ),
        ScheduleInfo(
            "interleaved-1f1b",
            looped.interleaved_one_f_one_b,
            "v chunks per device, stage s on device s mod K; bubble (1/v)(K-1)/M of ideal",
            "Narayanan et al., Megatron-LM, arXiv 2104.04473 §2.2",
            2,
            _interleaved_constraint,
            True,
            closed_form=closed_forms.interleaved,
            torch_class="ScheduleInterleaved1F1B",
            probe_role=ProbeRole.FULL_BACKWARD,
            probe_priority=1,
        ),
        ScheduleInfo(
            "interleaved-1f1b-flexible",
            looped.interleaved_flexible,
            "interleaved 1F1B for any M: each chunk takes groups of N >= K micro-batches, the "
            "smallest N Megatron-Core allows (K when K divides M)",
            "Llama 3, arXiv 2407.21783 §3.3.2; Megatron-Core get_schedule_table "
            "(microbatch_group_size_per_vp_stage)",
            2,
            _chunks_at_least(2, "with one chunk per device Megatron-Core runs 1f1b"),
            True,
            # Idle (K-1)(F+B) of one chunk whenever M >= K, the form and condition of looped
            # BFS: checked against the engine for every group size Megatron-Core allows.
            closed_form=closed_forms.looped_bfs,
        ),
        ScheduleInfo(
            "looped-bfs",
            looped.looped_bfs,
            "breadth-first over v chunks per device: each chunk takes every micro-batch in turn",
            "Lamy-Poirier, Breadth-First Pipeline Parallelism, arXiv 2211.05953",
            2,
            _any_chunks,
            True,
            closed_form=closed_forms.looped_bfs,
            torch_class="ScheduleLoopedBFS",
            probe_role=ProbeRole.FULL_BACKWARD,
            probe_priority=2,
        ),
        ScheduleInfo(
            "zb-h1",
            looped.zb_h1,
            "zero bubble H1: I/W split, W fills the bubble, memory as 1F1B",
            "Qi et al., Zero Bubble Pipeline Parallelism, arXiv 2401.10241 §2.1",
            1,
            _chunks_exactly(1, f"{_ONE_CHUNK}; interleaved-zb takes chunks"),
            False,
            closed_form=closed_forms.zb_h1,
            torch_class="ScheduleInterleavedZeroBubble",
            probe_role=ProbeRole.SPLIT_BACKWARD,
            probe_priority=0,
        ),
        ScheduleInfo(
            "zb-h2",
            looped.zb_h2,
            "zero bubble H2: 2(K-d)-1 warm-up forwards, no bubble at (2K-1) micro-batches",
            "Qi et al., Zero Bubble Pipeline Parallelism, arXiv 2401.10241 §2.2",
            1,
            _chunks_exactly(1, _ONE_CHUNK),
            False,
            closed_form=closed_forms.zb_h2,
        ),
        ScheduleInfo(
            "interleaved-zb",
            looped.interleaved_zero_bubble,
            "interleaved 1F1B with the I/W split (ZB1P), as torch.distributed.pipelining has it",
            "Qi et al., arXiv 2401.10241; PyTorch ScheduleInterleavedZeroBubble",
            2,
            _interleaved_constraint,
            False,
            torch_class="ScheduleInterleavedZeroBubble",
            probe_role=ProbeRole.SPLIT_BACKWARD,
            probe_priority=2,
        ),
        ScheduleInfo(
            "zbv",
            v_shaped.zbv,
            "zero bubble V: two chunks per device in a V, I/W split",
            "Qi et al., Zero Bubble Pipeline Parallelism, arXiv 2401.10241 §6",
            2,
            _chunks_exactly(2, "ZB-V places two stages per device in a V"),
            False,
            closed_form=closed_forms.zbv,
            torch_class="ScheduleZBVZeroBubble",
            probe_role=ProbeRole.SPLIT_BACKWARD,
            probe_priority=1,
        ),
        ScheduleInfo(
            "dualpipev",
            v_shaped.dualpipev,
            "DualPipe cut in half: a V, forward and backward of different micro-batches paired",
            "DeepSeek-V3 report, arXiv 2412.19437; deepseek-ai/DualPipe",
            2,
            _dualpipev_constraint,
            False,
            torch_class="ScheduleDualPipeV",
        ),
        ScheduleInfo(
            "dualpipe",
            dualpipe.dualpipe,
            "bidirectional: two copies of the model, half the micro-batches down each, forward "
            "and backward of the two directions paired",
            "DeepSeek-V3 report, arXiv 2412.19437 §3.2.1; deepseek-ai/DualPipe",
            1,
            _dualpipe_constraint,
            False,
            closed_form=closed_forms.dualpipe,
        ),
        ScheduleInfo(
            "pipedream-2bw",
            looped.pipedream_2bw,
            "1F1B order without flush, double-buffered weights: W(t+1) = W(t) - lr grad f(W(t-1))",
            "Narayanan et al., Memory-Efficient Pipeline-Parallel DNN Training, arXiv 2006.09503",
            1,
            _two_bw_constraint,
            True,
            closed_form=closed_forms.no_flush,
        ),
        ScheduleInfo(
            "pipedream",
            looped.pipedream,
            "1F1B order without flush, weight stashing (asynchronous)",
            "Narayanan et al., PipeDream, SOSP 2019",
            1,
            _chunks_exactly(1, _ONE_CHUNK),
            True,
            closed_form=closed_forms.no_flush,
        ),
    )
}


def schedule_names() -> tuple[str, ...]:
    """Every registered name, in registration order."""
    return tuple(_REGISTRY)


def schedule_info(name: str) -> ScheduleInfo:
    """The entry for ``name``; an unknown name is refused with the valid ones listed."""
    try:
        return _REGISTRY[name]
    except KeyError:
        known = ", ".join(_REGISTRY)
        raise ScheduleError(f"unknown schedule {name!r}; choose one of: {known}") from None


def _check_count(field: str, value: object) -> int:
    return checks.positive_int(field, value, error=ScheduleError)


def unsupported_reason(
    name: str, devices: int, microbatches: int, chunks: int | None = None, remat: bool = False
) -> str | None:
    """Why ``name`` cannot be built with these parameters, or None when it can."""
    info = schedule_info(name)
    devices = _check_count("devices", devices)
    microbatches = _check_count("microbatches", microbatches)
    chunks = _check_count("chunks", info.default_chunks if chunks is None else chunks)
    reason = info.constraint(devices, microbatches, chunks)
    if reason is None and remat and not info.supports_remat:
        reason = (
            "remat is not supported: the schedule splits backwards into I and W, and "
            "re-materialization is modelled for full backwards only"
        )
    return reason


def estimated_actions(info: ScheduleInfo, devices: int, microbatches: int, chunks: int) -> int:
    """The actions ``info`` generates for K, M, v: F and B per stage and micro-batch, or F, I
    and W for the schedules that split backwards (those without re-materialization)."""
    per_pair = 2 if info.supports_remat else 3
    return per_pair * devices * chunks * microbatches


def check_size(
    info: ScheduleInfo,
    devices: int,
    microbatches: int,
    chunks: int,
    steps: int = 1,
    name: str | None = None,
) -> None:
    """Refuse, before generating anything, a shape beyond :mod:`pipesim.common.limits` (K, v, and
    the actions it implies over ``steps`` simulated steps), with the limit and how to raise
    it. ``name`` names the shape in the message when it is not ``info``'s own (a schedule
    sized as ``info``'s is)."""
    shape = f"{name or info.name} K={devices:,} M={microbatches:,} v={chunks}"
    check(Limit.DEVICES, devices, f"{shape}: {devices:,} devices")
    check(Limit.CHUNKS, chunks, f"{shape}: {chunks:,} chunks per device")
    actions = estimated_actions(info, devices, microbatches, chunks) * steps
    over = f" over {steps:,} steps" if steps > 1 else ""
    check(Limit.ACTIONS, actions, f"{shape}: {actions:,} actions{over}")


def build(
    name: str,
    devices: int,
    microbatches: int,
    chunks: int | None = None,
    *,
    remat: bool = False,
) -> Schedule:
    """Build the schedule ``name`` for K = ``devices``, M = ``microbatches``, v = ``chunks``.

    ``chunks`` defaults to the schedule's own (1, or 2 for interleaved and V-shaped ones).
    ``remat`` asks for GPipe's re-materialization. Parameters the schedule cannot take are
    refused with a :class:`ScheduleError` that gives the reason.
    """
    info = schedule_info(name)
    chunks = info.default_chunks if chunks is None else chunks
    reason = unsupported_reason(name, devices, microbatches, chunks, remat)
    if reason is not None:
        raise ScheduleError(f"{name}: {reason}")
    check_size(info, devices, microbatches, chunks)
    if devices * chunks * microbatches <= _MEMO_MAX_UNITS:
        return _build_memo(name, devices, microbatches, chunks, remat)
    return _generate(info, devices, microbatches, chunks, remat)


# Sweeps and the planner build the same small shapes again and again, and generating a schedule
# is about half of a small configuration's cost. A Schedule is immutable, so a built one can be
# handed out again: small shapes (up to this many stage x micro-batch units) are memoized, large
# ones (whose simulation dwarfs their building) are not, so the memo stays a few MB.
_MEMO_MAX_UNITS = 4096
_MEMO_ENTRIES = 1024


def _generate(
    info: ScheduleInfo, devices: int, microbatches: int, chunks: int, remat: bool
) -> Schedule:
    schedule = info.generate(devices, microbatches, chunks)
    if remat:
        schedule = schedule.replace(rematerialize=True)
    schedule._set_generator(info.name)
    return schedule


def clear_build_memo() -> None:
    """Forget the memoized small schedules (benchmarks time building from scratch)."""
    _build_memo.cache_clear()


@functools.lru_cache(maxsize=_MEMO_ENTRIES)
def _build_memo(name: str, devices: int, microbatches: int, chunks: int, remat: bool) -> Schedule:
    return _generate(_REGISTRY[name], devices, microbatches, chunks, remat)


def registered_info(schedule: Schedule) -> ScheduleInfo | None:
    """The registry entry whose generator produces ``schedule``, or None.

    A schedule built by :func:`build` names its generator. Any other schedule (a CSV, one made
    by hand) is matched only when it is proven equal, action for action, in placement and in
    update rule, to what a registered generator builds with the same K, M and v (the entry of
    its own name is tried first): a file named "1f1b" that holds another order gets no entry,
    and so no closed form, while an exported 1F1B read back gets 1F1B's.
    """
    if schedule.generator is not None:
        return _REGISTRY[schedule.generator]
    k, m, v = schedule.devices, schedule.microbatches, schedule.chunks
    own = _REGISTRY.get(schedule.name)
    candidates = [own] if own is not None else []
    candidates += [info for info in _REGISTRY.values() if info is not own]
    for info in candidates:
        if unsupported_reason(info.name, k, m, v, schedule.rematerialize) is not None:
            continue
        reference = build(info.name, k, m, v, remat=schedule.rematerialize)
        if (
            reference.placement == schedule.placement
            and reference.copies == schedule.copies
            and reference.routes == schedule.routes
            and reference.action_arrays.same_as(schedule.action_arrays)
            and reference.update_rule is schedule.update_rule
        ):
            return info
    return None


def closed_form_bubble_s(schedule: Schedule, terms: BubbleTerms) -> float | None:
    """The closed-form idle time per device per step of ``schedule``, or None where its
    generator has no closed form, the conditions of the form do not hold, or the schedule is
    not (provably) the registered one."""
    info = registered_info(schedule)
    if info is None or info.closed_form is None:
        return None
    return info.closed_form(terms)


def probe_schedules(devices: int, microbatches: int, chunks: int) -> tuple[str, ...]:
    """The schedules validation runs to calibrate stage times at this K, M and v: for each
    :class:`ProbeRole`, the registered candidate of lowest priority that can be built."""
    chosen = []
    for role in ProbeRole:
        candidates = sorted(
            (info for info in _REGISTRY.values() if info.probe_role is role),
            key=lambda info: info.probe_priority,
        )
        for info in candidates:
            if unsupported_reason(info.name, devices, microbatches, chunks) is None:
                chosen.append(info.name)
                break
    return tuple(chosen)


def torch_schedules() -> dict[str, str]:
    """Schedule name to the ``torch.distributed.pipelining`` class that runs the same order."""
    return {name: info.torch_class for name, info in _REGISTRY.items() if info.torch_class}
