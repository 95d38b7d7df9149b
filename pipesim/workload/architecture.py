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
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from pipesim.common import checks
from pipesim.common.checks import SpecError


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

    def __post_init__(self) -> None:
        for field in ("layers", "hidden", "heads", "ffn", "seq", "vocab", "element_bytes"):
            checks.positive_int(f"transformer.{field}", getattr(self, field))
        checks.positive_int("transformer.mask_bytes", self.mask_bytes)
        if self.kv_heads is None:
            object.__setattr__(self, "kv_heads", self.heads)
        checks.positive_int("transformer.kv_heads", self.kv_heads)
        if self.hidden % self.heads:
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
        ):
            if not isinstance(getattr(self, name), bool):
                raise SpecError(
                    f"transformer.{name} must be true or false, got {getattr(self, name)!r}"
                )

    def to_json(self) -> dict[str, object]:
        """Every field by its model file's key (the ``[transformer]`` table
        :func:`pipesim.workload.toml_spec.model_table` writes, and what ``models show`` and
        ``run show`` print)."""
        return {
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

    @property
    def key_value_heads(self) -> int:
        """Key/value heads (``heads`` without grouped-query attention)."""
        return self.kv_heads if self.kv_heads is not None else self.heads

    @property
    def head_dim(self) -> int:
        """d = hidden / heads."""
        return self.hidden // self.heads

    @property
    def kv_width(self) -> int:
        """Width of the keys (and of the values): kv_heads · d."""
        return self.key_value_heads * self.head_dim

    @property
    def mlp_matrices(self) -> int:
        """h x f matrices in the MLP: 2 (GELU) or 3 (SwiGLU: gate, up, down)."""
        return 3 if self.mlp is Mlp.SWIGLU else 2

    @property
    def norm_parameters(self) -> int:
        """Parameters of one norm: 2h (LayerNorm) or h (RMSNorm)."""
        return (2 if self.norm is Norm.LAYERNORM else 1) * self.hidden

    def attention_matmul_parameters(self) -> int:
        """Weights of the query, key, value and output projections (no biases)."""
        h = self.hidden
        return h * (h + 2 * self.kv_width) + h * h

    def mlp_matmul_parameters(self) -> int:
        """Weights of the MLP's matrices (no biases)."""
        return self.mlp_matrices * self.hidden * self.ffn

    def block_bias_parameters(self) -> int:
        """Biases of one block's linear layers (0 without biases)."""
        if not self.linear_bias:
            return 0
        h, f = self.hidden, self.ffn
        qkv = h + 2 * self.kv_width
        mlp = (self.mlp_matrices - 1) * f + h
        return qkv + h + mlp

    def block_parameters(self) -> int:
        """One transformer block: attention, MLP, biases and two norms."""
        return (
            self.attention_matmul_parameters()
            + self.mlp_matmul_parameters()
            + self.block_bias_parameters()
            + 2 * self.norm_parameters
        )

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
        return (
            self.layers * self.block_parameters()
            + self.embedding_parameters()
            + self.output_parameters()
        )

    def block_forward_flops(self) -> float:
        """Matmul FLOPs of one block's forward pass for one sequence."""
        s = self.seq
        matmuls = 2 * s * (self.attention_matmul_parameters() + self.mlp_matmul_parameters())
        return matmuls + 4 * s * s * self.hidden

    def logits_forward_flops(self) -> float:
        """The output projection's forward FLOPs for one sequence: 2·s·h·V."""
        return 2 * self.seq * self.hidden * self.vocab

    def model_flops_per_sequence(self) -> float:
        """Training FLOPs of one sequence without recomputation: forward, then a backward of
        twice the forward (2104.04473's appendix)."""
        return 3 * (self.layers * self.block_forward_flops() + self.logits_forward_flops())
