"""Constructed models and clusters for the planner's tests (TOML files in a temp folder)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest


def write_model(
    path: Path,
    *,
    optimizer_bytes: float = 8,
    parameters: float = 1e6,
    activation_bytes: float = 4e6,
    output_bytes: float = 1e6,
    layers: int = 8,
) -> str:
    """A model of ``layers`` equal blocks, fp32, 2 GFLOP per pass and sample."""
    path.write_text(
        f"""name = "constructed"
dtype = "fp32"
default_batch = 16
weight_bytes_per_parameter = 4
gradient_bytes_per_parameter = 4
optimizer_bytes_per_parameter = {optimizer_bytes}
input_bytes = 1e6
[[layers]]
name = "block"
repeat = {layers}
forward_flops = 2e9
input_grad_flops = 2e9
weight_grad_flops = 2e9
parameters = {parameters}
activation_bytes = {activation_bytes}
weight_grad_activation_bytes = {activation_bytes / 2}
output_bytes = {output_bytes}
"""
    )
    return str(path)


def write_transformer(path: Path, *, layers: int = 8, hidden: int = 256, seq: int = 512) -> str:
    """A small fp32 transformer (4 heads, a vocabulary of 1,000, Adam's 8 bytes of state),
    whose blocks ``--recompute`` can recompute."""
    path.write_text(
        f"""name = "tiny-transformer"
dtype = "fp32"
default_batch = 8
weight_bytes_per_parameter = 4
gradient_bytes_per_parameter = 4
optimizer_bytes_per_parameter = 8
[transformer]
layers = {layers}
hidden = {hidden}
heads = 4
seq = {seq}
vocab = 1000
element_bytes = 4
"""
    )
    return str(path)


def write_hardware(path: Path, *, memory_bytes: float, bandwidth_bytes_per_s: float) -> str:
    """1 TFLOP/s fp32 devices joined all to all by links of the given bandwidth."""
    path.write_text(
        f"""name = "constructed"
[accelerator]
peak_flops_per_s = {{ fp32 = 1e12 }}
efficiency = 1.0
memory_bytes = {memory_bytes}
memory_bandwidth_bytes_per_s = 1e12
[network]
topology = "all-to-all"
bandwidth_bytes_per_s = {bandwidth_bytes_per_s}
latency_s = 1e-6
"""
    )
    return str(path)


@pytest.fixture
def model_file(tmp_path: Path) -> Callable[..., str]:
    """Write a constructed model TOML; keyword arguments as :func:`write_model`."""
    return lambda **kw: write_model(
        tmp_path / f"model{len(kw)}{hash(frozenset(kw.items()))}.toml", **kw
    )


@pytest.fixture
def hardware_file(tmp_path: Path) -> Callable[..., str]:
    """Write a constructed hardware TOML; keyword arguments as :func:`write_hardware`."""
    return lambda **kw: write_hardware(tmp_path / f"hw{hash(frozenset(kw.items()))}.toml", **kw)


@pytest.fixture
def transformer_file(tmp_path: Path) -> Callable[..., str]:
    """Write a small transformer TOML; keyword arguments as :func:`write_transformer`."""
    return lambda **kw: write_transformer(
        tmp_path / f"transformer{hash(frozenset(kw.items()))}.toml", **kw
    )
