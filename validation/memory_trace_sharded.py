"""A sharded-data-parallel (FSDP2: ZeRO-3, and ZeRO-2) GPT pipeline stage's memory, as PyTorch
accounts for it, next to the bytes FSDP2's rules say each term holds.

The stage of :mod:`validation.memory_trace` (an embedding and blocks, blocks and the output
layer, or all of them when K = 1) is wrapped as torchtitan wraps it: ``fully_shard`` on every
transformer block, then on the stage root, with ``MixedPrecisionPolicy(param_dtype=bf16,
reduce_dtype=fp32)`` and the sharded parameters in fp32 (the master weights), on a fake process
group of D ranks. One rank's part of a training step runs under
:class:`~torch._subclasses.fake_tensor.FakeTensorMode` and
:class:`~torch.distributed._tools.fsdp2_mem_tracker.FSDPMemTracker` (after a first, untracked
step that creates Adam's state: ``torch.optim.Adam``, foreach, on the DTensor shards); the peak
and every term at the peak are reported (:func:`trace`) next to :func:`expected`; with
``--compare``, next to pipesim's prediction instead (:func:`predict_sharded`, in the regimes
pipesim models: docs/reproductions/fsdp-memory.md).

The regimes (:class:`Regime`), as PyTorch 2.13 and torchtitan run them:

* ``pipeline``: the device's 1F1B order inside a pipeline (K > 1). torchtitan's
  ``reshard_after_forward`` policy "default" is False for blocks and root when PP is on.
  ``torch.distributed.pipelining`` (``backward_maybe_with_nosync``) sets
  ``set_is_last_backward(False)``, ``set_reshard_after_backward(False)`` and
  ``set_requires_gradient_sync(False)`` before *every* backward, the last one included, and
  reduces in a separate step after it (``perform_reduce_grad``: the three back to True,
  ``post_backward()`` on every parameter group, the root's final callback, the gradients divided
  by M). Then the optimizer step. ZeRO-2 inside a pipeline runs the same way.
* ``zero3-sync-every`` (K = 1, M micro-batches of gradient accumulation): torchtitan's default
  without PP (the blocks reshard after forward but the last; the root reshards too), and
  FSDP2's default gradient sync: a reduce-scatter after each micro-batch's backward.
* ``zero3-sync-last``: the same with ``set_requires_gradient_sync(False)`` on every micro-batch
  but the last (how users skip the reduce-scatter during accumulation).
* ``zero2``: FSDP2 expresses ZeRO-2 as ``reshard_after_forward=False`` everywhere and
  ``set_reshard_after_backward(False)`` on every micro-batch but the last, gradient sync on: the
  bf16 parameters are all-gathered once per step and stay unsharded through the accumulation
  (ZeRO-2's replicated working copy) while gradients are reduce-scattered into fp32 shards after
  each micro-batch. Unlike DeepSpeed's ZeRO-2 the bf16 copy is gathered at the step's first
  forward (not after the optimizer step) and freed by the last backward, so the optimizer step
  runs without it.

Two choices differ from :mod:`validation.memory_trace`, both to follow torchtitan and PyTorch's
pipeline schedule: the loss is computed outside the stage (the FSDP root module ends at the
logits), and a non-first stage frees each received input and its gradient after its backward
(MemTracker's module tracking otherwise keeps every received input, and its gradient, alive to
the end of the step). Gradients are set to None at the start of each step
(``optimizer.zero_grad()``, as torchtitan's train step does).

Each buffer is counted under the kind FSDP2 has given it by the end of the step (an all-gather
or reduce-scatter buffer is named at its collective, after it is filled; a bf16 gradient once
autograd has accumulated it; the fp32 unsharded accumulators, which FSDPMemTracker would count
as temporaries, are gradients here).
"""

from __future__ import annotations

import contextlib
import enum
import math
import sys
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, fields, replace
from functools import cache
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from pipesim.parallel.config import Parallelism, Recompute
from pipesim.schedules import Kind, build
from pipesim.workload.architecture import Attention, TransformerArchitecture
from pipesim.workload.catalogue import from_architecture
from pipesim.workload.model import Model
from validation.memory_trace import (
    DTYPE,
    MemoryTerms,
    TraceCase,
    _Call,
    _Stage,
    backward,
    error,
    simulated_memory,
    stage_name,
)

