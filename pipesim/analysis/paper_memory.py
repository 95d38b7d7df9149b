"""Closed-form memory figures from the papers, for checking the engine's memory model.

* GPipe with re-materialization keeps each micro-batch's stage input plus one micro-batch's
  activations during its backward: O(N + (L/K)(N/M)) (GPipe §2.3).
* 1F1B keeps at most K-d micro-batches in flight on device d (PipeDream-2BW §3, Megatron §2.2).
* ZB-H2 keeps at most 2K-1 micro-batches' activations (zero-bubble paper, Table 2).
* PipeDream-2BW §3, per worker of a depth-d pipeline with micro-batch b and m micro-batches
  per step: 2BW with recompute 2|W|/d + |A_total(b)|/d + d·|A_input(b)|; without recompute
  2|W|/d + d·|A_total(b)|/d + d·|A_input(b)|; GPipe with recompute |W|/d + |A_total(b)|/d +
  m·|A_input(b)|; PipeDream-Flush one weight version and at most d micro-batches in flight,
  |W|/d + d·|A_total(b)|/d; PipeDream up to d weight versions, d·|W|/d + d·|A_total(b)|/d.
"""

from __future__ import annotations


def gpipe_remat_peak_activation_bytes(
    microbatches: int, stage_input_bytes: float, stage_activation_bytes: float
) -> float:
    """Every micro-batch's stage input, plus one micro-batch's activations re-created."""
    return microbatches * stage_input_bytes + stage_activation_bytes


def one_f_one_b_in_flight(devices: int, device: int, microbatches: int) -> int:
    """Micro-batches a 1F1B device holds at most: K-d, or M when fewer."""
    return min(devices - device, microbatches)


def zb_h2_in_flight(devices: int, microbatches: int) -> int:
    """Micro-batches ZB-H2's first device holds at most: 2K-1, or M when fewer."""
    return min(2 * devices - 1, microbatches)


def two_bw_worker_bytes(
    weight_bytes: float,
    activation_total_bytes: float,
    activation_input_bytes: float,
    depth: int,
    *,
    recompute: bool,
) -> float:
    """PipeDream-2BW §3: per-worker memory of 2BW, whole-model |W| and |A_total(b)|."""
    activations = activation_total_bytes / depth * (1 if recompute else depth)
    return 2 * weight_bytes / depth + activations + depth * activation_input_bytes


def gpipe_worker_bytes(
    weight_bytes: float,
    activation_total_bytes: float,
    activation_input_bytes: float,
    depth: int,
    microbatches: int,
) -> float:
    """PipeDream-2BW §3: per-worker memory of GPipe with recompute."""
    return (
        weight_bytes / depth
        + activation_total_bytes / depth
        + microbatches * activation_input_bytes
    )


def one_f_one_b_worker_bytes(
    weight_bytes: float, activation_total_bytes: float, depth: int
) -> float:
    """PipeDream-2BW §3: PipeDream-Flush (1F1B) keeps one weight version and at most d
    micro-batches' activations of its 1/d of the model."""
    return weight_bytes / depth + depth * activation_total_bytes / depth


def pipedream_worker_bytes(weight_bytes: float, activation_total_bytes: float, depth: int) -> float:
    """PipeDream-2BW §3: PipeDream stashes up to d weight versions and d micro-batches."""
    return depth * weight_bytes / depth + depth * activation_total_bytes / depth
