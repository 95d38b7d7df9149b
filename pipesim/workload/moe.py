"""Mixture-of-experts layers and multi-head latent attention, as Megatron-Core and Hugging Face
name them: the parts of a :class:`~pipesim.workload.architecture.TransformerArchitecture` that
a dense Llama block does not have.

:class:`MixtureOfExperts` replaces the MLP of some blocks by ``experts`` routed expert MLPs, of
which each token goes through ``top_k``, beside ``shared_experts`` MLPs every token goes
through and a router (an ``experts`` x hidden matrix, no bias) that chooses them:

=====================  ========================  ===========================  ===================
field                  Megatron-Core             Hugging Face                 meaning
=====================  ========================  ===========================  ===================
experts                --num-experts             num_local_experts (Mixtral), routed experts, E
                                                 n_routed_experts (DeepSeek),
                                                 num_experts (Qwen3-MoE)
top_k                  --moe-router-topk         num_experts_per_tok          experts per token, k
expert_ffn             --moe-ffn-hidden-size     moe_intermediate_size        an expert's inner
                                                 (Mixtral: intermediate_size) width, f_e
shared_experts         (its size below)          n_shared_experts             experts every token
                                                                              goes through
shared_expert_ffn      --moe-shared-expert-      (DeepSeek: moe_intermediate_ each shared
                       intermediate-size / count size)                        expert's inner width
first_dense_layers     --moe-layer-freq          first_k_dense_replace        leading dense blocks
                       ([0]*k + [1]*(L-k))
layer_frequency        --moe-layer-freq N        moe_layer_freq (DeepSeek),   every N-th block is
                                                 decoder_sparse_step (Qwen)   an MoE block
gated                  --swiglu                  hidden_act silu              SwiGLU experts
capacity_factor        --moe-expert-capacity-    (none: dropless)             tokens an expert
                       factor                                                 takes, x k·s/E
pad_to_capacity        --moe-pad-expert-input-   (none)                       every expert
                       to-capacity                                            computes its capacity
max_expert_load        (the run's tokens per     (none)                       the busiest expert's
                       expert, as logged)                                     tokens, x k·s/E
load_balancing         --moe-router-load-        router_aux_loss_coef,        the auxiliary loss
                       balancing-type            seq_aux, aux_loss_alpha
expert_bias            --moe-router-enable-      topk_method noaux_tc         DeepSeek-V3's
                       expert-bias               (e_score_correction_bias)    aux-loss-free bias
=====================  ========================  ===========================  ===================

Block i (from 0) is an MoE block when ``i >= first_dense_layers`` and
``i % layer_frequency == 0`` (Megatron-Core's integer ``--moe-layer-freq`` and DeepSeek's
``moe_layer_freq``); the others keep the architecture's dense MLP of width ``ffn``.

The capacity factor, the padding, the busiest expert's load and the load balancing are the
run's routing, stated here for the cost model (the auxiliary losses cost no matmul). Each
sequence routes k·s tokens; ``max_expert_load`` L says how uneven they land: the busiest
expert receives L·k·s/E of them (1: balanced, the default) and the others the rest evenly,
each capped at the capacity c·k·s/E where a capacity drops what is beyond it; with
``pad_to_capacity`` every expert computes exactly c·k·s/E rows (and the permutation writes
and the combine reads E·c·k·s/E = c·k·s of them). What a rank computes is set by the experts
it holds (:meth:`MixtureOfExperts.busiest_rank_load`).

:class:`MultiLatentAttention` is DeepSeek-V2/V3's attention (arXiv 2405.04434 §2.1): queries
through a low-rank latent of ``q_lora_rank`` (DeepSeek-V2-Lite: none, a plain projection),
keys and values through a shared latent of ``kv_lora_rank``, each head's query and key
``qk_nope_head_dim`` wide plus a rotary part of ``qk_rope_head_dim`` (the key's one part
shared by all heads), each head's value ``v_head_dim`` wide. Megatron-Core's options say the
same (``--q-lora-rank``, ``--kv-lora-rank``, ``--qk-head-dim``, ``--qk-pos-emb-head-dim``,
``--v-head-dim``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

from pipesim.common import checks
from pipesim.common.checks import SpecError


class LoadBalancing(Enum):
    """The router's load-balancing loss (Megatron-Core's ``--moe-router-load-balancing-type``):
    the Switch Transformer's auxiliary loss over the batch (Mixtral, Qwen3-MoE), the same per
    sequence (DeepSeek-V2/V3), Sinkhorn's balanced assignment, or none."""

    AUX_LOSS = "aux_loss"
    SEQ_AUX_LOSS = "seq_aux_loss"
    SINKHORN = "sinkhorn"
    NONE = "none"


