"""pipesim's memory model held against PyTorch's own accounting of a GPT pipeline stage.

A stage of a GPT (an embedding and blocks, blocks, or blocks and the output layer with its
cross-entropy loss) is built in PyTorch the way Megatron-LM computes it (fused QKV, eager
attention with a separate softmax and dropout or PyTorch's fused scaled-dot-product attention,
bias-dropout-residual, GELU MLP; selective recomputation of the attention core and full
recomputation of each block with ``torch.utils.checkpoint``), in bf16 with Adam (its state in
the weights' dtype). It runs one stage's part of a 1F1B step, the very action order pipesim's
``1f1b`` generator gives that device, under :class:`~torch._subclasses.fake_tensor.FakeTensorMode`
(no memory is touched, so a 13B stage traces in seconds on a CPU) and
:class:`~torch.distributed._tools.mem_tracker.MemTracker`, after a first step that creates the
optimizer's state, then the optimizer step. Each output sent on is freed as Megatron-LM frees
it (only its graph is kept). The traced peak, term by term (weights, gradients, optimizer state
with its step's temporaries, activations with the transients), is compared with pipesim's
simulated peak of that device for the same stage.

Two artefacts of tracing on a CPU are the model's own settings here, not corrections: PyTorch's
CPU dropout keeps its mask in the input's dtype (2 bytes; a byte on CUDA: ``mask_bytes = 2``),
and the fused attention runs without dropout (on CUDA the mask is regenerated in the kernel and
never stored either; on a CPU PyTorch falls back to the unfused math when asked for dropout).
"""

from __future__ import annotations

import math
import sys
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd import Variable
from torch.utils.checkpoint import checkpoint

from pipesim.costs.spec_derived import costs_from_model
from pipesim.engine import simulate
from pipesim.engine.memory_over_time import DeviceMemory
from pipesim.hardware import resolve_hardware
from pipesim.parallel.config import Parallelism, Recompute
from pipesim.schedules import Kind, build
from pipesim.workload.architecture import Attention, TransformerArchitecture
from pipesim.workload.catalogue import from_architecture
from pipesim.workload.model import Model

DTYPE = torch.bfloat16
ELEMENT_BYTES = 2
MASK_BYTES = 2  # PyTorch's CPU dropout mask is in the input's dtype
ADAM_STATE_BYTES = 2 * ELEMENT_BYTES  # exp_avg and exp_avg_sq in the weights' dtype
ADAM_TEMPORARY_BYTES = ELEMENT_BYTES  # the multi-tensor step's square root


@dataclass(frozen=True)
class TraceCase:
    """One stage to trace.

    Attributes:
        name: a label.
        arch: the transformer (``mask_bytes`` is set to the CPU's 2 when traced).
        recompute: ``none``, ``selective`` or ``full``.
        devices: K, pipeline devices of the 1F1B step.
        device: which one is traced (0: the first stage, with the embedding; K-1: the last,
            with the output layer and the loss).
        blocks: transformer blocks per stage.
        microbatch_size: b.
        microbatches: M (at least K, so the stage reaches its steady state).
    """

    name: str
    arch: TransformerArchitecture
    recompute: str
    devices: int
    device: int
    blocks: int
    microbatch_size: int
    microbatches: int

    @property
    def traced_arch(self) -> TransformerArchitecture:
        """The architecture as traced: the blocks of all stages, CPU dropout masks."""
        import dataclasses

        return dataclasses.replace(
            self.arch, layers=self.blocks * self.devices, mask_bytes=MASK_BYTES
        )


@dataclass(frozen=True)
class MemoryTerms:
    """A device's memory by term (bytes): the static terms, and at the peak everything else
    (activations and what the running action holds: its temporaries, the tensors it receives
    and sends, recomputed activations, or the optimizer step's temporaries)."""

    weights: float
    gradients: float
    optimizer: float
    activations: float
    peak: float


# -- the PyTorch stage -----------------------------------------------------------------------


