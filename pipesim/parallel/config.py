"""A hybrid-parallel configuration besides the pipeline: tensor and sequence parallelism,
activation recomputation, optimizer sharding and data parallelism, as Megatron-LM names them.

The pipeline itself (depth K, chunks v, micro-batches M) is the schedule's; this object holds
every other dimension, so that one value describes what ``--tensor-parallel``,
``--sequence-parallel``, ``--recompute``, ``--zero`` and ``--data-parallel`` ask for and
travels unchanged from the command line to the costs. Whether the gradient reduction overlaps
the backward is the software's choice, the run's recipe (:mod:`pipesim.config.recipe`).

* ``tensor`` (T): Megatron's tensor parallelism (Shoeybi et al., arXiv 1909.08053): attention
  heads and the MLP's inner width split T ways, two all-reduces per layer in the forward pass
  and two in the input-gradient backward.
* ``sequence_parallel``: Korthikanti et al. (arXiv 2205.05198 §4.2.2): layer norms and dropouts
  run on 1/T of the sequence; each all-reduce becomes an all-gather and a reduce-scatter.
* ``recompute``: :class:`Recompute`, none, selective (the attention core, §5 of 2205.05198),
  full (every layer, its input alone stashed) or full for the first N layers of each stage
  (Megatron's ``--recompute-num-layers N`` with the block method).
* ``zero``: the ZeRO stage, 0 to 3 (:mod:`pipesim.parallel.sharding`): 0 every replica holds
  everything; 1 optimizer state and fp32 master weights divided by D (Megatron's distributed
  optimizer); 2 the gradients too; 3 the weights too (FSDP, torchtitan's default).
* ``reshard_after_forward``: under ZeRO-3, whether a layer's gathered weights are freed after
  its forward (torchtitan's ``fsdp_reshard_after_forward``: ``default`` does so only without a
  pipeline).
* ``data`` (D): data-parallel replicas of the whole T x K model.
* ``context`` (CP): context parallelism (Megatron-Core's ``--context-parallel-size``, Llama 3
  §3.3.2, Ring Attention arXiv 2310.01889): each sample's sequence split CP ways, every
  layer's tokens on 1/CP of them, the attention's keys and values exchanged over the CP group
  (``cp_comm_type``: a ring of point-to-point sends beside the attention's blocks, Megatron-
  Core's default ``p2p``, or Llama 3's all-gather before the attention, ``all-gather``). The
  weights are replicated over CP: gradients are reduced, and ZeRO shards, over D x CP ranks.
* ``expert`` (EP): expert parallelism for mixture-of-experts layers (Megatron-Core's
  ``--expert-model-parallel-size``): each MoE layer's routed experts divided over EP ranks
  of the D x CP ranks, tokens dispatched and combined by all-to-alls over them.
* ``expert_tensor`` (ETP): expert tensor parallelism (Megatron-Core's
  ``--expert-tensor-parallel-size``, "parallel folding", arXiv 2504.14960): each routed
  expert's FFN split ETP ways (None: T, Megatron's default). The MoE layers then have a layout
  of their own over the same T x CP x D ranks of a pipeline stage, ETP x EP x EDP with
  EDP = T x CP x D / (ETP x EP) the expert data group (:mod:`pipesim.parallel.ranks`).
* ``offload_optimizer``: the optimizer state and fp32 master weights live in host memory and
  the optimizer step runs on the host's CPU (ZeRO-Offload, Ren et al., arXiv 2101.06840 §4;
  DeepSpeed's ``offload_optimizer: {device: cpu}``, FSDP2's ``CPUOffloadPolicy``): each step
  copies the rank's gradient shard to the host, steps there and copies the updated weights
  back (:func:`pipesim.costs.spec_derived.layer_costs`). ZeRO-Offload's one-step delayed
  update, which overlaps the host's step with the next backward, is not modelled.
* ``offload_activations`` N: the stash of the model's first N transformer blocks is copied to
  host memory after each block's forward and back before its backward (Megatron-Core's
  ``--cpu-offloading --cpu-offloading-num-layers N``, Transformer Engine's CPU offload
  context, double-buffered on a side stream; DeepSpeed's ``cpu_checkpointing`` for
  checkpointed blocks): :func:`pipesim.costs.spec_derived.layer_costs`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from pipesim.common import checks
from pipesim.common.checks import SpecError
from pipesim.errors import named
from pipesim.parallel.ranks import RankLayout
from pipesim.parallel.sharding import ZERO_STAGES, ReshardPolicy, Sharding


class RecomputeMode(Enum):
    """How much of a transformer layer's forward pass its backward re-runs."""

    NONE = "none"
    SELECTIVE = "selective"
    FULL = "full"