MASTER_DTYPE = torch.float32
MASTER_BYTES = 4  # the sharded fp32 parameters
PARAM_BYTES = 2  # the all-gathered bf16 copy (param_dtype) and autograd's bf16 gradients
REDUCE_BYTES = 4  # reduce_dtype: fp32 gradient shards, unsharded accumulators, reduce buffers
ADAM_STATE_BYTES = 8  # exp_avg and exp_avg_sq in fp32, sharded
STEP_BYTES = 4  # Adam's per-tensor step counter (a float32 scalar)
ADAM_TEMPORARY_BYTES = 4  # the foreach step's square root of exp_avg_sq, fp32 like the shards
_TOTAL = "Total"


class Regime(enum.Enum):
    """How the sharded stage runs its micro-batches (see the module's docstring)."""

    PIPELINE = "pipeline"
    SYNC_EVERY = "zero3-sync-every"
    SYNC_LAST = "zero3-sync-last"
    ZERO2 = "zero2"


class Phase(enum.Enum):
    """The part of the step a moment belongs to."""

    FORWARD = "forward"
    BACKWARD = "backward"
    REDUCE = "reduce"  # the pipeline's reduce after its last backward
    OPTIMIZER = "optimizer"


@dataclass(frozen=True)
class Moment:
    """Where in the step a peak falls.

    Attributes:
        action: the running action (``0B1``), or ``reduce`` or ``optimizer``.
        phase: its phase.
        steady: a backward has completed before it, and it is not the last backward of a
            regime that syncs or reshards only then (``zero3-sync-last``, ``zero2``).
        last_backward: it is the step's last backward.
    """

    action: str
    phase: Phase
    steady: bool
    last_backward: bool = False


@dataclass(frozen=True)
class ShardedCase:
    """One rank of one stage to trace.

    Attributes:
        name: a label.
        stage: the stage and its step (K, which device, blocks, b, M) as in ``memory_trace``.
        data: D, the ranks the parameters are sharded over.
        regime: how its micro-batches run.
    """

    name: str
    stage: TraceCase
    data: int
    regime: Regime

    def __post_init__(self) -> None:
        if self.data < 2:
            raise ValueError(f"data: sharding needs at least 2 ranks, got {self.data}")
        if self.regime is not Regime.PIPELINE and self.stage.devices != 1:
            raise ValueError(
                f"regime: {self.regime.value} runs without a pipeline (K = 1), "
                f"got K = {self.stage.devices}"
            )


@dataclass(frozen=True)
class ShardedTerms:
    """A rank's memory by term (bytes). ``activations`` is everything else: the stashed
    activations and what the running action holds (its temporaries, a reduce-scatter's output
    on its way into the gradient shard, the optimizer step's temporaries)."""

    sharded_params: float  # fp32 master shards
    unsharded_params: float  # all-gathered bf16 copies present
    sharded_grads: float  # fp32 gradient shards
    unsharded_grads: float  # autograd's bf16 gradients and fp32 unsharded accumulators
    optimizer: float  # Adam's state, without its step's temporaries
    all_gather: float  # flat bf16 all-gather buffers (in flight, kept or prefetched)
    reduce_scatter: float  # flat fp32 reduce-scatter inputs
    activations: float
    peak: float

    @property
    def weights(self) -> float:
        """Sharded fp32 and unsharded bf16 parameters."""
        return self.sharded_params + self.unsharded_params

    @property
    def gradients(self) -> float:
        """Sharded and unsharded gradients."""
        return self.sharded_grads + self.unsharded_grads

    def memory_terms(self) -> MemoryTerms:
        """The terms as :class:`~validation.memory_trace.MemoryTerms` reports them; the
        collective buffers count with the activations and transients."""
        return MemoryTerms(
            weights=self.weights,
            gradients=self.gradients,
            optimizer=self.optimizer,
            activations=self.activations + self.all_gather + self.reduce_scatter,
            peak=self.peak,
        )


TERMS = tuple(f.name for f in fields(ShardedTerms))
RULED = TERMS[:7]  # the terms expected() predicts


@dataclass(frozen=True)
class Traced:
    """A traced peak: its terms and its moment."""

    terms: ShardedTerms
    moment: Moment