class _Block(nn.Module):
    """One pre-norm GPT block, as Megatron-LM computes it."""

    def __init__(self, arch: TransformerArchitecture, recompute: str) -> None:
        super().__init__()
        h = arch.hidden
        self.arch, self.recompute = arch, recompute
        self.ln1 = nn.LayerNorm(h, dtype=DTYPE)
        self.qkv = nn.Linear(h, h + 2 * arch.kv_width, dtype=DTYPE)
        self.proj = nn.Linear(h, h, dtype=DTYPE)
        self.ln2 = nn.LayerNorm(h, dtype=DTYPE)
        self.fc1 = nn.Linear(h, arch.ffn, dtype=DTYPE)
        self.fc2 = nn.Linear(arch.ffn, h, dtype=DTYPE)
        self.dropout = 0.1 if arch.dropout else 0.0

    def _core(self, q: Any, k: Any, v: Any) -> Any:
        """Attention from the queries, keys and values to the heads' outputs."""
        if self.arch.attention is Attention.FLASH:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        seq = q.shape[-2]
        scores = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(q.shape[-1]))
        mask = torch.ones(seq, seq, dtype=torch.bool).triu(1)
        probs = torch.softmax(scores.masked_fill(mask, -1e4), dim=-1)
        probs = F.dropout(probs, self.dropout, training=True)
        return torch.matmul(probs, v)

    def _forward(self, x: Any) -> Any:
        b, s, h = x.shape
        a, d = self.arch.heads, self.arch.head_dim
        q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, a, d).permute(2, 0, 3, 1, 4).unbind(0)
        if self.recompute == "selective":
            out = checkpoint(self._core, q, k, v, use_reentrant=False)
        else:
            out = self._core(q, k, v)
        out = out.transpose(1, 2).reshape(b, s, h)
        x = x + F.dropout(self.proj(out), self.dropout, training=True)
        mlp = self.fc2(F.gelu(self.fc1(self.ln2(x))))
        return x + F.dropout(mlp, self.dropout, training=True)

    def forward(self, x: Any) -> Any:
        if self.recompute == "full":
            return checkpoint(self._forward, x, use_reentrant=False)
        return self._forward(x)


class _Stage(nn.Module):
    """A pipeline stage: the embedding (first), blocks, the output layer (last)."""

    def __init__(
        self, arch: TransformerArchitecture, recompute: str, blocks: int, first: bool, last: bool
    ) -> None:
        super().__init__()
        h = arch.hidden
        self.first, self.last = first, last
        self.embedding = nn.Embedding(arch.vocab, h, dtype=DTYPE) if first else None
        self.positions = nn.Embedding(arch.seq, h, dtype=DTYPE) if first else None
        self.blocks = nn.ModuleList(_Block(arch, recompute) for _ in range(blocks))
        self.norm = nn.LayerNorm(h, dtype=DTYPE) if last else None
        self.output = nn.Linear(h, arch.vocab, bias=False, dtype=DTYPE) if last else None
        self.dropout = 0.1 if arch.embedding_dropout else 0.0

    def forward(self, x: Any, targets: Any = None) -> Any:
        if self.embedding is not None and self.positions is not None:
            positions = torch.arange(x.shape[1])
            x = F.dropout(
                self.embedding(x) + self.positions(positions), self.dropout, training=True
            )
        for block in self.blocks:
            x = block(x)
        if self.norm is not None and self.output is not None:
            logits = self.output(self.norm(x)).float()
            return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))
        return x


# -- tracing ----------------------------------------------------------------------------------


class _Call(nn.Module):
    """A fresh parent for each micro-batch's call of the stage: MemTracker follows a module
    called several times in one step when each call has a parent of its own."""

    def __init__(self, stage: _Stage) -> None:
        super().__init__()
        self.stage = stage

    def forward(self, *args: Any) -> Any:
        return self.stage(*args)


def _snapshot(tracker: Any, kind: str) -> dict[str, int]:
    return {
        str(key).split(".")[-1]: value
        for _, values in tracker.get_tracker_snapshot(kind).items()
        for key, value in values.items()
    }


def backward(out: Any, grad: Any) -> None:
    """A stage's backward from its output ``out`` with the gradient ``grad`` received, as
    ``torch.autograd.backward`` runs it (graph freed, gradients accumulated), without its
    checks that the output still holds data: a sent output's data is freed at once."""
    Variable._execution_engine.run_backward(
        tensors=(out,),
        grad_tensors=(grad,),
        keep_graph=False,
        create_graph=False,
        inputs=(),
        allow_unreachable=True,
        accumulate_grad=True,
    )