@dataclass(frozen=True)
class Recompute:
    """A recomputation setting: a mode, and for ``full`` optionally how many layers of each
    stage it covers (None: every layer).

    The text form is what ``--recompute`` takes: ``none``, ``selective``, ``full`` or a number
    N of layers per stage (``full`` for the first N transformer layers of each stage).
    """

    mode: RecomputeMode = RecomputeMode.NONE
    layers_per_stage: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.mode, RecomputeMode):
            raise SpecError(f"recompute mode must be a RecomputeMode, got {self.mode!r}")
        if self.layers_per_stage is not None:
            checks.non_negative_int(f"{named('recompute')} layers per stage", self.layers_per_stage)
            if self.mode is not RecomputeMode.FULL:
                raise SpecError(
                    f"{named('recompute')}: a count of layers goes with full recomputation, "
                    "got "
                    f"{self.mode.value} with {self.layers_per_stage}"
                )

    @classmethod
    def parse(cls, text: str) -> Recompute:
        """``none``, ``selective``, ``full`` or N (full for the first N layers per stage)."""
        value = text.strip().lower()
        for mode in RecomputeMode:
            if value == mode.value:
                return cls(mode)
        if value.isascii() and value.isdigit() and len(value) <= 9:
            layers = int(value)
            return cls(RecomputeMode.NONE) if layers == 0 else cls(RecomputeMode.FULL, layers)
        raise SpecError(
            f"{named('recompute')} must be none, selective, full or a number of layers per "
            f"stage, got {text!r}"
        )

    @property
    def label(self) -> str:
        """The text form: ``none``, ``selective``, ``full`` or the layer count."""
        if self.layers_per_stage is not None:
            return str(self.layers_per_stage)
        return self.mode.value

    def full_layers(self, blocks_in_stage: int) -> int:
        """How many of a stage's ``blocks_in_stage`` transformer layers are fully recomputed
        (the first ones: Megatron's block method)."""
        if self.mode is not RecomputeMode.FULL:
            return 0
        if self.layers_per_stage is None:
            return blocks_in_stage
        return min(self.layers_per_stage, blocks_in_stage)


NO_RECOMPUTE = Recompute()


class ContextComm(Enum):
    """How context-parallel ranks exchange keys and values (Megatron-Core's
    ``--cp-comm-type``)."""

    P2P = "p2p"
    ALL_GATHER = "all-gather"