@dataclass(frozen=True)
class Expectation:
    """What FSDP2's rules say a moment holds: ``resident`` bytes (there throughout such a
    moment) and at most ``in_flight`` more (what comes and goes within it: one group's
    gradients before they are upcast or reduced, one group's collective buffers, the running
    group's parameters). ``activations`` and ``peak`` are NaN: they are no rule of sharding."""

    resident: ShardedTerms
    in_flight: ShardedTerms

    def holds(self, term: str, traced: ShardedTerms) -> bool:
        """``resident <= traced <= resident + in_flight`` for one term or for ``weights`` or
        ``gradients``."""
        low, extra, seen = (getattr(t, term) for t in (self.resident, self.in_flight, traced))
        return bool(low <= seen <= low + extra)


# -- the stage --------------------------------------------------------------------------------


class _LogitsStage(_Stage):
    """:class:`~validation.memory_trace._Stage` whose last stage ends at the logits: torchtitan
    (and the pipeline schedule's ``loss_fn``) computes the loss outside the FSDP root module, so
    the root's post-forward (which frees the last all-gather buffer) comes before it."""

    def forward(self, x: Any, targets: Any = None) -> Any:
        if self.embedding is not None and self.positions is not None:
            positions = torch.arange(x.shape[1])
            x = F.dropout(
                self.embedding(x) + self.positions(positions), self.dropout, training=True
            )
        for block in self.blocks:
            x = block(x)
        if self.norm is not None and self.output is not None:
            return self.output(self.norm(x))
        return x


def _loss(logits: Any, targets: Any) -> Any:
    logits = logits.float()
    return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


def _build_stage(case: ShardedCase) -> _LogitsStage:
    """The stage with fp32 parameters (built in bf16 as memory_trace builds it, then cast)."""
    tc = case.stage
    stage = _LogitsStage(
        tc.traced_arch, tc.recompute, tc.blocks, tc.device == 0, tc.device == tc.devices - 1
    )
    for module in stage.modules():
        for name, param in list(module.named_parameters(recurse=False)):
            setattr(module, name, nn.Parameter(param.detach().to(MASTER_DTYPE)))
    return stage


def _reshard_after_forward(regime: Regime, block: int, blocks: int) -> tuple[bool, bool]:
    """(this block's, the root's) ``reshard_after_forward``: torchtitan's "default" policy
    (blocks: False with PP, else all but the last; root: ``not pp_enabled``), and False
    everywhere for ZeRO-2."""
    if regime in (Regime.PIPELINE, Regime.ZERO2):
        return False, False
    return block < blocks - 1, True


@dataclass(frozen=True)
class StageSizes:
    """A stage's parameter counts (elements, each tensor's first dimension padded to a multiple
    of D as FSDP2 shards it)."""

    total: int  # P
    root: int  # the root group: embeddings and/or the final norm and output layer
    head: int  # the root's parameters after the blocks (norm, output): first in backward
    block: int  # one transformer block, a group of its own
    tensors: int  # parameter tensors (Adam keeps a step counter for each)


