"""The dependency rule of the IR, in one place.

Dependencies are implied by the actions, never stored: F(s,m) needs F(s-1,m); B(s,m) and I(s,m)
need F(s,m) and whichever of B or I produces the gradient of (s+1,m) (the last stage needs only
its own F: the loss); W(s,m) needs I(s,m). A schedule whose stages hold copies of the model
(DualPipe) numbers them copy-major, S_model to a copy: a copy's first stage takes the input and
its last computes the loss, so the rule stops there (a micro-batch's actions name the stages of
its own copy only). The rule is written once, on the integer encoding
(:mod:`pipesim.schedules.encoded`) that the validator builds and the engines read; per-action
views (:meth:`Schedule.dependencies <pipesim.schedules.schedule.Schedule.dependencies>`) are
derived from its result.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from pipesim.schedules.encoded import F, I, W

IntArray = npt.NDArray[np.int64]


def dependency_arrays(
    stage: IntArray,
    kind: IntArray,
    microbatch: IntArray,
    flat_index: IntArray,
    backward_kind: IntArray,
    model_stages: int | None = None,
) -> tuple[IntArray, IntArray]:
    """Per action (flat index), the flat indices of the actions it consumes, ``(N, 2)`` and -1
    padded, and the one of them on another stage (``upstream``, -1 for none).

    ``flat_index[s, m, k]`` is the flat index of (stage s, micro-batch m, kind k) and
    ``backward_kind[s, m]`` the backward (B or I) that (s, m) runs; the caller has checked that
    every action the rule names exists and that each non-F action comes after its own F (or a
    W after its I) on its device. ``model_stages`` is S_model when the stages hold copies of
    the model (None: one copy, S_model = S).
    """
    stages = flat_index.shape[0]
    per_copy = stages if model_stages is None else model_stages
    position = stage % per_copy  # the stage's place in its copy
    count = len(stage)
    # A backward's and a W's own-stage dependency: its F, or its I.
    earlier = np.where(
        kind == W, flat_index[stage, microbatch, I], flat_index[stage, microbatch, F]
    )
    dependencies = np.full((count, 2), -1, dtype=np.int64)
    previous_stage = np.maximum(stage - 1, 0)
    next_stage = np.minimum(stage + 1, stages - 1)
    next_backward = flat_index[next_stage, microbatch, backward_kind[next_stage, microbatch]]
    previous_forward = np.where(position > 0, flat_index[previous_stage, microbatch, F], -1)
    dependencies[:, 0] = np.where(kind == F, previous_forward, earlier)
    dependencies[:, 1] = np.where(
        (kind != F) & (kind != W) & (position < per_copy - 1), next_backward, -1
    )
    upstream = np.where(kind == F, dependencies[:, 0], dependencies[:, 1])
    return dependencies, upstream