MOE = "transformer.moe"
MLA = "transformer.mla"


@dataclass(frozen=True)
class MixtureOfExperts:
    """The mixture-of-experts blocks of a transformer (see the module's table).

    Attributes:
        experts: routed experts per MoE block, E.
        top_k: routed experts each token goes through, k (at most E).
        expert_ffn: each routed expert's inner width, f_e.
        shared_experts: experts every token goes through (0: none).
        shared_expert_ffn: each shared expert's inner width; None: ``expert_ffn``.
        first_dense_layers: leading blocks that keep the dense MLP.
        layer_frequency: every ``layer_frequency``-th block (counted from block 0) is an MoE
            block, from ``first_dense_layers`` on.
        gated: the experts are SwiGLU MLPs (gate, up, down: 3 matrices) rather than 2-matrix
            ones.
        capacity_factor: the tokens an expert takes, as a multiple of its even share k·s/E;
            None: dropless (every routed token is computed). Stated for the cost model; the
            layers route every token.
        pad_to_capacity: every expert's input is padded to its capacity (Megatron-Core's
            ``--moe-pad-expert-input-to-capacity``; needs ``capacity_factor``).
        max_expert_load: the busiest expert's routed tokens over its even share k·s/E (1:
            balanced; at most E/k: every token on it); the run's router
            statistics, e.g. Megatron-Core's tokens-per-expert logging, stated not derived.
        load_balancing: the router's auxiliary loss (stated, no matmul).
        expert_bias: the router has a bias per expert for aux-loss-free balancing (DeepSeek-V3's
            ``e_score_correction_bias``): E parameters per MoE block, updated by a rule, not by
            a gradient.
    """

    experts: int
    top_k: int
    expert_ffn: int
    shared_experts: int = 0
    shared_expert_ffn: int | None = None
    first_dense_layers: int = 0
    layer_frequency: int = 1
    gated: bool = True
    capacity_factor: float | None = None
    pad_to_capacity: bool = False
    max_expert_load: float = 1.0
    load_balancing: LoadBalancing = LoadBalancing.AUX_LOSS
    expert_bias: bool = False

    def __post_init__(self) -> None:
        checks.positive_int(f"{MOE}.experts", self.experts)
        checks.positive_int(f"{MOE}.top_k", self.top_k)
        if self.top_k > self.experts:
            raise SpecError(
                f"{MOE}.top_k = {self.top_k:,} must be at most {MOE}.experts = "
                f"{self.experts:,} (each token goes through top_k different experts)"
            )
        checks.positive_int(f"{MOE}.expert_ffn", self.expert_ffn)
        checks.non_negative_int(f"{MOE}.shared_experts", self.shared_experts)
        if self.shared_expert_ffn is not None:
            checks.positive_int(f"{MOE}.shared_expert_ffn", self.shared_expert_ffn)
        checks.non_negative_int(f"{MOE}.first_dense_layers", self.first_dense_layers)
        checks.positive_int(f"{MOE}.layer_frequency", self.layer_frequency)
        for name in ("gated", "expert_bias", "pad_to_capacity"):
            if not isinstance(getattr(self, name), bool):
                raise SpecError(f"{MOE}.{name} must be true or false, got {getattr(self, name)!r}")
        if self.capacity_factor is not None:
            checks.positive(f"{MOE}.capacity_factor", self.capacity_factor)
        elif self.pad_to_capacity:
            raise SpecError(
                f"{MOE}.pad_to_capacity needs {MOE}.capacity_factor (the capacity padded to; "
                "Megatron-Core asserts the same)"
            )
        checks.positive(f"{MOE}.max_expert_load", self.max_expert_load)
        if not 1 <= self.max_expert_load <= self.experts / self.top_k:
            raise SpecError(
                f"{MOE}.max_expert_load must be between 1 (balanced) and experts / top_k = "
                f"{self.experts / self.top_k:g} (an expert can take at most every token once), "
                f"got {self.max_expert_load!r}"
            )
        if not isinstance(self.load_balancing, LoadBalancing):
            choices = ", ".join(kind.value for kind in LoadBalancing)
            raise SpecError(
                f"{MOE}.load_balancing must be one of {choices}, got {self.load_balancing!r}"
            )

    @property
    def matrices(self) -> int:
        """Matrices of one expert: 3 (gated: gate, up, down) or 2."""
        return 3 if self.gated else 2

    @property
    def shared_width(self) -> int:
        """The shared experts' inner width together (Megatron-Core runs them as one MLP of
        this width, its ``--moe-shared-expert-intermediate-size``): 0 without them."""
        each = self.expert_ffn if self.shared_expert_ffn is None else self.shared_expert_ffn
        return self.shared_experts * each

    def busiest_rank_load(self, expert_parallel: int) -> float:
        """The routed rows the busiest of ``expert_parallel`` ranks computes, over its even
        share k·s/EP. The busiest expert takes L = ``max_expert_load`` times its share and the
        others share the rest evenly, (E - L)/(E - 1) each; a capacity c caps every expert at
        c (the tokens beyond are dropped, not sent elsewhere). A rank holding the busiest
        expert and n = E/EP - 1 others computes (min(L, c) + n·min((E - L)/(E - 1), c)) /
        (n + 1) shares, a rank without it min((E - L)/(E - 1), c): the larger is the busiest
        rank's (1 without expert parallelism and without a capacity, where one rank computes
        every routed token; fewer where a capacity drops some). Padded to the capacity, every
        rank computes c shares."""
        capacity = math.inf if self.capacity_factor is None else self.capacity_factor
        if self.pad_to_capacity:
            return capacity
        hot = min(self.max_expert_load, capacity)
        if self.experts == 1:
            return hot
        other = min((self.experts - self.max_expert_load) / (self.experts - 1), capacity)
        local = self.experts / expert_parallel
        holding_hot = (hot + (local - 1) * other) / local
        return max(holding_hot, other)

    def is_moe_layer(self, index: int) -> bool:
        """Whether block ``index`` (from 0) is an MoE block."""
        return index >= self.first_dense_layers and index % self.layer_frequency == 0

    def expert_matmul_parameters(self, hidden: int) -> int:
        """The weights of one routed expert."""
        return self.matrices * hidden * self.expert_ffn

    def routed_parameters(self, hidden: int) -> int:
        """The routed experts' weights in one MoE block: E experts."""
        return self.experts * self.expert_matmul_parameters(hidden)

    def shared_parameters(self, hidden: int) -> int:
        """The shared experts' weights in one MoE block."""
        return self.matrices * hidden * self.shared_width

    def router_parameters(self, hidden: int) -> int:
        """The router's weights (E x hidden) and its per-expert bias where it has one."""
        return self.experts * hidden + (self.experts if self.expert_bias else 0)

    def to_json(self) -> dict[str, object]:
        """Every field by its model file's key (``[transformer.moe]``)."""
        return {
            "experts": self.experts,
            "top_k": self.top_k,
            "expert_ffn": self.expert_ffn,
            "shared_experts": self.shared_experts,
            "shared_expert_ffn": self.shared_expert_ffn,
            "first_dense_layers": self.first_dense_layers,
            "layer_frequency": self.layer_frequency,
            "gated": self.gated,
            "capacity_factor": self.capacity_factor,
            "pad_to_capacity": self.pad_to_capacity,
            "max_expert_load": self.max_expert_load,
            "load_balancing": self.load_balancing.value,
            "expert_bias": self.expert_bias,
        }