def stage_sizes(case: ShardedCase) -> StageSizes:
    """``case``'s parameter counts, from its stage built on the meta device."""
    with torch.device("meta"):
        stage = _build_stage(case)

    def padded(params: Iterable[nn.Parameter]) -> int:
        return sum(
            math.ceil(p.shape[0] / case.data) * case.data * (p.numel() // p.shape[0])
            for p in params
        )

    total, block = padded(stage.parameters()), padded(stage.blocks[0].parameters())
    head = sum(padded(m.parameters()) for m in (stage.norm, stage.output) if m is not None)
    return StageSizes(
        total=total,
        root=total - block * len(stage.blocks),
        head=head,
        block=block,
        tensors=len(list(stage.parameters())),
    )


# -- what to expect -----------------------------------------------------------------------------


def expected(case: ShardedCase, moment: Moment) -> Expectation:
    """FSDP2's bytes at ``moment``, from first principles (P: the stage's parameters, P_b a
    block's, P_r the root group's, P_h its norm and output layer; G = max(P_r, P_b) the
    largest group):

    * always: fp32 shards 4·P/D; Adam's two fp32 moments 8·P/D plus 4 bytes per tensor.
    * ``pipeline``: every group stays unsharded from its first all-gather (the first forward)
      to the reduce after the last backward: 2·P of bf16 in steady state. Without gradient sync
      FSDP2 upcasts each group's bf16 gradient to a fp32 unsharded accumulator at its
      post-backward (``to_accumulated_grad_if_needed``) and adds later ones into it: 4·P from
      the end of the first backward, no gradient shard until the reduce, no collective buffer.
    * ``zero2``: 2·P unsharded from the first forward to the last backward; fp32 gradient
      shards 4·P/D after the first backward.
    * ``zero3-*``: the running group unsharded, at most the root and a block 2·(P_r + P_b) (the
      root from its pre-forward to its post-forward and again through the backward; the last
      block is not resharded after forward, and is the first to run backward); the flat
      all-gather buffers: in forward the previous group's is kept until the next copy-out (and
      the last until the root's post-forward), 2·(P_b + G); in backward the next block's
      prefetch, 2·G. Gradients: fp32 shards 4·P/D (``sync-every``) or fp32 unsharded
      accumulators 4·P (``sync-last``).
    * in any backward: autograd's bf16 gradients of the running block and of the head (which
      wait for the root's post-backward at the backward's end), or all the root's there:
      2·max(P_h + P_b, P_r); with sync, one reduce-scatter input kept, 4·G.
    * the optimizer step: the shards, fp32 gradient shards 4·P/D, Adam's state.

    Outside the steady state (before the first backward has completed, the last backward of a
    regime that syncs or reshards only then, the pipeline's reduce) a term that is changing
    is counted in flight, from 0."""
    z = stage_sizes(case)
    p, d, regime, phase = z.total, case.data, case.regime, moment.phase
    group = max(z.root, z.block)
    bf16_grads = PARAM_BYTES * max(z.head + z.block, z.root)
    low = dict.fromkeys(TERMS, 0.0)
    high = dict.fromkeys(TERMS, 0.0)
    low["sharded_params"] = MASTER_BYTES * p / d
    low["optimizer"] = ADAM_STATE_BYTES * p / d + STEP_BYTES * z.tensors
    shards, accumulators = REDUCE_BYTES * p / d, REDUCE_BYTES * p
    if phase is Phase.OPTIMIZER:
        low["sharded_grads"] = shards
    elif phase is Phase.REDUCE:
        high.update(
            unsharded_params=PARAM_BYTES * p,
            unsharded_grads=accumulators,
            sharded_grads=shards,
            reduce_scatter=REDUCE_BYTES * group,
        )
    elif regime in (Regime.PIPELINE, Regime.ZERO2):
        held = low if moment.steady else high
        held["unsharded_params"] = PARAM_BYTES * p
        if regime is Regime.PIPELINE:
            held["unsharded_grads"] = accumulators
        else:
            held["sharded_grads"] = shards
            if phase is Phase.BACKWARD:
                high["reduce_scatter"] = REDUCE_BYTES * group
        if not moment.steady:
            high["all_gather"] = PARAM_BYTES * (z.block + group)
    else:
        high["unsharded_params"] = PARAM_BYTES * (z.root + z.block)
        held = low if moment.steady else high
        if regime is Regime.SYNC_EVERY:
            held["sharded_grads"] = shards
        else:
            held["unsharded_grads"] = accumulators
            if moment.last_backward:
                high["sharded_grads"] = shards
        if phase is Phase.FORWARD:
            high["all_gather"] = PARAM_BYTES * (z.block + group)
        else:
            high["all_gather"] = PARAM_BYTES * group
            if regime is Regime.SYNC_EVERY or moment.last_backward:
                high["reduce_scatter"] = REDUCE_BYTES * group
    if phase is Phase.BACKWARD:
        high["unsharded_grads"] += bf16_grads
    nan = dict(activations=math.nan, peak=math.nan)
    return Expectation(
        resident=ShardedTerms(**{**low, **nan}), in_flight=ShardedTerms(**{**high, **nan})
    )


# -- tracing ------------------------------------------------------------------------------------


@contextlib.contextmanager
def fake_process_group(world_size: int) -> Iterator[None]:
    """A fake default process group of ``world_size`` ranks (this process is rank 0), torn down
    on exit; one that exists already is used as it is if it is a fake group of that size."""
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        backend, size = dist.get_backend(), dist.get_world_size()
        if backend == "fake" and size == world_size:
            yield
            return
        raise RuntimeError(
            f"a {backend} process group of {size} ranks exists already; the sharded trace "
            f"needs a fake one of {world_size}"
        )
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world_size)
    try:
        yield
    finally:
        dist.destroy_process_group()