def run_order(
    stage: _Stage,
    order: Sequence[Any],
    first: bool,
    last: bool,
    vocab: int,
    shape: tuple[int, int, int],
    free_received: bool = False,
) -> None:
    """One step of a device's order of F and B actions on ``stage`` (not its optimizer step):
    the first stage reads token ids, the others a received (b, s, h) activation; the last
    takes targets and its loss is the backward's root; every other stage's output is sent (its
    data freed, its graph kept) and its gradient received as ones. ``free_received``: a
    received input is freed once its gradient is sent back (the MoE trace's convention; the
    other traces keep it until the step ends)."""
    b, s, h = shape
    pending: dict[int, Any] = {}
    received: dict[int, Any] = {}
    for action in order:
        m = action.microbatch
        if action.kind is Kind.F:
            if first:
                x = torch.randint(0, vocab, (b, s))
            else:
                x = torch.randn(b, s, h, dtype=DTYPE, requires_grad=True)
                if free_received:
                    received[m] = x
            call = _Call(stage)
            if last:
                pending[m] = call(x, torch.randint(0, vocab, (b, s)))
            else:
                out = call(x)
                out.data = torch.empty((1,), dtype=out.dtype)  # sent, then freed
                pending[m] = out
        else:
            out = pending.pop(m)
            grad = torch.ones_like(out) if last else torch.ones(b, s, h, dtype=DTYPE)
            backward(out, grad)
            del out, grad
            if m in received:  # its gradient sent back: both freed
                x = received.pop(m)
                x.grad = None
                x.data = torch.empty((1,), dtype=DTYPE)
                del x


def trace(case: TraceCase) -> MemoryTerms:
    """The traced peak of ``case``'s stage over a 1F1B step and its optimizer step (a first
    step run before, untracked, so the optimizer's state exists)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    arch = case.traced_arch
    first, last = case.device == 0, case.device == case.devices - 1
    order = build("1f1b", case.devices, case.microbatches).device_actions[case.device]
    with FakeTensorMode():
        stage = _Stage(arch, case.recompute, case.blocks, first, last)
        shape = (case.microbatch_size, arch.seq, arch.hidden)
        return traced_terms(stage, order, first, last, arch.vocab, shape)


def traced_terms(
    stage: _Stage,
    order: Sequence[Any],
    first: bool,
    last: bool,
    vocab: int,
    shape: tuple[int, int, int],
    free_received: bool = False,
) -> MemoryTerms:
    """``stage``'s memory under PyTorch's own accounting: a training step of the device's
    ``order`` (:func:`run_order`) and foreach Adam's step traced by ``MemTracker`` (after one
    step run before, untracked, so the optimizer's state exists); call it under the fake
    tensor mode the stage was built in."""
    from torch.distributed._tools.mem_tracker import MemTracker

    optimizer = torch.optim.Adam(stage.parameters(), lr=1e-4, foreach=True)

    def step() -> None:
        run_order(stage, order, first, last, vocab, shape, free_received)
        optimizer.step()

    step()  # the optimizer's state exists from here on, as in every later step
    tracker = MemTracker()
    tracker.track_external(stage, optimizer)
    with tracker, warnings.catch_warnings():
        # each micro-batch's _Call parent is gone by its backward: MemTracker's module
        # tracker warns once per hook it then skips (the memory is counted all the same)
        warnings.filterwarnings("ignore", message="Module is None", category=UserWarning)
        step()
        after = _snapshot(tracker, "current")  # the static terms, nothing in flight
    peak = float(_snapshot(tracker, "peak")["Total"])
    weights, gradients, state = (float(after[key]) for key in ("PARAM", "GRAD", "OPT"))
    return MemoryTerms(
        weights=weights,
        gradients=gradients,
        optimizer=state,
        activations=peak - weights - gradients - state,
        peak=peak,
    )


# -- pipesim's figure ---------------------------------------------------------------------------


def traced_model(case: TraceCase) -> Model:
    """The traced stage's model as pipesim reads it: every stage's blocks, bf16 weights and
    gradients, Adam's two moments in bf16, its step's square root in bf16, no master weights."""
    return from_architecture(
        case.name,
        case.traced_arch,
        dtype="bf16",
        default_batch=case.microbatch_size * case.microbatches,
        description="a traced GPT",
        weight_bytes=ELEMENT_BYTES,
        gradient_bytes=ELEMENT_BYTES,
        optimizer_bytes=ADAM_STATE_BYTES,
        master_weight_bytes=0.0,
        optimizer_temporary_bytes=ADAM_TEMPORARY_BYTES,
    )


def simulated_memory(
    case: TraceCase, parallelism: Parallelism, model: Model | None = None
) -> DeviceMemory:
    """pipesim's memory of the traced device under ``parallelism``: the same stages on K
    devices (the embedding with the first blocks, the output layer with the last), 1F1B, the
    same M and b. ``model``: the traced one unless given (the sharded trace's has its own
    precision). Every trace of this package predicts through here."""
    partition = [case.blocks] * case.devices
    partition[0] += 1  # the embedding
    partition[-1] += 1  # the output layer
    costs = costs_from_model(
        traced_model(case) if model is None else model,
        resolve_hardware("a100").cluster(case.devices),  # memory does not depend on it
        case.devices,
        case.microbatch_size,
        partition,
        parallelism=parallelism,
    )
    result = simulate(build("1f1b", case.devices, case.microbatches), costs)
    return result.per_device[case.device].memory


def predicted_terms(memory: DeviceMemory) -> MemoryTerms:
    """A simulated device's peak as :class:`MemoryTerms`: master weights with the optimizer
    state, the transient with the activations."""
    terms = memory.breakdown()
    return MemoryTerms(
        weights=terms["weights"],
        gradients=terms["gradients"],
        optimizer=terms["optimizer_state"] + terms["master_weights"],
        activations=terms["activations"] + terms["transient"],
        peak=memory.peak_bytes,
    )


def predict(case: TraceCase) -> MemoryTerms:
    """pipesim's peak of the traced device (:func:`simulated_memory`), term by term."""
    parallelism = Parallelism(recompute=Recompute.parse(case.recompute))
    return predicted_terms(simulated_memory(case, parallelism))


