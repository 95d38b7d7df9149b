"""Schedules on the looped placement (stage s on device s mod K): fill-drain (GPipe, looped BFS),
1F1B and its no-flush variants (PipeDream, PipeDream-2BW), interleaved 1F1B (with PyTorch's
equal rounds, or Megatron-Core's micro-batch groups for any M), and the zero-bubble handcrafted
schedules.

Every generator here is one call of
:func:`~pipesim.schedules.phases.merge_one_forward_one_backward` per device, on integer arrays
(no :class:`~pipesim.schedules.action.Action` is made until someone reads the actions); they
differ only in
the placement, the order of micro-batches over chunks, the warm-up length, the I/W split and the
weight-update rule.
"""

from __future__ import annotations

from pipesim.common import checks
from pipesim.errors import ScheduleError
from pipesim.parallel.placement import looped
from pipesim.schedules.encoded import ActionArrays
from pipesim.schedules.phases import chunk_sequence, merge_one_forward_one_backward
from pipesim.schedules.schedule import Schedule, UpdateRule


def _family(
    name: str,
    devices: int,
    microbatches: int,
    chunks: int,
    *,
    microbatches_per_round: int,
    warmup: list[int],
    weight_lag: list[int] | None = None,
    breadth_first_backward: bool = False,
    update_rule: UpdateRule = UpdateRule.FLUSH,
) -> Schedule:
    """One 1F1B-family schedule on the looped placement (stage s on device s mod K).

    ``warmup[d]`` and ``weight_lag[d]`` are per device. ``breadth_first_backward`` runs the
    backward passes last micro-batch first, as GPipe and looped BFS do.
    """
    placement = looped(devices, chunks)
    rows = []
    for device in range(devices):
        stages = tuple(range(device, devices * chunks, devices))
        forwards = chunk_sequence(stages, microbatches, microbatches_per_round)
        backwards = chunk_sequence(
            stages,
            microbatches,
            microbatches_per_round,
            reverse_chunks=True,
            reverse_microbatches=breadth_first_backward,
        )
        lag = None if weight_lag is None else weight_lag[device]
        rows.append(merge_one_forward_one_backward(forwards, backwards, warmup[device], lag))
    arrays = ActionArrays.from_device_lists(rows)
    return Schedule(name, microbatches, placement, arrays, update_rule)


def looped_bfs(devices: int, microbatches: int, chunks: int) -> Schedule:
    """Breadth-first looping (Lamy-Poirier, arXiv 2211.05953): every micro-batch through chunk
    0, then chunk 1, ...; then all backwards, last chunk and last micro-batch first."""
    return _family(
        "looped-bfs",
        devices,
        microbatches,
        chunks,
        microbatches_per_round=microbatches,
        warmup=[microbatches * chunks] * devices,
        breadth_first_backward=True,
    )


def gpipe(devices: int, microbatches: int, chunks: int) -> Schedule:
    """GPipe fill-drain (Huang et al., arXiv 1811.06965 §2.2): all F, then all B (last
    micro-batch first). Looped BFS with one chunk per device."""
    return _family(
        "gpipe",
        devices,
        microbatches,
        1,
        microbatches_per_round=microbatches,
        warmup=[microbatches] * devices,
        breadth_first_backward=True,
    )


def _one_f_one_b(name: str, devices: int, microbatches: int, rule: UpdateRule) -> Schedule:
    # Device d runs K-d forwards before its first backward: at most K-d micro-batches in flight.
    return _family(
        name,
        devices,
        microbatches,
        1,
        microbatches_per_round=microbatches,
        warmup=[devices - d for d in range(devices)],
        update_rule=rule,
    )


def one_f_one_b(devices: int, microbatches: int, chunks: int) -> Schedule:
    """1F1B with a flush, PipeDream-Flush (arXiv 2006.09503 §3; Megatron-LM 2021 §2.2)."""
    return _one_f_one_b("1f1b", devices, microbatches, UpdateRule.FLUSH)


def pipedream_2bw(devices: int, microbatches: int, chunks: int) -> Schedule:
    """PipeDream-2BW (arXiv 2006.09503): the 1F1B order, no flush, double-buffered weights."""
    return _one_f_one_b("pipedream-2bw", devices, microbatches, UpdateRule.TWO_BW)


def pipedream(devices: int, microbatches: int, chunks: int) -> Schedule:
    """PipeDream (Narayanan et al., SOSP 2019): the 1F1B order, no flush, weight stashing."""
    return _one_f_one_b("pipedream", devices, microbatches, UpdateRule.ASYNC)


def interleaved_rounds(devices: int, microbatches: int) -> int:
    """Micro-batches per round of the interleaved schedules: K when K divides M (Megatron's
    rule), else M divided into max(1, M // K) equal rounds (PyTorch's relaxation)."""
    return microbatches // max(1, microbatches // devices)


def _interleaved(
    name: str,
    devices: int,
    microbatches: int,
    chunks: int,
    hop_factor: int,
    split: bool,
    per_round: int,
) -> Schedule:
    total = microbatches * chunks
    # Forwards before the first backward: the last device fills its other chunks
    # ((v-1) rounds), and each hop away from it adds `hop_factor` more (2 for 1F1B: a forward
    # and a backward travel the hop; 1 with the zero-bubble split).
    warmup = [
        min((chunks - 1) * per_round + hop_factor * (devices - 1 - d), total) + 1
        for d in range(devices)
    ]
    return _family(
        name,
        devices,
        microbatches,
        chunks,
        microbatches_per_round=per_round,
        warmup=warmup,
        weight_lag=list(range(devices)) if split else None,
    )


