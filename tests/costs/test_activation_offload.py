"""Activations offloaded to host memory (``Parallelism.offload_activations`` N, Megatron-Core's
``--cpu-offloading-num-layers``): the model's first N blocks keep no stash on the device, each
pass takes the longer of its compute and one copy over the host link, the copies in flight
are transients; every number by hand on a toy model, then the engine's peak and the command
line, the run file and the Megatron translation stating the same run."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipesim.common.checks import SpecError
from pipesim.costs.spec_derived import costs_from_model
from pipesim.hardware.accelerator import Accelerator
from pipesim.hardware.network import Cluster, Link, Network, Topology
from pipesim.parallel.config import Parallelism
from pipesim.workload.model import Layer, Model
from tests.cli.test_schedule_cli import run, simulated

B = 4  # samples per micro-batch
STASH, KEPT = 1e6, 0.25e6  # bytes per sample: the stash, and what the weight gradient keeps


def _layer(name: str, flops: float) -> Layer:
    return Layer(
        name,
        forward_flops=flops,
        input_grad_flops=flops,
        weight_grad_flops=flops,
        parameters=1e3,
        activation_bytes=STASH,
        weight_grad_activation_bytes=KEPT,
        output_bytes=1e3,
    )


def _model() -> Model:
    """An embedding (not a block) and three blocks; the blocks' forward is 2 ms at B = 4
    (1e9 FLOPs at 1e12 x 0.5), the embedding's 8 ns."""
    layers = (_layer("embedding", 1e3), *(_layer(f"block {i}", 2.5e8) for i in range(3)))
    return Model(
        "toy",
        layers,
        input_bytes=1e3,
        dtype="fp16",
        weight_bytes_per_parameter=2,
        gradient_bytes_per_parameter=2,
        optimizer_bytes_per_parameter=8,
        default_batch=8,
    )


def _cluster(host: bool = True, link_bytes_per_s: float = 1e9) -> Cluster:
    """A toy accelerator; its host link 1 GB/s per direction (a 4 MB stash: 4 ms each way)."""
    accelerator = Accelerator(
        "toy",
        {"fp16": 1e12},
        efficiency=0.5,
        memory_bytes=1e9,
        memory_bandwidth_bytes_per_s=1e15,
        host_link_bandwidth_bytes_per_s=link_bytes_per_s if host else None,
        host_memory_bandwidth_bytes_per_s=1e10 if host else None,
    )
    return Cluster(accelerator, Network(2, Topology.ALL_TO_ALL, Link("link", 1e9, 1e-6)))


def _one_layer_stages(offloaded: int) -> tuple[object, ...]:
    costs = costs_from_model(
        _model(), _cluster(), 4, B, parallelism=Parallelism(offload_activations=offloaded)
    )
    return costs.stages


def test_the_first_n_blocks_keep_no_stash_and_wait_for_their_copies_by_hand() -> None:
    """N = 2: blocks 0 and 1 (stages 1 and 2) hold no stash, their forward and input gradient
    take the 4 ms copy instead of 2 ms of compute, the forward holds the 4 MB in flight, the
    input gradient the reloaded 4 MB and the next prefetch, the weight gradient the 1 MB it
    reads; the embedding and block 2 are as without offloading."""
    plain, offloaded = _one_layer_stages(0), _one_layer_stages(2)
    for index in (0, 3):
        assert offloaded[index] == plain[index]
    stash, kept = STASH * B, KEPT * B
    for index in (1, 2):
        before, after = plain[index], offloaded[index]
        assert (before.activation_bytes, before.weight_grad_activation_bytes) == (stash, kept)  # type: ignore[attr-defined]
        assert after.activation_bytes == after.weight_grad_activation_bytes == 0  # type: ignore[attr-defined]
        assert before.forward_s == pytest.approx(2e-3, rel=1e-3)  # type: ignore[attr-defined]
        assert after.forward_s == after.input_grad_s == pytest.approx(4e-3, rel=1e-12)  # type: ignore[attr-defined]
        assert after.weight_grad_s == before.weight_grad_s  # type: ignore[attr-defined]
        assert after.forward_transient_bytes == before.forward_transient_bytes + stash  # type: ignore[attr-defined]
        assert after.input_grad_transient_bytes == before.input_grad_transient_bytes + 2 * stash  # type: ignore[attr-defined]
        assert after.weight_grad_transient_bytes == before.weight_grad_transient_bytes + kept  # type: ignore[attr-defined]


