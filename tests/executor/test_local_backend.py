"""The local backend: splitting, errors that name what failed, timelines, stash measurement."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from executor import BackendError, ExecutorError, SplitError, StageError, run_step, split_model
from executor.clock import Clock
from executor.models import mlp
from executor.runtime import LocalTransport, make_runners
from executor.split import split_microbatches
from executor.stash import StashMeter
from executor.worker import DeviceRecord, DeviceWorker
from pipesim.export import chrome_trace
from pipesim.schedules import Kind, Schedule, build


def data(size: int, width: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return torch.randn(size, width, generator=generator), torch.randn(
        size, width, generator=generator
    )


def test_split_model_spreads_layers_and_shares_them() -> None:
    model = mlp(4, 7)
    stages = split_model(model, build("1f1b", 3, 2))
    assert [len(s) for s in stages] == [3, 2, 2]  # type: ignore[arg-type]
    assert stages[0][0] is model[0]  # type: ignore[index]
    counts = [len(s) for s in split_model(model, build("1f1b", 3, 2), [1, 1, 5])]  # type: ignore[arg-type]
    assert counts == [1, 1, 5]


@pytest.mark.parametrize(
    ("call", "kind", "message"),
    [
        (
            lambda: split_model(mlp(4, 3), build("zbv", 2, 4)),
            SplitError,
            "model has 3 layers, fewer than the schedule's 4 stages (K=2 x v=2)",
        ),
        (
            lambda: split_model(mlp(4, 3), build("1f1b", 2, 2), [1, 1]),
            SplitError,
            "partition covers 2 layers but the model has 3: 1,1",
        ),
        (
            lambda: split_model(mlp(4, 3), build("1f1b", 2, 2), [3]),
            SplitError,
            "partition has 1 stage(s) but the schedule has 2: 3",
        ),
        (
            lambda: split_model(mlp(4, 3), build("1f1b", 2, 2), [3, 0]),
            SplitError,
            "partition layer counts must be integers >= 1, got 3,0",
        ),
        (
            lambda: run_step(
                build("1f1b", 2, 4),
                split_model(mlp(4, 2), build("1f1b", 2, 4)),
                *data(6),
                nn.MSELoss(),
            ),
            SplitError,
            "inputs: a batch of 6 does not split into 4 equal micro-batches",
        ),
        (
            lambda: run_step(build("1f1b", 2, 2), [mlp(4, 1)], *data(4), nn.MSELoss()),
            SplitError,
            "got 1 stage module(s) but schedule '1f1b' has 2 stages (K=2 x v=1); use "
            "executor.split_model",
        ),
        (
            lambda: run_step(
                build("1f1b", 2, 2),
                split_model(mlp(4, 2), build("1f1b", 2, 2)),
                *data(4),
                nn.MSELoss(),
                backend="mpi",
            ),
            BackendError,
            "backend must be one of local, concurrent, distributed, got 'mpi'",
        ),
        (
            lambda: run_step(
                build("1f1b", 2, 2),
                split_model(mlp(4, 2), build("1f1b", 2, 2)),
                *data(4),
                nn.MSELoss(),
                backend="distributed",
            ),
            ExecutorError,
            "the distributed backend needs torch.distributed initialized (torchrun, or "
            "init_process_group) with one rank per device",
        ),
    ],
)
def test_bad_arguments_are_named(call: object, kind: type[Exception], message: str) -> None:
    with pytest.raises(kind) as error:
        call()  # type: ignore[operator]
    assert type(error.value) is kind
    assert str(error.value) == message


def test_a_bad_backend_is_bad_input_not_a_split_error() -> None:
    assert not issubclass(BackendError, SplitError)
    assert issubclass(BackendError, ValueError)  # a PipesimError: the CLI's exit 2


def test_a_shape_mismatch_names_the_stage_and_the_shape() -> None:
    schedule = build("1f1b", 2, 2)
    stages = [nn.Sequential(nn.Linear(4, 3)), nn.Sequential(nn.Linear(5, 4))]
    with pytest.raises(StageError) as error:
        run_step(schedule, stages, *data(4), nn.MSELoss())
    assert str(error.value).startswith(
        "stage 1 forward of micro-batch 0 failed on an input of shape (2, 3): RuntimeError: "
    )
    assert isinstance(error.value.__cause__, RuntimeError)


def test_a_stage_that_raises_is_named() -> None:
    schedule = build("zb-h1", 2, 2)
    stages = split_model(mlp(4, 2), schedule)

    def explode(*_: object) -> None:
        raise ValueError("boom")

    stages[0][0].register_full_backward_hook(explode)  # type: ignore[index]
    with pytest.raises(StageError) as error:
        run_step(schedule, stages, *data(4), nn.MSELoss())
    assert str(error.value) == (
        "stage 0 backward of micro-batch 0 failed on an input of shape (2, 4): ValueError: boom"
    )


def test_timeline_has_every_action_and_transfer_and_exports() -> None:
    schedule = build("interleaved-1f1b", 2, 4, 2)
    result = run_step(schedule, split_model(mlp(4, 4), schedule), *data(8), nn.MSELoss())
    compute = result.timeline.compute
    assert sorted(str(r.action) for r in compute) == sorted(str(a) for a in schedule.actions())
    assert all(0 <= r.start_s <= r.end_s for r in compute)
    # Cross-device messages: every stage boundary, both directions, per micro-batch.
    assert len(result.timeline.transfers) == 2 * 3 * 4
    trace = chrome_trace(result.timeline.compute, result.timeline.transfers, 2)
    assert any(e.get("name") == "0F0" for e in trace["traceEvents"])


def run_with(name: str, microbatches: int, width: int = 16) -> tuple[int, ...]:
    schedule = build(name, 2, microbatches)
    stages = split_model(mlp(width, 4), schedule)
    return run_step(schedule, stages, *data(2 * microbatches, width), nn.MSELoss()).peak_stash_bytes


def test_stash_peaks_follow_the_schedules_in_flight_counts() -> None:
    one = run_with("gpipe", 1)  # one micro-batch: each device's stash per micro-batch
    assert all(b > 0 for b in one)
    assert run_with("gpipe", 4) == (4 * one[0], 4 * one[1])  # all M in flight
    assert run_with("1f1b", 4) == (2 * one[0], 1 * one[1])  # K-d in flight on device d


def test_remat_stashes_less() -> None:
    width = 32
    plain = build("gpipe", 1, 4)
    remat = build("gpipe", 1, 4, remat=True)
    full = run_step(plain, split_model(mlp(width, 4), plain), *data(8, width), nn.MSELoss())
    less = run_step(remat, split_model(mlp(width, 4), remat), *data(8, width), nn.MSELoss())
    assert less.peak_stash_bytes[0] < full.peak_stash_bytes[0] / 2


def stash_after_each_action(schedule: Schedule, width: int) -> dict[int, list[tuple[str, int]]]:
    """Run one step on the local backend's parts, recording each device's live stash bytes
    after each of its actions."""
    meters = {d: StashMeter() for d in range(schedule.devices)}
    stages = split_model(mlp(width, schedule.stages), schedule)
    runners = make_runners(schedule, stages, nn.MSELoss(), None, None, meters)
    x, y = data(2 * schedule.microbatches, width)
    xs = split_microbatches(x, schedule.microbatches, "inputs")
    ys = split_microbatches(y, schedule.microbatches, "targets")
    transport = LocalTransport()
    workers = [
        DeviceWorker(
            d,
            schedule,
            {s: r for s, r in runners.items() if schedule.device_of(s) == d},
            transport,
            DeviceRecord(d, Clock(torch.device("cpu"))),
            0,
            xs,
            ys,
        )
        for d in range(schedule.devices)
    ]
    seen: dict[int, list[tuple[str, int]]] = {d: [] for d in range(schedule.devices)}
    for action in schedule.execution_order():
        device = schedule.device_of(action.stage)
        workers[device].run(action)
        seen[device].append((str(action), meters[device].live_bytes))
    return seen


def test_split_backward_keeps_w_stash_from_i_until_w() -> None:
    """I frees what only the input gradient needed and keeps the W part; W frees the rest."""
    schedule = build("zb-h1", 2, 3)
    assert {a.kind for a in schedule.actions()} == {Kind.F, Kind.I, Kind.W}
    seen = stash_after_each_action(schedule, 8)
    f0, w0 = seen[0][0][1], seen[0][2][1] - seen[0][0][1]  # after 0F0; held past 0I0
    f1, w1 = seen[1][0][1], seen[1][1][1]  # after 1F0; held past 1I0
    assert 0 < w0 < f0 and 0 < w1 < f1
    assert seen[0] == [
        ("0F0", f0),
        ("0F1", 2 * f0),
        ("0I0", f0 + w0),
        ("0W0", f0),
        ("0F2", 2 * f0),
        ("0I1", f0 + w0),
        ("0W1", f0),
        ("0I2", w0),
        ("0W2", 0),
    ]
    assert seen[1] == [
        ("1F0", f1),
        ("1I0", w1),
        ("1F1", w1 + f1),
        ("1I1", 2 * w1),  # both W stashes held: 1W0 has not run yet
        ("1W0", w1),
        ("1F2", w1 + f1),
        ("1I2", 2 * w1),
        ("1W1", w1),
        ("1W2", 0),
    ]
