"""One transformer block on one GPU, timed and its memory read, beside pipesim's kernel-level
prediction for the same block.

pipesim times a block kernel by kernel (:mod:`pipesim.costs.kernel_time`): each matrix multiply
at the fraction of peak the accelerator's curve gives for its FLOPs, the memory-bound kernels'
bytes at the achievable bandwidth. This module measures what that model is built from and what
it predicts, on the device at hand:

* the matrix-multiply curve (square bf16 products, m = n = k from 512 to 16,384) and the copy
  and triad bandwidth: the hardware spec's ``matmul_efficiency`` and
  ``memory_bandwidth_efficiency``, measured instead of cited;
* every matrix multiply of a block's forward, input-gradient and weight-gradient passes at its
  own shape (is one curve by FLOPs enough?);
* the block itself (:class:`BlockShard`: one tensor-parallel rank's share of a Megatron-LM GPT
  block, the tensor-parallel collectives left out) forward and backward, with CUDA events, and
  the memory it stashes and peaks at (``torch.cuda.max_memory_allocated``).

The block is written as Megatron-LM writes it: layer norms, a QKV projection, eager attention
(a scaled batched product, a causal softmax, dropout, the product with the values) or
PyTorch's fused attention (SDPA, flash), the output projection, bias-dropout-add, fc1,
tanh-GELU with its bias, fc2, bias-dropout-add. ``fused=True`` compiles the softmax,
bias-GELU and bias-dropout-add (``torch.compile``), as Megatron-LM's fused kernels are: one
pass over their bytes each, which is what pipesim's model counts; eager, they take several.

Run on a GPU: ``python -m validation.layer_timing --out layers.json`` (a few minutes on an
H100-class GPU); on a CPU it runs too (``--quick``, times from the wall clock), for tests.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from application.command_line import EXIT_BAD_INPUT, ArgumentParser
from pipesim.costs.kernel_time import pass_time_s
from pipesim.errors import PipesimError, short_values
from pipesim.files.inputs import decode_text, read_input
from pipesim.hardware.accelerator import Accelerator
from pipesim.parallel.config import Parallelism
from pipesim.workload.architecture import Attention, TransformerArchitecture
from pipesim.workload.model import Layer
from pipesim.workload.transformer import transformer_block
from pipesim.workload.work import Matmul, PassWork
from validation.typed_json import FieldRules, decode

DROPOUT = 0.1  # Megatron-LM's attention and hidden dropout
SQUARE_SIZES = (512, 1024, 2048, 3072, 4096, 6144, 8192, 12288, 16384)


@dataclass(frozen=True)
class LayerCase:
    """One block on one tensor-parallel rank of ``tensor``, at ``microbatch_size``."""

    label: str
    arch: TransformerArchitecture
    tensor: int
    microbatch_size: int

    @property
    def heads_local(self) -> int:
        return self.arch.heads // self.tensor

    @property
    def head_dim(self) -> int:
        return self.arch.hidden // self.arch.heads


def table_1_cases(attention: Attention = Attention.EAGER) -> list[LayerCase]:
    """The block of every row of 2104.04473 Table 1 as one of its GPUs holds it (T, b)."""
    from dataclasses import replace

    from pipesim.workload import model
    from validation.reproduce.megatron import TABLE_1

    cases = []
    for size, tensor, _pipeline, b, *_ in TABLE_1:
        arch = model(f"megatron-{size}").architecture
        assert arch is not None
        arch = replace(arch, attention=attention)
        cases.append(LayerCase(f"megatron-{size} T={tensor} b={b}", arch, tensor, b))
    return cases


class BlockShard(nn.Module):
    """One tensor-parallel rank's share of a GPT block (GELU MLP, LayerNorm, biases,
    dropout), in Megatron-LM's [sequence, batch, hidden] layout."""

    def __init__(self, case: LayerCase, fused: bool, dtype: torch.dtype) -> None:
        super().__init__()
        a, t = case.arch, case.tensor
        h, f = a.hidden, a.ffn
        self.case = case
        self.flash = a.attention is Attention.FLASH
        kw: dict[str, Any] = {"dtype": dtype}
        self.norm1 = nn.LayerNorm(h, **kw)
        self.qkv = nn.Linear(h, 3 * h // t, **kw)
        self.proj = nn.Linear(h // t, h, bias=False, **kw)
        self.proj_bias = nn.Parameter(torch.zeros(h, **kw))
        self.norm2 = nn.LayerNorm(h, **kw)
        self.fc1 = nn.Linear(h, f // t, bias=False, **kw)
        self.fc1_bias = nn.Parameter(torch.zeros(f // t, **kw))
        self.fc2 = nn.Linear(f // t, h, bias=False, **kw)
        self.fc2_bias = nn.Parameter(torch.zeros(h, **kw))
        self.softmax: Callable[[torch.Tensor], torch.Tensor] = _causal_softmax
        self.bias_gelu: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = _bias_gelu
        self.bias_dropout_add: Callable[..., torch.Tensor] = _bias_dropout_add
        if fused:
            _allow_recompiles()
            self.softmax = torch.compile(_causal_softmax)
            self.bias_gelu = torch.compile(_bias_gelu)
            self.bias_dropout_add = torch.compile(_bias_dropout_add)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s, b, _ = x.shape
        heads, d = self.case.heads_local, self.case.head_dim
        qkv = self.qkv(self.norm1(x)).view(s, b * heads, 3 * d)
        q, k, v = qkv.split(d, dim=-1)  # strided views, as Megatron-LM splits them
        if self.flash:
            shape = (b, heads, s, d)
            q, k, v = (u.reshape(s, b, heads, d).permute(1, 2, 0, 3) for u in (q, k, v))
            context = F.scaled_dot_product_attention(
                q.reshape(shape),
                k.reshape(shape),
                v.reshape(shape),
                dropout_p=DROPOUT,
                is_causal=True,
            )
            context = context.permute(2, 0, 1, 3).reshape(s, b, heads * d)
        else:
            q, k, v = (u.transpose(0, 1) for u in (q, k, v))  # [b·heads, s, d]
            scores = torch.baddbmm(
                torch.empty(b * heads, s, s, dtype=x.dtype, device=x.device),
                q,
                k.transpose(1, 2),
                beta=0.0,
                alpha=1.0 / math.sqrt(d),
            )
            probs = F.dropout(self.softmax(scores), DROPOUT, training=True)
            context = torch.bmm(probs, v).transpose(0, 1).reshape(s, b, heads * d)
        x = self.bias_dropout_add(self.proj(context), self.proj_bias, x)
        hidden = self.bias_gelu(self.fc1(self.norm2(x)), self.fc1_bias)
        return self.bias_dropout_add(self.fc2(hidden), self.fc2_bias, x)


def _allow_recompiles() -> None:
    """Every block shape compiles its fused kernels anew; the default limit (8) would send the
    later shapes back to eager kernels without a word."""
    import torch._dynamo

    for name, value in (("recompile_limit", 1024), ("accumulated_recompile_limit", 4096)):
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, value)


def _causal_softmax(scores: torch.Tensor) -> torch.Tensor:
    """Megatron-LM's upper-triangular masked softmax: 16-bit in and out (PyTorch's kernel, like
    Megatron-LM's, accumulates in fp32), so that the output it saves is 16-bit."""
    s = scores.shape[-1]
    index = torch.arange(s, device=scores.device)
    masked = scores.masked_fill(index[None, :] > index[:, None], float("-inf"))
    return torch.softmax(masked, dim=-1)


def _bias_gelu(x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return F.gelu(x + bias, approximate="tanh")


def _bias_dropout_add(x: torch.Tensor, bias: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
    return residual + F.dropout(x + bias, DROPOUT, training=True)


class _Timer:
    """Seconds between two points: CUDA events on a GPU, the wall clock on a CPU."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"

    def time(
        self, work: Callable[[], object], repeats: int, warmup: int = 2, inner: int = 1
    ) -> float:
        """The median of ``repeats`` timings of ``work`` after ``warmup`` untimed runs; each
        timing covers ``inner`` back-to-back runs (short kernels: the events' own cost
        amortised) and is divided by it."""
        for _ in range(warmup):
            work()
        samples = []
        for _ in range(repeats):
            if self.cuda:
                begin = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
                end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
                begin.record()
                for _ in range(inner):
                    work()
                end.record()
                end.synchronize()
                seconds = begin.elapsed_time(end) / 1e3
            else:
                start = time.perf_counter()
                for _ in range(inner):
                    work()
                seconds = time.perf_counter() - start
            samples.append(seconds / inner)
        return float(statistics.median(samples))


def warm_up(device: torch.device, seconds: float = 2.0) -> None:
    """Large products for ``seconds``, so that the GPU's clocks have left idle before the
    first timing (an idle H200 reads 345 MHz; the first small products ran at a tenth of
    their speed without this)."""
    if device.type != "cuda":
        return
    a = torch.randn(8192, 8192, dtype=torch.bfloat16, device=device)
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        for _ in range(10):
            a @ a
        torch.cuda.synchronize(device)


def _block_and_inputs(
    case: LayerCase, device: torch.device, dtype: torch.dtype, fused: bool
) -> tuple[BlockShard, torch.Tensor, torch.Tensor]:
    """The block on ``device``, an input of the case's micro-batch and a gradient for its
    output, all seeded alike."""
    torch.manual_seed(0)
    block = BlockShard(case, fused, dtype).to(device)
    s, b, h = case.arch.seq, case.microbatch_size, case.arch.hidden
    x = torch.randn(s, b, h, dtype=dtype, device=device, requires_grad=True)
    return block, x, torch.randn(s, b, h, dtype=dtype, device=device)


def measure_block(
    case: LayerCase, device: torch.device, dtype: torch.dtype, fused: bool, repeats: int
) -> dict[str, float]:
    """Forward and backward seconds of the block at the case's micro-batch size; on CUDA also
    the bytes it stashes (allocated by the forward, less its output, plus its input, which
    the first norm holds) and the peaks of each pass above what was allocated when it
    began."""
    block, x, grad = _block_and_inputs(case, device, dtype, fused)
    timer = _Timer(device)
    holder: dict[str, torch.Tensor] = {}

    def forward() -> None:
        holder["y"] = block(x)

    def backward() -> None:
        for p in block.parameters():  # each gradient written by its matmul, none accumulated
            p.grad = None
        x.grad = None
        holder.pop("y").backward(grad)  # type: ignore[no-untyped-call]

    def step() -> None:
        forward()
        backward()

    forward_s = timer.time(forward, repeats)
    holder.clear()
    step_s = timer.time(step, repeats)
    result = {"forward_s": forward_s, "backward_s": max(0.0, step_s - forward_s)}
    if device.type == "cuda":
        result.update(_memory(block, x, grad, device))
    return result


def _memory(
    block: nn.Module, x: torch.Tensor, grad: torch.Tensor, device: torch.device
) -> dict[str, float]:
    for p in block.parameters():
        p.grad = None
    x.grad = None
    torch.cuda.synchronize(device)
    before = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    y = block(x)
    torch.cuda.synchronize(device)
    after_forward = torch.cuda.memory_allocated(device)
    forward_peak = torch.cuda.max_memory_allocated(device) - before
    torch.cuda.reset_peak_memory_stats(device)
    y.backward(grad)
    torch.cuda.synchronize(device)
    backward_peak = torch.cuda.max_memory_allocated(device) - after_forward
    output = y.numel() * y.element_size()
    del y
    # The block's input was allocated before the forward, and the first norm holds it for
    # the backward: it is part of what the block stashes, as pipesim counts it.
    held_input = x.numel() * x.element_size()
    return {
        "stash_bytes": float(after_forward - before - output + held_input),
        "forward_peak_bytes": float(forward_peak),
        "backward_peak_bytes": float(backward_peak),
    }


def measure_matmul(
    shape: tuple[float, float, float, float], device: torch.device, dtype: torch.dtype, repeats: int
) -> float:
    """Seconds of one (batch of) (M x K)(K x N) product(s), contiguous operands."""
    batch, m, n, k = (round(v) for v in shape)
    a = torch.randn(batch, m, k, dtype=dtype, device=device)
    w = torch.randn(batch, k, n, dtype=dtype, device=device)
    inner = max(1, min(50, int(2e11 / (2 * batch * m * n * k))))  # about 1 ms per timing
    if batch == 1:
        a2, w2 = a[0], w[0]
        return _Timer(device).time(lambda: torch.mm(a2, w2), repeats, inner=inner)
    return _Timer(device).time(lambda: torch.bmm(a, w), repeats, inner=inner)


def attention_matmuls(
    device: torch.device, dtype: torch.dtype, repeats: int, quick: bool
) -> list[dict[str, Any]]:
    """Attention's batched products at sequence s and head size d: scores (s x d)(d x s) and
    values (s x s)(s x d), for a batch of micro-batch x local heads: how far a product whose
    contraction (or output width) is a head's size falls below the square curve."""
    rows = []
    seqs = (128,) if quick else (1024, 2048, 4096)
    heads = (2,) if quick else (16, 64, 256)
    dims = (16,) if quick else (64, 96, 128, 160)
    for s in seqs:
        for d in dims:
            for batch in heads:
                for name, shape in (("scores", (batch, s, s, d)), ("values", (batch, s, d, s))):
                    seconds = measure_matmul(shape, device, dtype, repeats)
                    flops = 2.0 * batch * s * s * d
                    rows.append(
                        {
                            "name": name,
                            "batch": batch,
                            "s": s,
                            "d": d,
                            "seconds": seconds,
                            "flops_per_s": flops / seconds,
                        }
                    )
    return rows


def memory_kernels(
    device: torch.device, dtype: torch.dtype, elements: int, repeats: int
) -> list[dict[str, float]]:
    """The memory-bound kernels of a block, each alone on ``elements`` 16-bit elements, with
    the bytes pipesim counts for it: their achieved bandwidth against the triad's."""
    e = torch.empty((), dtype=dtype).element_size()
    rows_2048 = max(1, elements // 2048)
    x = torch.randn(rows_2048, 2048, dtype=dtype, device=device)
    y = torch.randn_like(x)
    mask = torch.rand(rows_2048, 2048, device=device) > 0.1
    n = x.numel()
    width = 2048
    weight = torch.ones(width, dtype=dtype, device=device)
    bias = torch.zeros(width, dtype=dtype, device=device)
    softmax = torch.softmax(x, dim=-1)
    mean = torch.zeros(rows_2048, 1, dtype=torch.float32, device=device)
    rstd = torch.ones(rows_2048, 1, dtype=torch.float32, device=device)
    logits = torch.randn(max(1, elements // 65536), 65536, device=device)  # fp32 logits
    labels = torch.zeros(logits.shape[0], dtype=torch.long, device=device)
    cases: list[tuple[str, Callable[[], object], float]] = [
        ("softmax", lambda: torch.softmax(x, dim=-1), 2 * e * n),
        (
            "softmax backward",
            lambda: torch._softmax_backward_data(y, softmax, -1, dtype),
            3 * e * n,
        ),
        ("dropout", lambda: torch.native_dropout(x, 0.1, True), (2 * e + 1) * n),
        (
            "dropout backward",
            lambda: torch.ops.aten.native_dropout_backward(y, mask, 1 / 0.9),
            (2 * e + 1) * n,
        ),
        ("layer norm", lambda: F.layer_norm(x, (width,), weight, bias), 2 * e * n),
        (
            "layer norm backward",
            lambda: torch.ops.aten.native_layer_norm_backward(
                y, x, (width,), mean, rstd, weight, bias, (True, True, True)
            ),
            3 * e * n,
        ),
        ("gelu", lambda: F.gelu(x, approximate="tanh"), 2 * e * n),
        (
            "gelu backward",
            lambda: torch.ops.aten.gelu_backward(y, x, approximate="tanh"),
            3 * e * n,
        ),
        ("add", lambda: torch.add(x, y), 3 * e * n),
        ("sum over the tokens (a bias gradient)", lambda: x.sum(0), e * n),
        ("cross entropy (fp32)", lambda: F.cross_entropy(logits, labels), 8.0 * logits.numel()),
        ("copy", lambda: y.copy_(x), 2 * e * n),
    ]
    rows: list[dict[str, Any]] = []
    for name, work, moved in cases:
        seconds = _Timer(device).time(work, repeats)
        rows.append(
            {"name": name, "bytes": moved, "seconds": seconds, "bytes_per_s": moved / seconds}
        )
    return rows


def kernel_profile(
    case: LayerCase, device: torch.device, dtype: torch.dtype, fused: bool
) -> dict[str, list[dict[str, float]]]:
    """The block's forward and backward kernel by kernel (PyTorch's profiler, CUDA time per
    kernel name, summed over one pass): where the time goes."""
    from torch.profiler import ProfilerActivity, profile

    block, x, grad = _block_and_inputs(case, device, dtype, fused)
    for _ in range(3):
        block(x).backward(grad)
    result = {}
    for pass_name in ("forward", "backward"):
        for p in block.parameters():
            p.grad = None
        y = block(x) if pass_name == "backward" else None
        torch.cuda.synchronize(device)
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            if y is None:
                block(x)
            else:
                y.backward(grad)
            torch.cuda.synchronize(device)
        kernels = [
            {
                "name": event.key[:120],
                "calls": event.count,
                "seconds": event.self_device_time_total / 1e6,
            }
            for event in prof.key_averages()
            if event.self_device_time_total > 0
        ]
        kernels.sort(key=lambda k: -k["seconds"])
        result[pass_name] = kernels[:40]
    return result


def square_curve(
    device: torch.device, dtype: torch.dtype, sizes: Iterable[int], repeats: int
) -> list[dict[str, float]]:
    """Square products m = n = k: FLOPs and FLOP/s, the hardware spec's curve."""
    rows = []
    for n in sizes:
        seconds = measure_matmul((1, n, n, n), device, dtype, repeats)
        flops = 2.0 * n**3
        rows.append({"n": n, "flops": flops, "seconds": seconds, "flops_per_s": flops / seconds})
    return rows


def bandwidth(device: torch.device, size_bytes: int, repeats: int) -> dict[str, float]:
    """Copy (read + write) and triad (a = b + 3c: two reads, a write) in bytes per second."""
    n = size_bytes // 4
    a, b, c = (torch.rand(n, device=device) for _ in range(3))
    timer = _Timer(device)
    copy = timer.time(lambda: a.copy_(b), repeats)
    triad = timer.time(lambda: torch.add(b, c, alpha=3.0, out=a), repeats)
    return {"copy_bytes_per_s": 2 * 4 * n / copy, "triad_bytes_per_s": 3 * 4 * n / triad}


def _layer(case: LayerCase) -> Layer:
    """pipesim's block on one rank of the case's tensor-parallel group."""
    return transformer_block("block", case.arch, Parallelism(tensor=case.tensor))


def passes(case: LayerCase) -> dict[str, PassWork]:
    """pipesim's description of the block on one rank: its F, I and W passes."""
    work = _layer(case).work
    assert work is not None
    return dict(zip("FIW", work.passes(), strict=True))


def predict(case: LayerCase, accelerator: Accelerator, dtype: str) -> dict[str, float]:
    """pipesim's forward and backward (I + W) seconds on one rank, collectives left out,
    and the bytes it stashes."""
    layer = _layer(case)
    assert layer.work is not None
    f, i, w = layer.work.passes()
    b = case.microbatch_size
    return {
        "forward_s": pass_time_s(accelerator, f, b, dtype),
        "backward_s": pass_time_s(accelerator, i, b, dtype) + pass_time_s(accelerator, w, b, dtype),
        "stash_bytes": layer.activation_bytes * b,
    }


def measure(
    cases: list[LayerCase],
    device: torch.device,
    repeats: int,
    quick: bool,
    profile_kernels: bool = False,
) -> dict[str, Any]:
    """Everything this module measures, as one JSON-ready record."""
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    record: dict[str, Any] = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "dtype": str(dtype).removeprefix("torch."),
        "cases": [],
    }
    sizes = SQUARE_SIZES[:3] if quick else SQUARE_SIZES
    warm_up(device)
    _progress("square matmuls")
    record["square_matmuls"] = square_curve(device, dtype, sizes, repeats)
    _progress("bandwidth")
    record["bandwidth"] = bandwidth(device, (1 << 20) if quick else (2 << 30), repeats)
    _progress("memory-bound kernels")
    record["memory_kernels"] = memory_kernels(
        device, dtype, (1 << 14) if quick else (1 << 30), repeats
    )
    _progress("attention products")
    record["attention_matmuls"] = attention_matmuls(device, dtype, repeats, quick)
    for case in cases:
        _progress(case.label)
        entry: dict[str, Any] = {
            "label": case.label,
            "arch": {k: getattr(case.arch, k) for k in ("hidden", "heads", "ffn", "seq", "vocab")},
            "attention": case.arch.attention.value,
            "tensor": case.tensor,
            "microbatch_size": case.microbatch_size,
            "eager": measure_block(case, device, dtype, False, repeats),
        }
        if device.type == "cuda":
            try:
                entry["fused"] = measure_block(case, device, dtype, True, repeats)
            except Exception as error:  # torch.compile unavailable: say so, keep the rest
                entry["fused_error"] = f"{type(error).__name__}: {error}"[:300]
        if device.type == "cuda" and profile_kernels:
            entry["profile"] = kernel_profile(case, device, dtype, True)
        matmuls = []
        for pass_name, work in passes(case).items():
            for mm in work.matmuls:
                shape = mm.shape(case.microbatch_size)
                seconds = measure_matmul(shape, device, dtype, repeats)
                matmuls.append({"pass": pass_name, **_matmul_fields(mm, shape), "seconds": seconds})
        entry["matmuls"] = matmuls
        record["cases"].append(entry)
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return record


@dataclass(frozen=True)
class _Bandwidth:
    copy_bytes_per_s: float
    triad_bytes_per_s: float


@dataclass(frozen=True)
class _SquareMatmul:
    n: int
    flops: float
    flops_per_s: float


@dataclass(frozen=True)
class _MemoryKernel:
    name: str
    bytes_per_s: float


@dataclass(frozen=True)
class _BlockShape:
    hidden: int
    heads: int
    ffn: int
    seq: int


@dataclass(frozen=True)
class _BlockTimes:
    forward_s: float
    backward_s: float  # max(0, step - forward): 0 where the step took no longer
    stash_bytes: float | None = None  # CUDA only


@dataclass(frozen=True)
class _Block:
    label: str
    arch: _BlockShape
    attention: Attention
    tensor: int
    microbatch_size: int
    eager: _BlockTimes
    fused: _BlockTimes | None = None


@dataclass(frozen=True)
class LayerRecord:
    """What :func:`report` reads of a record :func:`measure` wrote (the rest is not read)."""

    device: str
    torch: str
    dtype: str
    bandwidth: _Bandwidth
    square_matmuls: tuple[_SquareMatmul, ...]
    memory_kernels: tuple[_MemoryKernel, ...]
    cases: tuple[_Block, ...]


# The most rows of each table a record may hold, checked before any is read (every row is
# reported; the blocks each predicted): measure writes 20 blocks, 9 square products and 12
# kernels, and a file of 100,000 rows, inside the input size limit, would take a minute.
MAX_RECORD_ROWS = 1_000

# Beyond the types: what the report divides by, and the shapes and counts of a block, must be
# > 0 (a backward may be 0: measure writes max(0, step - forward)); a record measures something.
RECORD_RULES = FieldRules(
    positive=frozenset(
        {
            "copy_bytes_per_s",
            "triad_bytes_per_s",
            "n",
            "flops",
            "flops_per_s",
            "bytes_per_s",
            "hidden",
            "heads",
            "ffn",
            "seq",
            "tensor",
            "microbatch_size",
            "forward_s",
            "stash_bytes",
        }
    ),
    non_empty=frozenset({"cases", "square_matmuls", "memory_kernels"}),
)


def layer_record(data: object) -> LayerRecord:
    """``data`` (a record's parsed JSON) as a :class:`LayerRecord`, strictly: a missing field, a
    value of the wrong kind, a zero or negative one where a record cannot hold it, or an unknown
    attention is a one-line :class:`PipesimError` naming the field and the value."""
    if isinstance(data, dict):
        for field in ("cases", "square_matmuls", "memory_kernels"):
            rows = data.get(field)
            if isinstance(rows, list) and len(rows) > MAX_RECORD_ROWS:
                raise PipesimError(
                    f"record.{field} holds {len(rows):,} rows, more than {MAX_RECORD_ROWS:,} "
                    "(measure writes a few dozen at most): not a record this module wrote"
                )
    return decode(data, LayerRecord, "record", RECORD_RULES)


def read_layer_record(path: Path, what: str = "--report") -> LayerRecord:
    """The record at ``path``, read as every input is (:func:`read_input`: size-limited, a
    device or a pipe read no further than the limit, a named pipe without a writer given up
    on), then :func:`layer_record`: anything wrong is one line naming ``what`` file it is."""
    where = f"{what} file {str(path)!r}"
    text = decode_text(read_input(path, what), where)
    try:
        data = json.loads(text)
    except RecursionError:
        raise PipesimError(f"{where}: not JSON (nested too deeply)") from None
    except ValueError as error:
        raise PipesimError(f"{where}: not JSON ({error})") from None
    try:
        return layer_record(data)
    except PipesimError as error:
        raise PipesimError(f"{where}: {_first_line(error)}") from None


def _ratio(numerator: float, denominator: float, where: str) -> float:
    """``numerator / denominator``, refused naming ``where`` when it overflows a float."""
    value = numerator / denominator
    if not math.isfinite(value):
        raise PipesimError(
            f"{where}: {numerator:g} / {denominator:g} overflows a float (a value far out of range)"
        )
    return value


def report(
    record: LayerRecord | dict[str, Any], accelerator: Accelerator, dtype: str = "bf16"
) -> list[str]:
    """A record beside pipesim's predictions for ``accelerator``, as Markdown tables: the
    square-product curve, the memory-bound kernels against the triad, and per block the
    forward, backward and stash, predicted over measured (the fused block where it ran).

    A record given as parsed JSON is read by :func:`layer_record` first; a block pipesim cannot
    describe (heads that do not divide its width, a tensor-parallel size that does not divide
    its heads) is a :class:`PipesimError` naming it."""
    if not isinstance(record, LayerRecord):
        record = layer_record(record)
    triad = record.bandwidth.triad_bytes_per_s
    copy = record.bandwidth.copy_bytes_per_s
    lines = [
        f"{record.device}, torch {record.torch}, {record.dtype}; "
        f"triad {triad / 1e12:.2f} TB/s, copy {copy / 1e12:.2f} TB/s",
        "",
        "| m = n = k | measured TFLOP/s | fraction of peak | pipesim's curve |",
        "| --- | --- | --- | --- |",
    ]
    peak = accelerator.peak(dtype)
    for row in record.square_matmuls:
        lines.append(
            f"| {row.n} | {row.flops_per_s / 1e12:.1f} | {row.flops_per_s / peak:.3f} "
            f"| {accelerator.matmul_fraction(row.flops):.3f} |"
        )
    lines += ["", "| memory-bound kernel | TB/s | of the triad |", "| --- | --- | --- |"]
    for index, kernel in enumerate(record.memory_kernels):
        rate = kernel.bytes_per_s
        of_triad = _ratio(rate, triad, f"record.memory_kernels[{index}].bytes_per_s")
        lines.append(f"| {kernel.name} | {rate / 1e12:.2f} | {of_triad:.2f} |")
    lines += [
        "",
        "| block | attention | forward ms: pipesim / measured | backward ms | step ratio "
        "| eager PyTorch step ratio | stash ratio |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for index, entry in enumerate(record.cases):
        where = f"record.cases[{index}]"
        shape = entry.arch
        try:  # a block does not read the vocabulary: one the tensor-parallel size divides
            arch = TransformerArchitecture(
                1,
                shape.hidden,
                shape.heads,
                shape.ffn,
                shape.seq,
                entry.tensor,
                attention=entry.attention,
            )
            case = LayerCase(entry.label, arch, entry.tensor, entry.microbatch_size)
            predicted = predict(case, accelerator, dtype)
        except PipesimError as error:
            raise PipesimError(f"{where}: {_first_line(error)}") from None
        measured = entry.fused or entry.eager
        eager = entry.eager
        step = predicted["forward_s"] + predicted["backward_s"]
        step_ratio = _ratio(step, measured.forward_s + measured.backward_s, where)
        stash = eager.stash_bytes
        if stash is None:
            lines.append(f"| {entry.label} | {entry.attention.value} | | | {step_ratio:.3f} | | |")
            continue
        eager_ratio = _ratio(step, eager.forward_s + eager.backward_s, f"{where}.eager")
        stash_ratio = _ratio(predicted["stash_bytes"], stash, f"{where}.eager.stash_bytes")
        lines.append(
            f"| {entry.label} | {entry.attention.value} "
            f"| {predicted['forward_s'] * 1e3:.2f} / {measured.forward_s * 1e3:.2f} "
            f"| {predicted['backward_s'] * 1e3:.2f} / {measured.backward_s * 1e3:.2f} "
            f"| {step_ratio:.3f} | {eager_ratio:.3f} | {stash_ratio:.3f} |"
        )
    return lines


def _first_line(error: BaseException) -> str:
    lines = str(error).splitlines()
    return lines[0] if lines else type(error).__name__


def _matmul_fields(mm: Matmul, shape: tuple[float, float, float, float]) -> dict[str, Any]:
    batch, m, n, k = shape
    return {"name": mm.name, "batch": batch, "m": m, "n": n, "k": k}


def _progress(what: str) -> None:
    sys.stderr.write(f"layer_timing: {what}\n")
    sys.stderr.flush()


def _small_case() -> LayerCase:
    arch = TransformerArchitecture(2, 64, 4, 256, 32, 128)
    return LayerCase("small T=2 b=2", arch, 2, 2)


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="python -m validation.layer_timing", description=__doc__)
    parser.add_argument("--out", type=Path, help="JSON file to write")
    parser.add_argument(
        "--report",
        type=Path,
        metavar="JSON",
        help="print a record written earlier beside pipesim's predictions, measuring nothing",
    )
    parser.add_argument("--hardware", default="h200", help="the spec to predict with (--report)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--quick", action="store_true", help="tiny shapes (a CPU smoke run)")
    parser.add_argument("--profile", action="store_true", help="each block kernel by kernel")
    parser.add_argument(
        "--cases", default="table-1", choices=("table-1", "table-1-flash", "both", "small")
    )
    args = parser.parse_args(argv)
    if args.report is not None:
        return _print_report(parser, args.report, args.hardware)
    if args.out is None:
        parser.error("--out is required to measure (or --report FILE to print one)")
    from application.outputs import output_path, write_text_atomically

    try:
        output_path(args.out, "--out", (".json",))  # refused before minutes of measuring
        device = torch.device(args.device)
    except (PipesimError, RuntimeError) as error:
        parser.error(str(error).splitlines()[0])
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device is available here; use --device cpu")
    if args.repeats < 1:
        parser.error(f"--repeats must be an integer >= 1, got {args.repeats}")
    if args.cases == "small" or args.quick:
        cases = [_small_case()]
    elif args.cases == "both":
        cases = table_1_cases() + table_1_cases(Attention.FLASH)
    else:
        flash = args.cases == "table-1-flash"
        cases = table_1_cases(Attention.FLASH if flash else Attention.EAGER)
    try:
        record = measure(cases, device, args.repeats, args.quick, args.profile)
    except KeyboardInterrupt:
        sys.stderr.write(f"{parser.prog}: interrupted (Ctrl-C); nothing written\n")
        return 130
    write_text_atomically(args.out, json.dumps(record, indent=1) + "\n", field="--out")
    _progress(f"wrote {args.out}")
    return 0


def _print_report(parser: ArgumentParser, path: Path, hardware_name: str) -> int:
    """``--report``: the record's tables on stdout (exit 0). A bad ``--hardware`` is the
    parser's one-line error; a record that cannot be read or reported is one line naming the
    file and the field, exit 2, with no usage: the options were right, the file is not."""
    from pipesim.hardware import resolve_hardware

    try:
        accelerator = resolve_hardware(hardware_name).accelerator
    except PipesimError as error:
        parser.error(f"--hardware: {_first_line(error)}")
    try:
        record = read_layer_record(path)  # its errors name the file
        try:
            lines = report(record, accelerator)
        except PipesimError as error:
            raise PipesimError(f"--report file {str(path)!r}: {_first_line(error)}") from None
    except PipesimError as error:
        sys.stderr.write(f"{parser.prog}: error: {short_values(_first_line(error))}\n")
        return EXIT_BAD_INPUT
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    from application.command_line import watching_stdout
    from application.lifetime import interrupts_in_one_line

    PROG = "python -m validation.layer_timing"
    raise SystemExit(watching_stdout(lambda: interrupts_in_one_line(main, PROG), PROG))


__all__ = [
    "BlockShard",
    "LayerCase",
    "LayerRecord",
    "layer_record",
    "measure",
    "predict",
    "read_layer_record",
    "report",
    "table_1_cases",
]
