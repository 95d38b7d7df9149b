"""The kernel-level time model by hand: a matmul on the efficiency curve or its own memory
traffic, memory-bound bytes at the achievable bandwidth, launch overheads, collectives."""

from __future__ import annotations

import math

import pytest

from pipesim.common.checks import SpecError
from pipesim.costs.kernel_time import matmul_time_s, pass_time_s
from pipesim.hardware.accelerator import Accelerator
from pipesim.hardware.collectives import Collective
from pipesim.hardware.network import Link, Network, Topology
from pipesim.workload.work import CollectiveCall, GroupKind, Matmul, PassWork, Scaled

CURVE = ((1e9, 0.25), (1e12, 0.75))


def _accelerator(**kw: object) -> Accelerator:
    fields: dict[str, object] = {
        "name": "toy",
        "peak_flops_per_s": {"bf16": 1e15},
        "efficiency": 0.5,
        "memory_bytes": 1e12,
        "memory_bandwidth_bytes_per_s": 1e12,
        "kernel_overhead_s": 0.0,
        "matmul_efficiency": CURVE,
        "memory_bandwidth_efficiency": 0.5,
    }
    fields.update(kw)
    return Accelerator(**fields)  # type: ignore[arg-type]


def test_the_curve_is_interpolated_in_log_flops_and_flat_beyond_its_ends() -> None:
    acc = _accelerator()
    assert acc.matmul_fraction(1e6) == 0.25
    assert acc.matmul_fraction(1e9) == 0.25
    assert acc.matmul_fraction(math.sqrt(1e9 * 1e12)) == pytest.approx(0.5)
    assert acc.matmul_fraction(1e15) == 0.75
    assert not Accelerator("x", {"bf16": 1.0}, 0.5, 1.0, 1.0).kernel_level


def test_a_large_matmul_runs_at_the_curves_fraction() -> None:
    """M = 1024 (b = 2 x 512 rows), N = K = 8192: 2·1024·8192·8192 = 137.4 GFLOP at the
    curve's 0.25 + 0.5·log(137.4)/log(1000) of 1 PFLOP/s; its 2·(M K + K N + M N) bytes
    (168 MB) move faster than that at 5 TB/s."""
    acc = _accelerator(memory_bandwidth_bytes_per_s=1e13)
    matmul = Matmul("fc", 512, 8192, 8192)
    flops = 2 * 1024 * 8192 * 8192
    fraction = 0.25 + 0.5 * math.log(flops / 1e9) / math.log(1000)
    assert matmul_time_s(acc, matmul, 2, "bf16", 2) == pytest.approx(flops / (1e15 * fraction))


def test_a_skinny_matmul_is_bound_by_its_memory_traffic() -> None:
    """A batch of 64 products of 128 x 16 by 16 x 128: 2·(2048 + 2048 + 16384)·64 bytes at
    half of 1 TB/s, slower than its 33.6 MFLOP at the curve's 0.25 of 1 PFLOP/s."""
    acc = _accelerator(kernel_overhead_s=1e-6)
    matmul = Matmul("scores", 128, 128, 16, 32, Scaled.BATCH)
    traffic = 2 * 64 * (128 * 16 + 16 * 128 + 128 * 128)
    assert matmul_time_s(acc, matmul, 2, "bf16", 2) == pytest.approx(traffic / 0.5e12 + 1e-6)


def test_a_pass_adds_matmuls_memory_kernels_and_collectives() -> None:
    """2 MB per sample at b = 4 and 1 MB fixed, at 0.5 TB/s: 18 us; 3 kernels of 2 us; an
    all-reduce of 1 MB per sample (4 MB) over 2 ranks at 100 GB/s and 1 us: 40 us + 2 us."""
    acc = _accelerator(kernel_overhead_s=2e-6)
    work = PassWork(
        memory_bytes=2e6,
        fixed_memory_bytes=1e6,
        kernels=3,
        collectives=(CollectiveCall(Collective.ALL_REDUCE, 1e6),),
    )
    network = Network(2, Topology.ALL_TO_ALL, Link("l", 100e9, 1e-6))
    assert pass_time_s(acc, work, 4, "bf16") == pytest.approx(18e-6 + 6e-6)
    assert pass_time_s(acc, work, 4, "bf16", network, (0, 1)) == pytest.approx(
        18e-6 + 6e-6 + 40e-6 + 2e-6
    )