def test_a_fast_link_hides_the_copies_under_the_compute() -> None:
    """At 10 GB/s the copy is 0.4 ms, under the 2 ms of compute: the times are unchanged."""
    fast = _cluster(link_bytes_per_s=1e10)
    plain = costs_from_model(_model(), fast, 4, B).stages[1]
    offloaded = costs_from_model(
        _model(), fast, 4, B, parallelism=Parallelism(offload_activations=1)
    ).stages[1]
    assert (offloaded.forward_s, offloaded.input_grad_s) == (plain.forward_s, plain.input_grad_s)
    assert offloaded.activation_bytes == 0


@pytest.mark.parametrize(
    ("count", "cluster", "message"),
    [
        (3, _cluster(), "offload_activations 3 must be fewer than the model's 3 transformer"),
        (1, _cluster(host=False), "offload_activations: accelerator 'toy' gives no accelerator"),
    ],
)
def test_refusals_are_one_line_naming_the_field(count: int, cluster: Cluster, message: str) -> None:
    with pytest.raises(SpecError) as error:
        costs_from_model(
            _model(), cluster, 2, B, parallelism=Parallelism(offload_activations=count)
        )
    assert message in str(error.value) and "\n" not in str(error.value)
    with pytest.raises(SpecError, match="offload_activations must be an integer >= 0, got -1"):
        Parallelism(offload_activations=-1)


FLAGS = [
    "--model",
    "megatron-1.7b",
    "--hardware",
    "a100",
    "--batch",
    "8",
    "-K",
    "1",
    "--data-parallel",
    "2",
    "--schedule",
    "1f1b",
    "-M",
    "4",
]
RUN_FILE = """\
model = "megatron-1.7b"
hardware = "a100"

[training]
batch = 8

[parallelism]
pipeline_parallel = 1
data_parallel = 2
offload_activations = 12

[pipeline]
schedule = "1f1b"
microbatches = 4
"""


def _peak(result: dict[str, object]) -> float:
    return max(device["peak_memory_bytes"] for device in result["per_device"])  # type: ignore[attr-defined]


def test_the_flag_and_the_run_file_state_the_same_run_and_the_peak_falls(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "run.toml"
    path.write_text(RUN_FILE)
    by_flag = simulated(capsys, *FLAGS, "--offload-activations", "12")
    assert simulated(capsys, "--run", str(path)) == by_flag
    on_device = simulated(capsys, *FLAGS)
    assert by_flag["layout"]["offload_activations"] == 12  # type: ignore[index]
    assert "offload_activations" not in on_device["layout"]  # type: ignore[operator]
    assert _peak(by_flag) < _peak(on_device)
    assert by_flag["iteration_time"] >= on_device["iteration_time"]  # type: ignore[operator]
    status, _, err = run(capsys, "simulate", *FLAGS, "--offload-activations", "24")
    assert status == 2
    assert err.strip().endswith(
        "--offload-activations 24 must be fewer than the model's 24 transformer blocks (the "
        "last block's stash is used as soon as it is made; a model given as layers has no "
        "blocks to offload)"
    )


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (["--schedule", "zb-h1"], "--offload-activations 4 with zb-h1, whose backward is split"),
        (["--schedule", "gpipe", "--remat"], "--offload-activations 4 with --remat: "),
    ],
)
def test_split_backward_and_rematerialization_are_refused_with_offloading(
    capsys: pytest.CaptureFixture[str], extra: list[str], said: str
) -> None:
    """A weight gradient run apart from its input gradient would read offloaded inputs, and
    re-materialization keeps no stash to copy: neither is costed, both refused in one line."""
    argv = ["--model", "megatron-1.7b", "--hardware", "a100", "--batch", "8", "-K", "2"]
    argv += ["-M", "4", "--data-parallel", "1", "--offload-activations", "4", *extra]
    status, _, err = run(capsys, "simulate", *argv)
    assert status == 2, err
    assert said in err and err.count("\n") == 1
