"""pipesim's per-rank memory of a mixture-of-experts stage held against PyTorch's trace of it.

One rank of an expert-parallel (EP) group runs a pipeline stage of MoE blocks (the stage of
:mod:`validation.memory_trace`, :class:`~validation.memory_trace._Stage`, with its blocks'
MLPs replaced), in bf16 with Adam, the device's 1F1B order of a 2-stage pipeline, under
:class:`~torch._subclasses.fake_tensor.FakeTensorMode` and
:class:`~torch.distributed._tools.mem_tracker.MemTracker`, then the optimizer step; with EP > 1
on a fake process group of EP ranks (this process is rank 0).

Each block is a pre-norm block with FlashAttention (no dropout, no linear biases) whose MLP is
the MoE layer as Megatron-Core computes it with its ``alltoall`` token dispatcher (TP = 1):

* the router: a bias-free E x h linear in bf16, the softmax over the E experts in fp32 (what
  its backward saves: the fp32 probabilities); the chosen experts' probabilities gathered from
  them and cast to bf16 (Megatron's ``.type_as(logits)``);
* the permutation: ``index_select`` of the norm's output into k·s rows sorted by expert
  (Megatron's ``permute``);
* under EP: the dispatch all-to-all (``torch.distributed.all_to_all_single`` in an autograd
  Function that runs the reverse all-to-all in its backward, Megatron's ``_AllToAll``), then,
  with more than one local expert, the sort of the received rows by local expert
  (``index_select``, Megatron's ``sort_chunks_by_idxs``);
* the experts: Megatron's ``SequentialMLP``, a loop over the rank's E/EP experts, each a SwiGLU
  MLP (fc1 h -> 2 f_e, the fused SwiGLU that saves its input only as Megatron's
  ``SwiGLUFunction`` does, fc2 f_e -> h) on its rows, the outputs concatenated;
* under EP the unsort and the combine all-to-all;
* the unpermutation: the expert outputs times their probabilities (bf16), ``scatter_add_`` back
  into the tokens' order (Megatron's ``unpermute``); the shared expert (a SwiGLU MLP of width
  F_s on every token) added, then the residual.

One departure from :func:`validation.memory_trace.trace`'s loop: a later stage's received input
and its gradient are freed after its backward (the gradient sent back, as Megatron-LM frees
them). Under MemTracker the harness's loop otherwise keeps both alive (2·e·s·h per micro-batch;
without the tracker the input is freed, with it no Python object refers to it and ``gc`` does
not free it), which would add (M - 1)·2·e·s·h to the last stage's traced peak.

Routing is balanced by construction, as pipesim assumes: token t goes to experts
(t + i) mod E, i < k (so each expert receives exactly k·s/E rows of every rank, each rank's
E/EP experts p·k·s/E rows each, k·s in all), while the router's probabilities are still
computed and the gradient flows into the router through the gathered ones.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from pipesim.parallel.config import Parallelism, Recompute
from pipesim.schedules import build
from pipesim.workload.architecture import Attention, Mlp, TransformerArchitecture
from pipesim.workload.moe import MixtureOfExperts
from validation.memory_trace import (
    DTYPE,
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


@dataclass(frozen=True)
class MoECase:
    """One rank of an EP group running one MoE stage.

    Attributes:
        name: a label.
        stage: the stage as :mod:`validation.memory_trace` traces it; its architecture has
            ``moe`` set (every block an MoE block).
        expert: EP (1: every expert on the rank, no all-to-all).
    """

    name: str
    stage: TraceCase
    expert: int

    def __post_init__(self) -> None:
        moe = self.stage.arch.moe
        if moe is None or moe.first_dense_layers or moe.layer_frequency != 1 or not moe.gated:
            raise ValueError("the traced stage's blocks are all gated MoE blocks")
        if moe.experts % self.expert:
            raise ValueError(f"EP = {self.expert} must divide the {moe.experts} experts")
        if self.stage.arch.seq % moe.experts:
            raise ValueError("balanced routing needs E to divide the sequence")
        arch = self.stage.arch
        if arch.linear_bias or arch.dropout or arch.attention is not Attention.FLASH:
            raise ValueError("the traced MoE block has no biases, no dropout, FlashAttention")

    @property
    def moe(self) -> MixtureOfExperts:
        """The architecture's mixture of experts."""
        assert self.stage.arch.moe is not None
        return self.stage.arch.moe


# -- the PyTorch MoE block ---------------------------------------------------------------------


class _SwiGLU(torch.autograd.Function):
    """silu(a)·b of the two halves of the input, saving the input only (Megatron-Core's
    fused ``SwiGLUFunction``). Each pass allocates its output only, as the fused kernel does:
    the elementwise steps run in place in it (an unfused backward would hold several
    temporaries of the rows x f_e each)."""

    @staticmethod
    def forward(ctx: Any, x: Any) -> Any:
        ctx.save_for_backward(x)
        a, b = x.chunk(2, dim=-1)
        return F.silu(a).mul_(b)

    @staticmethod
    def backward(ctx: Any, grad: Any) -> Any:
        (x,) = ctx.saved_tensors
        a, b = x.chunk(2, dim=-1)
        out = torch.empty_like(x)
        da, db = out.chunk(2, dim=-1)
        torch.sigmoid(a, out=da)  # σ
        torch.mul(a, da, out=db)  # silu = a·σ
        da.addcmul_(da, db, value=-1).add_(db)  # σ·(1 + a·(1 - σ)) = σ - σ·silu + silu
        da.mul_(b).mul_(grad)
        db.mul_(grad)
        return out


