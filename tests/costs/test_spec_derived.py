"""Spec-derived costs against hand-computed FLOPs, bytes and roofline times.

Every expected number below is written out by hand (the arithmetic is in the comments), not
computed by the code under test.
"""

from __future__ import annotations

import pytest

from pipesim.costs.spec_derived import costs_from_model
from pipesim.hardware.accelerator import Accelerator
from pipesim.hardware.network import Cluster, Link, Network, Topology
from pipesim.workload.architecture import TransformerArchitecture
from pipesim.workload.model import Layer, Model
from pipesim.workload.transformer import transformer_block


def test_a_transformer_layer_has_the_zero_bubble_papers_flops() -> None:
    """GPipe's Transformer layer, s=1024, h=2048, f=8192=4h, 32 heads.

    F = 24sh^2 + 4s^2h = 103,079,215,104 + 8,589,934,592 = 111,669,149,696
    B = sbh(24h + 8s)  = 2,097,152 x 57,344              = 120,259,084,288
    W = sbh * 24h       = 2,097,152 x 49,152              = 103,079,215,104
    parameters 4h^2 + 2hf + 9h + f = 16,777,216 + 33,554,432 + 18,432 + 8,192 = 50,358,272
    """
    layer = transformer_block("block", TransformerArchitecture(1, 2048, 32, 8192, 1024, 1))
    assert layer.forward_flops == 111_669_149_696
    assert layer.input_grad_flops == 120_259_084_288
    assert layer.weight_grad_flops == 103_079_215_104
    assert layer.parameters == 50_358_272
    # 16-bit activations: 18sh + 4sf + 5as^2 = 37,748,736 + 33,554,432 + 167,772,160
    assert layer.activation_bytes == 239_075_328
    # the weight gradient keeps the four linear layers' inputs: 6sh + 2sf
    assert layer.weight_grad_activation_bytes == 12_582_912 + 16_777_216
    assert layer.output_bytes == 2 * 1024 * 2048


def _tiny_model(optimizer_bytes: float = 8.0) -> Model:
    # Two identical layers: 1 GFLOP forward, 2 GFLOP input gradient, 1 GFLOP weight gradient
    # per sample; 1M parameters; 1 MB stashed (0.25 MB of it for W); 64 KB passed on.
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
        dtype="fp32",
        weight_bytes_per_parameter=4,
        gradient_bytes_per_parameter=4,
        optimizer_bytes_per_parameter=optimizer_bytes,
        default_batch=8,
    )


def _cluster(bandwidth: float, overhead_s: float = 0.0) -> Cluster:
    accelerator = Accelerator(
        "toy",
        {"fp32": 1e12},
        efficiency=0.5,  # 5e11 FLOP/s achievable
        memory_bytes=1e9,
        memory_bandwidth_bytes_per_s=bandwidth,
        kernel_overhead_s=overhead_s,
    )
    network = Network(2, Topology.ALL_TO_ALL, Link("link", 1e9, 1e-6))
    return Cluster(accelerator, network)


def test_compute_bound_stage_times_are_flops_over_achievable_peak() -> None:
    # Memory so fast it never binds. Micro-batch of 4 samples, one layer per stage:
    # F = 4 x 1e9 / 5e11 = 8 ms; I = 4 x 2e9 / 5e11 = 16 ms; W = 8 ms; plus 10 us overhead.
    costs = costs_from_model(_tiny_model(), _cluster(1e18, 1e-5), 2, 4, optimizer=False)
    for stage in costs.stages:
        assert stage.forward_s == pytest.approx(8e-3 + 1e-5, rel=1e-12)
        assert stage.input_grad_s == pytest.approx(16e-3 + 1e-5, rel=1e-12)
        assert stage.weight_grad_s == pytest.approx(8e-3 + 1e-5, rel=1e-12)
        assert stage.optimizer_step_s == 0.0
        assert stage.activation_bytes == 4e6
        assert stage.weight_grad_activation_bytes == 1e6
        assert stage.output_bytes == 4 * 65_536
        # weights 1e6 x 4 B, gradients the same, Adam-like state 8 B per parameter
        assert (stage.parameter_bytes, stage.gradient_bytes, stage.optimizer_bytes) == (
            4e6,
            4e6,
            8e6,
        )
    assert costs.stages[0].input_bytes == 4 * 1000  # the model's input, 4 samples
    assert costs.stages[1].input_bytes == 4 * 65_536  # the previous layer's output


