"""Fuzzing the hardware and model TOML loaders: every file either loads to a valid object or
raises the documented error (:class:`~pipesim.errors.PipesimError`, one line), never another
exception: binary files, non-UTF-8, wrong types, NaN and infinities, huge numbers, missing and
unknown keys."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest
from hypothesis import given

from pipesim.common.checks import SpecError
from pipesim.errors import PipesimError
from pipesim.hardware.catalogue import HardwareSpec
from pipesim.hardware.toml_spec import load_hardware
from pipesim.workload.model import Model
from pipesim.workload.toml_spec import load_model

from .toml_documents import Document, documents

T = TypeVar("T")

HARDWARE: list[Document] = [
    {
        "name": "box",
        "accelerator": {
            "peak_flops_per_s": {"bf16": 312e12, "fp32": 19.5e12},
            "efficiency": 0.5,
            "memory_bytes": 85899345920,
            "memory_bandwidth_bytes_per_s": 2.039e12,
            "kernel_overhead_s": 4e-6,
            "transfers_use_compute": False,
        },
        "network": {"topology": "all-to-all", "bandwidth_bytes_per_s": 300e9, "latency_s": 4e-6},
    },
    {
        "accelerator": {
            "peak_flops_per_s": {"fp16": 1e14},
            "efficiency": 1,
            "memory_bytes": 1e9,
            "memory_bandwidth_bytes_per_s": 1e12,
        },
        "network": {
            "topology": "hierarchical",
            "bandwidth_bytes_per_s": 1e11,
            "latency_s": 0,
            "devices_per_node": 4,
            "inter_node_bandwidth_bytes_per_s": 25e9,
            "inter_node_latency_s": 1e-5,
        },
    },
    {
        "accelerator": {
            "peak_flops_per_s": {"bf16": 1e14},
            "efficiency": 0.4,
            "memory_bytes": 16e9,
            "memory_bandwidth_bytes_per_s": 9e11,
        },
        "network": {
            "topology": "torus-2d",
            "bandwidth_bytes_per_s": 7e10,
            "latency_s": 2e-6,
            "torus_columns": 4,
        },
    },
    {
        "name": "nodes",
        "accelerator": {
            "peak_flops_per_s": {"bf16": 1e15},
            "efficiency": 0.45,
            "memory_bytes": 80e9,
            "memory_bandwidth_bytes_per_s": 3e12,
            "matmul_efficiency": [[2e9, 0.3], [1e12, 0.8]],
            "memory_bandwidth_efficiency": 0.9,
            "runtime_reserve_bytes": 2e9,
            "fragmentation_fraction": 0.05,
        },
        "network": {
            "topology": "hierarchical",
            "link_name": "nvlink",
            "bandwidth_bytes_per_s": 4.5e11,
            "latency_s": 4e-6,
            "collective_bandwidth_bytes_per_s": 4.8e11,
            "message_overhead_s": 2.5e-4,
            "devices_per_node": 8,
            "inter_node_link_name": "ib",
            "inter_node_bandwidth_bytes_per_s": 5e10,
            "inter_node_latency_s": 1e-5,
            "inter_node_collective_bandwidth_bytes_per_s": 4.8e10,
        },
    },
]

LAYER = {
    "name": "block",
    "repeat": 3,
    "forward_flops": 2e9,
    "input_grad_flops": 2e9,
    "weight_grad_flops": 2e9,
    "parameters": 1e6,
    "activation_bytes": 4e6,
    "weight_grad_activation_bytes": 2e6,
    "output_bytes": 1e6,
}
MODELS: list[Document] = [
    {
        "name": "gpt",
        "dtype": "bf16",
        "default_batch": 8,
        "weight_bytes_per_parameter": 2,
        "transformer": {"layers": 4, "hidden": 64, "ffn": 256, "heads": 4, "seq": 32,
                        "vocab": 1000},
    },
    {"dtype": "fp32", "default_batch": 4, "input_bytes": 1e6, "layers": [LAYER, dict(LAYER)]},
]  # fmt: skip


def _load(loader: Callable[[Path], T], data: bytes, use: Callable[[T], object]) -> T | None:
    """``loader`` on a file holding ``data``, then ``use`` of what it loaded; None when either
    raised the documented error (checked to be one short line)."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "spec.toml"
        path.write_bytes(data)
        try:
            loaded = loader(path)
            use(loaded)
            return loaded
        except PipesimError as error:
            message = str(error)
            assert message and "\n" not in message and len(message) < 1000, message
            return None


def _use_hardware(spec: HardwareSpec) -> None:
    for devices in (4, 8):
        spec.cluster(devices)


def _use_model(model: Model) -> None:
    assert len(model.layers) >= 1


@given(documents(*HARDWARE))
def test_hardware_files_load_or_raise_the_documented_error(data: bytes) -> None:
    _load(load_hardware, data, _use_hardware)


@given(documents(*MODELS))
def test_model_files_load_or_raise_the_documented_error(data: bytes) -> None:
    _load(load_model, data, _use_model)


def test_the_bases_load() -> None:
    from .toml_documents import to_toml

    for base in HARDWARE:
        assert _load(load_hardware, to_toml(base).encode(), _use_hardware) is not None
    for base in MODELS:
        assert _load(load_model, to_toml(base).encode(), _use_model) is not None


def test_a_transformer_whose_heads_do_not_divide_its_width_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "model.toml"
    path.write_text(
        'dtype = "bf16"\ndefault_batch = 8\n[transformer]\nlayers = 2\nhidden = 30\nheads = 4\n'
        "seq = 4\nvocab = 10\n"
    )
    with pytest.raises(SpecError) as error:
        load_model(path)
    assert str(error.value) == (
        f"model file {str(path)!r}: transformer.heads = 4 must divide transformer.hidden = 30 "
        "(each head gets hidden / heads of the width)"
    )
