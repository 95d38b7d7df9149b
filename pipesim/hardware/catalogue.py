"""The hardware catalogue: datasheet figures of the accelerators the papers used, and today's.

Each entry is a :class:`HardwareSpec`: an accelerator and the way its devices are joined; it
builds a :class:`~pipesim.hardware.network.Cluster` of any size. Figures are datasheet peaks
(sources beside each). ``efficiency``, the fraction of peak the kernels reach, is a modelling
assumption: 0.5 for TPUs and V100/A100-era GPUs and 0.45 for H100/H200, in line with the model
FLOPs utilization reported for large transformer training (Megatron-LM 45-52% of A100 peak,
arXiv 2104.04473 §5; PaLM 46% on TPU v4; Llama 3 38-43% on H100). Override it with a TOML file
of your own, or replace every figure by calibration.

Provenance: each figure names the stored record it comes from (``# provenance:`` lines, paths
under docs/measurements/), and tests/hardware/test_provenance.py derives every figure of every
entry from its record and checks the catalogue against it (docs/accuracy.md, "Provenance of
constants"). Kinds: MEASURED for the project (h200-layers.json), CITED (cited/*.json), DERIVED
from cited figures, FITTED to a paper's table, ASSUMED (cited/assumptions.json). ``efficiency``
is ASSUMED; it is read for models given as layers, and for every layer on an entry without a
``matmul_efficiency`` curve (the TPUs, V100, P100, H100 PCIe and CPU entries).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from pipesim.common.checks import SpecError
from pipesim.hardware.accelerator import Accelerator
from pipesim.hardware.network import Cluster, Link, Network, Topology

GiB = 2**30
GB = 1e9
TERA = 1e12


@dataclass(frozen=True)
class HardwareSpec:
    """A named kind of cluster: one accelerator, one way of joining any number of them."""

    name: str
    description: str
    accelerator: Accelerator
    topology: Topology
    link: Link
    inter_node_link: Link | None = None
    devices_per_node: int | None = None
    torus_columns: int | None = None
    message_overhead_s: float = 0.0

    def network(self, devices: int, rank_stride: int = 1) -> Network:
        """The network joining ``devices`` of these accelerators, ``rank_stride`` ranks apart
        (a pipeline's devices with tensor-parallel ranks in between)."""
        return Network(
            devices,
            self.topology,
            self.link,
            self.inter_node_link,
            self.devices_per_node,
            self.torus_columns,
            rank_stride,
            self.message_overhead_s,
        )

    def describe(self, devices: int) -> str:
        """How ``devices`` of these accelerators are joined, in a line: nodes and the links
        inside and between them, or a flat fabric said to be one."""
        link = f"{self.link.name} {self.link.bandwidth_bytes_per_s / 1e9:g} GB/s"
        if self.topology is Topology.HIERARCHICAL and self.devices_per_node:
            per_node = self.devices_per_node
            nodes = -(-devices // per_node)
            inter = self.inter_node_link
            between = (
                f", {inter.name} {inter.bandwidth_bytes_per_s / 1e9:g} GB/s per device between them"
                if inter is not None and nodes > 1
                else ""
            )
            name = self.accelerator.name
            return f"{devices} x {name}: {nodes} node(s) of {per_node} ({link} inside{between})"
        if self.topology is Topology.ALL_TO_ALL:
            flat = ": a flat fabric, every pair on the same link (no nodes)" if devices > 8 else ""
            return f"{devices} x {self.accelerator.name}, all-to-all on {link} per direction{flat}"
        return f"{devices} x {self.accelerator.name}, {self.topology.value} of {link} links"

    def cluster(self, devices: int, rank_stride: int = 1) -> Cluster:
        """``devices`` of these accelerators, joined as the spec says, ``rank_stride`` ranks
        apart."""
        return Cluster(self.accelerator, self.network(devices, rank_stride))


# Google TPU v2, one core (GPipe's AmoebaNet experiments ran on TPUv2 cores, 8 GB each).
# A chip has two cores: 45 TFLOP/s bf16 (Google's figure; the CACM table says 46), 16 GiB HBM at
# 700 GB/s, four ICI links of 496 Gbit/s in a 2-D torus (Jouppi et al., "A Domain-Specific
# Supercomputer for Training Deep Neural Networks", CACM 63(7) 2020, key-features table; the same
# 700 GB/s in jax's jax/_src/pallas/mosaic/tpu_info.py). Per core: half of the chip. The link
# between the two cores of a chip is unpublished; every hop is modelled as an ICI link.
_TPU_V2 = HardwareSpec(
    "tpu-v2",
    "Google TPU v2 core: 22.5 TFLOP/s bf16, 8 GiB HBM; 2-D torus ICI",
    Accelerator(
        "tpu-v2",
        {"bf16": 22.5 * TERA},  # provenance: cited/datasheets.json
        efficiency=0.5,  # provenance: cited/assumptions.json (ASSUMED)
        memory_bytes=8 * GiB,  # provenance: cited/datasheets.json
        memory_bandwidth_bytes_per_s=350 * GB,  # provenance: cited/datasheets.json
        source="Jouppi et al., CACM 2020, Table 3 (per chip; halved per core)",
    ),
    Topology.TORUS_2D,
    # provenance: bandwidth cited/datasheets.json (CACM, not verified); latency
    # cited/assumptions.json (ASSUMED)
    Link("ici", bandwidth_bytes_per_s=496e9 / 8, latency_s=2e-6),
)

# Google TPU v3, one core (GPipe's Transformer experiments): a chip has two cores, 123 TFLOP/s
# bf16, 32 GiB HBM at 900 GB/s (cloud.google.com/tpu/docs/v3), four ICI links of 656 Gbit/s
# (Jouppi et al., CACM 2020; the JAX scaling book gives 100 GB/s one way) in a 2-D torus.
# Per core: 61.5 TFLOP/s, 16 GiB, 450 GB/s.
_TPU_V3 = HardwareSpec(
    "tpu-v3",
    "Google TPU v3 core: 61.5 TFLOP/s bf16, 16 GiB HBM; 2-D torus ICI",
    Accelerator(
        "tpu-v3",
        {"bf16": 61.5 * TERA},  # provenance: cited/datasheets.json
        efficiency=0.5,  # provenance: cited/assumptions.json (ASSUMED)
        memory_bytes=16 * GiB,  # provenance: cited/datasheets.json
        memory_bandwidth_bytes_per_s=450 * GB,  # provenance: cited/datasheets.json
        source="Jouppi et al., CACM 2020, Table 3 (per chip; halved per core)",
    ),
    Topology.TORUS_2D,
    # provenance: bandwidth cited/datasheets.json (CACM, not verified); latency
    # cited/assumptions.json (ASSUMED)
    Link("ici", bandwidth_bytes_per_s=656e9 / 8, latency_s=2e-6),
)

# NVIDIA Tesla P100 PCIe 16 GB: 18.7 TFLOP/s fp16, 9.3 fp32, 732 GB/s HBM2 (NVIDIA Tesla P100
# datasheet). GPipe's Table 3 host: GPUs on one PCIe tree without NVLink; PCIe 3.0 x16 is
# 15.75 GB/s per direction in theory, 11.7-12.9 GB/s measured host to GPU (Microway, "Tesla P100
# PCI-E 16GB Up Close"); peer to peer under one switch assumed 12 GB/s, 10 us per transfer.
_P100 = HardwareSpec(
    "p100-pcie",
    "NVIDIA P100 PCIe 16 GB: 18.7 TFLOP/s fp16; one shared PCIe 3.0 x16 bus, no NVLink",
    Accelerator(
        "p100-pcie",
        {"fp16": 18.7 * TERA, "fp32": 9.3 * TERA},  # provenance: cited/datasheets.json
        efficiency=0.5,  # provenance: cited/assumptions.json (ASSUMED)
        memory_bytes=16 * GiB,  # provenance: cited/datasheets.json
        memory_bandwidth_bytes_per_s=732 * GB,  # provenance: cited/datasheets.json
        kernel_overhead_s=5e-6,  # provenance: cited/assumptions.json (ASSUMED)
        source="NVIDIA Tesla P100 datasheet",
    ),
    Topology.SHARED_BUS,
    # provenance: both cited/assumptions.json (ASSUMED); the bandwidth inside
    # cited/microway-p100-pcie.json's host-to-GPU range
    Link("pcie", bandwidth_bytes_per_s=12 * GB, latency_s=10e-6),
)

# NVIDIA Tesla V100 SXM2 32 GB: 125 TFLOP/s tensor fp16, 15.7 fp32, 900 GB/s HBM2; NVLink 2.0
# at 25 GB/s per link and direction, six links per GPU (NVIDIA V100 datasheet). In a DGX-1
# hybrid cube-mesh, pairs have two, one or no links; ordering the 8 GPUs along NCCL's ring
# (0,3,2,1,5,6,7,4) gives every pipeline neighbour two links: modelled as all-to-all at the
# 47.9 GB/s one way that a two-link pair measures (Dell C4140 V100 whitepaper).
_V100 = HardwareSpec(
    "v100-nvlink",
    "NVIDIA V100 SXM2 32 GB: 125 TFLOP/s fp16 tensor; NVLink 2.0",
    Accelerator(
        "v100-nvlink",
        {"fp16": 125 * TERA, "fp32": 15.7 * TERA},  # provenance: cited/datasheets.json
        efficiency=0.5,  # provenance: cited/assumptions.json (ASSUMED)
        memory_bytes=32 * GiB,  # provenance: cited/datasheets.json
        memory_bandwidth_bytes_per_s=900 * GB,  # provenance: cited/datasheets.json
        kernel_overhead_s=5e-6,  # provenance: cited/assumptions.json (ASSUMED)
        source="NVIDIA Tesla V100 datasheet",
    ),
    Topology.ALL_TO_ALL,
    # provenance: bandwidth cited/dell-c4140-v100.json (not verified); latency
    # cited/assumptions.json (ASSUMED)
    Link("nvlink", bandwidth_bytes_per_s=47.9 * GB, latency_s=5e-6),
)

# The 16 GB V100 of PipeDream-2BW's evaluation (DGX-1 servers, §5.1): the same chip and links.
_V100_16GB = dataclasses.replace(
    _V100,
    name="v100-16gb-nvlink",
    description="NVIDIA V100 SXM2 16 GB (PipeDream-2BW's GPUs): as v100-nvlink, 16 GB HBM2",
    accelerator=dataclasses.replace(
        _V100.accelerator,
        name="v100-16gb-nvlink",
        memory_bytes=16 * GiB,  # provenance: cited/datasheets.json
    ),
)

# Kernel-level figures of the GPUs (the time model of pipesim.costs.kernel_time), each cited:
#
# * matmul efficiency: the fraction of peak one cuBLAS matrix multiply reaches, by its FLOPs.
#   A100: FP16 cuBLASLt, m = n = k from 1024 to 16384: 119.4, 221.8, 228.0, 253.7, 256.5 TFLOP/s
#   (Azure/AI-benchmarking-guide, Azure_Results/ND_A100_v4_results.md, A100-SXM4-80GB); the best
#   shape stas00/ml-engineering's mamf-finder found reaches 271.2 (86.9%).
#   H100/H200 (bf16): no such bf16 sweep is published; the FP8 sweep on the same machines (274.1,
#   1011.3, 1216.9, 1290.1, 1377.3 of 1979: Azure ND_H100_v5_results.md) rescaled so that its
#   largest size reaches the bf16 MAMF, 794.5 of 989 (80.3%; "H200 is the same"): an estimate,
#   pessimistic at small sizes (an FP8 multiply of the same FLOPs takes half the time).
# * memory bandwidth efficiency: BabelStream triad over the datasheet bandwidth: A100 1.70 of
#   2.039 TB/s (0.834), H100 2.97 of 3.35 (0.887) (Azure, same files). The H200's is its own
#   measured triad (below), not Azure's 4.15 of 4.8.
# * collective bus bandwidth (NCCL's busbw, nccl-tests all_reduce_perf at 8 GB): 8 x A100 over
#   NVSwitch 231.6 GB/s, 8 x H100 478.9, 8 x H200 480.0 (Azure, same files); InfiniBand: "24GB/s
#   is the peak performance per 200G NIC" (NCCL's maintainer, NVIDIA/nccl-tests#119), NDR 400G
#   taken as twice that.
# * point-to-point message overhead: the zero-bubble paper profiled T_comm, one activation
#   message between A100 pipeline stages in Megatron-LM (arXiv 2401.10241, Table 6: 0.38 to 0.76
#   ms for 10.5 to 28.3 MB); against the message size its least-squares intercept is 0.24 ms
#   (0.237), the cost of a message besides its bytes (send and receive calls, their
#   synchronisation; 0.25 ms until 2026-11-27, which no fit of the record gives). FITTED, not
#   measured: the zero-bubble reproduction's T_comm rows compare against the same column and
#   are marked in-sample. Taken for the H100 and H200 as well (the same software).
# * measured here, on one H200 SXM (torch 2.11.0+cu130, driver 580.159, 26 Nov 2026) with
#   ``python -m validation.layer_timing`` (docs/accuracy.md, "A CUDA measurement"):
#   - the H200's bf16 matmul curve, square products m = n = k from 1024 to 16384 (torch.mm,
#     CUDA events): 126.8, 590.4, 649.3, 664.5, 723.4, 732.8, 698.8, 675.4 TFLOP/s at 1024,
#     2048, 3072, 4096, 6144, 8192, 12288, 16384, the stored record's square_matmuls
#     (docs/measurements/h200-layers.json) rounded to 0.1 TFLOP/s; a test derives them from
#     the record. (An earlier run, not stored, read 179.8 at 1024 and within 2% of these above
#     it; the largest sizes fall back under the 700 W power limit.) IN-SAMPLE for the H200
#     block times of the same record, which compare the model with the run it was set from;
#   - its triad (a = b + 3c on 2 GiB fp32 arrays): 4.31 TB/s (the stored record's 4.3145),
#     0.90 of the datasheet's 4.8 (4.33 until 2026-11-27: an unstored run's);
#   - the memory-bound kernels of a transformer block alone on 2^30 bf16 elements, as
#     fractions of that triad: elementwise ones reach it (add 0.99, GELU 0.84 forward and
#     0.96 backward, dropout's backward 1.00); row reductions reach half of it (softmax 0.43,
#     its backward 0.51, layer norm 0.55, its backward 0.46, cross entropy 0.49: median 0.49;
#     0.48 until 2026-11-27, from an unstored run); dropout's forward,
#     which draws a random number per element, 0.70. These fractions are PyTorch's kernels'
#     and are taken for the A100 and H100 as well (the same kernels on each GPU, an
#     assumption: no A100 or H100 was measured). Every figure here is the stored record's
#     (add 1.00, GELU 0.85 in it); a test derives them from it.
# provenance: cited/azure-nd-a100-v4.json (CITED: FP16 cuBLASLt TFLOP/s over datasheets.json's 312)
_A100_MATMUL = (
    (2 * 1024.0**3, 119.4 / 312),
    (2 * 2048.0**3, 221.8 / 312),
    (2 * 4096.0**3, 228.0 / 312),
    (2 * 8192.0**3, 253.7 / 312),
    (2 * 16384.0**3, 256.5 / 312),
)
# provenance: cited/azure-nd-h100-v5.json, cited/ml-engineering-mamf.json (DERIVED: the FP8
# sweep rescaled to the bf16 MAMF; an estimate, no bf16 sweep of an H100 is stored)
_H100_MATMUL = tuple(
    (2 * n**3, fp8 / 1377.3 * 794.5 / 989)
    for n, fp8 in (
        (1024.0, 274.1),
        (2048.0, 1011.3),
        (4096.0, 1216.9),
        (8192.0, 1290.1),
        (16384.0, 1377.3),
    )
)
# provenance: h200-layers.json (MEASURED: square_matmuls to 0.1 TFLOP/s over 989; IN-SAMPLE for
# the record's block rows)
_H200_MATMUL = tuple(
    (2 * n**3, tflops / 989)
    for n, tflops in (
        (1024.0, 126.8),
        (2048.0, 590.4),
        (3072.0, 649.3),
        (4096.0, 664.5),
        (6144.0, 723.4),
        (8192.0, 732.8),
        (12288.0, 698.8),
        (16384.0, 675.4),
    )
)
# provenance: h200-layers.json (MEASURED: median of the row reductions over the triad, 0.4866)
REDUCTION_BANDWIDTH_FRACTION = 0.49
# provenance: h200-layers.json (MEASURED: dropout's forward over the triad)
RANDOM_BANDWIDTH_FRACTION = 0.70
# provenance: cited/zero-bubble-2401.10241-table6.json (FITTED, not measured: the intercept of
# T_comm against message bytes, least squares through the record's 12 rows: 0.237 ms, stated to
# 0.01 ms; IN-SAMPLE for that reproduction's T_comm rows)
P2P_MESSAGE_OVERHEAD_S = 0.24e-3
# provenance: cited/datasheets.json (CITED: GPUs per DGX server)
GPUS_PER_NODE = 8
# provenance: bandwidth cited/datasheets.json (InfiniBand HDR 200 / NDR 400 Gbit/s over 8);
# collective cited/nccl-tests-119.json (24 GB/s per HDR NIC; NDR DERIVED as twice it, which
# cited/nccl-tests-319.json's 48 GB/s per 400G NIC agrees with); latency ASSUMED
# (cited/assumptions.json)
_IB_HDR = Link("ib-hdr", 25 * GB, 10e-6, collective_bandwidth_bytes_per_s=24 * GB)
_IB_NDR = Link("ib-ndr", 50 * GB, 10e-6, collective_bandwidth_bytes_per_s=48 * GB)

# The host side of an optimizer offloaded to CPU memory (ZeRO-Offload, arXiv 2101.06840 §4), all
# theoretical peaks: each GPU's PCIe link per direction (NVIDIA's datasheets state both
# directions together: A100 SXM Gen4 64 GB/s, H100 SXM Gen5 128 GB/s), and the host memory
# bandwidth one GPU of a DGX server shares (DGX A100: 2 x AMD EPYC 7742, 8 channels DDR4-3200
# = 204.8 GB/s each; DGX H100 and H200: 2 x Intel Xeon Platinum 8480C, 8 channels DDR5-4800 =
# 307.2 GB/s each; over 8 GPUs).
# provenance: cited/offload-host.json (CITED: the A100 datasheet's PCIe Gen4 64 GB/s over two
# directions; a theoretical peak)
A100_HOST_LINK_BYTES_PER_S = 32 * GB
# provenance: cited/offload-host.json (CITED: the H100 datasheet's PCIe Gen5 128 GB/s over two
# directions; a theoretical peak)
HOPPER_HOST_LINK_BYTES_PER_S = 64 * GB
# provenance: cited/offload-host.json (DERIVED: 2 CPUs x 204.8 GB/s over 8 GPUs; a theoretical
# peak)
DGX_A100_HOST_MEMORY_BYTES_PER_S = 2 * 204.8 * GB / 8
# provenance: cited/offload-host.json (DERIVED: 2 CPUs x 307.2 GB/s over 8 GPUs; a theoretical
# peak)
DGX_H100_HOST_MEMORY_BYTES_PER_S = 2 * 307.2 * GB / 8

# NVIDIA A100 SXM 80 GB: 312 TFLOP/s bf16 dense, 156 tf32, 19.5 fp32, 2.039 TB/s HBM2e; NVLink 3
# 600 GB/s total (300 per direction) through NVSwitch (NVIDIA A100 datasheet). Point-to-point
# latency: NCCL send/recv measures 3-4 us on NVLink (NVIDIA/nccl issues 1487, 1984). Servers of
# 8 (DGX A100, Selene: 8 HDR InfiniBand NICs per server, one per GPU; arXiv 2104.04473 §5).
_A100 = HardwareSpec(
    "a100",
    "NVIDIA A100 SXM 80 GB: 312 TFLOP/s bf16; servers of 8 on NVSwitch (300 GB/s per "
    "direction), InfiniBand HDR between servers (25 GB/s per GPU)",
    Accelerator(
        "a100",
        # provenance: cited/datasheets.json (peaks, memory, bandwidth)
        {"bf16": 312 * TERA, "fp16": 312 * TERA, "tf32": 156 * TERA, "fp32": 19.5 * TERA},
        efficiency=0.5,  # provenance: cited/assumptions.json (ASSUMED)
        memory_bytes=80 * GiB,
        memory_bandwidth_bytes_per_s=2039 * GB,
        kernel_overhead_s=4e-6,  # provenance: cited/assumptions.json (ASSUMED)
        source="NVIDIA A100 datasheet; kernel-level figures cited above",
        matmul_efficiency=_A100_MATMUL,
        memory_bandwidth_efficiency=1.70 / 2.039,  # provenance: cited/azure-nd-a100-v4.json
        reduction_bandwidth_fraction=REDUCTION_BANDWIDTH_FRACTION,
        random_bandwidth_fraction=RANDOM_BANDWIDTH_FRACTION,
        host_link_bandwidth_bytes_per_s=A100_HOST_LINK_BYTES_PER_S,
        host_memory_bandwidth_bytes_per_s=DGX_A100_HOST_MEMORY_BYTES_PER_S,
    ),
    Topology.HIERARCHICAL,
    Link(
        "nvlink",
        bandwidth_bytes_per_s=300 * GB,  # provenance: cited/datasheets.json
        latency_s=4e-6,  # provenance: cited/nccl-1487.json, cited/nccl-1984.json
        collective_bandwidth_bytes_per_s=231.6 * GB,  # provenance: cited/azure-nd-a100-v4.json
    ),
    inter_node_link=_IB_HDR,
    devices_per_node=GPUS_PER_NODE,
    message_overhead_s=P2P_MESSAGE_OVERHEAD_S,
)

# NVIDIA H100 SXM 80 GB: 989 TFLOP/s bf16 dense (the datasheet's 1979 is with 2:4 sparsity),
# 494 tf32, 67 fp32, 1979 fp8 dense; 3.35 TB/s HBM3; NVLink 4 900 GB/s total (450 per
# direction) through NVSwitch (NVIDIA H100 datasheet; Hopper architecture whitepaper). Servers
# of 8 (DGX H100: InfiniBand NDR 400 Gbit/s, one NIC per GPU).
_H100 = HardwareSpec(
    "h100",
    "NVIDIA H100 SXM 80 GB: 989 TFLOP/s bf16 dense; servers of 8 on NVSwitch (450 GB/s per "
    "direction), InfiniBand NDR between servers (50 GB/s per GPU)",
    Accelerator(
        "h100",
        # provenance: cited/datasheets.json (peaks: half the with-sparsity figure, rounded down)
        {
            "bf16": 989 * TERA,
            "fp16": 989 * TERA,
            "fp8": 1979 * TERA,
            "tf32": 494 * TERA,
            "fp32": 67 * TERA,
        },
        efficiency=0.45,  # provenance: cited/assumptions.json (ASSUMED)
        memory_bytes=80 * GiB,  # provenance: cited/datasheets.json
        memory_bandwidth_bytes_per_s=3350 * GB,  # provenance: cited/datasheets.json
        kernel_overhead_s=4e-6,  # provenance: cited/assumptions.json (ASSUMED)
        source="NVIDIA H100 datasheet; kernel-level figures cited above",
        matmul_efficiency=_H100_MATMUL,
        memory_bandwidth_efficiency=2.97 / 3.35,  # provenance: cited/azure-nd-h100-v5.json
        reduction_bandwidth_fraction=REDUCTION_BANDWIDTH_FRACTION,
        random_bandwidth_fraction=RANDOM_BANDWIDTH_FRACTION,
        host_link_bandwidth_bytes_per_s=HOPPER_HOST_LINK_BYTES_PER_S,
        host_memory_bandwidth_bytes_per_s=DGX_H100_HOST_MEMORY_BYTES_PER_S,
    ),
    Topology.HIERARCHICAL,
    Link(
        "nvlink",
        bandwidth_bytes_per_s=450 * GB,  # provenance: cited/datasheets.json
        latency_s=4e-6,  # provenance: cited/nccl-1487.json, cited/nccl-1984.json
        collective_bandwidth_bytes_per_s=478.9 * GB,  # provenance: cited/azure-nd-h100-v5.json
    ),
    inter_node_link=_IB_NDR,
    devices_per_node=GPUS_PER_NODE,
    message_overhead_s=P2P_MESSAGE_OVERHEAD_S,
)

# NVIDIA H200 SXM 141 GB: the H100's compute, 141 GB HBM3e at 4.8 TB/s; NVLink 900 GB/s
# (NVIDIA H200 datasheet). Servers of 8, InfiniBand NDR between them.
_H200 = HardwareSpec(
    "h200",
    "NVIDIA H200 SXM 141 GB: H100 compute, 4.8 TB/s HBM3e; servers of 8 on NVSwitch (450 GB/s "
    "per direction), InfiniBand NDR between servers (50 GB/s per GPU)",
    Accelerator(
        "h200",
        dict(_H100.accelerator.peak_flops_per_s),  # provenance: cited/datasheets.json
        efficiency=0.45,  # provenance: cited/assumptions.json (ASSUMED)
        memory_bytes=141 * GB,  # provenance: cited/datasheets.json (141 GB, decimal)
        memory_bandwidth_bytes_per_s=4800 * GB,  # provenance: cited/datasheets.json
        kernel_overhead_s=4e-6,  # provenance: cited/assumptions.json (ASSUMED)
        source="NVIDIA H200 datasheet; kernel-level figures measured on an H200 (above)",
        matmul_efficiency=_H200_MATMUL,
        # provenance: h200-layers.json (MEASURED; the record's triad is 4.31 TB/s, DISAGREES)
        memory_bandwidth_efficiency=4.31 / 4.8,
        reduction_bandwidth_fraction=REDUCTION_BANDWIDTH_FRACTION,
        random_bandwidth_fraction=RANDOM_BANDWIDTH_FRACTION,
        # the DGX H200's host: the DGX H100's CPUs (cited/offload-host.json)
        host_link_bandwidth_bytes_per_s=HOPPER_HOST_LINK_BYTES_PER_S,
        host_memory_bandwidth_bytes_per_s=DGX_H100_HOST_MEMORY_BYTES_PER_S,
    ),
    Topology.HIERARCHICAL,
    Link(
        "nvlink",
        bandwidth_bytes_per_s=450 * GB,  # provenance: cited/datasheets.json
        latency_s=4e-6,  # provenance: cited/nccl-1487.json, cited/nccl-1984.json
        collective_bandwidth_bytes_per_s=480.0 * GB,  # provenance: cited/azure-nd-h200-v5.json
    ),
    inter_node_link=_IB_NDR,
    devices_per_node=GPUS_PER_NODE,
    message_overhead_s=P2P_MESSAGE_OVERHEAD_S,
)

# NVIDIA H800 SXM 80 GB: the H100 SXM's tensor cores and HBM3, NVLink cut to 400 GB/s total
# (200 per direction; NVIDIA H800 datasheet), the GPU DeepSeek-V3 was trained on; DeepSeek
# measures 160 GB/s achievable over NVLink and 50 GB/s over InfiniBand (arXiv 2412.19437
# §3.2.2). Servers of 8, InfiniBand NDR between them, the DGX H100's host.
_H800 = HardwareSpec(
    "h800",
    "NVIDIA H800 SXM 80 GB: H100 compute; servers of 8 on NVSwitch (NVLink cut to 200 GB/s per "
    "direction), InfiniBand NDR between servers (50 GB/s per GPU)",
    dataclasses.replace(
        _H100.accelerator,
        name="h800",
        # provenance: cited/datasheets.json (the H800 SXM column: the H100 SXM's peaks)
        peak_flops_per_s=dict(_H100.accelerator.peak_flops_per_s),
        source="NVIDIA H800 datasheet; kernel-level figures the H100's (the same GPU)",
    ),
    Topology.HIERARCHICAL,
    Link(
        "nvlink",
        bandwidth_bytes_per_s=200 * GB,  # provenance: cited/datasheets.json
        latency_s=4e-6,  # provenance: cited/nccl-1487.json, cited/nccl-1984.json
        # provenance: cited/deepseek-v3-2412.19437.json (CITED: achievable, DeepSeek's)
        collective_bandwidth_bytes_per_s=160 * GB,
    ),
    inter_node_link=_IB_NDR,
    devices_per_node=GPUS_PER_NODE,
    message_overhead_s=P2P_MESSAGE_OVERHEAD_S,
)

# NVIDIA A100 SXM 40 GB: the 80 GB part's compute and NVSwitch, 40 GB HBM2 at 1555 GB/s
# (NVIDIA A100 datasheet, the 40 GB column).
_A100_40GB = dataclasses.replace(
    _A100,
    name="a100-40gb",
    description="NVIDIA A100 SXM 40 GB: 312 TFLOP/s bf16, 1.56 TB/s; servers of 8 on NVSwitch "
    "(300 GB/s per direction), InfiniBand HDR between servers",
    accelerator=dataclasses.replace(
        _A100.accelerator,
        name="a100-40gb",
        memory_bytes=40 * GiB,  # as the 80 GB entry: HBM sizes are binary (40960 MiB)
        # provenance: cited/datasheets.json (memory, bandwidth);
        # cited/gpu-benches-a100-40.json (the triad below)
        memory_bandwidth_bytes_per_s=1555 * GB,
        # gpu-stream triad on an A100 40 GB: 1375 GB/s (te42kyfo/gpu-benches, a100_40.txt)
        memory_bandwidth_efficiency=1375 / 1555,
    ),
)

# NVIDIA H100 PCIe 80 GB: 756 TFLOP/s bf16 dense (1513 with sparsity), 378 tf32, 51 fp32, 1513
# fp8 dense; 80 GB HBM2e at 2.0 TB/s; PCIe Gen5 x16 128 GB/s (64 per direction); NVLink bridges
# join pairs only (NVIDIA H100 PCIe product brief PB-11133-001; H100 datasheet, PCIe column).
# Modelled as every pair over PCIe Gen5 at 64 GB/s per direction (one switch, no NVLink),
# 10 us per transfer (assumed, as for the P100's PCIe).
_H100_PCIE = HardwareSpec(
    "h100-pcie",
    "NVIDIA H100 PCIe 80 GB: 756 TFLOP/s bf16 dense, 2.0 TB/s; PCIe Gen5 64 GB/s per direction",
    Accelerator(
        "h100-pcie",
        # provenance: cited/datasheets.json (peaks: half the with-sparsity figure, rounded down)
        {
            "bf16": 756 * TERA,
            "fp16": 756 * TERA,
            "fp8": 1513 * TERA,
            "tf32": 378 * TERA,
            "fp32": 51 * TERA,
        },
        efficiency=0.45,  # provenance: cited/assumptions.json (ASSUMED)
        memory_bytes=80 * GiB,  # provenance: cited/datasheets.json
        memory_bandwidth_bytes_per_s=2000 * GB,  # provenance: cited/datasheets.json
        kernel_overhead_s=4e-6,  # provenance: cited/assumptions.json (ASSUMED)
        source="NVIDIA H100 PCIe product brief PB-11133-001; H100 datasheet",
    ),
    Topology.ALL_TO_ALL,
    # provenance: bandwidth cited/datasheets.json; latency cited/assumptions.json (ASSUMED)
    Link("pcie5", bandwidth_bytes_per_s=64 * GB, latency_s=10e-6),
)

# Google TPU v4, one chip (two TensorCores seen as one device): 275 TFLOP/s bf16, 32 GiB HBM2
# at 1200 GB/s, a 3-D mesh/torus of ICI links (cloud.google.com/tpu/docs/v4). Per ICI link
# about 45-50 GB/s per direction (Jouppi et al., "TPU v4", ISCA 2023; the JAX scaling book's
# 4.5e10 B/s one way): 45 GB/s used. The simulator has no 3-D torus: a 2-D torus stands in,
# which gives pipeline neighbours the same single hop.
_TPU_V4 = HardwareSpec(
    "tpu-v4",
    "Google TPU v4 chip: 275 TFLOP/s bf16, 32 GiB HBM2; ICI torus (2-D model of the 3-D one)",
    Accelerator(
        "tpu-v4",
        {"bf16": 275 * TERA},  # provenance: cited/datasheets.json
        efficiency=0.5,  # provenance: cited/assumptions.json (ASSUMED)
        memory_bytes=32 * GiB,  # provenance: cited/datasheets.json
        memory_bandwidth_bytes_per_s=1200 * GB,  # provenance: cited/datasheets.json
        source="cloud.google.com/tpu/docs/v4 (system architecture table)",
    ),
    Topology.TORUS_2D,
    # provenance: bandwidth cited/datasheets.json (ISCA 2023, not verified); latency
    # cited/assumptions.json (ASSUMED)
    Link("ici", bandwidth_bytes_per_s=45 * GB, latency_s=2e-6),
)

# Google TPU v5e, one chip: 197 TFLOP/s bf16, 16 GB HBM2 at 819 GB/s, 2-D torus with four ICI
# ports and 400 GB/s bidirectional ICI per chip, i.e. 50 GB/s per port and direction
# (cloud.google.com/tpu/docs/v5e, key chip specifications).
_TPU_V5E = HardwareSpec(
    "tpu-v5e",
    "Google TPU v5e chip: 197 TFLOP/s bf16, 16 GB HBM2; 2-D torus ICI, 50 GB/s per link",
    Accelerator(
        "tpu-v5e",
        {"bf16": 197 * TERA},  # provenance: cited/datasheets.json
        efficiency=0.5,  # provenance: cited/assumptions.json (ASSUMED)
        memory_bytes=16 * GiB,  # provenance: cited/datasheets.json (16 GB read as GiB)
        memory_bandwidth_bytes_per_s=819 * GB,  # provenance: cited/datasheets.json
        source="cloud.google.com/tpu/docs/v5e (key chip specifications)",
    ),
    Topology.TORUS_2D,
    # provenance: bandwidth cited/datasheets.json; latency cited/assumptions.json (ASSUMED)
    Link("ici", bandwidth_bytes_per_s=50 * GB, latency_s=2e-6),
)

# A CPU core running one pipeline stage, as the executor's CPU tests and the quick validation
# suite use it. Rough starting figures (one AVX2 core at ~3 GHz, gloo over loopback); a
# calibrated run replaces every number here with measurements.
_CPU = HardwareSpec(
    "cpu",
    "one CPU core per stage, gloo over loopback (rough figures: calibrate for real ones)",
    # provenance: every figure cited/assumptions.json (ASSUMED)
    Accelerator(
        "cpu",
        {"fp32": 50e9, "fp64": 25e9},
        efficiency=0.5,
        memory_bytes=16 * GiB,
        memory_bandwidth_bytes_per_s=10 * GB,
        kernel_overhead_s=10e-6,
        source="assumption; replace by calibration (pipesim validate)",
    ),
    Topology.ALL_TO_ALL,
    Link("loopback", bandwidth_bytes_per_s=2 * GB, latency_s=50e-6),
)

# The names of earlier versions for the multi-node A100 and H100 clusters: the a100 and h100
# entries are those clusters now (servers of 8, InfiniBand between them).
_A100_IB = dataclasses.replace(
    _A100, name="a100-ib", description="the a100 entry under its earlier name: " + _A100.description
)
_H100_IB = dataclasses.replace(
    _H100, name="h100-ib", description="the h100 entry under its earlier name: " + _H100.description
)

CATALOGUE: dict[str, HardwareSpec] = {
    spec.name: spec
    for spec in (
        _TPU_V2,
        _TPU_V3,
        _TPU_V4,
        _TPU_V5E,
        _P100,
        _V100,
        _V100_16GB,
        _A100,
        _A100_40GB,
        _H100,
        _H100_PCIE,
        _H200,
        _H800,
        _A100_IB,
        _H100_IB,
        _CPU,
    )
}


def hardware_names() -> tuple[str, ...]:
    """The catalogue's names."""
    return tuple(CATALOGUE)


def hardware(name: str) -> HardwareSpec:
    """The catalogue entry ``name``; an unknown name lists the known ones."""
    try:
        return CATALOGUE[name]
    except KeyError:
        raise SpecError(
            f"unknown hardware {name!r}; choose one of: {', '.join(CATALOGUE)} (or a .toml file)"
        ) from None
