"""A decoder-only transformer's architecture: the numbers a GPT or Llama config states.

From an architecture, :mod:`pipesim.workload.transformer` builds the layers one device holds
under any tensor, sequence-parallel and recompute setting; the parameter count and the model
FLOPs here are the published ones' formulas:

* parameters: per layer the attention's query, key, value and output projections
  (h·(h + 2·kv·d) + h·h, d = h / heads), the MLP (2·h·f, or 3·h·f gated), their biases and the
  norms' weights; the word embeddings V·h (twice when the output layer is untied), learned
  positions s·h, the final norm. Megatron's GPT: 12·l·h² + 13·l·h + (V + s)·h, plus the final
  layer norm (arXiv 2104.04473 §5.1; its Table 1 omits the 2h).
* model FLOPs per sequence (the appendix of 2104.04473, counting matrix multiplies only, one
  multiply-add as 2 FLOPs): forward per layer 2·s·(parameters of its matmuls) + 4·s²·h for the
  attention scores and values, backward twice the forward, the logits 2·s·h·V forward.

Beyond GPT and Llama (:mod:`pipesim.workload.moe`): a head width of its own (``head_dim``,
Qwen3's 128 at hidden 2048 and 32 heads), RMS norms of each head's query and key
(``qk_norm``), mixture-of-experts blocks (``moe``: a block's matmul FLOPs count the router, the
top-k routed experts and the shared experts, its parameters every expert) and multi-head latent
attention (``mla``: the attention's projections are the latent ones, its scores and values
2·s²·heads·(qk_head_dim + v_head_dim) FLOPs forward).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from pipesim.common import checks
from pipesim.common.checks import SpecError
from pipesim.workload.moe import MixtureOfExperts, MultiLatentAttention


class Mlp(Enum):
    """The feed-forward block: GPT's GELU MLP (two matmuls) or Llama's SwiGLU (three)."""

    GELU = "gelu"
    SWIGLU = "swiglu"


class Attention(Enum):
    """How attention is computed, which decides what it stores for the backward.

    * ``eager``: scores, softmax and dropout as separate tensors (2205.05198's 5·a·s²·b bytes:
      the softmax output, the dropout mask and its output).
    * ``flash``: a fused kernel (FlashAttention, PyTorch's SDPA, Megatron's
      ``--use-flash-attn``): only the log-sum-exp statistics (fp32, a·s·b), the scores
      recomputed in the backward.
    """

    EAGER = "eager"
    FLASH = "flash"


class Norm(Enum):
    """LayerNorm (weight and bias) or RMSNorm (weight only)."""

    LAYERNORM = "layernorm"
    RMSNORM = "rmsnorm"


class Position(Enum):
    """Position information: learned embeddings (s·h parameters), rotary (none), or none."""

    LEARNED = "learned"
    ROPE = "rope"
    NONE = "none"


@dataclass(frozen=True)
class TransformerArchitecture:
    """A decoder-only transformer.

    Attributes:
        layers: transformer blocks, l.
        hidden: model width, h.
        heads: attention heads, a.
        ffn: the MLP's inner width, f (4h for GPT).
        seq: sequence length, s.
        vocab: vocabulary, V (as padded for the run).
        kv_heads: key/value heads (grouped-query attention); None: ``heads``.
        mlp, attention, norm, position: see the enums.
        tied_embeddings: the output layer uses the word embeddings' weights (GPT); a pipeline
            whose last stage is on another device keeps a copy there (Megatron does).
        linear_bias: the linear layers have biases (GPT yes, Llama no).
        dropout: dropout after the attention probabilities and the projections.
        embedding_dropout: dropout after the embeddings.
        fused_output_norm: the final norm fused into the output projection, so that only the
            norm's input is stashed (unfused, the projection stashes the norm's output too:
            Korthikanti et al.'s 2sbh + 2sbh).
        element_bytes: bytes of one activation element (2: fp16/bf16; 4: fp32).
        mask_bytes: bytes of one dropout-mask element (1: PyTorch's bool masks).
        head_width: each head's query, key and value width, d (Hugging Face's ``head_dim``,
            Megatron's ``--kv-channels``; the model file's ``head_dim``); None: hidden / heads.
        qk_norm: a norm of each head's query and of its key before the scores (Qwen3's
            ``q_norm`` and ``k_norm``, Megatron's ``--qk-layernorm``): d weights each.
        moe: the mixture-of-experts blocks (:class:`~pipesim.workload.moe.MixtureOfExperts`);
            None: every block's MLP is dense.
        mla: multi-head latent attention
            (:class:`~pipesim.workload.moe.MultiLatentAttention`); None: multi-head or
            grouped-query attention.
    """

    layers: int
    hidden: int
    heads: int
    ffn: int
    seq: int
    vocab: int
    kv_heads: int | None = None
    mlp: Mlp = Mlp.GELU
    attention: Attention = Attention.EAGER
    norm: Norm = Norm.LAYERNORM
    position: Position = Position.LEARNED
    tied_embeddings: bool = True
    linear_bias: bool = True
    dropout: bool = True
    embedding_dropout: bool = True
    fused_output_norm: bool = False
    element_bytes: int = 2
    mask_bytes: int = 1
    head_width: int | None = None
    qk_norm: bool = False
    moe: MixtureOfExperts | None = None
    mla: MultiLatentAttention | None = None

    def __post_init__(self) -> None:
        for field in ("layers", "hidden", "heads", "ffn", "seq", "vocab", "element_bytes"):
            checks.positive_int(f"transformer.{field}", getattr(self, field))
        checks.positive_int("transformer.mask_bytes", self.mask_bytes)
        if self.kv_heads is None:
            object.__setattr__(self, "kv_heads", self.heads)
        checks.positive_int("transformer.kv_heads", self.kv_heads)
        if self.head_width is not None:
            checks.positive_int("transformer.head_dim", self.head_width)
        elif self.hidden % self.heads and self.mla is None:
            raise SpecError(
                f"transformer.heads = {self.heads:,} must divide transformer.hidden = "
                f"{self.hidden:,} (each head gets hidden / heads of the width)"
            )
        if self.heads % self.key_value_heads:
            raise SpecError(
                f"transformer.kv_heads = {self.key_value_heads:,} must divide transformer.heads "
                f"= {self.heads:,} (grouped-query attention shares each key/value head)"
            )
        for name, kind in (
            ("mlp", Mlp),
            ("attention", Attention),
            ("norm", Norm),
            ("position", Position),
        ):
            if not isinstance(getattr(self, name), kind):
                choices = ", ".join(k.value for k in kind)
                raise SpecError(
                    f"transformer.{name} must be one of {choices}, got {getattr(self, name)!r}"
                )
        for name in (
            "tied_embeddings",
            "linear_bias",
            "dropout",
            "embedding_dropout",
            "fused_output_norm",
            "qk_norm",
        ):
            if not isinstance(getattr(self, name), bool):
                raise SpecError(
                    f"transformer.{name} must be true or false, got {getattr(self, name)!r}"
                )
        self._check_moe_and_mla()

    def _check_moe_and_mla(self) -> None:
        """The mixture of experts and the latent attention: of their types, an MoE block among
        the layers, and nothing pipesim does not build with them."""
        if self.moe is not None:
            if not isinstance(self.moe, MixtureOfExperts):
                raise SpecError(f"transformer.moe must be a MixtureOfExperts, got {self.moe!r}")
            if self.moe_layers == 0:
                raise SpecError(
                    f"transformer.moe.first_dense_layers = {self.moe.first_dense_layers:,} "
                    f"leaves no mixture-of-experts block among transformer.layers = "
                    f"{self.layers:,}"
                )
        if self.mla is not None:
            if not isinstance(self.mla, MultiLatentAttention):
                raise SpecError(f"transformer.mla must be a MultiLatentAttention, got {self.mla!r}")
            if self.key_value_heads != self.heads:
                raise SpecError(
                    f"transformer.kv_heads = {self.key_value_heads:,} with transformer.mla: "
                    f"latent attention gives every one of the {self.heads:,} heads its keys "
                    "and values"
                )
            if self.head_width is not None or self.qk_norm:
                raise SpecError(
                    "transformer.head_dim and transformer.qk_norm do not apply to latent "
                    "attention (transformer.mla states its own head widths)"
                )
        if self.linear_bias and (self.moe is not None or self.mla is not None):
            part = "transformer.moe" if self.moe is not None else "transformer.mla"
            raise SpecError(
                f"transformer.linear_bias with {part}: biased experts and latent projections "
                "are not modelled (set transformer.linear_bias = false)"
            )

    def to_json(self) -> dict[str, object]:
        """Every field by its model file's key (the ``[transformer]`` table
        :func:`pipesim.workload.toml_spec.model_table` writes, and what ``models show`` and
        ``run show`` print)."""
        table: dict[str, object] = {
            "layers": self.layers,
            "hidden": self.hidden,
            "ffn": self.ffn,
            "heads": self.heads,
            "kv_heads": self.kv_heads,
            "seq": self.seq,
            "vocab": self.vocab,
            "mlp": self.mlp.value,
            "attention": self.attention.value,
            "norm": self.norm.value,
            "position": self.position.value,
            "tied_embeddings": self.tied_embeddings,
            "linear_bias": self.linear_bias,
            "dropout": self.dropout,
            "embedding_dropout": self.embedding_dropout,
            "fused_output_norm": self.fused_output_norm,
            "element_bytes": self.element_bytes,
            "mask_bytes": self.mask_bytes,
        }
        # The fields beyond GPT and Llama only where set: a dense model's table is as it was.
        if self.head_width is not None:
            table["head_dim"] = self.head_width
        if self.qk_norm:
            table["qk_norm"] = True
        if self.moe is not None:
            table["moe"] = self.moe.to_json()
        if self.mla is not None:
            table["mla"] = self.mla.to_json()
        return table

    @property
    def key_value_heads(self) -> int:
        """Key/value heads (``heads`` without grouped-query attention)."""
        return self.kv_heads if self.kv_heads is not None else self.heads

    @property
    def head_dim(self) -> int:
        """d: ``head_width`` where given, else hidden / heads."""
        return self.head_width if self.head_width is not None else self.hidden // self.heads

    @property
    def kv_width(self) -> int:
        """Width of the keys (and of the values) without latent attention: kv_heads · d."""
        return self.key_value_heads * self.head_dim

    @property
    def score_head_dim(self) -> int:
        """Each head's query and key width: d, or latent attention's nope + rope."""
        return self.mla.qk_head_dim if self.mla is not None else self.head_dim

    @property
    def value_head_dim(self) -> int:
        """Each head's value width: d, or latent attention's ``v_head_dim``."""
        return self.mla.v_head_dim if self.mla is not None else self.head_dim

    @property
    def query_width(self) -> int:
        """The queries' width: heads · d (h without a head width of its own)."""
        return self.heads * self.score_head_dim

    @property
    def key_width(self) -> int:
        """The keys' width: kv_heads · d (every head's nope + rope under latent attention)."""
        return self.query_width if self.mla is not None else self.kv_width

    @property
    def value_width(self) -> int:
        """The values' width: kv_heads · d (heads · v_head_dim under latent attention)."""
        return self.output_width if self.mla is not None else self.kv_width

    @property
    def output_width(self) -> int:
        """The attention's output, the output projection's input: heads · (value width)."""
        return self.heads * self.value_head_dim

    @property
    def mlp_matrices(self) -> int:
        """h x f matrices in the MLP: 2 (GELU) or 3 (SwiGLU: gate, up, down)."""
        return 3 if self.mlp is Mlp.SWIGLU else 2

    @property
    def norm_parameters(self) -> int:
        """Parameters of one norm: 2h (LayerNorm) or h (RMSNorm)."""
        return self.norm_factor * self.hidden

    @property
    def norm_factor(self) -> int:
        """Parameters of a norm per element: 2 (LayerNorm: weight and bias) or 1."""
        return 2 if self.norm is Norm.LAYERNORM else 1

    @property
    def moe_layers(self) -> int:
        """Mixture-of-experts blocks (0 for a dense model)."""
        if self.moe is None:
            return 0
        return sum(1 for index in range(self.layers) if self.moe.is_moe_layer(index))

    @property
    def dense_layers(self) -> int:
        """Blocks with the dense MLP."""
        return self.layers - self.moe_layers

    def is_moe_layer(self, index: int) -> bool:
        """Whether block ``index`` (from 0) is a mixture-of-experts block."""
        return self.moe is not None and self.moe.is_moe_layer(index)

    def attention_matmul_parameters(self) -> int:
        """Weights of the query, key, value and output projections (no biases); under latent
        attention, the down- and up-projections of the query and key/value latents."""
        h = self.hidden
        if self.mla is not None:
            m = self.mla
            if m.q_lora_rank is None:
                query = h * self.query_width
            else:
                query = h * m.q_lora_rank + m.q_lora_rank * self.query_width
            kv_up = m.kv_lora_rank * self.heads * (m.qk_nope_head_dim + m.v_head_dim)
            return query + h * m.kv_down_width + kv_up + self.output_width * h
        return h * (self.query_width + self.key_width + self.value_width) + self.output_width * h

    def attention_replicated_parameters(self) -> int:
        """The part of :meth:`attention_matmul_parameters` every tensor-parallel rank holds
        whole: latent attention's down-projections (Megatron-Core's ``duplicated`` linears);
        0 otherwise."""
        if self.mla is None:
            return 0
        return self.hidden * ((self.mla.q_lora_rank or 0) + self.mla.kv_down_width)

    def attention_norm_parameters(self) -> int:
        """Norms inside the attention: the latents' (latent attention) or each head's query
        and key norm (``qk_norm``: d each); 0 otherwise."""
        if self.mla is not None:
            return self.norm_factor * self.mla.latent_width
        return 2 * self.norm_factor * self.head_dim if self.qk_norm else 0

    def mlp_matmul_parameters(self) -> int:
        """Weights of the dense MLP's matrices (no biases)."""
        return self.mlp_matrices * self.hidden * self.ffn

    def moe_matmul_parameters(self) -> int:
        """Weights of an MoE block's MLP: the router, every routed expert, the shared ones
        (0 for a dense model)."""
        if self.moe is None:
            return 0
        h = self.hidden
        return (
            self.moe.routed_parameters(h)
            + self.moe.shared_parameters(h)
            + self.moe.experts * h  # the router's matrix
        )

    def moe_active_matmul_parameters(self) -> int:
        """The weights of an MoE block's MLP one token goes through: the router, its top-k
        routed experts, the shared experts."""
        if self.moe is None:
            return 0
        h = self.hidden
        moe = self.moe
        return (
            moe.top_k * moe.expert_matmul_parameters(h)
            + moe.shared_parameters(h)
            + (moe.experts * h)
        )

    def block_bias_parameters(self) -> int:
        """Biases of one block's linear layers (0 without biases)."""
        if not self.linear_bias:
            return 0
        h, f = self.hidden, self.ffn
        qkv = self.query_width + self.key_width + self.value_width
        mlp = (self.mlp_matrices - 1) * f + h
        return qkv + h + mlp

    def block_parameters(self) -> int:
        """One dense transformer block: attention, MLP, biases and two norms."""
        return (
            self.attention_matmul_parameters()
            + self.attention_norm_parameters()
            + self.mlp_matmul_parameters()
            + self.block_bias_parameters()
            + 2 * self.norm_parameters
        )

    def moe_block_parameters(self) -> int:
        """One mixture-of-experts block: attention, router (and its expert bias), every
        expert, two norms (0 for a dense model)."""
        if self.moe is None:
            return 0
        return (
            self.attention_matmul_parameters()
            + self.attention_norm_parameters()
            + self.moe.routed_parameters(self.hidden)
            + self.moe.shared_parameters(self.hidden)
            + self.moe.router_parameters(self.hidden)
            + 2 * self.norm_parameters
        )

    def moe_block_active_parameters(self) -> int:
        """The parameters of an MoE block one token goes through: all but the E - k routed
        experts it is not sent to (0 for a dense model)."""
        if self.moe is None:
            return 0
        idle = (self.moe.experts - self.moe.top_k) * self.moe.expert_matmul_parameters(self.hidden)
        return self.moe_block_parameters() - idle

    def embedding_parameters(self) -> int:
        """Word embeddings and learned positions."""
        positions = self.seq * self.hidden if self.position is Position.LEARNED else 0
        return self.vocab * self.hidden + positions

    def output_parameters(self) -> int:
        """The final norm, and the output projection when it is not tied to the embeddings."""
        untied = 0 if self.tied_embeddings else self.vocab * self.hidden
        return self.norm_parameters + untied

    def parameters(self) -> int:
        """The model's parameter count (a tied output projection counted once)."""
        blocks = self.dense_layers * self.block_parameters()
        if self.moe is not None:
            blocks += self.moe_layers * self.moe_block_parameters()
        return blocks + self.embedding_parameters() + self.output_parameters()

    def expert_parameters(self) -> int:
        """The routed experts' weights in all (0 for a dense model): what expert parallelism
        divides among its ranks."""
        if self.moe is None:
            return 0
        return self.moe_layers * self.moe.routed_parameters(self.hidden)

    def active_parameters(self) -> int:
        """The parameters one token's forward pass goes through: every parameter but those of
        the routed experts it is not sent to (the embeddings whole, as Mistral and Qwen count
        them; DeepSeek's published counts leave the word embeddings out). A dense model's
        are all its parameters."""
        if self.moe is None:
            return self.parameters()
        idle = self.moe_block_parameters() - self.moe_block_active_parameters()
        return self.parameters() - self.moe_layers * idle

    def attention_core_forward_flops(self) -> int:
        """The attention scores and values of one sequence, forward: 2·s²·heads·(d_qk + d_v)
        (4·s²·h for multi-head attention)."""
        s = self.seq
        return 2 * s * s * self.heads * (self.score_head_dim + self.value_head_dim)

    def block_forward_flops(self) -> float:
        """Matmul FLOPs of one dense block's forward pass for one sequence."""
        s = self.seq
        matmuls = 2 * s * (self.attention_matmul_parameters() + self.mlp_matmul_parameters())
        return matmuls + self.attention_core_forward_flops()

    def moe_block_forward_flops(self) -> float:
        """Matmul FLOPs of one MoE block's forward pass for one sequence: the attention, the
        router, each token's top-k routed experts and the shared experts (0 for a dense
        model)."""
        if self.moe is None:
            return 0.0
        s = self.seq
        matmuls = 2 * s * (self.attention_matmul_parameters() + self.moe_active_matmul_parameters())
        return matmuls + self.attention_core_forward_flops()

    def logits_forward_flops(self) -> float:
        """The output projection's forward FLOPs for one sequence: 2·s·h·V."""
        return 2 * self.seq * self.hidden * self.vocab

    def model_flops_per_sequence(self) -> float:
        """Training FLOPs of one sequence without recomputation: forward, then a backward of
        twice the forward (2104.04473's appendix); an MoE block's count its active experts."""
        blocks = self.dense_layers * self.block_forward_flops()
        if self.moe is not None:
            blocks += self.moe_layers * self.moe_block_forward_flops()
        return 3 * (blocks + self.logits_forward_flops())
