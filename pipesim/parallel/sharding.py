"""Sharded data parallelism: what one rank holds of a layer's state under each ZeRO stage, and
when its collectives run.

The stages are ZeRO's (Rajbhandari et al., arXiv 1910.02054 §5) as the frameworks name them:

* 0: every replica holds everything; gradients all-reduced once per step.
* 1: optimizer state and fp32 master weights divided by the D replicas (Megatron-LM's
  ``--use-distributed-optimizer``, DeepSpeed ``stage: 1``); gradients reduce-scattered, the
  updated weights all-gathered, once per step.
* 2: gradients sharded too (DeepSpeed ``stage: 2``, Megatron-FSDP's ``optim_grads``).
* 3: the weights too: FSDP (PyTorch FSDP2's ``fully_shard``, torchtitan's default, DeepSpeed
  ``stage: 3``, Megatron-FSDP's ``optim_grads_params``). Each rank keeps its shard and gathers
  a layer's whole weights before computing with them.

Two behaviours decide the working set and the traffic, as PyTorch runs them:

* **Inside a pipeline** (more than one stage), ``torch.distributed.pipelining`` turns the
  gradient sync off for every backward but the step's last (``set_requires_gradient_sync(False)``
  and ``set_reshard_after_backward(False)`` in ``PipelineStage.backward_maybe_with_nosync``):
  gradients accumulate unsharded over the micro-batches and are reduce-scattered once, at the
  last backward. torchtitan's ``reshard_after_forward_policy = "default"`` keeps the gathered
  weights from the first forward to the step's end when the pipeline is on. So a pipelined
  ZeRO-2/3 rank holds, at its peak, what a ZeRO-1 rank holds, and moves the same bytes per step
  (one all-gather of the weights, one reduce-scatter of the gradients).
* **Without a pipeline** (one stage: FSDP alone, with gradient accumulation), FSDP2 reduce-
  scatters every micro-batch's gradients during its backward, and with
  ``reshard_after_forward`` (the default there) frees each layer's gathered weights after its
  forward and gathers them again for its backward: the working set is the layer being computed
  and the next one prefetched, and each micro-batch moves the weights twice and the gradients
  once, overlapped with the passes.

What is not modelled: DeepSpeed ZeRO-3 keeps a half-precision shard beside the fp32 master
shard (FSDP2 and Megatron-FSDP keep the fp32 shard as the parameter: the convention here);
hybrid sharding (HSDP: shards within a node, replicas across); the framework's bucket sizes
(each layer is one FSDP unit, torchtitan's per-block wrapping).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

ZERO_STAGES = (0, 1, 2, 3)
"""The sharding stages a run may ask for."""


class ReshardPolicy(Enum):
    """When a ZeRO-3 (FSDP) rank frees a layer's gathered weights after its forward:
    torchtitan's ``parallelism.fsdp_reshard_after_forward`` ("default": not inside a pipeline,
    "always", "never"), FSDP2's ``reshard_after_forward``."""

    DEFAULT = "default"
    ALWAYS = "always"
    NEVER = "never"

    def reshards(self, pipelined: bool) -> bool:
        """True when a layer's gathered weights are freed after its forward (torchtitan's
        default does so only without a pipeline)."""
        if self is ReshardPolicy.DEFAULT:
            return not pipelined
        return self is ReshardPolicy.ALWAYS


@dataclass(frozen=True)
class Sharding:
    """One rank's sharding regime: the ZeRO stage over ``shards`` ranks, resolved for a run
    that is or is not pipelined.

    Attributes:
        zero: the ZeRO stage, 0 to 3.
        shards: the ranks that share the state (D; 1 when ``zero`` is 0).
        pipelined: the rank runs a pipeline stage (gradients accumulate unsharded until the
            step's last backward).
        reshard_after_forward: under ZeRO-3, each layer's gathered weights are freed after its
            forward and gathered again for its backward.
    """

    zero: int = 0
    shards: int = 1
    pipelined: bool = True
    reshard_after_forward: bool = False

    @classmethod
    def of(cls, zero: int, data: int, policy: ReshardPolicy, pipelined: bool) -> Sharding:
        """The regime of ``zero`` over ``data`` replicas, inside a pipeline or not."""
        if zero == 0 or data == 1:
            return cls(zero, 1, pipelined, False)
        return cls(zero, data, pipelined, zero == 3 and policy.reshards(pipelined))

    @property
    def syncs_every_microbatch(self) -> bool:
        """Gradients are reduce-scattered during each micro-batch's backward (ZeRO-2/3 without
        a pipeline), not once per step."""
        return self.zero >= 2 and self.shards > 1 and not self.pipelined

    @property
    def holds_gathered_weights(self) -> bool:
        """Under ZeRO-3, the whole stage's weights stay gathered through the step."""
        return self.zero == 3 and self.shards > 1 and not self.reshard_after_forward

    def held(self, parameters: float, bytes_per_parameter: LayerBytes) -> HeldState:
        """What one rank holds of ``parameters`` (one tensor rank's share of a layer) at its
        peak, term by term, and the transients each pass adds."""
        p, d, per = parameters, self.shards, bytes_per_parameter
        optimizer_divisor = d if self.zero >= 1 else 1
        weights = per.weight * p
        gradients = per.gradient * p
        gather = 0.0
        gradient_transient = 0.0
        if self.zero == 3 and d > 1:
            # the fp32 master shard is the parameter (FSDP2, Megatron-FSDP); a model without
            # master weights keeps a shard in the weights' own dtype
            at_rest = 0.0 if per.master > 0 else weights / d
            if self.reshard_after_forward:
                gather = 2 * weights  # this layer's and the next one's, prefetched
                weights = at_rest
            else:
                weights = weights + at_rest
        if self.syncs_every_microbatch:
            gradient_transient = gradients  # unsharded until its reduce-scatter
            gradients = gradients / d
        return HeldState(
            parameter_bytes=weights,
            gradient_bytes=gradients,
            optimizer_bytes=per.optimizer * p / optimizer_divisor,
            master_weight_bytes=per.master * p / optimizer_divisor,
            optimizer_transient_bytes=per.optimizer_temporary * p / optimizer_divisor,
            forward_gather_bytes=gather,
            backward_gather_bytes=gather + gradient_transient,
        )


@dataclass(frozen=True)
class LayerBytes:
    """Bytes per parameter of each kind of state (the model's precision and optimizer)."""

    weight: float
    gradient: float
    optimizer: float
    master: float
    optimizer_temporary: float


@dataclass(frozen=True)
class HeldState:
    """What one rank holds of a layer (bytes): the static terms at the peak, and what its
    forward and backward passes add while they run (gathered weights, the unsharded gradient
    before its reduce-scatter)."""

    parameter_bytes: float
    gradient_bytes: float
    optimizer_bytes: float
    master_weight_bytes: float
    optimizer_transient_bytes: float
    forward_gather_bytes: float
    backward_gather_bytes: float