class _AllToAll(torch.autograd.Function):
    """An even all-to-all over the default group (``all_to_all_single``); its backward is the
    same all-to-all of the gradient (Megatron-Core's ``_AllToAll``). Saves nothing."""

    @staticmethod
    def forward(ctx: Any, x: Any) -> Any:
        import torch.distributed as dist

        out = torch.empty_like(x)
        dist.all_to_all_single(out, x.contiguous())
        return out

    @staticmethod
    def backward(ctx: Any, grad: Any) -> Any:
        import torch.distributed as dist

        out = torch.empty_like(grad)
        dist.all_to_all_single(out, grad.contiguous())
        return out


class _Expert(nn.Module):
    """A SwiGLU MLP without biases: fc1 (h -> 2·width), the fused SwiGLU, fc2 (width -> h)."""

    def __init__(self, hidden: int, width: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(hidden, 2 * width, bias=False, dtype=DTYPE)
        self.fc2 = nn.Linear(width, hidden, bias=False, dtype=DTYPE)

    def forward(self, x: Any) -> Any:
        return self.fc2(_SwiGLU.apply(self.fc1(x)))  # type: ignore[no-untyped-call]


class _MoEBlock(_Block):
    """:class:`~validation.memory_trace._Block` (its norms and attention; no biases) with the
    MoE layer in place of its MLP: the router, E/EP local experts, the shared expert."""

    def __init__(self, arch: TransformerArchitecture, recompute: str, expert: int) -> None:
        super().__init__(arch, recompute)
        moe = arch.moe
        assert moe is not None
        h = arch.hidden
        self.qkv = nn.Linear(h, h + 2 * arch.kv_width, bias=False, dtype=DTYPE)
        self.proj = nn.Linear(h, h, bias=False, dtype=DTYPE)
        del self.fc1, self.fc2
        self.moe, self.ep = moe, expert
        self.router = nn.Linear(h, moe.experts, bias=False, dtype=DTYPE)
        local = moe.experts // expert
        self.experts = nn.ModuleList(_Expert(h, moe.expert_ffn) for _ in range(local))
        self.shared = _Expert(h, moe.shared_width) if moe.shared_width else None

    def _route(self, tokens: int) -> tuple[Any, Any]:
        """The balanced choice (tokens x k: token t to experts (t + i) mod E) and, for the
        k·tokens routed rows sorted by expert, the flat index of each in the choice."""
        e, k = self.moe.experts, self.moe.top_k
        choice = (torch.arange(tokens).unsqueeze(1) + torch.arange(k)) % e
        order = torch.argsort(choice.flatten(), stable=True)
        return choice, order

    def _experts(self, rows: Any) -> Any:
        """The local experts on their rows (sorted by local expert, an equal share each)."""
        chunks = rows.split(rows.shape[0] // len(self.experts))
        outputs = [expert(chunk) for expert, chunk in zip(self.experts, chunks, strict=True)]
        return torch.cat(outputs)

    def _sort(self, rows: int) -> Any:
        """The received rows' order by local expert: they arrive by source rank, then by
        local expert (``sort_chunks_by_idxs``)."""
        p, local = self.ep, len(self.experts)
        chunk = rows // (p * local)
        index = torch.arange(rows).view(p, local, chunk).transpose(0, 1).flatten()
        return index

    def _mlp(self, y: Any) -> Any:
        b, s, h = y.shape
        tokens = y.reshape(b * s, h)
        probs = torch.softmax(self.router(tokens), dim=-1, dtype=torch.float32)
        choice, order = self._route(b * s)
        gates = probs.gather(1, choice).to(DTYPE).flatten().index_select(0, order)
        source = order // self.moe.top_k  # each routed row's token
        rows = tokens.index_select(0, source)  # permute
        if self.ep > 1:
            rows = _AllToAll.apply(rows)  # type: ignore[no-untyped-call]
            if len(self.experts) > 1:
                index = self._sort(rows.shape[0])
                out = self._experts(rows.index_select(0, index))
                out = out.index_select(0, torch.argsort(index))
            else:
                out = self._experts(rows)
            out = _AllToAll.apply(out)  # type: ignore[no-untyped-call]
        else:
            out = self._experts(rows)
        weighted = out * gates.unsqueeze(-1)
        index = source.unsqueeze(1).expand(-1, h)
        combined = torch.zeros_like(tokens).scatter_add_(0, index, weighted)  # unpermute
        if self.shared is not None:
            combined = combined + self.shared(tokens)
        return combined.view(b, s, h)

    def _forward(self, x: Any) -> Any:
        b, s, h = x.shape
        a, d = self.arch.heads, self.arch.head_dim
        q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, a, d).permute(2, 0, 3, 1, 4).unbind(0)
        out = self._core(q, k, v).transpose(1, 2).reshape(b, s, h)
        x = x + self.proj(out)
        return x + self._mlp(self.ln2(x))


class _MoEStage(_Stage):
    """:class:`~validation.memory_trace._Stage` with :class:`_MoEBlock` blocks."""

    def __init__(
        self,
        arch: TransformerArchitecture,
        recompute: str,
        blocks: int,
        first: bool,
        last: bool,
        expert: int,
    ) -> None:
        super().__init__(arch, recompute, 0, first, last)
        self.blocks = nn.ModuleList(_MoEBlock(arch, recompute, expert) for _ in range(blocks))


def trace(case: MoECase) -> MemoryTerms:
    """The traced peak of one EP rank of ``case``'s stage over a 1F1B step and its optimizer
    step (after a first, untracked step that creates Adam's state), as
    :func:`validation.memory_trace.trace` runs it."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    tc = case.stage
    arch = tc.traced_arch
    first, last = tc.device == 0, tc.device == tc.devices - 1
    order = build("1f1b", tc.devices, tc.microbatches).device_actions[tc.device]
    group = fake_process_group(case.expert) if case.expert > 1 else contextlib.nullcontext()
    with group, FakeTensorMode():
        stage = _MoEStage(arch, tc.recompute, tc.blocks, first, last, case.expert)
        shape = (tc.microbatch_size, arch.seq, arch.hidden)
        return traced_terms(stage, order, first, last, arch.vocab, shape, free_received=True)


def parameter_tensors(case: MoECase) -> int:
    """The stage's parameter tensors (Adam keeps a 4-byte step counter for each, which pipesim
    does not count)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    tc = case.stage
    with FakeTensorMode():
        stage = _MoEStage(
            tc.traced_arch,
            tc.recompute,
            tc.blocks,
            tc.device == 0,
            tc.device == tc.devices - 1,
            case.expert,
        )
        return sum(1 for _ in stage.parameters())