@cache
def _tracker_type() -> type[Any]:
    """FSDPMemTracker that keeps, at each new peak, every live buffer and the moment, and
    counts the buffers made while ``accumulating`` as unsharded gradients."""
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker, _FSDPRefType

    class Tracker(FSDPMemTracker):  # type: ignore[no-untyped-call]
        def __init__(self, *args: Any) -> None:
            super().__init__(*args)
            self.moment = Moment("", Phase.FORWARD, steady=False)
            self.peak_moment = self.moment
            self.peak_total = -1
            self.peak_buffers: list[tuple[Any, int]] = []
            self.accumulating = False

        def _track(self, reftype: Any, t: torch.Tensor) -> None:
            if self.accumulating:
                reftype = _FSDPRefType.UNSHARDED_GRAD
            super()._track(reftype, t)

        def _update_peak_stats(self, peak_state: Any) -> None:
            super()._update_peak_stats(peak_state)
            (now,) = self._curr_mem_snap.values()
            if now[_TOTAL] > self.peak_total:
                self.peak_total, self.peak_moment = now[_TOTAL], self.moment
                self.peak_buffers = [
                    (winfo, winfo.mem_consumed)
                    for winfo, _ in self._WINFO.values()  # type: ignore[no-untyped-call]
                    if winfo.mem_consumed
                ]

        def name_gradient(self, param: torch.Tensor) -> None:
            if param.grad is not None:
                self._update_and_maybe_create_winfos(
                    param.grad, _FSDPRefType.UNSHARDED_GRAD, update_existing=True
                )

        def peak_terms(self) -> dict[str, float]:
            """The buffers live at the peak by the kind each has been given since."""
            terms = {str(kind.value): 0.0 for kind in _FSDPRefType}
            for winfo, size in self.peak_buffers:
                terms[str(winfo.reftype.value)] += size
            terms[_TOTAL] = float(self.peak_total)
            return terms

    return Tracker


@contextlib.contextmanager
def _name_gradients(stage: nn.Module, tracker: Any) -> Iterator[None]:
    """Count FSDP2's fp32 unsharded accumulators (made in ``to_accumulated_grad_if_needed``)
    and the bf16 gradients autograd accumulates into the unsharded parameters as gradients."""
    from torch.distributed.fsdp import fully_shard

    state = fully_shard.state(stage)  # type: ignore[attr-defined]
    fsdp_params = [
        fsdp_param
        for st in state._state_ctx.all_states
        for group in st._fsdp_param_groups
        for fsdp_param in group.fsdp_params
    ]
    handles = []
    for fsdp_param in fsdp_params:

        def upcast(original: Any = fsdp_param.to_accumulated_grad_if_needed) -> None:
            tracker.accumulating = True
            try:
                original()
            finally:
                tracker.accumulating = False

        fsdp_param.to_accumulated_grad_if_needed = upcast
        handles.append(
            fsdp_param._unsharded_param.register_post_accumulate_grad_hook(tracker.name_gradient)
        )
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()
        for fsdp_param in fsdp_params:
            del fsdp_param.to_accumulated_grad_if_needed


def _by_name(snapshot: dict[torch.device, dict[Any, int]]) -> dict[str, float]:
    """A tracker snapshot of one device by the names of its kinds (``Sharded Param``...)."""
    (terms,) = snapshot.values()
    return {str(getattr(key, "value", key)): float(value) for key, value in terms.items()}