@dataclass(frozen=True)
class MultiLatentAttention:
    """DeepSeek-V2/V3's multi-head latent attention (see the module's docstring).

    Attributes:
        kv_lora_rank: the keys' and values' shared latent width.
        qk_nope_head_dim: each head's query and key width without rotary positions.
        qk_rope_head_dim: each head's rotary query and key width (the key's is shared by the
            heads: one projection of this width).
        v_head_dim: each head's value width.
        q_lora_rank: the queries' latent width; None: the queries are one projection of the
            hidden state (DeepSeek-V2-Lite).
    """

    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    q_lora_rank: int | None = None

    def __post_init__(self) -> None:
        for name in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
            checks.positive_int(f"{MLA}.{name}", getattr(self, name))
        if self.q_lora_rank is not None:
            checks.positive_int(f"{MLA}.q_lora_rank", self.q_lora_rank)

    @property
    def qk_head_dim(self) -> int:
        """Each head's query (and key) width: nope + rope."""
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    @property
    def kv_down_width(self) -> int:
        """The key/value down-projection's output: the latent and the shared rotary key."""
        return self.kv_lora_rank + self.qk_rope_head_dim

    @property
    def latent_width(self) -> int:
        """The latents the up-projections read per token (``q_lora_rank``, 0 without it, and
        ``kv_lora_rank``), each after its own norm."""
        return (self.q_lora_rank or 0) + self.kv_lora_rank

    def to_json(self) -> dict[str, object]:
        """Every field by its model file's key (``[transformer.mla]``)."""
        return {
            "q_lora_rank": self.q_lora_rank,
            "kv_lora_rank": self.kv_lora_rank,
            "qk_nope_head_dim": self.qk_nope_head_dim,
            "qk_rope_head_dim": self.qk_rope_head_dim,
            "v_head_dim": self.v_head_dim,
        }