# -- pipesim's figure ---------------------------------------------------------------------------


def predict_moe(case: MoECase) -> MemoryTerms:
    """pipesim's peak of ``case``'s device on one rank of ``Parallelism(expert=EP,
    data=EP)``: the same stages on K devices, 1F1B, the same M and b, term by term."""
    tc = case.stage
    parallelism = Parallelism(
        recompute=Recompute.parse(tc.recompute), expert=case.expert, data=case.expert
    )
    return predicted_terms(simulated_memory(tc, parallelism))


def compare(case: MoECase) -> tuple[MemoryTerms, MemoryTerms]:
    """(traced, predicted)."""
    return trace(case), predict_moe(case)


# -- the cases and the table -------------------------------------------------------------------

# (label, experts, shared experts); hidden 256, 4 heads, top-2, expert width 512
SHAPES = (("E4", 4, 0), ("E8 +shared", 8, 1))
EXPERT = (1, 2, 4)
HIDDEN, HEADS, SEQ, VOCAB, TOP_K, EXPERT_FFN = 256, 4, 512, 1000, 2, 512
BLOCKS, MICROBATCH, MICROBATCHES = 2, 1, 4


def architecture(experts: int, shared: int, seq: int = SEQ) -> TransformerArchitecture:
    """The traced MoE transformer: every block an MoE block of ``experts`` SwiGLU experts
    (top-2, width 512) and ``shared`` shared ones; FlashAttention, no biases, no dropout."""
    moe = MixtureOfExperts(experts, TOP_K, EXPERT_FFN, shared_experts=shared)
    return TransformerArchitecture(
        2 * BLOCKS,
        HIDDEN,
        HEADS,
        EXPERT_FFN,
        seq,
        VOCAB,
        mlp=Mlp.SWIGLU,
        attention=Attention.FLASH,
        linear_bias=False,
        dropout=False,
        embedding_dropout=False,
        moe=moe,
    )


def cases(
    shapes: tuple[tuple[str, int, int], ...] = SHAPES,
    expert: tuple[int, ...] = EXPERT,
    recompute: str = "none",
) -> Iterator[MoECase]:
    """For each shape and EP: the first and the last stage of a 2-stage pipeline."""
    for label, experts, shared in shapes:
        arch = architecture(experts, shared)
        for ep in expert:
            for device in (0, 1):
                name = f"{label} EP={ep} {stage_name(device, 2)}"
                if recompute != "none":
                    name += f" {recompute}"
                stage = TraceCase(
                    name, arch, recompute, 2, device, BLOCKS, MICROBATCH, MICROBATCHES
                )
                yield MoECase(name, stage, ep)


def main(argv: list[str] | None = None) -> int:
    """Trace every case (``--recompute selective|full`` for another mode) and print the
    table with the largest error."""
    return compare_main(argv, cases, compare, "EP rank")


if __name__ == "__main__":
    sys.exit(main())
