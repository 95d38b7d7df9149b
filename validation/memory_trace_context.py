"""pipesim's per-rank memory under context parallelism held against PyTorch's trace of one rank.

One rank of a context-parallel (CP) group runs the GPT stage of :mod:`validation.memory_trace`
(:class:`~validation.memory_trace._Stage` and its :class:`~validation.memory_trace._Block`, in
bf16 with Adam, FlashAttention, the device's 1F1B order of a 2-stage pipeline) on s/CP tokens
of every sample, under :class:`~torch._subclasses.fake_tensor.FakeTensorMode` and
:class:`~torch.distributed._tools.mem_tracker.MemTracker`, on a fake process group of CP ranks
(this process is rank 0).

The attention is PyTorch's own context-parallel ring attention
(``torch.distributed.tensor.experimental._context_parallel._attention``, what
``context_parallel()`` and torchtitan run): ``_scaled_dot_product_ring_flash_attention`` and
``_scaled_dot_product_ring_flash_attention_backward``, the functions the CP dispatcher calls
for ``aten._scaled_dot_product_flash_attention`` and its backward on sequence-sharded DTensors,
called here on the block's local queries, keys and values from an autograd Function
(:class:`_RingFlash`) that saves what the aten op's autograd saves (q, k, v, the output and the
log-sum-exp, all s/CP tokens). PyTorch's defaults hold: the head-tail load balance
(Megatron-Core's 2·CP chunks) and ``convert_to_f32`` (the partial outputs merged, and the
query, key and value gradients accumulated and passed on, in fp32). PyTorch's two rotate
methods are pipesim's two exchanges:

* ``allgather`` (PyTorch's default, torchtitan's): the local keys and values concatenated and
  all-gathered once (``all_gather_single``) before the blocks are computed on: pipesim's
  ``ContextComm.ALL_GATHER`` (Llama 3's all-gather);
* ``alltoall``: a ring, each step's keys and values sent on (``permute_tensor``) while the
  current block is computed on: pipesim's ``ContextComm.P2P`` (Megatron-Core's ``p2p``).

The backward gathers (or rotates) the keys and values again and passes the keys' and values'
gradients around the ring (always ``alltoall``) in fp32.

Why not through DTensor: MemTracker is a dispatch mode, which runs above a tensor subclass's
dispatch, so the buffers the ring makes inside DTensor's SDPA handler (the gathered keys and
values, the fp32 accumulators) would never be seen, only its outputs. Why not
``F.scaled_dot_product_attention``: on a CPU it picks
``_scaled_dot_product_flash_attention_for_cpu``, which the CP handler does not take; the CUDA
op's fake kernel runs on fake CPU tensors, so the ring is traced as a GPU runs it.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from pipesim.parallel.config import ContextComm, Parallelism, Recompute
from pipesim.schedules import build
from pipesim.workload.architecture import Attention, TransformerArchitecture
from validation.memory_trace import (
    MemoryTerms,
    TraceCase,
    _Block,
    _Stage,
    compare_main,
    predicted_terms,
    simulated_memory,
    stage_name,
    traced_terms,
)
from validation.memory_trace_sharded import fake_process_group

ROTATE = {ContextComm.ALL_GATHER: "ALL_GATHER", ContextComm.P2P: "ALL_TO_ALL"}
"""pipesim's exchange and the PyTorch rotate method (``_RotateMethod``) that runs it."""


@dataclass(frozen=True)
class ContextCase:
    """One rank of a CP group running one stage.

    Attributes:
        name: a label.
        stage: the stage as :mod:`validation.memory_trace` traces it; its architecture's
            ``seq`` is the whole sequence (each rank runs seq/CP of it).
        context: CP.
        comm: the exchange of keys and values.
    """

    name: str
    stage: TraceCase
    context: int
    comm: ContextComm

    def __post_init__(self) -> None:
        if self.context < 2:
            raise ValueError(f"context: CP needs at least 2 ranks, got {self.context}")
        if self.stage.arch.seq % (2 * self.context):
            raise ValueError(
                f"context: the sequence ({self.stage.arch.seq}) must split into 2·CP chunks"
            )
        if self.stage.arch.attention is not Attention.FLASH:
            raise ValueError("PyTorch's ring attention runs FlashAttention-type SDPA only")


# -- the PyTorch stage with ring attention -------------------------------------------------------


class _RingBlock(_Block):
    """:class:`~validation.memory_trace._Block` whose attention core is PyTorch's CP ring
    attention over ``mesh`` (the local queries, keys and values: s/CP tokens)."""

    def __init__(self, arch: TransformerArchitecture, recompute: str, mesh: Any) -> None:
        super().__init__(arch, recompute)
        self.mesh = mesh

    def _core(self, q: Any, k: Any, v: Any) -> Any:
        return _RingFlash.apply(q, k, v, self.mesh)  # type: ignore[no-untyped-call]


