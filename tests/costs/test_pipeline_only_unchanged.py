"""The hybrid-parallel model reduces to the pipeline-only one: with T = 1, no recomputation and
no optimizer sharding, every layer and stage is what it was, and on hardware without a kernel
curve the step time and the static and stashed memory are the very numbers pipesim gave before
tensor parallelism existed (literals recorded from that version, commit 4205bfd, through
``pipesim simulate --json``)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipesim.config import RunConfig
from pipesim.costs.model_on_hardware import model_on_hardware
from pipesim.engine import simulate
from pipesim.hardware import resolve_hardware
from pipesim.parallel.config import IDENTITY, Parallelism
from pipesim.schedules import build
from pipesim.workload import model
from pipesim.workload.sharding import sharded_layers

# argv pieces: (model, hardware, schedule, v, dtype, steps), then the recorded iteration time and
# per device (static bytes, peak activation bytes)
RECORDED = [
    (
        ("gpipe-transformer-24", "tpu-v3", "1f1b", 1, None, 1),
        3.181439055488347,
        [
            (4412227584, 45902594048.0),
            (4230094848, 40164655104.0),
            (3625795584, 22951231488.0),
            (3807977472, 10120855552.0),
        ],
    ),
    (
        ("gpt-3.8b", "v100-nvlink", "interleaved-1f1b", 2, None, 1),
        31.781476318786755,
        [
            (16973168640, 268705988608.0),
            (14500626432, 219848638464.0),
            (14500626432, 170993385472.0),
            (16973266944, 152672665600.0),
        ],
    ),
    (
        ("bert-355m", "v100-16gb-nvlink", "pipedream-2bw", 1, None, 3),
        2.40149205085524,
        [
            (1924263936, 59593719808.0),
            (1587124224, 52143587328.0),
            (1587124224, 34762391552.0),
            (1470836736, 14008975360.0),
        ],
    ),
    (
        ("amoebanet-d-18-256", "p100-pcie", "1f1b", 1, "fp16", 1),
        0.4818004398025074,
        [
            (47108352.0, 2813067264.0),
            (162398208.0, 1194590208.0),
            (359399424.0, 398196736.0),
            (901656288.0, 141359616.0),
        ],
    ),
]


@pytest.mark.parametrize(("setup", "iteration", "memory"), RECORDED, ids=lambda x: str(x)[:40])
def test_the_pipeline_only_numbers_are_the_earlier_versions(
    setup: tuple[str, str, str, int, str | None, int],
    iteration: float,
    memory: list[tuple[float, float]],
) -> None:
    name, hardware, schedule_name, chunks, dtype, steps = setup
    built = model(name)
    if dtype is not None:
        built = dataclasses.replace(built, dtype=dtype)
    batch = built.default_batch
    schedule = build(schedule_name, 4, 8, chunks)
    run = RunConfig(built, resolve_hardware(hardware), Parallelism(tensor=1))
    costs = model_on_hardware(run, 4, chunks, batch / 8, placement=schedule.placement)
    result = simulate(schedule, costs, steps=steps)
    assert result.iteration_time_s == pytest.approx(iteration, rel=1e-12)
    static = [d.memory.static_bytes for d in result.per_device]
    stashed = [d.peak_activation_bytes for d in result.per_device]
    assert static == pytest.approx([m[0] for m in memory], rel=1e-12)
    assert stashed == pytest.approx([m[1] for m in memory], rel=1e-12)


@settings(max_examples=20)
@given(
    st.sampled_from(["gpipe-transformer-8", "gpt-355m", "bert-1.3b", "zb-1.5b", "megatron-1.7b"]),
    st.sampled_from([1, 2, 4]),
)
def test_the_plain_configuration_leaves_every_layer_as_it_is(name: str, replicas: int) -> None:
    built = model(name)
    plain = sharded_layers(built, Parallelism(data=replicas))
    assert plain.layers is built.layers
    assert plain.recomputed is None
    assert sharded_layers(built, IDENTITY).layers is built.layers
