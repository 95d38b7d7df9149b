"""Small models for tests, demos and validation runs: MLPs and transformer blocks.

Both are ``nn.Sequential`` of uniform layers, so any stage count up to the depth cuts them, and
every layer maps a tensor to a tensor of the same shape (a pipeline boundary carries one tensor).
Their weights come from a ``torch.Generator`` of their own, seeded with ``seed``: the same seed
gives the same weights in every process and run, and building a model leaves torch's global
random state alone.
"""

from __future__ import annotations

import math

import torch
from torch import nn


class Block(nn.Module):
    """A pre-LN transformer block: self-attention and a GELU MLP, each with a residual."""

    def __init__(
        self,
        hidden: int,
        heads: int,
        ffn: int | None = None,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        inner = ffn or 4 * hidden
        self.norm1 = nn.LayerNorm(hidden, device=device)
        self.attention = nn.MultiheadAttention(hidden, heads, batch_first=True, device=device)
        self.norm2 = nn.LayerNorm(hidden, device=device)
        self.mlp = nn.Sequential(
            nn.Linear(hidden, inner, device=device),
            nn.GELU(),
            nn.Linear(inner, hidden, device=device),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (batch, sequence, hidden)."""
        h = self.norm1(x)
        attended, _ = self.attention(h, h, h, need_weights=False)
        x = x + attended
        result: torch.Tensor = x + self.mlp(self.norm2(x))
        return result


class Residual(nn.Module):
    """x + relu(linear(x)): an MLP layer that keeps the width."""

    def __init__(
        self, width: int, bias: bool = True, device: torch.device | str | None = None
    ) -> None:
        super().__init__()
        self.linear = nn.Linear(width, width, bias=bias, device=device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (batch, width)."""
        return x + torch.relu(self.linear(x))


def mlp(
    width: int, layers: int, *, bias: bool = True, dtype: torch.dtype = torch.float32, seed: int = 0
) -> nn.Sequential:
    """``layers`` residual ReLU layers of ``width``, deterministic for ``seed``."""
    model = nn.Sequential(*(Residual(width, bias, device="meta") for _ in range(layers)))
    return _initialized(model, seed).to(dtype)


def transformer(
    hidden: int,
    heads: int,
    layers: int,
    *,
    ffn: int | None = None,
    dtype: torch.dtype = torch.float32,
    seed: int = 0,
) -> nn.Sequential:
    """``layers`` transformer blocks, deterministic for ``seed``."""
    model = nn.Sequential(*(Block(hidden, heads, ffn, device="meta") for _ in range(layers)))
    return _initialized(model, seed).to(dtype)


def _initialized(model: nn.Sequential, seed: int) -> nn.Sequential:
    """``model`` (built on the meta device, so nothing was drawn) materialized on the CPU and
    initialized as PyTorch's defaults do, from a generator seeded with ``seed``: linear weights
    and biases uniform in ±1/sqrt(fan_in), attention input projections Xavier-uniform with
    zero biases, layer norms one and zero."""
    generator = torch.Generator().manual_seed(seed)
    model = model.to_empty(device="cpu")
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.Linear):
                bound = 1.0 / math.sqrt(module.in_features)
                nn.init.uniform_(module.weight, -bound, bound, generator=generator)
                if module.bias is not None:
                    nn.init.uniform_(module.bias, -bound, bound, generator=generator)
            elif isinstance(module, nn.LayerNorm):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)
            elif isinstance(module, nn.MultiheadAttention):
                nn.init.xavier_uniform_(module.in_proj_weight, generator=generator)
                nn.init.zeros_(module.in_proj_bias)
        for module in model.modules():  # after the Linear pass, which covers out_proj
            if isinstance(module, nn.MultiheadAttention):
                nn.init.zeros_(module.out_proj.bias)
    return model
