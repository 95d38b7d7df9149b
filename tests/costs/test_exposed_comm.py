"""The exposed communication inside a pass (what DualPipe's overlapped forward-backward pairs
hide): the part of the pass's time its collectives add, carried per stage, the times unchanged."""

from __future__ import annotations

import pytest

from pipesim.costs import StageCosts
from pipesim.costs.kernel_time import pass_time_parts_s, pass_time_s
from pipesim.costs.pipeline_costs import merge_layers
from pipesim.hardware.collectives import Collective
from pipesim.hardware.network import Link, Network, Topology
from pipesim.workload.work import CollectiveCall, GroupKind, Matmul, PassWork

from .test_kernel_time import _accelerator

NETWORK = Network(4, Topology.ALL_TO_ALL, Link("l", 100e9, 1e-6))
GROUP = (0, 1, 2, 3)
MATMUL = Matmul("mm", 1e4, 1e4, 5e3)  # 1.333 ms at 0.75 of 1 PFLOP/s


def _pass(*calls: CollectiveCall) -> PassWork:
    return PassWork(matmuls=(MATMUL,), memory_bytes=1e6, collectives=calls)


def _parts(work: PassWork, overlap: bool = False) -> tuple[float, float]:
    kw = {"context_group": GROUP, "expert_group": GROUP, "overlap_collectives": overlap}
    time, comm = pass_time_parts_s(_accelerator(), work, 1, "bf16", NETWORK, GROUP, **kw)
    assert time == pass_time_s(_accelerator(), work, 1, "bf16", NETWORK, GROUP, **kw)
    return time, comm


def test_without_collectives_nothing_is_exposed() -> None:
    assert _parts(_pass())[1] == 0.0
    assert pass_time_parts_s(_accelerator(), _pass(), 1, "bf16")[1] == 0.0


def test_the_expert_all_to_all_is_exposed_whole() -> None:
    """4 MB over 4 ranks at 100 GB/s: 30 us + 1 us, all of it communication."""
    plain_s = _parts(_pass())[0]
    time, comm = _parts(_pass(CollectiveCall(Collective.ALL_TO_ALL, 4e6, group=GroupKind.EXPERT)))
    assert comm == pytest.approx(31e-6)
    assert time == pytest.approx(plain_s + comm)


def test_tensor_collectives_are_exposed_past_the_matmuls_when_overlapped() -> None:
    small = _pass(CollectiveCall(Collective.ALL_REDUCE, 1e6))
    assert _parts(small)[1] == pytest.approx(2 * 0.75e6 / 100e9 + 6e-6)  # ring: 2(n-1)/n
    assert _parts(small, overlap=True)[1] == 0.0  # hidden behind the 1.333 ms matmul
    large = _pass(CollectiveCall(Collective.ALL_REDUCE, 1e9))
    time, comm = _parts(large, overlap=True)
    assert comm == pytest.approx(time - _parts(_pass())[0])


def test_a_hidden_collective_shows_only_its_excess() -> None:
    call = CollectiveCall(Collective.SEND_RECV, 4e9, group=GroupKind.CONTEXT, hidden_by=("mm",))
    time, comm = _parts(_pass(call))
    assert comm == pytest.approx(time - _parts(_pass())[0])
    assert 0.0 < comm < time


def test_merge_layers_sums_the_communication() -> None:
    layer = StageCosts(2.0, 3.0, 1.0, forward_comm_s=0.5, input_grad_comm_s=1.0)
    merged = merge_layers([layer, layer, layer], 0.0, speed=2.0)
    assert (merged.forward_comm_s, merged.input_grad_comm_s) == (0.75, 1.5)
    assert (merged.forward_s, merged.input_grad_s) == (3.0, 4.5)
    assert StageCosts(1.0, 1.0, 1.0).forward_comm_s == 0.0
