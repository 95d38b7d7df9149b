"""The planner's search space: every (T, K, D, schedule, v, M, b, remat, recompute, ZeRO,
sequence parallelism) that the model and the schedule can take, for N devices and a global
batch B.

T x K x D = N: T is the tensor-parallel size (a divisor of the node's devices that splits the
model's heads, key/value heads, MLP and vocabulary evenly; 1 for a model given as layers),
K the pipeline depth (at most the model's layers), D = N / (T·K) the data-parallel replicas;
each replica takes B / D samples per step as M micro-batches of b samples. Schedules with chunks
take v in ``chunk_options`` (interleaved) or their fixed v (V-shaped); re-materialization (the
stage-level recomputation) is tried where the schedule supports it, layer-level recomputation
(none, selective, full, and full for the first N blocks of each stage) on models given by their
architecture, full recomputation (of every block or of the first N) only with a full backward;
ZeRO-1 where D > 1; sequence parallelism where T > 1. One pipeline device (K = 1) is data and
tensor parallelism with gradient accumulation: every flush schedule is the same there, so only
1F1B is kept.

Recomputing the first N blocks of each stage (Megatron-LM's ``--recompute-method block``) is
not one dimension more: ``layers`` (:data:`RECOMPUTE_LAYERS`) stands for every N, and the
planner resolves it per configuration to the fewest N that fit memory (more N only adds
recomputation; :meth:`pipesim.plan.planner.PlanContext.evaluate_all`). A number given instead
is searched as it is, on the shapes where every partition has a stage of N blocks to recompute
(N <= ceil(blocks / stages)).

Asynchronous update rules (PipeDream-2BW, PipeDream) change what the optimizer computes: they
are searched only when named, and every plan that uses one says so.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from pipesim.schedules import schedule_info, unsupported_reason
from pipesim.synthesis.synthesis import SYNTH_NAME

DEFAULT_SCHEDULES = (
    "gpipe",
    "1f1b",
    "interleaved-1f1b",
    "zb-h1",
    "zb-h2",
    "zbv",
)
"""The synchronous (flush) schedules the planner searches unless told otherwise."""

MODEL_COPY_SCHEDULES = ("dualpipe",)
"""Schedules that keep two copies of the model (DualPipe): searched over the model's K stages
(the first copy's placement), each copy's stage costing its model stage's; searched only when
named: where the balanced partition overflows, the memory-aware search weighs one copy's stage
per device, so its partition is checked exactly and may be refused where another would fit."""

ASYNC_SCHEDULES = ("pipedream-2bw", "pipedream")
"""Schedules whose weight updates are asynchronous (stale weights): searched only when named."""

RECOMPUTE_LAYERS = "layers"
"""The recompute token for the first N blocks of each stage fully recomputed, N chosen per
configuration (the fewest that fit memory)."""

DEFAULT_RECOMPUTE = ("none", "selective", "full", RECOMPUTE_LAYERS)
SPLIT_BACKWARD = ("zb-h1", "zb-h2", "zbv", "dualpipev", "dualpipe")


def recompute_layers(recompute: str) -> int | None:
    """N of a recompute label that recomputes the first N blocks of each stage (``3``); None
    for ``none``, ``selective``, ``full`` and :data:`RECOMPUTE_LAYERS` (no N yet)."""
    return int(recompute) if recompute.isascii() and recompute.isdigit() else None


def recomputes_in_full(recompute: str) -> bool:
    """True when a recompute label re-runs whole layers in the backward (``full``, a count,
    :data:`RECOMPUTE_LAYERS`): refused with re-materialization and with a split backward (W
    would need the inputs full recomputation frees)."""
    return recompute in ("full", RECOMPUTE_LAYERS) or recompute_layers(recompute) is not None


@dataclass(frozen=True)
class Candidate:
    """One configuration of the search.

    Attributes:
        devices: K, pipeline depth.
        data_parallel: D = N / (T·K) replicas.
        schedule: registered schedule name.
        chunks: v.
        microbatches: M per replica and step.
        microbatch_size: b samples per micro-batch.
        remat: re-materialization (the stage-level recomputation).
        memory_limit: for a synthesised schedule (``synth``), the micro-batches in flight it
            was made for; None for a registered one.
        tensor: T, tensor-parallel size.
        sequence_parallel: sequence parallelism in the tensor-parallel group.
        recompute: layer-level recomputation, ``none``, ``selective``, ``full``, or a count N
            (the first N blocks of each stage fully recomputed, as ``--recompute N``); in the
            search space also :data:`RECOMPUTE_LAYERS`, resolved to a count per configuration.
        zero: the ZeRO stage, 0 to 3.
        context: CP, context-parallel ranks per sample.
        expert: EP, expert-parallel ranks of each MoE layer.
    """

    devices: int
    data_parallel: int
    schedule: str
    chunks: int
    microbatches: int
    microbatch_size: int
    remat: bool
    memory_limit: int | None = None
    tensor: int = 1
    sequence_parallel: bool = False
    recompute: str = "none"
    zero: int = 0
    context: int = 1
    expert: int = 1

    @property
    def schedule_label(self) -> str:
        """The schedule's name, with the limit of a synthesised one (``synth N=3``); without a
        pipeline (K=1) ``no pipeline`` with the order its micro-batches run in (1F1B's: one
        at a time, the gradient accumulated; GPipe's: every forward first), since the
        schedule's name alone reads as a pipeline that is not there."""
        name = (
            self.schedule
            if self.memory_limit is None
            else (f"{self.schedule} N={self.memory_limit}")
        )
        return f"no pipeline ({name})" if self.devices == 1 else name

    @property
    def stages(self) -> int:
        """S = K·v."""
        return self.devices * self.chunks

    @property
    def ranks(self) -> int:
        """T x CP x K x D, the devices the configuration uses."""
        return self.tensor * self.context * self.devices * self.data_parallel

    @property
    def asynchronous(self) -> bool:
        """True when the schedule updates weights asynchronously (not what plain SGD or Adam
        computes)."""
        return self.schedule in ASYNC_SCHEDULES

    def label(self) -> str:
        """A short name: ``1f1b T=8 SP K=8 DP=8 v=1 M=32 b=2 recompute=full ZeRO-1``."""
        remat = " remat" if self.remat else ""
        sp = " SP" if self.sequence_parallel else ""
        recompute = "" if self.recompute == "none" else f" recompute={self.recompute}"
        zero = f" ZeRO-{self.zero}" if self.zero else ""
        cp = f" CP={self.context}" if self.context > 1 else ""
        ep = f" EP={self.expert}" if self.expert > 1 else ""
        return (
            f"{self.schedule_label} T={self.tensor}{sp}{cp}{ep} K={self.devices} "
            f"DP={self.data_parallel} "
            f"v={self.chunks} M={self.microbatches} b={self.microbatch_size}{remat}{recompute}"
            f"{zero}"
        )

    def settings(self) -> dict[str, str]:
        """Every dimension of the configuration by name, defaults included, in the order
        :meth:`full_label` writes them (CP and EP where they are not 1:
        :meth:`differences` reads an absent one as 1)."""
        settings = {
            "schedule": self.schedule_label,
            "T": str(self.tensor),
            "SP": "on" if self.sequence_parallel else "off",
            "K": str(self.devices),
            "DP": str(self.data_parallel),
            "v": str(self.chunks),
            "M": str(self.microbatches),
            "b": str(self.microbatch_size),
            "recompute": "remat" if self.remat else self.recompute,
            "ZeRO": str(self.zero),
        }
        if self.context > 1:
            settings["CP"] = str(self.context)
        if self.expert > 1:
            settings["EP"] = str(self.expert)
        return settings

    def full_label(self) -> str:
        """Every dimension, none left out at its default: ``1f1b T=8 SP=on K=8 DP=8 v=1
        M=32 b=2 recompute=none ZeRO=1`` (a rejected alternative beside a plan must not read
        as the same configuration for a dimension left unsaid)."""
        settings = self.settings()
        schedule = settings.pop("schedule")
        return schedule + " " + " ".join(f"{key}={value}" for key, value in settings.items())

    def differences(self, other: Candidate) -> str:
        """Where this configuration differs from ``other``: ``T=4 (8), M=48 (96)``."""
        mine, theirs = self.settings(), other.settings()
        keys = list(mine) + [k for k in theirs if k not in mine]
        changed = [
            f"{k}={mine.get(k, '1')} ({theirs.get(k, '1')})"
            for k in keys
            if mine.get(k, "1") != theirs.get(k, "1")
        ]
        return ", ".join(changed) if changed else "nothing but its partition"


def divisors(n: int) -> list[int]:
    """The divisors of ``n`` in increasing order, found in sqrt(n) steps (``--batch 10**9``
    takes 31,623 steps, not a billion)."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return small + [n // d for d in reversed(small) if d * d != n]


@dataclass(frozen=True)
class SpaceLimits:
    """What the model and the hardware allow the search.

    Attributes:
        layers: the model's layers (K·v at most).
        tensor_sizes: the tensor-parallel sizes the model and a node allow (1 always).
        recompute: the layer-level recomputation modes to try.
        zero: the optimizer sharding stages to try (where D > 1).
        sequence_parallel: the sequence-parallel settings to try (where T > 1).
        sequence_splits: the tensor-parallel sizes that split the sequence evenly (sequence
            parallelism is tried with these only); None: every size.
        blocks: the model's transformer blocks (what ``--recompute N`` counts); a count N is
            searched on K·v stages only where N <= ceil(blocks / (K·v)).
    """

    layers: int
    tensor_sizes: tuple[int, ...] = (1,)
    recompute: tuple[str, ...] = ("none",)
    zero: tuple[int, ...] = (0,)
    sequence_parallel: tuple[bool, ...] = (False,)
    sequence_splits: tuple[int, ...] | None = None
    blocks: int = 0
    context_sizes: tuple[int, ...] = (1,)
    expert_sizes: tuple[int, ...] = (1,)


def candidates(
    devices: int,
    batch: int,
    layers: int | SpaceLimits,
    schedules: Sequence[str] = DEFAULT_SCHEDULES,
    chunk_options: Sequence[int] = (2, 4),
    max_microbatches: int = 512,
) -> Iterator[Candidate]:
    """Every buildable configuration (skipping shapes a schedule cannot take, and more stages
    than layers). ``layers`` is the model's layer count, or the :class:`SpaceLimits` of a
    hybrid search."""
    limits = layers if isinstance(layers, SpaceLimits) else SpaceLimits(layers)
    # a synthesised schedule is offered after the search
    schedules = [name for name in schedules if name != SYNTH_NAME]
    for name in schedules:
        schedule_info(name)  # unknown names fail before any work
    for tensor, cp in ((t, c) for t in limits.tensor_sizes for c in limits.context_sizes):
        if devices % (tensor * cp):
            continue
        pipeline_and_data = devices // (tensor * cp)
        for k in divisors(pipeline_and_data):
            if k > limits.layers:
                continue
            dp = pipeline_and_data // k
            if batch % dp:
                continue
            per_replica = batch // dp
            # Micro-batch counts up to the cap that divide the batch, fewest samples each
            # first: at most max_microbatches steps whatever --batch is.
            counts = range(min(max_microbatches, per_replica), 0, -1)
            for m in (m for m in counts if per_replica % m == 0):
                b = per_replica // m
                for ep in limits.expert_sizes:
                    if (dp * cp) % ep:
                        continue  # the experts are divided over EP of the D x CP ranks
                    for c in _schedules(limits, schedules, chunk_options, tensor, k, dp, m, b):
                        if cp == 1 and ep == 1:
                            yield c
                        else:
                            yield dataclasses.replace(c, context=cp, expert=ep)


def _zero_stages(stages: tuple[int, ...], pipeline_stages: int) -> tuple[int, ...]:
    """The ZeRO stages worth trying: all asked for without a pipeline; inside one, ZeRO-2
    and 3 hold and move what ZeRO-1 does (PyTorch defers their gradient sync to the step's
    last backward and keeps the gathered weights through the step:
    :mod:`pipesim.parallel.sharding`), so where 1 is tried they are not tried again."""
    if pipeline_stages == 1 or 1 not in stages:
        return stages
    return tuple(stage for stage in stages if stage < 2)


def _schedules(
    limits: SpaceLimits,
    schedules: Sequence[str],
    chunk_options: Sequence[int],
    tensor: int,
    k: int,
    dp: int,
    m: int,
    b: int,
) -> Iterator[Candidate]:
    for name in schedules if k > 1 else ("1f1b",):
        info = schedule_info(name)
        if k == 1 or info.default_chunks == 1:
            chunk_list: Sequence[int] = [1]
        elif name in ("zbv", "dualpipev"):
            chunk_list = [2]
        else:
            chunk_list = chunk_options
        for v in chunk_list:
            if k * v > limits.layers:
                continue
            for remat in (False, True) if info.supports_remat else (False,):
                if unsupported_reason(name, k, m, v, remat) is not None:
                    continue
                for recompute in limits.recompute:
                    if recompute != "none" and remat:
                        continue  # one recomputation at a time
                    if recomputes_in_full(recompute) and name in SPLIT_BACKWARD:
                        continue  # W would need the recomputed inputs
                    count = recompute_layers(recompute)
                    if count is not None and count > -(-limits.blocks // (k * v)):
                        continue  # some partition would leave no stage N blocks to recompute
                    for zero in _zero_stages(limits.zero, k * v) if dp > 1 else (0,):
                        for sp in limits.sequence_parallel if tensor > 1 else (False,):
                            if sp and tensor not in (limits.sequence_splits or (tensor,)):
                                continue  # the sequence does not split T ways
                            yield Candidate(
                                k, dp, name, v, m, b, remat, None, tensor, sp, recompute, zero
                            )