class _Peaked(Protocol):
    @property
    def peak(self) -> float: ...


def error(traced: _Peaked, predicted: _Peaked) -> float:
    """pipesim's peak error relative to the traced peak."""
    return predicted.peak / traced.peak - 1


_TERMS = ("weights", "gradients", "optimizer", "activations")
_HEADS = ("weights", "gradients", "optimizer", "activations+transients")


def terms_table(rows: Sequence[tuple[str, MemoryTerms, MemoryTerms]]) -> str:
    """Markdown: per case (by name) the traced and pipesim's peak (MiB), the error, each term
    traced / pipesim (MiB)."""
    mib = 2.0**20
    head = ["case", "traced peak", "pipesim peak", "error"]
    head += [f"{name} traced / pipesim" for name in _HEADS]
    lines = ["| " + " | ".join(head) + " |", "| --- |" + " ---: |" * (len(head) - 1)]
    for name, traced, predicted in rows:
        cells = [
            name,
            f"{traced.peak / mib:.3f}",
            f"{predicted.peak / mib:.3f}",
            f"{error(traced, predicted):+.1%}",
        ]
        cells += [
            f"{getattr(traced, t) / mib:.3f} / {getattr(predicted, t) / mib:.3f}" for t in _TERMS
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def compare(case: TraceCase) -> tuple[MemoryTerms, MemoryTerms]:
    """(traced, predicted)."""
    return trace(case), predict(case)


StageName = Callable[[int, int], str]


def compare_main(
    argv: list[str] | None,
    cases: Callable[..., Iterable[Any]],
    compare_case: Callable[[Any], tuple[MemoryTerms, MemoryTerms]],
    per: str,
) -> int:
    """A trace module's ``main``: trace every case of ``cases(recompute=...)``
    (``--recompute selective|full`` for another mode than none), print the terms table (MiB
    ``per`` rank) and the largest error; status 1 where an error is not a number."""
    args = sys.argv[1:] if argv is None else argv
    recompute = args[args.index("--recompute") + 1] if "--recompute" in args else "none"
    rows = [(case, *compare_case(case)) for case in cases(recompute=recompute)]
    sys.stdout.write(f"MiB per {per}, terms at the traced and at pipesim's peak\n\n")
    sys.stdout.write(terms_table([(c.name, t, p) for c, t, p in rows]) + "\n\n")
    worst = max(abs(error(t, p)) for _, t, p in rows)
    sys.stdout.write(f"largest |error|: {worst:.1%}\n")
    return 0 if not math.isnan(worst) else 1


def stage_name(device: int, devices: int) -> str:
    """``first``, ``middle`` or ``last``."""
    if device == 0:
        return "first"
    return "last" if device == devices - 1 else "middle"
