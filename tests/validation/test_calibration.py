"""Calibration: profiles of a tiny model make valid simulator costs."""

from __future__ import annotations

import torch
from torch import nn

from executor import run_step, split_model
from executor.models import mlp
from executor.profile import (
    LinkProfile,
    calibrated_costs,
    in_situ_latency,
    in_situ_times,
    profile_stage,
    stage_inputs,
    with_times,
)
from pipesim.engine import simulate
from pipesim.schedules import Kind, build


def test_profiles_of_a_tiny_model_make_valid_costs() -> None:
    schedule = build("zb-h1", 2, 4)
    stages = split_model(mlp(32, 4), schedule)
    x, y = torch.randn(4, 32), torch.randn(4, 32)
    inputs = stage_inputs(stages, x)
    profiles = [
        profile_stage(s, stages[s], inputs[s], y, nn.MSELoss(), last=s == 1, repeats=3, warmup=1)
        for s in range(2)
    ]
    for p in profiles:
        assert p.forward_s > 0 and p.backward_s > 0 and p.input_grad_s > 0 and p.weight_grad_s > 0
        assert 0 < p.weight_grad_activation_bytes <= p.activation_bytes
        assert p.input_bytes == 4 * 32 * 4
        assert p.parameter_bytes == 2 * (32 * 32 + 32) * 4
    assert profiles[0].output_bytes == 4 * 32 * 4 and profiles[1].output_bytes == 0
    assert all(p.grad is not None and not p.grad.any() for p in stages[0].parameters())
    costs = calibrated_costs(profiles, LinkProfile(1e-5, 1e9, ()), 2, samples_per_microbatch=4)
    result = simulate(schedule, costs)
    assert result.iteration_time_s > 0 and result.throughput_unit == "samples/s"
    assert costs.stages[0].backward_s == profiles[0].backward_s  # B as measured, not I + W


def test_in_situ_times_come_from_a_measured_timeline() -> None:
    schedule = build("zb-h1", 2, 4)
    stages = split_model(mlp(16, 2), schedule)
    result = run_step(schedule, stages, torch.randn(8, 16), torch.randn(8, 16), nn.MSELoss())
    times = in_situ_times([result.timeline])
    assert set(times) == {(s, k) for s in (0, 1) for k in (Kind.F, Kind.I, Kind.W)}
    assert all(t > 0 for t in times.values())
    profile = profile_stage(
        0,
        stages[0],
        torch.randn(2, 16),
        torch.randn(2, 16),
        nn.MSELoss(),
        last=False,
        repeats=2,
        warmup=1,
    )
    merged = with_times(profile, 0, times)
    assert merged.forward_s == times[(0, Kind.F)] and merged.backward_s == profile.backward_s
    # The local backend's receivers never wait before a send: no latency sample.
    assert in_situ_latency([result.timeline], 1e9) is None
