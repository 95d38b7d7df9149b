"""Schedules on the looped placement (stage s on device s mod K): fill-drain (GPipe, looped BFS),
1F1B and its no-flush variants (PipeDream, PipeDream-2BW), interleaved 1F1B, and the zero-bubble
handcrafted schedules.

Every generator here is one call of
:func:`~pipesim.schedules.phases.merge_one_forward_one_backward` per device, on integer arrays
(no :class:`~pipesim.schedules.action.Action` is made until someone reads the actions); they
differ only in
the placement, the order of micro-batches over chunks, the warm-up length, the I/W split and the
weight-update rule.
"""

from __future__ import annotations

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
    name: str, devices: int, microbatches: int, chunks: int, hop_factor: int, split: bool
) -> Schedule:
    per_round = interleaved_rounds(devices, microbatches)
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
    return _interleaved("interleaved-1f1b", devices, microbatches, chunks, 2, split=False)


def interleaved_zero_bubble(devices: int, microbatches: int, chunks: int) -> Schedule:
    """Interleaved zero bubble, ZB1P with v chunks (Qi et al., arXiv 2401.10241; PyTorch's
    ScheduleInterleavedZeroBubble): interleaved 1F1B with I/W split, W delayed d on device d."""
    return _interleaved("interleaved-zb", devices, microbatches, chunks, 1, split=True)


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