@dataclass(frozen=True)
class Parallelism:
    """Every parallel dimension but the pipeline's (see the module docstring).

    Attributes:
        tensor: T, tensor-parallel degree (1: none).
        sequence_parallel: sequence parallelism inside each tensor-parallel group (T > 1).
        recompute: activation recomputation.
        zero: the ZeRO stage, 0 to 3.
        data: D, data-parallel replicas (the ranks a ZeRO stage shards over).
        reshard_after_forward: under ZeRO-3, when gathered weights are freed.
        context: CP, context-parallel ranks per sample (1: none).
        expert: EP, expert-parallel ranks of each MoE layer (1: none).
        cp_comm_type: how the CP ranks exchange keys and values.
        offload_optimizer: optimizer state and master weights in host memory, the optimizer
            step on the host's CPU.
        offload_activations: the model's first N transformer blocks keep their stash in host
            memory between the forward and the backward (0: none).
        expert_tensor: ETP, the ranks each routed expert's FFN is split over; None: T
            (Megatron-Core's default). A value equal to T is stored as None, so the two
            spellings of one layout are one value.
    """

    tensor: int = 1
    sequence_parallel: bool = False
    recompute: Recompute = NO_RECOMPUTE
    zero: int = 0
    data: int = 1
    reshard_after_forward: ReshardPolicy = ReshardPolicy.DEFAULT
    context: int = 1
    expert: int = 1
    cp_comm_type: ContextComm = ContextComm.P2P
    offload_optimizer: bool = False
    offload_activations: int = 0
    expert_tensor: int | None = None

    def __post_init__(self) -> None:
        checks.positive_int(named("tensor_parallel"), self.tensor)
        checks.positive_int(named("data_parallel"), self.data)
        checks.positive_int(named("context_parallel"), self.context)
        checks.positive_int(named("expert_parallel"), self.expert)
        if self.expert_tensor is not None:
            checks.positive_int(named("expert_tensor_parallel"), self.expert_tensor)
            if self.expert_tensor == self.tensor:
                object.__setattr__(self, "expert_tensor", None)
        if not isinstance(self.cp_comm_type, ContextComm):
            raise SpecError(
                f"{named('cp_comm_type')} must be p2p or all-gather, got {self.cp_comm_type!r}"
            )
        if self.cp_comm_type is not ContextComm.P2P and self.context == 1:
            raise SpecError(
                f"{named('cp_comm_type')} {self.cp_comm_type.value} is how context-parallel "
                f"ranks exchange keys and values: it needs {named('context_parallel')} 2 or "
                "more, got 1"
            )
        self._check_expert_layout()
        if self.zero not in ZERO_STAGES or isinstance(self.zero, bool):
            raise SpecError(f"{named('zero')} must be 0, 1, 2 or 3, got {self.zero!r}")
        if not isinstance(self.reshard_after_forward, ReshardPolicy):
            raise SpecError(
                f"{named('reshard_after_forward')} must be default, always or never, got "
                f"{self.reshard_after_forward!r}"
            )
        if self.reshard_after_forward is not ReshardPolicy.DEFAULT and self.zero != 3:
            raise SpecError(
                f"{named('reshard_after_forward')} {self.reshard_after_forward.value} frees "
                f"gathered weights, which only ZeRO-3 (FSDP) has: it needs {named('zero')} 3, "
                f"got {self.zero}"
            )
        if not isinstance(self.recompute, Recompute):
            raise SpecError(f"recompute must be a Recompute, got {self.recompute!r}")
        if not isinstance(self.sequence_parallel, bool):
            raise SpecError(
                f"sequence_parallel must be true or false, got {self.sequence_parallel!r}"
            )
        if not isinstance(self.offload_optimizer, bool):
            raise SpecError(
                f"{named('offload_optimizer')} must be true or false, got "
                f"{self.offload_optimizer!r}"
            )
        checks.non_negative_int(named("offload_activations"), self.offload_activations)
        if self.sequence_parallel and self.tensor == 1:
            raise SpecError(
                f"{named('sequence_parallel')} splits the sequence over the tensor-parallel "
                f"group: it needs {named('tensor_parallel')} of 2 or more, got 1"
            )
        if self.folded and self.tensor > 1 and not self.sequence_parallel:
            raise SpecError(
                f"{named('expert_tensor_parallel')} {self.expert_tensor} with "
                f"{named('tensor_parallel')} {self.tensor} needs {named('sequence_parallel')}: "
                "Megatron-Core's MoELayer raises 'performance may degrade if MoE and tensor "
                "parallelism are enabled without also enabling sequence parallelism' in "
                "training (28c8dd7, 2024-05-30); pipesim models that case at the default "
                "ETP = T only"
            )

    def _check_expert_layout(self) -> None:
        """The MoE layers' ETP x EP x EDP must fill each pipeline stage's T x CP x D ranks:
        Megatron-Core's parallel_state raises 'world_size (...) is not divisible by
        expert_tensor_model_pipeline_parallel size' unless ETP x EP x PP divides the world
        (T x CP x PP x D). At ETP = T that is EP dividing D x CP."""
        if not self.folded:
            if (self.data * self.context) % self.expert:
                raise SpecError(
                    f"{named('expert_parallel')} must divide {named('data_parallel')} x "
                    f"{named('context_parallel')} = {self.data * self.context} (the experts "
                    f"are divided over those ranks), got {self.expert}"
                )
            return
        ranks = self.tensor * self.context * self.data
        if ranks % (self.expert * self.expert_tensor_size):
            raise SpecError(
                f"{named('expert_tensor_parallel')} {self.expert_tensor_size} x "
                f"{named('expert_parallel')} {self.expert} = "
                f"{self.expert * self.expert_tensor_size} must divide "
                f"{named('tensor_parallel')} x {named('context_parallel')} x "
                f"{named('data_parallel')} = {ranks} (Megatron-Core's parallel_state: 'world_size "
                "is not divisible by expert_tensor_model_pipeline_parallel size')"
            )

    @property
    def expert_tensor_size(self) -> int:
        """ETP: the ranks each routed expert is split over (T unless set)."""
        return self.tensor if self.expert_tensor is None else self.expert_tensor

    @property
    def folded(self) -> bool:
        """The MoE layers have a tensor-parallel size of their own (ETP != T): Megatron-
        Core's parallel folding."""
        return self.expert_tensor is not None

    @property
    def expert_data(self) -> int:
        """EDP: the ranks holding the same routed experts, T x CP x D / (ETP x EP) (D x CP /
        EP at ETP = T): what the experts' gradients are reduced, and ZeRO shards them, over."""
        ranks = self.tensor * self.context * self.data
        return ranks // (self.expert_tensor_size * self.expert)

    @property
    def experts_apart(self) -> bool:
        """The routed experts are reduced and sharded over a group of their own (the expert
        data group), not the dense layers' data group: with expert parallelism or a folded
        layout."""
        return self.expert > 1 or self.folded

    @property
    def is_identity(self) -> bool:
        """True when nothing but (possibly) plain data parallelism is asked for: the
        pipeline-only model of the model's layers applies unchanged."""
        return (
            self.tensor == 1
            and not self.sequence_parallel
            and self.recompute == NO_RECOMPUTE
            and self.zero == 0
            and self.reshard_after_forward is ReshardPolicy.DEFAULT
            and self.context == 1
            and self.expert == 1
            and not self.folded
            and not self.offload_optimizer
            and not self.offload_activations
        )

    @property
    def replicated_over(self) -> int:
        """D x CP: the ranks that hold the same weights of a dense layer (what its
        gradients are reduced, and ZeRO shards, over)."""
        return self.data * self.context

    def layout(self, devices: int) -> RankLayout:
        """The job's ranks with ``devices`` pipeline devices: T x CP x K x D."""
        return RankLayout(
            self.tensor, devices, self.data, self.context, self.expert, self.expert_tensor
        )

    @property
    def ranks_per_device(self) -> int:
        """T x CP: the ranks of one pipeline device of one replica (consecutive pipeline
        devices are that many ranks apart)."""
        return self.tensor * self.context

    def sharding(self, pipelined: bool) -> Sharding:
        """The ZeRO regime one rank runs, inside a pipeline (more than one stage) or not."""
        return Sharding.of(self.zero, self.replicated_over, self.reshard_after_forward, pipelined)

    def label(self) -> str:
        """A short description: ``T=8 SP recompute=full ZeRO-1 optimizer-offload D=4``
        (``EP=8 ETP=1`` for a folded MoE layout)."""
        words = [f"T={self.tensor}"]
        if self.sequence_parallel:
            words.append("SP")
        if self.recompute != NO_RECOMPUTE:
            words.append(f"recompute={self.recompute.label}")
        if self.zero:
            words.append(f"ZeRO-{self.zero}")
        if self.reshard_after_forward is not ReshardPolicy.DEFAULT:
            words.append(f"reshard-after-forward={self.reshard_after_forward.value}")
        if self.context > 1:
            words.append(
                f"CP={self.context}"
                + (" all-gather" if self.cp_comm_type is ContextComm.ALL_GATHER else "")
            )
        if self.expert > 1:
            words.append(f"EP={self.expert}")
        if self.folded:
            words.append(f"ETP={self.expert_tensor_size}")
        if self.offload_optimizer:
            words.append("optimizer-offload")
        if self.offload_activations:
            words.append(f"activation-offload={self.offload_activations}")
        words.append(f"D={self.data}")
        return " ".join(words)


IDENTITY = Parallelism()
