"""The kernel-level time model: one pass of a layer on one device, kernel by kernel.

* A matrix multiply of F FLOPs (a batched one counted whole) runs at the fraction of peak the
  accelerator's curve gives for F (``Accelerator.matmul_fraction``: a multiply split T ways is
  smaller and slower per FLOP), or at its own memory traffic (its
  inputs and output, once) over the achievable bandwidth when that is slower: the roofline of
  one kernel, plus the launch overhead.
* Memory-bound kernels move their bytes at the achievable bandwidth, each paying the launch
  overhead: elementwise ones (activation functions, residual adds, gradient accumulation) at
  the triad's, row reductions (softmax, norms, the loss) at ``reduction_bandwidth_fraction``
  of it, random-number kernels (dropout) at ``random_bandwidth_fraction`` of it.
* Tensor-parallel collectives run on the tensor-parallel group's links
  (:func:`pipesim.hardware.collectives.collective_time_s`), blocking, as Megatron-LM runs them.

The pass's time is the sum; :func:`pass_time_parts_s` also gives the collectives' exposed
part of it. Layers without a kernel description, or an accelerator without a
matmul curve, keep the per-pass roofline of :mod:`pipesim.costs.spec_derived`.
"""

from __future__ import annotations

from collections.abc import Sequence

from pipesim.hardware.accelerator import Accelerator
from pipesim.hardware.collectives import collective_time_s
from pipesim.hardware.network import Network
from pipesim.workload.work import GroupKind, Matmul, PassWork


def matmul_time_s(
    accelerator: Accelerator,
    matmul: Matmul,
    microbatch_size: float,
    dtype: str,
    element_bytes: float,
) -> float:
    """One matrix multiply (or batch of them) at ``microbatch_size`` samples."""
    batch, m, n, k = matmul.shape(microbatch_size)
    flops = 2.0 * batch * m * n * k
    compute = flops / (accelerator.peak(dtype) * accelerator.matmul_fraction(flops))
    traffic = element_bytes * batch * (m * k + k * n + m * n)
    memory = traffic / _bandwidth(accelerator)
    return max(compute, memory) + accelerator.kernel_overhead_s


def _bandwidth(accelerator: Accelerator) -> float:
    return accelerator.memory_bandwidth_bytes_per_s * accelerator.memory_bandwidth_efficiency


def pass_time_s(
    accelerator: Accelerator,
    work: PassWork,
    microbatch_size: float,
    dtype: str,
    network: Network | None = None,
    tensor_group: Sequence[int] = (),
    *,
    overlap_collectives: bool = False,
    context_group: Sequence[int] = (),
    expert_group: Sequence[int] = (),
    expert_tensor_group: Sequence[int] = (),
) -> float:
    """One pass (:class:`~pipesim.workload.work.PassWork`) on one device: its matmuls, its
    memory-bound bytes and kernels, its collectives over ``tensor_group`` of ``network``.

    ``overlap_collectives``: the collectives run while the pass's matrix multiplies do
    (Transformer Engine's userbuffers split each all-gather and reduce-scatter into chunks
    pipelined with the GEMM that consumes or produces it), so only what exceeds the matmuls'
    time is exposed. The SMs the overlap takes from the GEMMs are not modelled."""
    return pass_time_parts_s(
        accelerator,
        work,
        microbatch_size,
        dtype,
        network,
        tensor_group,
        overlap_collectives=overlap_collectives,
        context_group=context_group,
        expert_group=expert_group,
        expert_tensor_group=expert_tensor_group,
    )[0]


def pass_time_parts_s(
    accelerator: Accelerator,
    work: PassWork,
    microbatch_size: float,
    dtype: str,
    network: Network | None = None,
    tensor_group: Sequence[int] = (),
    *,
    overlap_collectives: bool = False,
    context_group: Sequence[int] = (),
    expert_group: Sequence[int] = (),
    expert_tensor_group: Sequence[int] = (),
) -> tuple[float, float]:
    """:func:`pass_time_s` and the exposed communication inside it: the pass's time (the
    very number :func:`pass_time_s` returns) and the part of it its collectives add, the
    seconds another pass's computation could hide (DualPipe's overlapped forward-backward
    pairs, :func:`pipesim.engine.durations.overlap_savings_s`): a collective's time past the
    matmuls that hide it, the expert-parallel and context-parallel collectives whole, and the
    tensor-parallel ones whole, or past the matmuls under ``overlap_collectives``. The
    expert-tensor-parallel collectives (``expert_tensor_group``: the dispatched tokens'
    gather and reduce-scatter over the ETP ranks of a folded MoE layer) are exposed whole, as
    the all-to-alls beside them."""
    b = microbatch_size
    times = [
        matmul_time_s(accelerator, matmul, b, dtype, work.element_bytes) for matmul in work.matmuls
    ]
    matmuls = sum(times)
    total = 0.0
    moved = (
        work.memory_bytes * b
        + work.fixed_memory_bytes
        + work.reduction_bytes * b / accelerator.reduction_bandwidth_fraction
        + work.random_bytes * b / accelerator.random_bandwidth_fraction
    )
    if moved > 0:
        total += moved / _bandwidth(accelerator)
    total += work.kernels * accelerator.kernel_overhead_s
    communication = 0.0
    exposed = 0.0  # the collectives' part of ``total`` besides ``communication``
    groups = {
        GroupKind.TENSOR: tensor_group,
        GroupKind.CONTEXT: context_group,
        GroupKind.EXPERT: expert_group,
        GroupKind.EXPERT_TENSOR: expert_tensor_group,
    }
    if network is not None:
        for call in work.collectives:
            group = groups[call.group]
            if len(group) <= 1:
                continue
            size = call.bytes_per_sample * b + call.fixed_bytes
            seconds = collective_time_s(network, group, call.kind, size)
            if call.hidden_by:
                beside = sum(
                    t for t, m in zip(times, work.matmuls, strict=True) if m.name in call.hidden_by
                )
                exposed += max(0.0, seconds - beside)
                total += max(0.0, seconds - beside)
            elif call.group is GroupKind.TENSOR:
                communication += seconds
            else:
                exposed += seconds
                total += seconds  # not the tensor-parallel userbuffers' to overlap
    if overlap_collectives:
        return total + max(matmuls, communication), exposed + max(0.0, communication - matmuls)
    return total + matmuls + communication, exposed + communication