class _RingFlash(torch.autograd.Function):
    """PyTorch's ring FlashAttention on this rank's local queries, keys and values: the very
    functions the CP dispatcher runs for ``aten._scaled_dot_product_flash_attention`` and its
    backward on sequence-sharded DTensors, called on the local tensors so that every buffer
    they make is seen by the tracker. It saves what the aten op's autograd saves."""

    @staticmethod
    def forward(ctx: Any, q: Any, k: Any, v: Any, mesh: Any) -> Any:
        from torch.distributed.tensor.experimental._context_parallel import _attention as cp

        out, lse, *rest = cp._scaled_dot_product_ring_flash_attention(mesh, q, k, v, 0.0, True)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.rest, ctx.mesh = rest, mesh
        return out

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> Any:
        from torch.distributed.tensor.experimental._context_parallel import _attention as cp

        q, k, v, out, lse = ctx.saved_tensors
        cum_q, cum_k, max_q, max_k, seed, offset = ctx.rest[:6]
        dq, dk, dv, *_ = cp._scaled_dot_product_ring_flash_attention_backward(
            ctx.mesh,
            grads[0],
            q,
            k,
            v,
            out,
            lse,
            cum_q,
            cum_k,
            max_q,
            max_k,
            0.0,
            True,
            seed,
            offset,
        )
        return dq, dk, dv, None


class _RingStage(_Stage):
    """:class:`~validation.memory_trace._Stage` with :class:`_RingBlock` blocks (the position
    table holds the whole sequence, as Megatron-LM's does; each rank looks up its tokens')."""

    def __init__(
        self,
        arch: TransformerArchitecture,
        recompute: str,
        blocks: int,
        first: bool,
        last: bool,
        mesh: Any,
    ) -> None:
        super().__init__(arch, recompute, 0, first, last)
        self.blocks = nn.ModuleList(_RingBlock(arch, recompute, mesh) for _ in range(blocks))


@contextlib.contextmanager
def _ring_attention(comm: ContextComm) -> Iterator[None]:
    """PyTorch's CP options for the ring: the rotate method of ``comm``, its defaults
    otherwise; as they were on exit."""
    from torch.distributed.tensor.experimental._context_parallel import _attention as cp

    options = cp._cp_options
    before = (options.rotate_method, options.enable_load_balance, options.convert_to_f32)
    options.rotate_method = getattr(cp._RotateMethod, ROTATE[comm])
    options.enable_load_balance = True  # PyTorch's default, Megatron-Core's split
    options.convert_to_f32 = True
    try:
        yield
    finally:
        options.rotate_method, options.enable_load_balance, options.convert_to_f32 = before


def trace(case: ContextCase) -> MemoryTerms:
    """The traced peak of one CP rank of ``case``'s stage over a 1F1B step and its optimizer
    step (after a first, untracked step that creates Adam's state), as
    :func:`validation.memory_trace.trace` runs it."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed.device_mesh import init_device_mesh

    tc = case.stage
    arch = tc.traced_arch
    first, last = tc.device == 0, tc.device == tc.devices - 1
    order = build("1f1b", tc.devices, tc.microbatches).device_actions[tc.device]
    with fake_process_group(case.context), _ring_attention(case.comm):
        mesh = init_device_mesh("cpu", (case.context,))  # outside FakeTensorMode
        with FakeTensorMode():
            stage = _RingStage(arch, tc.recompute, tc.blocks, first, last, mesh)
            shape = (tc.microbatch_size, arch.seq // case.context, arch.hidden)
            return traced_terms(stage, order, first, last, arch.vocab, shape)


# -- pipesim's figure ---------------------------------------------------------------------------


def predict_context(case: TraceCase, cp: int, comm: ContextComm) -> MemoryTerms:
    """pipesim's peak of ``case``'s device on one rank of ``Parallelism(context=cp,
    cp_comm_type=comm)``: the same stages on K devices, 1F1B, the same M and b (the model's
    sequence is the whole one; pipesim gives each rank 1/CP of it), term by term."""
    parallelism = Parallelism(
        recompute=Recompute.parse(case.recompute), context=cp, cp_comm_type=comm
    )
    return predicted_terms(simulated_memory(case, parallelism))


def compare(case: ContextCase) -> tuple[MemoryTerms, MemoryTerms]:
    """(traced, predicted)."""
    return trace(case), predict_context(case.stage, case.context, case.comm)


# -- the cases and the table -------------------------------------------------------------------

# (label, hidden, heads, whole sequence, vocabulary, blocks per stage, b, M)
SHAPES = (
    ("h256 s512", 256, 4, 512, 1000, 2, 1, 4),
    ("h512 s1024", 512, 8, 1024, 2000, 2, 1, 4),
)
CONTEXT = (2, 4)
COMMS = (ContextComm.ALL_GATHER, ContextComm.P2P)


def cases(
    shapes: tuple[tuple[Any, ...], ...] = SHAPES,
    recompute: str = "none",
    context: tuple[int, ...] = CONTEXT,
    comms: tuple[ContextComm, ...] = COMMS,
) -> Iterator[ContextCase]:
    """For each shape, CP and exchange: the first and the last stage of a 2-stage pipeline."""
    for label, hidden, heads, seq, vocab, blocks, b, m in shapes:
        arch = TransformerArchitecture(
            2 * blocks, hidden, heads, 4 * hidden, seq, vocab, attention=Attention.FLASH
        )
        for cp in context:
            for comm in comms:
                for device in (0, 1):
                    name = f"{label} CP={cp} {comm.value} {stage_name(device, 2)}"
                    if recompute != "none":
                        name += f" {recompute}"
                    stage = TraceCase(name, arch, recompute, 2, device, blocks, b, m)
                    yield ContextCase(name, stage, cp, comm)


def main(argv: list[str] | None = None) -> int:
    """Trace every case (``--recompute selective|full`` for another mode) and print the
    table with the largest error."""
    return compare_main(argv, cases, compare, "CP rank")


if __name__ == "__main__":
    sys.exit(main())