def trace(case: ShardedCase) -> Traced:
    """The traced peak of ``case``'s rank over a step and its optimizer step, a first step run
    before, untracked, so that the optimizer's state exists."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard

    tc, regime = case.stage, case.regime
    arch = tc.traced_arch
    first, last = tc.device == 0, tc.device == tc.devices - 1
    order = build("1f1b", tc.devices, tc.microbatches).device_actions[tc.device]
    backwards = sum(1 for action in order if action.kind is not Kind.F)
    # ZeRO-2 reshards, and sync-last reduces, only in the last backward
    policy = MixedPrecisionPolicy(param_dtype=DTYPE, reduce_dtype=torch.float32)
    tracker: Any = None

    def mark(moment: Moment) -> None:
        if tracker is not None:
            tracker.moment = moment

    with fake_process_group(case.data):
        mesh = init_device_mesh("cpu", (case.data,))  # outside FakeTensorMode: it reads ranks
        with FakeTensorMode():
            stage = _build_stage(case)
            for i, block in enumerate(stage.blocks):
                after, _ = _reshard_after_forward(regime, i, len(stage.blocks))
                fully_shard(block, mesh=mesh, mp_policy=policy, reshard_after_forward=after)
            _, root_after = _reshard_after_forward(regime, 0, len(stage.blocks))
            fully_shard(stage, mesh=mesh, mp_policy=policy, reshard_after_forward=root_after)
            if not isinstance(stage, FSDPModule):
                raise TypeError(f"fully_shard returned a {type(stage).__name__}")
            optimizer = torch.optim.Adam(stage.parameters(), lr=1e-4, foreach=True)
            b, s, h = tc.microbatch_size, arch.seq, arch.hidden

            def reduce_after_pipeline() -> None:
                """torch.distributed.pipelining's ``perform_reduce_grad``."""
                stage.set_is_last_backward(True)
                stage.set_reshard_after_backward(True)
                stage.set_requires_gradient_sync(True)
                state = fully_shard.state(stage)  # type: ignore[attr-defined]
                for st in state._state_ctx.all_states:
                    for group in st._fsdp_param_groups:
                        group.post_backward()
                state._root_post_backward_final_callback()
                for param in stage.parameters():
                    if param.grad is not None:
                        param.grad.div_(tc.microbatches)

            def step() -> None:
                optimizer.zero_grad()
                pending: dict[int, tuple[Any, Any]] = {}
                done = 0
                for action in order:
                    m = action.microbatch
                    if action.kind is Kind.F:
                        mark(Moment(str(action), Phase.FORWARD, steady=done > 0))
                        if first:
                            x = torch.randint(0, arch.vocab, (b, s))
                        else:
                            x = torch.randn(b, s, h, dtype=DTYPE, requires_grad=True)
                        out = _Call(stage)(x)
                        if last:
                            out = _loss(out, torch.randint(0, arch.vocab, (b, s)))
                        else:
                            out.data = torch.empty((1,), dtype=out.dtype)  # sent, then freed
                        pending[m] = (x, out)
                        del x, out
                        continue
                    done += 1
                    final = done == backwards
                    steady = done > 1 and not (final and regime in (Regime.SYNC_LAST, Regime.ZERO2))
                    mark(Moment(str(action), Phase.BACKWARD, steady, final))
                    if regime is Regime.PIPELINE:
                        stage.set_is_last_backward(False)
                        stage.set_reshard_after_backward(False)
                        stage.set_requires_gradient_sync(False)
                    elif regime is Regime.SYNC_LAST:
                        stage.set_requires_gradient_sync(final)
                    elif regime is Regime.ZERO2:
                        stage.set_reshard_after_backward(final)
                    x, out = pending.pop(m)
                    grad = torch.ones_like(out) if last else torch.ones(b, s, h, dtype=DTYPE)
                    backward(out, grad)
                    if not first:  # the input's gradient is sent back, then both are freed
                        x.grad = None
                        x.data = torch.empty((1,), dtype=x.dtype)
                    del x, out, grad
                if regime is Regime.PIPELINE:
                    mark(Moment("reduce", Phase.REDUCE, steady=False))
                    reduce_after_pipeline()
                mark(Moment("optimizer", Phase.OPTIMIZER, steady=True))
                optimizer.step()

            step()  # the optimizer's state exists from here on, as in every later step
            tracker = _tracker_type()(stage, optimizer)
            with _name_gradients(stage, tracker), tracker, warnings.catch_warnings():
                # each micro-batch's _Call parent is gone by its backward: the module tracker
                # warns once per hook it then skips (the memory is counted all the same)
                warnings.filterwarnings("ignore", message="Module is None", category=UserWarning)
                step()
                static = _by_name(tracker.get_tracker_snapshot("current"))
            at_peak = tracker.peak_terms()
    if at_peak[_TOTAL] != _by_name(tracker.get_tracker_snapshot("peak"))[_TOTAL]:
        raise RuntimeError("the buffers kept at the peak do not add up to the tracker's peak")
    terms = dict(
        sharded_params=at_peak["Sharded Param"],
        unsharded_params=at_peak["Unsharded Param"],
        sharded_grads=at_peak["Sharded Grad"],
        unsharded_grads=at_peak["Unsharded Grad"],
        optimizer=static["OptState"],  # the state; its step's temporaries are activations
        all_gather=at_peak["All Gather"],
        reduce_scatter=at_peak["Reduce Scatter"],
    )
    peak = at_peak[_TOTAL]
    return Traced(
        ShardedTerms(**terms, activations=peak - sum(terms.values()), peak=peak),
        tracker.peak_moment,
    )


