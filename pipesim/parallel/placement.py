"""Stage-to-device placements: which device holds each of the S = K·v stages.

A placement is a tuple indexed by stage whose values are devices. Every device holds the same
number of stages, ``v`` (the chunks per device).
"""

from __future__ import annotations


def looped(devices: int, chunks: int) -> tuple[int, ...]:
    """Stage ``s`` on device ``s mod K``: GPipe and 1F1B (v = 1), interleaved and looped BFS.

    >>> looped(2, 2)
    (0, 1, 0, 1)
    """
    return tuple(stage % devices for stage in range(devices * chunks))


def v_shape(devices: int) -> tuple[int, ...]:
    """Two stages per device in a V: stage ``s`` on device ``s`` for s < K, else ``2K-1-s``.

    Device 0 holds the first and the last stage, so the loss is computed where the input
    enters (ZB-V, DualPipeV).

    >>> v_shape(3)
    (0, 1, 2, 2, 1, 0)
    """
    return tuple(s if s < devices else 2 * devices - 1 - s for s in range(2 * devices))
