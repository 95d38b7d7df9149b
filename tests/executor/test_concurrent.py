"""The concurrent backend: every pipeline device a lane of one machine, all running at once.

CPU lanes (threads) are tested here; CUDA lanes (green-context streams) where a GPU is present,
and their refusal where none is."""

from __future__ import annotations

import copy
import threading

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from executor import BackendError, ExecutorError, PipelineTrainer, StageError, run_step, split_model
from executor.concurrent import ThreadTransport
from executor.errors import PeerError
from executor.lanes import CpuLanes, LaneError, cpu_lanes, cuda_lanes, green_context_support
from executor.messages import Message
from executor.models import mlp, transformer
from pipesim.schedules import Action, Kind, Schedule, build, schedule_names

from ..schedules.strategies import schedules
from .reference import assert_close, reference_step


def _step_matches_unpipelined(schedule: Schedule, width: int, seed: int) -> None:
    model = transformer(width, 2, schedule.stages, dtype=torch.float64, seed=seed)
    reference = copy.deepcopy(model)
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(schedule.microbatches * 2, 3, width, generator=generator, dtype=torch.float64)
    y = torch.randn(x.shape, generator=generator, dtype=torch.float64)
    result = run_step(
        schedule,
        split_model(model, schedule),
        x,
        y,
        nn.MSELoss(),
        backend="concurrent",
        lanes=cpu_lanes(schedule.devices, 1),
        check_finite=True,
    )
    loss, expected = reference_step(reference, x, y, nn.MSELoss(), schedule.microbatches)
    assert abs(result.loss - loss) <= 1e-10 * abs(loss)
    for name, parameter in model.named_parameters():
        assert_close(parameter.grad, expected[name], what=name)
    actions = {r.action for r in result.timeline.compute}
    assert actions == set(schedule.actions())
    assert result.device_peak_allocated_bytes is None  # CPU lanes: no allocator to read


@pytest.mark.parametrize("name", schedule_names())
def test_every_schedule_through_cpu_lanes_gives_the_unpipelined_gradients(name: str) -> None:
    _step_matches_unpipelined(build(name, 2, 4), 8, 3)


@settings(max_examples=25, deadline=None)
@given(schedules(max_devices=4, max_microbatches=6, max_chunks=2), st.integers(0, 2**16))
def test_any_schedule_through_cpu_lanes_gives_the_unpipelined_gradients(
    schedule: Schedule, seed: int
) -> None:
    _step_matches_unpipelined(schedule, 4, seed)


def test_two_lanes_compute_at_the_same_time() -> None:
    """A real pipeline: some compute span of lane 0 overlaps one of lane 1 (the local backend
    runs one action at a time, so this fails there)."""
    schedule = build("1f1b", 2, 6)
    model = mlp(384, 8, seed=0)
    x, y = torch.randn(6 * 64, 384), torch.randn(6 * 64, 384)
    stages = split_model(model, schedule)

    def overlapping(backend: str) -> bool:
        result = run_step(
            schedule,
            stages,
            x,
            y,
            nn.MSELoss(),
            backend=backend,
            lanes=cpu_lanes(2, 1) if backend == "concurrent" else None,
        )
        spans = {
            d: [(r.start_s, r.end_s) for r in result.timeline.compute if r.device == d]
            for d in (0, 1)
        }
        return any(a0 < b1 and a1 < b0 for a0, b0 in spans[0] for a1, b1 in spans[1])

    assert overlapping("concurrent")
    assert not overlapping("local")


def _no_lane_threads() -> bool:
    return not [t for t in threading.enumerate() if t.name.startswith("pipesim-lane-")]


