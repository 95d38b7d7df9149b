"""The optimizer offloaded to host memory (``Parallelism.offload_optimizer``, ZeRO-Offload
arXiv 2101.06840 §4): device memory without optimizer state and master weights, and the step
as gradients to the host, the host's step and the weights back, every number by hand."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipesim.common.checks import SpecError
from pipesim.costs.spec_derived import costs_from_model
from pipesim.hardware.accelerator import Accelerator
from pipesim.hardware.network import Cluster, Link, Network, Topology
from pipesim.parallel.config import Parallelism
from pipesim.workload.model import Layer, Model
from tests.cli.test_schedule_cli import simulated


def _model() -> Model:
    # Two identical layers of 1M parameters; mixed precision Adam: 2-byte weights and
    # gradients, 8 bytes of optimizer state and 4 of fp32 master weights per parameter.
    layer = Layer(
        "l",
        forward_flops=1e9,
        input_grad_flops=2e9,
        weight_grad_flops=1e9,
        parameters=1e6,
        activation_bytes=1e6,
        weight_grad_activation_bytes=0.25e6,
        output_bytes=65_536,
    )
    return Model(
        "tiny",
        (layer, layer),
        input_bytes=1000,
        dtype="fp16",
        weight_bytes_per_parameter=2,
        gradient_bytes_per_parameter=2,
        optimizer_bytes_per_parameter=8,
        master_weight_bytes_per_parameter=4,
        optimizer_temporary_bytes_per_parameter=4,
        default_batch=8,
    )


def _cluster(host: bool = True) -> Cluster:
    accelerator = Accelerator(
        "toy",
        {"fp16": 1e12},
        efficiency=0.5,
        memory_bytes=1e9,
        memory_bandwidth_bytes_per_s=1e12,
        host_link_bandwidth_bytes_per_s=1e9 if host else None,  # 1 GB/s per direction
        host_memory_bandwidth_bytes_per_s=1e10 if host else None,  # 10 GB/s per device
    )
    return Cluster(accelerator, Network(2, Topology.ALL_TO_ALL, Link("link", 1e9, 1e-6)))


def test_offloaded_stage_holds_no_optimizer_state_and_steps_over_the_host_by_hand() -> None:
    """One layer per stage, 1M parameters:
    device to host: 1e6 x 2 B / 1 GB/s = 2 ms; the host's step: 2 x 1e6 x (2 + 4 + 8) B /
    10 GB/s = 2.8 ms; host to device: 1e6 x 2 B / 1 GB/s = 2 ms; in all 6.8 ms."""
    on_device = costs_from_model(_model(), _cluster(), 2, 4)
    offloaded = costs_from_model(
        _model(), _cluster(), 2, 4, parallelism=Parallelism(offload_optimizer=True)
    )
    for before, stage in zip(on_device.stages, offloaded.stages, strict=True):
        assert (before.optimizer_bytes, before.master_weight_bytes) == (8e6, 4e6)
        assert before.optimizer_transient_bytes == 4e6
        assert stage.optimizer_bytes == stage.master_weight_bytes == 0
        assert stage.optimizer_transient_bytes == 0
        assert (stage.parameter_bytes, stage.gradient_bytes) == (2e6, 2e6)
        assert stage.optimizer_step_s == pytest.approx(2e-3 + 2.8e-3 + 2e-3, rel=1e-12)
        assert stage.forward_s == before.forward_s  # the passes are untouched
    # no optimizer asked for: no step, and still no state on the device
    (stage, _) = costs_from_model(
        _model(),
        _cluster(),
        2,
        4,
        optimizer=False,
        parallelism=Parallelism(offload_optimizer=True),
    ).stages
    assert stage.optimizer_step_s == 0 and stage.optimizer_bytes == 0


def test_zero_1_over_d_divides_every_term_of_the_offloaded_step_by_d() -> None:
    """ZeRO-1 over D = 4: each rank offloads 1/4 of the shard: 0.5 + 0.7 + 0.5 = 1.7 ms."""
    offloaded = costs_from_model(
        _model(),
        _cluster(),
        2,
        4,
        parallelism=Parallelism(zero=1, data=4, offload_optimizer=True),
    )
    for stage in offloaded.stages:
        assert stage.optimizer_step_s == pytest.approx(0.5e-3 + 0.7e-3 + 0.5e-3, rel=1e-12)
        assert stage.optimizer_bytes == stage.master_weight_bytes == 0
    # ZeRO-0 with the same D: every replica steps its whole copy
    replicated = costs_from_model(
        _model(), _cluster(), 2, 4, parallelism=Parallelism(data=4, offload_optimizer=True)
    )
    assert replicated.stages[0].optimizer_step_s == pytest.approx(6.8e-3, rel=1e-12)


def test_offloading_is_refused_in_one_line_on_hardware_without_host_figures() -> None:
    with pytest.raises(SpecError) as error:
        costs_from_model(
            _model(), _cluster(host=False), 2, 4, parallelism=Parallelism(offload_optimizer=True)
        )
    message = str(error.value)
    assert "\n" not in message
    assert "'toy'" in message and "host_link_bandwidth_bytes_per_s" in message
    # without offloading the same hardware runs
    costs_from_model(_model(), _cluster(host=False), 2, 4)


RUN_FILE = """\
model = "megatron-1.7b"
hardware = "a100"

[training]
batch = 8

[parallelism]
pipeline_parallel = 2
data_parallel = 2
zero = 1
offload_optimizer = true

[pipeline]
schedule = "1f1b"
microbatches = 4
"""
FLAGS = [
    "--model",
    "megatron-1.7b",
    "--hardware",
    "a100",
    "--batch",
    "8",
    "-K",
    "2",
    "--data-parallel",
    "2",
    "--zero",
    "1",
    "--schedule",
    "1f1b",
    "-M",
    "4",
]


def test_the_flag_and_the_run_file_key_state_the_same_offloaded_run(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "run.toml"
    path.write_text(RUN_FILE)
    by_file = simulated(capsys, "--run", str(path))
    by_flag = simulated(capsys, *FLAGS, "--offload-optimizer")
    assert by_file == by_flag
    on_device = simulated(capsys, *FLAGS)
    assert by_flag != on_device
    assert by_flag["layout"]["offload_optimizer"] is True  # type: ignore[index]
    assert "offload_optimizer" not in on_device["layout"]  # type: ignore[operator]
    # the run file's false is the flag's --no- form: the run on the device
    path.write_text(RUN_FILE.replace("offload_optimizer = true", "offload_optimizer = false"))
    assert simulated(capsys, "--run", str(path)) == on_device