def interleaved_one_f_one_b(devices: int, microbatches: int, chunks: int) -> Schedule:
    """Interleaved 1F1B (Narayanan et al., arXiv 2104.04473 §2.2): v chunks per device, stage
    s on device s mod K, depth-first over rounds of micro-batches."""
    per_round = interleaved_rounds(devices, microbatches)
    return _interleaved("interleaved-1f1b", devices, microbatches, chunks, 2, False, per_round)


def interleaved_zero_bubble(devices: int, microbatches: int, chunks: int) -> Schedule:
    """Interleaved zero bubble, ZB1P with v chunks (Qi et al., arXiv 2401.10241; PyTorch's
    ScheduleInterleavedZeroBubble): interleaved 1F1B with I/W split, W delayed d on device d."""
    per_round = interleaved_rounds(devices, microbatches)
    return _interleaved("interleaved-zb", devices, microbatches, chunks, 1, True, per_round)


def group_size_reason(devices: int, microbatches: int, group_size: int) -> str | None:
    """Why the flexible interleaved schedule cannot group M = ``microbatches`` by
    ``group_size`` on K = ``devices``, or None when it can.

    Megatron-Core's rule (``forward_backward_pipelining_with_interleaving``): K <= N <= M, and
    the last group, M mod N, is empty or holds at least K micro-batches. A shorter last group
    cannot keep the pipeline fed: Megatron-Core refuses it, and run in order it often
    deadlocks. With M < K the one group of all M micro-batches is allowed (PyTorch's and
    ``interleaved-1f1b``'s order there; Megatron-Core refuses M < K).
    """
    low = min(devices, microbatches)
    if not low <= group_size <= microbatches:
        return (
            f"group_size must be in [min(K, M), M] = [{low}, {microbatches}] with "
            f"M={microbatches} and K={devices}, got {group_size}"
        )
    last = microbatches % group_size
    if 0 < last < devices:
        return (
            f"group_size must leave a last group of 0 or >= K = {devices} micro-batches, got "
            f"{group_size}: M={microbatches} leaves {last}"
        )
    return None


def flexible_group_size(devices: int, microbatches: int) -> int:
    """The micro-batch group size of ``interleaved-1f1b-flexible``: the smallest N >= K that
    :func:`group_size_reason` allows (M when M < K). It is K, Megatron-Core's default, whenever
    K divides M, and the smallest keeps the fewest micro-batches in flight (the warm-up grows
    with N).

    Wherever M splits into max(1, M // K) equal rounds, this is the round's size (see
    :func:`interleaved_rounds`): with r = M // K rounds of n = M / r, every N in [K, n) leaves
    M - rN = r(n - N) > 0 and below (r + 1)K - rK = K.

    >>> flexible_group_size(2, 5), flexible_group_size(4, 9), flexible_group_size(4, 8)
    (3, 5, 4)
    """
    low = min(devices, microbatches)
    return next(
        size
        for size in range(low, microbatches + 1)
        if group_size_reason(devices, microbatches, size) is None
    )


def interleaved_flexible(
    devices: int, microbatches: int, chunks: int, group_size: int | None = None
) -> Schedule:
    """Interleaved 1F1B for any M (Llama 3, arXiv 2407.21783 §3.3.2; Megatron-Core's
    ``microbatch_group_size_per_vp_stage``): each chunk takes a group of N micro-batches in
    turn, forward and backward, the last group holding the M mod N left over.

    Device d runs min((v-1)·N + 2(K-1-d), vM) warm-up forwards, then one forward one
    backward: Megatron-Core's ``get_schedule_table``, ``get_pp_rank_microbatches`` and
    ``convert_schedule_table_to_order`` (megatron/core/pipeline_parallel/schedules.py,
    megatron/core/transformer/cuda_graphs.py). ``group_size`` defaults to
    :func:`flexible_group_size`; one that :func:`group_size_reason` refuses raises
    :class:`ScheduleError`.
    """
    if group_size is None:
        size = flexible_group_size(devices, microbatches)
    else:
        size = checks.positive_int("group_size", group_size, error=ScheduleError)
    reason = group_size_reason(devices, microbatches, size)
    if reason is not None:
        raise ScheduleError(f"interleaved-1f1b-flexible: {reason}")
    return _interleaved("interleaved-1f1b-flexible", devices, microbatches, chunks, 2, False, size)


def zb_h1(devices: int, microbatches: int, chunks: int) -> Schedule:
    """ZB-H1 (Qi et al., arXiv 2401.10241 §2.1): 1F1B's warm-up and memory, each backward split
    into I and W, device d deferring its W passes by d to fill the cool-down bubble."""
    return _family(
        "zb-h1",
        devices,
        microbatches,
        1,
        microbatches_per_round=microbatches,
        warmup=[devices - d for d in range(devices)],
        weight_lag=list(range(devices)),
    )


def zb_h2(devices: int, microbatches: int, chunks: int) -> Schedule:
    """ZB-H2 (Qi et al., arXiv 2401.10241 §2.2): 2(K-d)-1 warm-up forwards on device d (at most
    2K-1 micro-batches in flight), W deferred by 2d: a parallelogram with no bubble when
    M >= 2K-1 and consecutive steps are not synchronized."""
    return _family(
        "zb-h2",
        devices,
        microbatches,
        1,
        microbatches_per_round=microbatches,
        warmup=[2 * (devices - d) - 1 for d in range(devices)],
        weight_lag=[2 * d for d in range(devices)],
    )