class _Fails(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise ValueError("boom")


def test_a_stage_that_raises_ends_every_lane_with_its_message() -> None:
    schedule = build("1f1b", 3, 4)
    stages = [nn.Linear(4, 4), _Fails(), nn.Linear(4, 4)]
    with pytest.raises(StageError, match=r"stage 1 forward of micro-batch 0 failed.*boom"):
        run_step(schedule, stages, torch.randn(8, 4), torch.randn(8, 4), nn.MSELoss(), "concurrent")
    assert _no_lane_threads()


def test_a_message_that_never_comes_is_a_peer_error_naming_it() -> None:
    transport = ThreadTransport(timeout_s=0.2)
    message = Message(0, Action(0, Kind.F, 0), Action(1, Kind.F, 0))
    with pytest.raises(PeerError, match=r"waited 0.2 s for 0F0->1F0 \(step 0\) from device 0"):
        transport.receive(message, 0)


def test_a_failed_lane_wakes_a_waiting_one() -> None:
    transport = ThreadTransport(timeout_s=30)
    message = Message(0, Action(0, Kind.F, 0), Action(1, Kind.F, 0))
    errors: list[BaseException] = []

    def wait() -> None:
        try:
            transport.receive(message, 0)
        except ExecutorError as error:
            errors.append(error)

    waiter = threading.Thread(target=wait)
    waiter.start()
    transport.fail(RuntimeError("lane 0 died"))
    waiter.join(5)
    assert not waiter.is_alive()
    assert "another lane failed" in str(errors[0])


def test_the_trainer_steps_the_same_through_lanes_as_one_at_a_time() -> None:
    schedule = build("zb-h1", 2, 4)
    models = [mlp(6, 4, dtype=torch.float64, seed=5) for _ in range(2)]
    x = torch.randn(8, 6, dtype=torch.float64)
    y = torch.randn(8, 6, dtype=torch.float64)
    for model, backend in zip(models, ("local", "concurrent"), strict=True):
        trainer = PipelineTrainer(
            schedule, split_model(model, schedule), nn.MSELoss(), backend=backend
        )
        for _ in range(2):
            trainer.step(x, y)
    for (name, a), b in zip(models[0].named_parameters(), models[1].parameters(), strict=True):
        assert_close(b.detach(), a.detach(), what=name)


def test_wrong_lanes_are_refused_in_one_line() -> None:
    schedule = build("1f1b", 2, 2)
    stages = split_model(mlp(4, 2), schedule)
    x, y = torch.randn(4, 4), torch.randn(4, 4)
    with pytest.raises(ExecutorError, match=r"1 CPU lane.*K=2 devices: one lane per device"):
        run_step(schedule, stages, x, y, nn.MSELoss(), "concurrent", lanes=cpu_lanes(1, 1))
    with pytest.raises(BackendError, match="lanes go with the concurrent backend, not with local"):
        run_step(schedule, stages, x, y, nn.MSELoss(), "local", lanes=cpu_lanes(2, 1))
    with pytest.raises(LaneError, match="threads_per_lane must be an integer >= 1, got 0"):
        CpuLanes(2, 0)
    for count in (0, "2", None, True):
        with pytest.raises(LaneError, match=r"lanes: count must be an integer >= 1, got"):
            cpu_lanes(count)  # type: ignore[arg-type]
    for bad in ("cpu", 2, object()):
        with pytest.raises(ExecutorError, match=r"lanes must be made by executor\.cpu_lanes"):
            run_step(schedule, stages, x, y, nn.MSELoss(), "concurrent", lanes=bad)  # type: ignore[arg-type]
    for timeout in (0, -1, float("nan")):
        with pytest.raises(ExecutorError, match="timeout_s must be seconds > 0"):
            run_step(schedule, stages, x, y, nn.MSELoss(), "concurrent", timeout_s=timeout)
    with pytest.raises(BackendError, match="not with distributed"):
        run_step(schedule, stages, x, y, nn.MSELoss(), "distributed", lanes=cpu_lanes(2, 1))


def test_cpu_lanes_restore_the_thread_setting() -> None:
    before = torch.get_num_threads()
    with cpu_lanes(2, 1).budget():
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal without a GPU")
def test_cuda_lanes_are_refused_in_one_line_without_green_contexts() -> None:
    reason = green_context_support()
    assert reason is not None
    with pytest.raises(
        LaneError, match=r"^CUDA lanes need green contexts: no CUDA device"
    ) as error:
        cuda_lanes(2)
    assert "\n" not in str(error.value)


@pytest.mark.cuda
@pytest.mark.skipif(green_context_support() is not None, reason="needs CUDA green contexts")
@pytest.mark.parametrize("name", schedule_names())
def test_every_schedule_through_cuda_lanes_gives_the_unpipelined_gradients(name: str) -> None:
    schedule = build(name, 2, 4)
    model = transformer(16, 2, schedule.stages, dtype=torch.float64, seed=2).cuda()
    reference = copy.deepcopy(model)
    x = torch.randn(8, 5, 16, dtype=torch.float64, device="cuda")
    y = torch.randn(8, 5, 16, dtype=torch.float64, device="cuda")
    lanes = cuda_lanes(2)
    result = run_step(
        schedule, split_model(model, schedule), x, y, nn.MSELoss(), "concurrent", lanes=lanes
    )
    loss, expected = reference_step(reference, x, y, nn.MSELoss(), 4)
    assert abs(result.loss - loss) <= 1e-10 * abs(loss)
    for n, p in model.named_parameters():
        assert_close(p.grad, expected[n], what=n)
    assert result.device_peak_allocated_bytes is not None
    assert result.device_peak_allocated_bytes > 0
    assert all(r.end_s >= r.start_s >= 0 for r in result.timeline.compute)
    assert all(t.end_s >= t.start_s for t in result.timeline.transfers)


@pytest.mark.cuda
@pytest.mark.skipif(green_context_support() is not None, reason="needs CUDA green contexts")
def test_two_cuda_lanes_compute_at_the_same_time() -> None:
    schedule = build("1f1b", 2, 6)
    model = mlp(2048, 8, seed=0).cuda()
    x = torch.randn(6 * 512, 2048, device="cuda")
    y = torch.randn_like(x)
    stages = split_model(model, schedule)
    lanes = cuda_lanes(2)
    run_step(schedule, stages, x, y, nn.MSELoss(), "concurrent", lanes=lanes)  # warm-up
    result = run_step(schedule, stages, x, y, nn.MSELoss(), "concurrent", lanes=lanes)
    spans = {
        d: [(r.start_s, r.end_s) for r in result.timeline.compute if r.device == d] for d in (0, 1)
    }
    assert any(a0 < b1 and a1 < b0 for a0, b0 in spans[0] for a1, b1 in spans[1])


INTERRUPTED_LOOP = """
import signal, sys, threading
signal.signal(signal.SIGINT, signal.default_int_handler)
import torch
from torch import nn
from executor import run_step, split_model, cpu_lanes
from executor.models import transformer
from pipesim.schedules import build
schedule = build("1f1b", 2, 8)
stages = split_model(transformer(128, 4, 8, seed=0), schedule)
x = torch.randn(32, 32, 128)
lanes = cpu_lanes(2, 1)
try:
    while True:
        run_step(schedule, stages, x, x, nn.MSELoss(), backend="concurrent", lanes=lanes)
        print("stepped", flush=True)
except KeyboardInterrupt:
    print("lanes left:", [t.name for t in threading.enumerate() if t.name != "MainThread"])
    sys.exit(130)
"""


def test_ctrl_c_twice_stops_every_lane_before_the_process_exits() -> None:
    """A second Ctrl-C while the lanes stop must not abandon them: a lane thread inside a
    torch operation when the interpreter exits aborts it (exit 134, "terminate called")."""
    import os
    import signal
    import subprocess
    import sys
    import time

    process = subprocess.Popen(
        [sys.executable, "-c", INTERRUPTED_LOOP],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=os.getcwd(),
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert process.stdout is not None
    assert process.stdout.readline().strip() == "stepped"  # the loop is under way
    process.send_signal(signal.SIGINT)
    time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=120)
    assert "terminate called" not in err
    # 130 from the script, or the second SIGINT landing in its own except block (Python then
    # ends by that signal): either way no abort (-SIGABRT) and no lane left running.
    assert process.returncode in (130, -signal.SIGINT), err
    if process.returncode == 130:
        assert "lanes left: []" in out


def test_a_lane_stream_comes_from_its_green_context() -> None:
    """A green context's own Stream() where it has one; otherwise a stream made while the
    context is current, popped again even when making it fails."""
    from executor.lanes import _stream_of

    class WithStream:
        def Stream(self) -> str:
            return "its own"

    class ContextOnly:
        def __init__(self) -> None:
            self.calls: list[str] = []

        def set_context(self) -> None:
            self.calls.append("set")

        def pop_context(self) -> None:
            self.calls.append("pop")

    assert _stream_of(WithStream(), torch.device("cuda", 0)) == "its own"
    context = ContextOnly()
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError):
            _stream_of(context, torch.device("cuda", 0))
        assert context.calls == ["set", "pop"]