def test_overlapped_collectives_hide_behind_the_matmuls_and_only_their_excess_shows() -> None:
    """A recipe's tp_comm_overlap (Transformer Engine's userbuffers): the pass is its
    memory-bound part plus the longer of its matmuls and its collectives. 2 us of memory-bound
    work (1 MB at 0.5 TB/s: 2 us); a 1e12-FLOP matmul at 0.75 of 1 PFLOP/s:
    1.333 ms; an all-reduce of 1 MB per sample at b = 1 over 2 ranks at 100 GB/s: 10 us + 2 us.
    Overlapped, the collective disappears behind the matmul; made 1000 times larger (10 ms),
    only what exceeds the matmul shows."""
    acc = _accelerator()
    network = Network(2, Topology.ALL_TO_ALL, Link("l", 100e9, 1e-6))
    matmul = Matmul("mm", 1e4, 1e4, 5e3)

    def work(collective_bytes: float) -> PassWork:
        return PassWork(
            matmuls=(matmul,),
            memory_bytes=1e6,
            collectives=(CollectiveCall(Collective.ALL_REDUCE, collective_bytes),),
        )

    matmul_s = pass_time_s(acc, PassWork(matmuls=(matmul,)), 1, "bf16")
    assert matmul_s == pytest.approx(1e12 / 0.75e15, rel=1e-3)
    small, large = work(1e6), work(1e9)
    serial = pass_time_s(acc, small, 1, "bf16", network, (0, 1))
    assert serial == pytest.approx(matmul_s + 2e-6 + 12e-6)
    hidden = pass_time_s(acc, small, 1, "bf16", network, (0, 1), overlap_collectives=True)
    assert hidden == pytest.approx(matmul_s + 2e-6)
    exposed = pass_time_s(acc, large, 1, "bf16", network, (0, 1), overlap_collectives=True)
    assert exposed == pytest.approx(2e-6 + 1e9 / 100e9 + 2e-6)


def test_reductions_and_random_kernels_run_at_their_fractions_of_the_bandwidth() -> None:
    """1 MB elementwise, 1 MB of row reductions at 0.5 and 1 MB of dropout at 0.25 of the
    achievable 0.5 TB/s, per sample at b = 2: 4 us + 8 us + 16 us."""
    acc = _accelerator(reduction_bandwidth_fraction=0.5, random_bandwidth_fraction=0.25)
    work = PassWork(memory_bytes=1e6, reduction_bytes=1e6, random_bytes=1e6)
    assert pass_time_s(acc, work, 2, "bf16") == pytest.approx(4e-6 + 8e-6 + 16e-6)
    # at fractions of 1 the three classes are one stream of bytes, as before they were split
    assert pass_time_s(_accelerator(), work, 2, "bf16") == pytest.approx(12e-6)


def test_a_pass_followed_by_another_adds_every_class_of_bytes() -> None:
    first = PassWork(memory_bytes=1.0, reduction_bytes=2.0, random_bytes=3.0, transient_bytes=5)
    second = PassWork(memory_bytes=10.0, reduction_bytes=20.0, random_bytes=30.0)
    both = first.plus(second)
    assert (both.memory_bytes, both.reduction_bytes, both.random_bytes) == (11.0, 22.0, 33.0)
    assert both.transient_bytes == 5


@pytest.mark.parametrize("field", ["reduction_bandwidth_fraction", "random_bandwidth_fraction"])
@pytest.mark.parametrize("value", [0.0, 1.5, -0.1])
def test_a_bandwidth_fraction_outside_0_to_1_is_refused(field: str, value: float) -> None:
    with pytest.raises(SpecError, match=rf"accelerator.{field} must be a number in \(0, 1\]"):
        _accelerator(**{field: value})


@pytest.mark.parametrize(
    ("curve", "message"),
    [
        (((1e9, 0.5), (1e8, 0.6)), "must list increasing FLOPs"),
        (((1e9, 1.5),), r"fraction must be a number in \(0, 1\]"),
        ((1e9,), "must be a \\[flops, fraction\\] pair"),
    ],
)
def test_a_bad_curve_is_refused(curve: object, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        _accelerator(matmul_efficiency=curve)


def test_a_context_parallel_ring_shows_only_what_the_attention_does_not_hide() -> None:
    """A ring of sends over 4 context ranks at 100 GB/s and 1 us per step, beside the pass's
    "flash scores" matmul (1.333 ms) but not its "proj" matmul: 4 MB per sample passes 3/4 of
    it, 30 us + 3 us: hidden. 4 GB: 30 ms + 3 us, of which what exceeds the scores shows. The
    ring runs over the context group, not the tensor group (which is absent here); an
    all-to-all over the expert group pays one latency."""
    acc = _accelerator()
    network = Network(4, Topology.ALL_TO_ALL, Link("l", 100e9, 1e-6))
    scores = Matmul("flash scores", 1e4, 1e4, 5e3)
    proj = Matmul("proj", 1e4, 1e4, 5e3)
    base = pass_time_s(acc, PassWork(matmuls=(scores, proj)), 1, "bf16")
    matmul_s = base / 2

    def ring(size: float) -> PassWork:
        call = CollectiveCall(
            Collective.SEND_RECV, size, group=GroupKind.CONTEXT, hidden_by=("flash scores",)
        )
        return PassWork(matmuls=(scores, proj), collectives=(call,))

    context = (0, 1, 2, 3)
    assert pass_time_s(acc, ring(4e6), 1, "bf16", network, context_group=context) == base
    large = pass_time_s(acc, ring(4e9), 1, "bf16", network, context_group=context)
    assert large == pytest.approx(base + (0.03 + 3e-6 - matmul_s), rel=1e-9)
    assert pass_time_s(acc, ring(4e9), 1, "bf16", network) == base  # no context group
    exchange = PassWork(
        collectives=(CollectiveCall(Collective.ALL_TO_ALL, 4e6, group=GroupKind.EXPERT),)
    )
    assert pass_time_s(acc, exchange, 1, "bf16", network, expert_group=context) == pytest.approx(
        30e-6 + 1e-6
    )