def test_memory_bound_stage_times_are_traffic_over_bandwidth() -> None:
    # Compute is instant next to a 1 GB/s memory. Micro-batch of 1 sample:
    # F traffic = weights 4e6 + activations (1e6 stashed + 65,536 out) = 5,065,536 B -> 5.065536 ms
    # I traffic is the same; W reads weights and writes gradients (8e6) + 0.25e6 -> 8.25 ms.
    # The optimizer reads and writes weights, gradients and state: 2 x 16e6 B -> 32 ms.
    costs = costs_from_model(_tiny_model(), _cluster(1e9), 2, 1)
    stage = costs.stages[0]
    assert stage.forward_s == pytest.approx(5.065536e-3, rel=1e-12)
    assert stage.input_grad_s == pytest.approx(5.065536e-3, rel=1e-12)
    assert stage.weight_grad_s == pytest.approx(8.25e-3, rel=1e-12)
    assert stage.optimizer_step_s == pytest.approx(32e-3, rel=1e-12)


def test_an_explicit_partition_sums_its_layers() -> None:
    # One stage holding both layers: its times and bytes are the two layers' sums.
    costs = costs_from_model(_tiny_model(), _cluster(1e18), 1, 4, partition=[2], optimizer=False)
    assert costs.stages[0].forward_s == pytest.approx(16e-3, rel=1e-12)
    assert costs.stages[0].parameter_bytes == 8e6


def test_fsdp_holds_shards_and_gathers_two_layers_at_a_time() -> None:
    """One stage of the two 1M-parameter fp32 layers (4 B weights, 4 B gradients, 8 B of
    optimizer state each) under ZeRO-3 over 4 replicas, no pipeline: at rest a quarter of
    the weights (no master copy: the shard is in the weights' dtype), of the gradients and of
    the state; while a pass runs, one layer's and the next one's gathered weights (8 MB), in
    the backward the layer's whole gradient too (4 MB) until its reduce-scatter. The
    optimizer steps over its quarter: 2 x (4 + 4 + 8) MB / 4 at 1 GB/s."""
    from pipesim.parallel.config import Parallelism

    costs = costs_from_model(
        _tiny_model(), _cluster(1e9), 1, 1, parallelism=Parallelism(zero=3, data=4)
    )
    stage = costs.stages[0]
    assert (stage.parameter_bytes, stage.gradient_bytes, stage.optimizer_bytes) == (
        2e6,
        2e6,
        4e6,
    )
    assert (stage.unsharded_parameter_bytes, stage.unsharded_gradient_bytes) == (8e6, 8e6)
    plain = costs_from_model(_tiny_model(), _cluster(1e9), 1, 1).stages[0]
    assert stage.forward_transient_bytes == pytest.approx(plain.forward_transient_bytes + 8e6)
    assert stage.input_grad_transient_bytes == pytest.approx(
        plain.input_grad_transient_bytes + 12e6
    )
    assert stage.optimizer_step_s == pytest.approx(2 * 32e6 / 4 / 1e9)
    # inside a pipeline (two stages) each stage holds its whole weights and gradients
    piped = costs_from_model(
        _tiny_model(), _cluster(1e9), 2, 1, parallelism=Parallelism(zero=3, data=4)
    ).stages[0]
    assert (piped.parameter_bytes, piped.gradient_bytes, piped.optimizer_bytes) == (
        4e6 + 1e6,
        4e6,
        2e6,
    )
