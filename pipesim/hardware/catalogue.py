"""The hardware catalogue: datasheet figures of the accelerators the papers used, and today's.

Each entry is a :class:`HardwareSpec`: an accelerator and the way its devices are joined; it
builds a :class:`~pipesim.hardware.network.Cluster` of any size. Figures are datasheet peaks
(sources beside each). ``efficiency``, the fraction of peak the kernels reach, is a modelling
assumption: 0.5 for TPUs and V100/A100-era GPUs and 0.45 for H100/H200, in line with the model
FLOPs utilization reported for large transformer training (Megatron-LM 45-52% of A100 peak,
arXiv 2104.04473 §5; PaLM 46% on TPU v4; Llama 3 38-43% on H100). Override it with a TOML file
of your own, or replace every figure by calibration.
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

    def network(self, devices: int) -> Network:
        """The network joining ``devices`` of these accelerators."""
        return Network(
            devices,
            self.topology,
            self.link,
            self.inter_node_link,
            self.devices_per_node,
            self.torus_columns,
        )

    def cluster(self, devices: int) -> Cluster:
        """``devices`` of these accelerators, joined as the spec says."""
        return Cluster(self.accelerator, self.network(devices))


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
        {"bf16": 22.5 * TERA},
        efficiency=0.5,
        memory_bytes=8 * GiB,
        memory_bandwidth_bytes_per_s=350 * GB,
        source="Jouppi et al., CACM 2020, Table 3 (per chip; halved per core)",
    ),
    Topology.TORUS_2D,
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
        {"bf16": 61.5 * TERA},
        efficiency=0.5,
        memory_bytes=16 * GiB,
        memory_bandwidth_bytes_per_s=450 * GB,
        source="Jouppi et al., CACM 2020, Table 3 (per chip; halved per core)",
    ),
    Topology.TORUS_2D,
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
        {"fp16": 18.7 * TERA, "fp32": 9.3 * TERA},
        efficiency=0.5,
        memory_bytes=16 * GiB,
        memory_bandwidth_bytes_per_s=732 * GB,
        kernel_overhead_s=5e-6,
        source="NVIDIA Tesla P100 datasheet",
    ),
    Topology.SHARED_BUS,
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
        {"fp16": 125 * TERA, "fp32": 15.7 * TERA},
        efficiency=0.5,
        memory_bytes=32 * GiB,
        memory_bandwidth_bytes_per_s=900 * GB,
        kernel_overhead_s=5e-6,
        source="NVIDIA Tesla V100 datasheet",
    ),
    Topology.ALL_TO_ALL,
    Link("nvlink", bandwidth_bytes_per_s=47.9 * GB, latency_s=5e-6),
)

# The 16 GB V100 of PipeDream-2BW's evaluation (DGX-1 servers, §5.1): the same chip and links.
_V100_16GB = dataclasses.replace(
    _V100,
    name="v100-16gb-nvlink",
    description="NVIDIA V100 SXM2 16 GB (PipeDream-2BW's GPUs): as v100-nvlink, 16 GB HBM2",
    accelerator=dataclasses.replace(
        _V100.accelerator, name="v100-16gb-nvlink", memory_bytes=16 * GiB
    ),
)

# NVIDIA A100 SXM 80 GB: 312 TFLOP/s bf16 dense, 156 tf32, 19.5 fp32, 2.039 TB/s HBM2e; NVLink 3
# 600 GB/s total (300 per direction) through NVSwitch (NVIDIA A100 datasheet). Point-to-point
# latency: NCCL send/recv measures 3-4 us on NVLink (NVIDIA/nccl issues 1487, 1984).
_A100 = HardwareSpec(
    "a100",
    "NVIDIA A100 SXM 80 GB: 312 TFLOP/s bf16; NVSwitch, 300 GB/s per direction",
    Accelerator(
        "a100",
        {"bf16": 312 * TERA, "fp16": 312 * TERA, "tf32": 156 * TERA, "fp32": 19.5 * TERA},
        efficiency=0.5,
        memory_bytes=80 * GiB,
        memory_bandwidth_bytes_per_s=2039 * GB,
        kernel_overhead_s=4e-6,
        source="NVIDIA A100 datasheet",
    ),
    Topology.ALL_TO_ALL,
    Link("nvlink", bandwidth_bytes_per_s=300 * GB, latency_s=4e-6),
)

# NVIDIA H100 SXM 80 GB: 989 TFLOP/s bf16 dense (the datasheet's 1979 is with 2:4 sparsity),
# 494 tf32, 67 fp32, 1979 fp8 dense; 3.35 TB/s HBM3; NVLink 4 900 GB/s total (450 per
# direction) through NVSwitch (NVIDIA H100 datasheet; Hopper architecture whitepaper).
_H100 = HardwareSpec(
    "h100",
    "NVIDIA H100 SXM 80 GB: 989 TFLOP/s bf16 dense; NVSwitch, 450 GB/s per direction",
    Accelerator(
        "h100",
        {
            "bf16": 989 * TERA,
            "fp16": 989 * TERA,
            "fp8": 1979 * TERA,
            "tf32": 494 * TERA,
            "fp32": 67 * TERA,
        },
        efficiency=0.45,
        memory_bytes=80 * GiB,
        memory_bandwidth_bytes_per_s=3350 * GB,
        kernel_overhead_s=4e-6,
        source="NVIDIA H100 datasheet",
    ),
    Topology.ALL_TO_ALL,
    Link("nvlink", bandwidth_bytes_per_s=450 * GB, latency_s=4e-6),
)

# NVIDIA H200 SXM 141 GB: the H100's compute, 141 GB HBM3e at 4.8 TB/s; NVLink 900 GB/s
# (NVIDIA H200 datasheet).
_H200 = HardwareSpec(
    "h200",
    "NVIDIA H200 SXM 141 GB: H100 compute, 4.8 TB/s HBM3e; NVSwitch, 450 GB/s per direction",
    Accelerator(
        "h200",
        dict(_H100.accelerator.peak_flops_per_s),
        efficiency=0.45,
        memory_bytes=141 * GB,
        memory_bandwidth_bytes_per_s=4800 * GB,
        kernel_overhead_s=4e-6,
        source="NVIDIA H200 datasheet",
    ),
    Topology.ALL_TO_ALL,
    Link("nvlink", bandwidth_bytes_per_s=450 * GB, latency_s=4e-6),
)

# NVIDIA A100 SXM 40 GB: the 80 GB part's compute and NVSwitch, 40 GB HBM2 at 1555 GB/s
# (NVIDIA A100 datasheet, the 40 GB column).
_A100_40GB = dataclasses.replace(
    _A100,
    name="a100-40gb",
    description="NVIDIA A100 SXM 40 GB: 312 TFLOP/s bf16, 1.56 TB/s; NVSwitch, 300 GB/s per "
    "direction",
    accelerator=dataclasses.replace(
        _A100.accelerator,
        name="a100-40gb",
        memory_bytes=40 * GiB,  # as the 80 GB entry: HBM sizes are binary (40960 MiB)
        memory_bandwidth_bytes_per_s=1555 * GB,
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
        {
            "bf16": 756 * TERA,
            "fp16": 756 * TERA,
            "fp8": 1513 * TERA,
            "tf32": 378 * TERA,
            "fp32": 51 * TERA,
        },
        efficiency=0.45,
        memory_bytes=80 * GiB,
        memory_bandwidth_bytes_per_s=2000 * GB,
        kernel_overhead_s=4e-6,
        source="NVIDIA H100 PCIe product brief PB-11133-001; H100 datasheet",
    ),
    Topology.ALL_TO_ALL,
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
        {"bf16": 275 * TERA},
        efficiency=0.5,
        memory_bytes=32 * GiB,
        memory_bandwidth_bytes_per_s=1200 * GB,
        source="cloud.google.com/tpu/docs/v4 (system architecture table)",
    ),
    Topology.TORUS_2D,
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
        {"bf16": 197 * TERA},
        efficiency=0.5,
        memory_bytes=16 * GiB,
        memory_bandwidth_bytes_per_s=819 * GB,
        source="cloud.google.com/tpu/docs/v5e (key chip specifications)",
    ),
    Topology.TORUS_2D,
    Link("ici", bandwidth_bytes_per_s=50 * GB, latency_s=2e-6),
)

# A CPU core running one pipeline stage, as the executor's CPU tests and the quick validation
# suite use it. Rough starting figures (one AVX2 core at ~3 GHz, gloo over loopback); a
# calibrated run replaces every number here with measurements.
_CPU = HardwareSpec(
    "cpu",
    "one CPU core per stage, gloo over loopback (rough figures: calibrate for real ones)",
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

# Several 8-GPU servers: NVSwitch inside a server, InfiniBand between servers. HDR is 200 Gbit/s
# per port (25 GB/s per direction), NDR 400 Gbit/s (50 GB/s) (NVIDIA ConnectX-6/-7 manuals);
# a GPU-to-GPU transfer through NCCL across servers takes about 10 us (estimate).
_A100_IB = HardwareSpec(
    "a100-ib",
    "A100 servers of 8 (NVSwitch inside), InfiniBand HDR 25 GB/s per direction between them",
    _A100.accelerator,
    Topology.HIERARCHICAL,
    _A100.link,
    inter_node_link=Link("ib-hdr", bandwidth_bytes_per_s=25 * GB, latency_s=10e-6),
    devices_per_node=8,
)
_H100_IB = HardwareSpec(
    "h100-ib",
    "H100 servers of 8 (NVSwitch inside), InfiniBand NDR 50 GB/s per direction between them",
    _H100.accelerator,
    Topology.HIERARCHICAL,
    _H100.link,
    inter_node_link=Link("ib-ndr", bandwidth_bytes_per_s=50 * GB, latency_s=10e-6),
    devices_per_node=8,
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