# -- pipesim's figure ----------------------------------------------------------------------------

ZERO = {Regime.PIPELINE: 3, Regime.SYNC_EVERY: 3, Regime.ZERO2: 2}
"""The regimes pipesim models and their ZeRO stage; ``zero3-sync-last`` (ZeRO-3 without a
pipeline, gradient sync turned off but in the last micro-batch) is not one of them: pipesim's
rule syncs every micro-batch whenever there is no pipeline."""


@dataclass(frozen=True)
class Comparable:
    """A rank's memory in the terms both sides have (bytes): weights with the fp32 master
    weights, gradients, the optimizer's state, and the rest of the peak (activations, the
    running action's transients, collective buffers, the optimizer step's temporaries)."""

    weights: float
    gradients: float
    optimizer: float
    activations: float
    peak: float


def sharded_model(case: ShardedCase) -> Model:
    """The traced stage's model as pipesim reads it: every stage's blocks, untied output layer
    (``_Stage`` keeps its own), bf16 weights (FSDP2's ``param_dtype``), fp32 gradients
    (``reduce_dtype``: FSDP2 accumulates and reduces in fp32), Adam's two fp32 moments, fp32
    master weights (the shards), the foreach step's fp32 square root."""
    arch = replace(case.stage.traced_arch, tied_embeddings=False)
    return from_architecture(
        case.name,
        arch,
        dtype="bf16",
        default_batch=case.stage.microbatch_size * case.stage.microbatches,
        description="a traced GPT under FSDP2",
        weight_bytes=PARAM_BYTES,
        gradient_bytes=REDUCE_BYTES,
        optimizer_bytes=ADAM_STATE_BYTES,
        master_weight_bytes=MASTER_BYTES,
        optimizer_temporary_bytes=ADAM_TEMPORARY_BYTES,
    )


def predict_sharded(case: TraceCase, regime: Regime, data: int) -> Comparable:
    """pipesim's peak of ``case``'s device with ``Parallelism(zero=3 or 2, data=D)`` (the
    default ``reshard_after_forward``), 1F1B on K devices (``pipeline``: K = 2; otherwise
    K = 1), term by term."""
    if regime not in ZERO:
        raise ValueError(f"regime: pipesim does not model {regime.value}")
    sharded = ShardedCase(case.name, case, data, regime)
    parallelism = Parallelism(
        recompute=Recompute.parse(case.recompute), zero=ZERO[regime], data=data
    )
    memory = simulated_memory(case, parallelism, sharded_model(sharded))
    terms = memory.breakdown()
    return Comparable(
        weights=terms["weights"] + terms["master_weights"],
        gradients=terms["gradients"],
        optimizer=terms["optimizer_state"],
        activations=terms["activations"] + terms["transient"],
        peak=memory.peak_bytes,
    )


def traced_comparable(traced: Traced) -> Comparable:
    """The traced terms as :class:`Comparable` has them."""
    t = traced.terms
    return Comparable(
        weights=t.weights,
        gradients=t.gradients,
        optimizer=t.optimizer,
        activations=t.activations + t.all_gather + t.reduce_scatter,
        peak=t.peak,
    )


COMPARED = ("weights", "gradients", "optimizer", "activations")
_COMPARED_HEADS = ("weights+master", "gradients", "optimizer", "activations+transients")


def compare_table(rows: list[tuple[ShardedCase, Traced, Comparable | None]]) -> str:
    """Markdown: per case the traced and pipesim's peak (MiB), the error, and each term traced
    / pipesim (MiB); a regime pipesim does not model has no prediction."""
    mib = 2.0**20
    head = ["case", "traced peak", "pipesim peak", "error"]
    head += [f"{name} traced / pipesim" for name in _COMPARED_HEADS]
    lines = ["| " + " | ".join(head) + " |", "| --- |" + " ---: |" * (len(head) - 1)]
    for case, traced, predicted in rows:
        seen = traced_comparable(traced)
        cells = [case.name, f"{seen.peak / mib:.2f}"]
        if predicted is None:
            cells += ["not modelled", ""]
            cells += [f"{getattr(seen, term) / mib:.2f} / -" for term in COMPARED]
        else:
            cells += [f"{predicted.peak / mib:.2f}", f"{error(seen, predicted):+.1%}"]
            cells += [
                f"{getattr(seen, term) / mib:.2f} / {getattr(predicted, term) / mib:.2f}"
                for term in COMPARED
            ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def compare_main() -> int:
    """Trace every case, predict the ones pipesim models, and print the comparison."""
    rows: list[tuple[ShardedCase, Traced, Comparable | None]] = []
    for case in cases():
        traced = trace(case)
        predicted = (
            predict_sharded(case.stage, case.regime, case.data) if case.regime in ZERO else None
        )
        rows.append((case, traced, predicted))
    sys.stdout.write("MiB per rank, terms at the traced and at pipesim's peak\n\n")
    sys.stdout.write(compare_table(rows) + "\n")
    return 0


# -- the cases and the table -------------------------------------------------------------------

# (label, hidden, heads, sequence, vocabulary, blocks per stage, b, M)
SHAPES = (
    ("h256", 256, 4, 128, 1000, 2, 2, 4),
    ("h512", 512, 8, 256, 2000, 2, 1, 4),
)
DATA = (2, 4)


def cases(shapes: tuple[tuple[Any, ...], ...] = SHAPES) -> Iterator[ShardedCase]:
    """For each shape and D: the first and the last stage of a 2-stage pipeline, and the
    whole model (K = 1) in each regime of gradient accumulation."""
    for label, hidden, heads, seq, vocab, blocks, b, m in shapes:
        arch = TransformerArchitecture(
            2 * blocks, hidden, heads, 4 * hidden, seq, vocab, attention=Attention.FLASH
        )
        for data in DATA:
            runs = [(2, 0, Regime.PIPELINE), (2, 1, Regime.PIPELINE)]
            runs += [(1, 0, r) for r in (Regime.SYNC_EVERY, Regime.SYNC_LAST, Regime.ZERO2)]
            for devices, device, regime in runs:
                where = f"K={devices} {stage_name(device, devices)}" if devices > 1 else "K=1"
                name = f"{label} D={data} {where} {regime.value}"
                stage = TraceCase(name, arch, "none", devices, device, blocks, b, m)
                if devices == 1:  # the whole model: the embedding and the output layer
                    stage = replace(stage, blocks=2 * blocks)
                yield ShardedCase(name, stage, data, regime)


def table(rows: list[tuple[ShardedCase, Traced, Expectation]]) -> str:
    """Markdown: per case and term the traced bytes, the resident bytes expected, the most
    expected (resident and in flight), and the traced minus the resident in % of the traced
    peak; ``*`` marks a term outside [expected, up to]. ``activations`` is the rest of the peak
    (MemoryTerms' activations are it and the two collective buffers)."""
    head = "| case (peak in) | term | traced | expected | up to | diff, % of peak |"
    lines = [head, "| --- | --- | ---: | ---: | ---: | ---: |"]
    for case, traced, expectation in rows:
        label = f"{case.name} ({traced.moment.action})"
        peak = traced.terms.peak
        for term in (*RULED, "weights", "gradients", "activations", "peak"):
            seen = getattr(traced.terms, term)
            low = getattr(expectation.resident, term)
            high = low + getattr(expectation.in_flight, term)
            cells = [label, term, f"{seen:,.0f}"]
            if math.isnan(low):
                cells += ["", "", ""]
            else:
                mark = "" if expectation.holds(term, traced.terms) else " *"
                diff = (seen - low) / peak
                cells += [f"{low:,.0f}", f"{high:,.0f}", f"{diff:+.1%}{mark}"]
            lines.append("| " + " | ".join(cells) + " |")
            label = ""
    return "\n".join(lines)


def main() -> int:
    """Trace every case and print the table; 1 if a term falls outside its expectation."""
    rows = []
    for case in cases():
        traced = trace(case)
        rows.append((case, traced, expected(case, traced.moment)))
    sys.stdout.write(table(rows) + "\n")
    checked = (*RULED, "weights", "gradients")
    return 0 if all(e.holds(t, tr.terms) for _, tr, e in rows for t in checked) else 1


if __name__ == "__main__":
    sys.exit(compare_main() if "--compare" in sys.argv[1:] else main())
