"""Every constant of the hardware catalogue against the stored record it comes from.

Each figure that a catalogue entry sets is listed in :data:`PROVENANCE` with the record it
comes from (a JSON file under ``docs/measurements/``), how it follows from that record, and
what kind of figure it is: MEASURED for the project (the H200 record), CITED from a published
source (``docs/measurements/cited/``), FITTED to a paper's table, or ASSUMED (a choice stated in
``cited/assumptions.json``). A test derives each figure from its record in code, rounded as the
catalogue states it, and asserts that the catalogue's entry equals it; another fails when an
entry, or a field of one, appears without a row here.

Where the record gives another figure than the catalogue, the row says so and its test is a
strict expected failure: the disagreement is stated here and in docs/accuracy.md
("Provenance of constants"), not hidden by changing either side.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pipesim.hardware import hardware
from pipesim.hardware.accelerator import Accelerator
from pipesim.hardware.catalogue import CATALOGUE, HardwareSpec
from pipesim.hardware.network import Link

MEASUREMENTS = Path(__file__).resolve().parents[2] / "docs" / "measurements"
CITED = MEASUREMENTS / "cited"

GB = 1e9
GiB = 2**30
TERA = 1e12
US = 1e-6


@functools.cache
def record(name: str) -> Any:
    """A stored record by its path under docs/measurements/ (cited ones as cited/NAME)."""
    return json.loads((MEASUREMENTS / name).read_text())


def datasheet(device: str) -> dict[str, Any]:
    """The figures of one datasheet entry of cited/datasheets.json."""
    figures: dict[str, Any] = record("cited/datasheets.json")["entries"][device]["figures"]
    return figures


def assumed(group: str, key: str | None = None) -> Any:
    """A figure of cited/assumptions.json."""
    value = record("cited/assumptions.json")[group]
    return value if key is None else value[key]


def dense(with_sparsity_tflops: float) -> float:
    """A dense peak from NVIDIA's with-sparsity figure: half of it, in whole TFLOP/s rounded
    down as the catalogue states them (989 of 1,979)."""
    return math.floor(with_sparsity_tflops / 2) * TERA


# --- derivations, one per figure, from the records ----------------------------------------------


def a100_peak(dtype: str) -> float:
    sheet = datasheet("nvidia-a100")
    key = {"bf16": "bf16_tensor_tflops", "fp16": "fp16_tensor_tflops", "tf32": "tf32_tensor_tflops"}
    return float(sheet[key.get(dtype, "fp32_tflops")]) * TERA


def hopper_peak(device: str, dtype: str) -> float:
    sheet = datasheet(device)
    if dtype == "fp32":
        return float(sheet["fp32_tflops"]) * TERA
    return dense(sheet[f"{dtype}_tensor_tflops_with_sparsity"])


def a100_curve() -> tuple[tuple[float, float], ...]:
    """The A100's FP16 cuBLASLt square products over the datasheet's 312 TFLOP/s."""
    peak = datasheet("nvidia-a100")["bf16_tensor_tflops"]
    rows = record("cited/azure-nd-a100-v4.json")["gemm_cublaslt"]["square_rows"]
    return tuple((2.0 * row["n"] ** 3, row["tflops"] / peak) for row in rows)


def h100_curve() -> tuple[tuple[float, float], ...]:
    """The H100's FP8 sweep up to 16,384, rescaled so that its 16,384 point reaches the bf16
    MAMF (794.5 of 989): an estimate, not a bf16 measurement."""
    rows = [
        row
        for row in record("cited/azure-nd-h100-v5.json")["gemm_cublaslt"]["square_rows"]
        if row["n"] <= 16384
    ]
    largest = rows[-1]["tflops"]
    (mamf,) = [
        row
        for row in record("cited/ml-engineering-mamf.json")["bf16_mamf_rows"]
        if row["accelerator"] == "NVIDIA H100 SXM"
    ]
    return tuple(
        (2.0 * row["n"] ** 3, row["tflops"] / largest * mamf["mamf_tflops"] / mamf["theory_tflops"])
        for row in rows
    )


def h200_curve() -> tuple[tuple[float, float], ...]:
    """The H200 record's square bf16 products from 1,024 up, rounded to 0.1 TFLOP/s, over the
    bf16 dense peak (989)."""
    peak = dense(datasheet("nvidia-h100-sxm")["bf16_tensor_tflops_with_sparsity"])
    return tuple(
        (float(row["flops"]), round(row["flops_per_s"] / 1e12, 1) * 1e12 / peak)
        for row in record("h200-layers.json")["square_matmuls"]
        if row["n"] >= 1024
    )


def h200_triad_tb_per_s() -> float:
    """The H200 record's triad in TB/s, to 0.01 as the catalogue states its 4.31."""
    return round(record("h200-layers.json")["bandwidth"]["triad_bytes_per_s"] / 1e12, 2)


# The row-reduction kernels of the H200 record (softmax, norms and their backwards, the loss):
# those reduction_bandwidth_fraction stands for (Accelerator's docstring, docs/accuracy.md).
ROW_REDUCTIONS = (
    "softmax",
    "softmax backward",
    "layer norm",
    "layer norm backward",
    "cross entropy (fp32)",
)


def of_triad(name: str) -> float:
    h200 = record("h200-layers.json")
    (kernel,) = [k for k in h200["memory_kernels"] if k["name"] == name]
    return float(kernel["bytes_per_s"] / h200["bandwidth"]["triad_bytes_per_s"])


def reduction_fraction() -> float:
    """The median of the row reductions' bandwidths over the H200 record's triad, to 0.01."""
    return round(statistics.median(of_triad(name) for name in ROW_REDUCTIONS), 2)


def random_fraction() -> float:
    """Dropout's forward (a random number drawn per element) over the triad, to 0.01."""
    return round(of_triad("dropout"), 2)


def busbw(record_name: str) -> float:
    """nccl-tests all_reduce_perf bus bandwidth at 8 GB, to 0.1 GB/s as the catalogue states
    it."""
    column = record(record_name)["nccl_allreduce_busbw_gb_per_s"]["by_message_size"]
    return round(column["8G"], 1) * GB


def nvlink_latency_s() -> float:
    """The upper end of the 3-4 us NCCL send/receive latencies the catalogue cites."""
    low = record("cited/nccl-1487.json")["nccl_tests_nvlink_latency_us"]
    high = record("cited/nccl-1984.json")["nvlink_send_recv_latency_us_upper"]
    return float(max(low, high)) * US


def infiniband_collective(rate: str) -> float:
    """NCCL's peak bus bandwidth per NIC: 24 GB/s per HDR (200G) NIC, NDR (400G) twice that
    (the catalogue's rule; nccl-tests#319's 'around 48GB/s' per 400G NIC agrees)."""
    per_hdr = record("cited/nccl-tests-119.json")["peak_busbw_per_200g_nic_gb_per_s"]
    return {"hdr": 1, "ndr": 2}[rate] * per_hdr * GB


def infiniband_rate(rate: str) -> float:
    """An InfiniBand NIC's line rate in bytes per second."""
    return float(datasheet("servers-and-fabrics")[f"infiniband_{rate}_gbit_per_s"]) * GB / 8


def message_bytes_and_t_comm() -> tuple[list[float], list[float]]:
    """The zero-bubble paper's profiled T_comm (ms) against the size of the message it times:
    one stage's output, micro-batch x sequence x hidden fp16 elements (Table 3's setups)."""
    zb = record("cited/zero-bubble-2401.10241-table6.json")
    sizes, times = [], []
    for row in zb["profiled_rows"]:
        setup = zb["table_3_setups"][row["model"]]
        elements = setup["microbatch_size"] * setup["sequence_tokens"] * setup["hidden"]
        sizes.append(float(elements * zb["activation_bytes_per_element"]))
        times.append(float(row["t_comm_ms"]))
    return sizes, times


def intercept_ms() -> float:
    """The least-squares line of T_comm against the message bytes, its intercept in ms."""
    sizes, times = message_bytes_and_t_comm()
    return statistics.linear_regression(sizes, times).intercept


def message_overhead_s() -> float:
    """The intercept, rounded to 0.01 ms as the catalogue states its 0.24 ms."""
    return round(intercept_ms(), 2) * 1e-3


def triad_40gb() -> float:
    """The A100 40 GB's best gpu-stream triad over its datasheet bandwidth."""
    column = record("cited/gpu-benches-a100-40.json")["triad_gb_per_s_by_block_size"]
    bandwidth = datasheet("nvidia-a100")["memory_bandwidth_40gb_part_gb_per_s"]
    return float(max(column.values()) / bandwidth)


def offload_host(entry: str) -> dict[str, Any]:
    """The figures of one entry of cited/offload-host.json."""
    figures: dict[str, Any] = record(OFFLOAD_HOST)["entries"][entry]["figures"]
    return figures


def host_link(entry: str, key: str) -> float:
    """A GPU's PCIe link to its host per direction: the datasheet's total over two."""
    return float(offload_host(entry)[key]) / 2 * GB


def host_memory_per_gpu(entry: str) -> float:
    """A DGX server's host memory bandwidth per GPU: its CPUs' theoretical peak (channels x
    transfer rate x 8 bytes, as the vendor states it per CPU) over its GPUs."""
    host = offload_host(entry)
    per_cpu = host["memory_bandwidth_per_cpu_gb_per_s"] * GB
    return float(host["cpus_per_server"] * per_cpu / host["gpus_per_server"])


OFFLOAD_HOST = "cited/offload-host.json"


def host_rows(link_entry: str, link_key: str, host_entry: str) -> dict[str, Provenance]:
    """The host figures of an optimizer offloaded to the CPU (theoretical peaks)."""
    return {
        "accelerator.host_link_bandwidth_bytes_per_s": Provenance(
            OFFLOAD_HOST,
            "the datasheet's PCIe x16 total over two directions (a theoretical peak)",
            "CITED",
            functools.partial(host_link, link_entry, link_key),
        ),
        "accelerator.host_memory_bandwidth_bytes_per_s": Provenance(
            OFFLOAD_HOST,
            "the DGX server's CPUs x their DRAM peak GB/s, over its 8 GPUs (a theoretical peak)",
            "DERIVED",
            functools.partial(host_memory_per_gpu, host_entry),
        ),
    }


# --- the table ------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Provenance:
    """One figure of one entry: where it comes from and how."""

    record: str
    how: str
    kind: str  # MEASURED, CITED, DERIVED (from cited figures), FITTED or ASSUMED
    derive: Callable[[], object]
    disagrees: str | None = None


KINDS = {"MEASURED", "CITED", "DERIVED", "FITTED", "ASSUMED"}
DATASHEETS = "cited/datasheets.json"
ASSUMPTIONS = "cited/assumptions.json"
H200 = "h200-layers.json"
DEEPSEEK_V3 = "cited/deepseek-v3-2412.19437.json"

TRIAD_DISAGREES = None  # the catalogue now states the record's figure (2026-11-27)
REDUCTION_DISAGREES = None  # the catalogue now states the record's figure (2026-11-27)
OVERHEAD_DISAGREES = None  # the catalogue now states the record's figure (2026-11-27)


def kernel_rows(
    curve: Callable[[], object],
    triad: Callable[[], object],
    *,
    curve_how: str,
    triad_how: str,
    curve_record: str,
    triad_record: str,
    curve_kind: str,
    triad_disagrees: str | None = None,
) -> dict[str, Provenance]:
    """The kernel-level fields of a GPU with a matmul curve."""
    taken = "the H200 record's fraction, taken for this GPU (an assumption: no other GPU measured)"
    return {
        "accelerator.matmul_efficiency": Provenance(curve_record, curve_how, curve_kind, curve),
        "accelerator.memory_bandwidth_efficiency": Provenance(
            triad_record,
            triad_how,
            "CITED" if triad_record != H200 else "MEASURED",
            triad,
            triad_disagrees,
        ),
        "accelerator.reduction_bandwidth_fraction": Provenance(
            H200,
            "median of the row reductions' TB/s over the triad, to 0.01"
            + ("" if triad_record == H200 else f"; {taken}"),
            "MEASURED",
            reduction_fraction,
            REDUCTION_DISAGREES,
        ),
        "accelerator.random_bandwidth_fraction": Provenance(
            H200,
            "dropout's forward TB/s over the triad, to 0.01"
            + ("" if triad_record == H200 else f"; {taken}"),
            "MEASURED",
            random_fraction,
        ),
    }


def server_rows(
    per_direction: float, collective: Callable[[], object], busbw_record: str, inter: str
) -> dict[str, Provenance]:
    """An 8-GPU NVSwitch server's links, the InfiniBand between servers and the message
    overhead."""
    nic = {"hdr": "HDR 200", "ndr": "NDR 400"}[inter]
    return {
        "link.bandwidth_bytes_per_s": Provenance(
            DATASHEETS,
            "the datasheet's NVLink total over two directions",
            "CITED",
            lambda: per_direction,
        ),
        "link.latency_s": Provenance(
            "cited/nccl-1487.json, cited/nccl-1984.json",
            "the upper end of NCCL send/receive's 3-4 us",
            "CITED",
            nvlink_latency_s,
        ),
        "link.collective_bandwidth_bytes_per_s": Provenance(
            busbw_record, "all_reduce_perf busbw at 8 GB, to 0.1 GB/s", "CITED", collective
        ),
        "inter_node_link.bandwidth_bytes_per_s": Provenance(
            DATASHEETS, f"InfiniBand {nic} Gbit/s over 8", "CITED", lambda: infiniband_rate(inter)
        ),
        "inter_node_link.latency_s": Provenance(
            ASSUMPTIONS,
            "assumed",
            "ASSUMED",
            lambda: assumed("link_latency_us", "infiniband") * US,
        ),
        "inter_node_link.collective_bandwidth_bytes_per_s": Provenance(
            "cited/nccl-tests-119.json",
            "24 GB/s per HDR NIC" + ("" if inter == "hdr" else ", NDR taken as twice it"),
            "CITED" if inter == "hdr" else "DERIVED",
            lambda: infiniband_collective(inter),
        ),
        "devices_per_node": Provenance(
            DATASHEETS,
            "GPUs per DGX server",
            "CITED",
            lambda: datasheet("servers-and-fabrics")["gpus_per_dgx_server"],
        ),
        "message_overhead_s": Provenance(
            "cited/zero-bubble-2401.10241-table6.json",
            "intercept of a least-squares line of T_comm against message bytes, to 0.01 ms "
            "(IN-SAMPLE for the zero-bubble reproduction's T_comm rows)",
            "FITTED",
            message_overhead_s,
            OVERHEAD_DISAGREES,
        ),
    }


def gpu_basics(
    peaks: dict[str, Callable[[], object]],
    memory: Callable[[], object],
    bandwidth: Callable[[], object],
    efficiency_key: str,
    overhead_key: str,
    memory_how: str,
) -> dict[str, Provenance]:
    """Datasheet peaks, memory and bandwidth, and the two assumed figures."""
    rows = {
        f"accelerator.peak_flops_per_s.{dtype}": Provenance(
            DATASHEETS, "the datasheet's dense TFLOP/s", "CITED", peak
        )
        for dtype, peak in peaks.items()
    }
    rows["accelerator.memory_bytes"] = Provenance(DATASHEETS, memory_how, "CITED", memory)
    rows["accelerator.memory_bandwidth_bytes_per_s"] = Provenance(
        DATASHEETS, "the datasheet's bandwidth", "CITED", bandwidth
    )
    rows["accelerator.efficiency"] = Provenance(
        ASSUMPTIONS,
        "assumed (read by layers given by their totals)",
        "ASSUMED",
        lambda: assumed("efficiency", efficiency_key),
    )
    rows["accelerator.kernel_overhead_s"] = Provenance(
        ASSUMPTIONS, "assumed", "ASSUMED", lambda: assumed("kernel_overhead_us", overhead_key) * US
    )
    return rows


def tpu_rows(
    device: str, per_core: bool, link: Callable[[], object], link_how: str
) -> dict[str, Provenance]:
    """A TPU entry: per core (half a two-core chip) or per chip."""
    sheet = datasheet(device)
    share = 2 if per_core else 1
    gib_key = "hbm_gib_per_chip" if "hbm_gib_per_chip" in sheet else "hbm_gb_per_chip"
    half = ", halved per core" if per_core else ""
    return {
        "accelerator.peak_flops_per_s.bf16": Provenance(
            DATASHEETS,
            f"bf16 TFLOP/s per chip{half}",
            "CITED",
            lambda: sheet["bf16_tflops_per_chip"] / share * TERA,
        ),
        "accelerator.memory_bytes": Provenance(
            DATASHEETS,
            f"HBM per chip{half} (16 GB of v5e read as GiB)",
            "CITED",
            lambda: sheet[gib_key] / share * GiB,
        ),
        "accelerator.memory_bandwidth_bytes_per_s": Provenance(
            DATASHEETS,
            f"HBM GB/s per chip{half}",
            "CITED",
            lambda: sheet["hbm_bandwidth_gb_per_s_per_chip"] / share * GB,
        ),
        "accelerator.efficiency": Provenance(
            ASSUMPTIONS, "assumed", "ASSUMED", lambda: assumed("efficiency", "tpu")
        ),
        "link.bandwidth_bytes_per_s": Provenance(DATASHEETS, link_how, "CITED", link),
        "link.latency_s": Provenance(
            ASSUMPTIONS, "assumed", "ASSUMED", lambda: assumed("link_latency_us", "tpu_ici") * US
        ),
    }


def build_table() -> dict[tuple[str, str], Provenance]:
    table: dict[tuple[str, str], Provenance] = {}

    def add(entries: tuple[str, ...], rows: dict[str, Provenance]) -> None:
        for entry in entries:
            for field, row in rows.items():
                table[entry, field] = row

    a100 = datasheet("nvidia-a100")
    add(
        ("a100", "a100-ib", "a100-40gb"),
        gpu_basics(
            {d: functools.partial(a100_peak, d) for d in ("bf16", "fp16", "tf32", "fp32")},
            lambda: a100["memory_80gb_part_gb"] * GiB,
            lambda: a100["memory_bandwidth_80gb_part_gb_per_s"] * GB,
            "pascal_volta_ampere_gpu",
            "ampere_hopper_gpu",
            "the datasheet's GB read as GiB (HBM sizes are binary)",
        )
        | kernel_rows(
            a100_curve,
            lambda: (
                record("cited/azure-nd-a100-v4.json")["hbm_bandwidth_tb_per_s"]["triad"]
                / (a100["memory_bandwidth_80gb_part_gb_per_s"] / 1000)
            ),
            curve_how="FP16 cuBLASLt square TFLOP/s over the datasheet's 312",
            triad_how="BabelStream triad TB/s over the datasheet's TB/s",
            curve_record="cited/azure-nd-a100-v4.json",
            triad_record="cited/azure-nd-a100-v4.json",
            curve_kind="CITED",
        )
        | server_rows(
            a100["nvlink_total_gb_per_s"] / 2 * GB,
            lambda: busbw("cited/azure-nd-a100-v4.json"),
            "cited/azure-nd-a100-v4.json",
            "hdr",
        )
        | host_rows("nvidia-a100-sxm-pcie", "pcie_gen4_x16_total_gb_per_s", "dgx-a100-host"),
    )
    # The 40 GB part: the 80 GB part's compute, curve and links; its own memory and triad.
    table["a100-40gb", "accelerator.memory_bytes"] = Provenance(
        DATASHEETS,
        "the datasheet's 40 GB read as GiB",
        "CITED",
        lambda: a100["memory_40gb_part_gb"] * GiB,
    )
    table["a100-40gb", "accelerator.memory_bandwidth_bytes_per_s"] = Provenance(
        DATASHEETS,
        "the datasheet's 40 GB column",
        "CITED",
        lambda: a100["memory_bandwidth_40gb_part_gb_per_s"] * GB,
    )
    table["a100-40gb", "accelerator.memory_bandwidth_efficiency"] = Provenance(
        "cited/gpu-benches-a100-40.json",
        "best gpu-stream triad over the datasheet's 1555 GB/s",
        "CITED",
        triad_40gb,
    )

    hopper = {
        d: functools.partial(hopper_peak, "nvidia-h100-sxm", d)
        for d in ("bf16", "fp16", "fp8", "tf32", "fp32")
    }
    h100 = datasheet("nvidia-h100-sxm")
    add(
        ("h100", "h100-ib"),
        gpu_basics(
            hopper,
            lambda: h100["memory_gb"] * GiB,
            lambda: h100["memory_bandwidth_tb_per_s"] * 1000 * GB,
            "hopper_gpu",
            "ampere_hopper_gpu",
            "the datasheet's GB read as GiB",
        )
        | kernel_rows(
            h100_curve,
            lambda: (
                record("cited/azure-nd-h100-v5.json")["hbm_bandwidth_tb_per_s"]["triad"]
                / h100["memory_bandwidth_tb_per_s"]
            ),
            curve_how="FP8 cuBLASLt sweep rescaled so that 16,384 reaches the bf16 MAMF 794.5 "
            "of 989 (an estimate)",
            triad_how="BabelStream triad TB/s over the datasheet's TB/s",
            curve_record="cited/azure-nd-h100-v5.json, cited/ml-engineering-mamf.json",
            triad_record="cited/azure-nd-h100-v5.json",
            curve_kind="DERIVED",
        )
        | server_rows(
            h100["nvlink_total_gb_per_s"] / 2 * GB,
            lambda: busbw("cited/azure-nd-h100-v5.json"),
            "cited/azure-nd-h100-v5.json",
            "ndr",
        )
        | host_rows("nvidia-h100-sxm-pcie", "pcie_gen5_x16_total_gb_per_s", "dgx-h100-host"),
    )

    h200 = datasheet("nvidia-h200")
    add(
        ("h200",),
        gpu_basics(
            hopper,
            lambda: h200["memory_gb"] * GB,
            lambda: h200["memory_bandwidth_tb_per_s"] * 1000 * GB,
            "hopper_gpu",
            "ampere_hopper_gpu",
            "the datasheet's 141 GB, decimal",
        )
        | kernel_rows(
            h200_curve,
            lambda: h200_triad_tb_per_s() / h200["memory_bandwidth_tb_per_s"],
            curve_how="square bf16 products from 1,024 up, to 0.1 TFLOP/s, over 989 (IN-SAMPLE "
            "for the record's block rows)",
            triad_how="the record's triad TB/s, to 0.01, over the datasheet's 4.8",
            curve_record=H200,
            triad_record=H200,
            curve_kind="MEASURED",
            triad_disagrees=TRIAD_DISAGREES,
        )
        | server_rows(
            h200["nvlink_total_gb_per_s"] / 2 * GB,
            lambda: busbw("cited/azure-nd-h200-v5.json"),
            "cited/azure-nd-h200-v5.json",
            "ndr",
        )
        # the DGX H200's host is the DGX H100's (the same CPUs and PCIe Gen5 x16)
        | host_rows("nvidia-h100-sxm-pcie", "pcie_gen5_x16_total_gb_per_s", "dgx-h100-host"),
    )

    h800 = datasheet("nvidia-h800-sxm")
    h800_rows = server_rows(
        h800["nvlink_total_gb_per_s"] / 2 * GB,
        lambda: record(DEEPSEEK_V3)["nvlink_achievable_gb_per_s"] * GB,
        DEEPSEEK_V3,
        "ndr",
    )
    h800_rows["link.collective_bandwidth_bytes_per_s"] = Provenance(
        DEEPSEEK_V3,
        "the NVLink bandwidth DeepSeek achieves on its H800s (§3.2.2)",
        "CITED",
        lambda: record(DEEPSEEK_V3)["nvlink_achievable_gb_per_s"] * GB,
    )
    add(
        ("h800",),
        gpu_basics(
            {
                d: functools.partial(hopper_peak, "nvidia-h800-sxm", d)
                for d in ("bf16", "fp16", "fp8", "tf32", "fp32")
            },
            lambda: h800["memory_gb"] * GiB,
            lambda: h800["memory_bandwidth_tb_per_s"] * 1000 * GB,
            "hopper_gpu",
            "ampere_hopper_gpu",
            "the datasheet's GB read as GiB",
        )
        # the same GPU as the H100 SXM: its kernel figures and its DGX host
        | kernel_rows(
            h100_curve,
            lambda: (
                record("cited/azure-nd-h100-v5.json")["hbm_bandwidth_tb_per_s"]["triad"]
                / h800["memory_bandwidth_tb_per_s"]
            ),
            curve_how="the H100's: its FP8 sweep rescaled to the bf16 MAMF (an estimate)",
            triad_how="the H100's BabelStream triad over the datasheet's TB/s",
            curve_record="cited/azure-nd-h100-v5.json, cited/ml-engineering-mamf.json",
            triad_record="cited/azure-nd-h100-v5.json",
            curve_kind="DERIVED",
        )
        | h800_rows
        | host_rows("nvidia-h100-sxm-pcie", "pcie_gen5_x16_total_gb_per_s", "dgx-h100-host"),
    )

    pcie = datasheet("nvidia-h100-pcie")
    add(
        ("h100-pcie",),
        gpu_basics(
            {
                d: functools.partial(hopper_peak, "nvidia-h100-pcie", d)
                for d in ("bf16", "fp16", "fp8", "tf32", "fp32")
            },
            lambda: pcie["memory_gb"] * GiB,
            lambda: pcie["memory_bandwidth_tb_per_s"] * 1000 * GB,
            "hopper_gpu",
            "ampere_hopper_gpu",
            "the datasheet's GB read as GiB",
        )
        | {
            "link.bandwidth_bytes_per_s": Provenance(
                DATASHEETS,
                "PCIe Gen5 x16 total over two directions",
                "CITED",
                lambda: pcie["pcie_gen5_x16_total_gb_per_s"] / 2 * GB,
            ),
            "link.latency_s": Provenance(
                ASSUMPTIONS, "assumed", "ASSUMED", lambda: assumed("link_latency_us", "pcie") * US
            ),
        },
    )

    v100 = datasheet("nvidia-v100-sxm2")
    for entry, memory_key in (
        ("v100-nvlink", "memory_gb"),
        ("v100-16gb-nvlink", "memory_16gb_part_gb"),
    ):
        add(
            (entry,),
            gpu_basics(
                {
                    "fp16": lambda: v100["tensor_tflops"] * TERA,
                    "fp32": lambda: v100["fp32_tflops"] * TERA,
                },
                functools.partial(lambda key: v100[key] * GiB, memory_key),
                lambda: v100["memory_bandwidth_gb_per_s"] * GB,
                "pascal_volta_ampere_gpu",
                "pascal_volta_gpu",
                "the datasheet's GB read as GiB",
            )
            | {
                "link.bandwidth_bytes_per_s": Provenance(
                    "cited/dell-c4140-v100.json",
                    "a two-NVLink pair's measured GB/s one way",
                    "CITED",
                    lambda: (
                        record("cited/dell-c4140-v100.json")[
                            "two_link_pair_unidirectional_gb_per_s"
                        ]
                        * GB
                    ),
                ),
                "link.latency_s": Provenance(
                    ASSUMPTIONS,
                    "assumed",
                    "ASSUMED",
                    lambda: assumed("link_latency_us", "v100_nvlink") * US,
                ),
            },
        )

    p100 = datasheet("nvidia-p100-pcie")
    add(
        ("p100-pcie",),
        gpu_basics(
            {
                "fp16": lambda: p100["fp16_tflops"] * TERA,
                "fp32": lambda: p100["fp32_tflops"] * TERA,
            },
            lambda: p100["memory_gb"] * GiB,
            lambda: p100["memory_bandwidth_gb_per_s"] * GB,
            "pascal_volta_ampere_gpu",
            "pascal_volta_gpu",
            "the datasheet's GB read as GiB",
        )
        | {
            "link.bandwidth_bytes_per_s": Provenance(
                ASSUMPTIONS,
                "assumed inside Microway's 11.7-12.9 GB/s host to GPU",
                "ASSUMED",
                lambda: assumed("p100_pcie_peer_to_peer_gb_per_s") * GB,
            ),
            "link.latency_s": Provenance(
                ASSUMPTIONS, "assumed", "ASSUMED", lambda: assumed("link_latency_us", "pcie") * US
            ),
        },
    )

    v2, v3, v4, v5e = (datasheet(f"google-tpu-{v}") for v in ("v2", "v3", "v4", "v5e"))
    add(
        ("tpu-v2",),
        tpu_rows(
            "google-tpu-v2",
            True,
            lambda: v2["ici_gbit_per_s_per_link"] * GB / 8,
            "ICI Gbit/s per link over 8",
        ),
    )
    add(
        ("tpu-v3",),
        tpu_rows(
            "google-tpu-v3",
            True,
            lambda: v3["ici_gbit_per_s_per_link"] * GB / 8,
            "ICI Gbit/s per link over 8",
        ),
    )
    add(
        ("tpu-v4",),
        tpu_rows(
            "google-tpu-v4",
            False,
            lambda: v4["ici_gb_per_s_per_link_per_direction_low"] * GB,
            "the low end of 45-50 GB/s per link and direction",
        ),
    )
    add(
        ("tpu-v5e",),
        tpu_rows(
            "google-tpu-v5e",
            False,
            lambda: v5e["ici_bidirectional_gb_per_s_per_chip"] / v5e["ici_ports_per_chip"] / 2 * GB,
            "ICI GB/s per chip, both directions, over 4 ports and 2 directions",
        ),
    )

    cpu = assumed("cpu")
    add(
        ("cpu",),
        {
            "accelerator.peak_flops_per_s.fp32": Provenance(
                ASSUMPTIONS, "assumed", "ASSUMED", lambda: cpu["fp32_gflops"] * GB
            ),
            "accelerator.peak_flops_per_s.fp64": Provenance(
                ASSUMPTIONS, "assumed", "ASSUMED", lambda: cpu["fp64_gflops"] * GB
            ),
            "accelerator.efficiency": Provenance(
                ASSUMPTIONS, "assumed", "ASSUMED", lambda: assumed("efficiency", "cpu")
            ),
            "accelerator.memory_bytes": Provenance(
                ASSUMPTIONS, "assumed", "ASSUMED", lambda: cpu["memory_gib"] * GiB
            ),
            "accelerator.memory_bandwidth_bytes_per_s": Provenance(
                ASSUMPTIONS, "assumed", "ASSUMED", lambda: cpu["memory_bandwidth_gb_per_s"] * GB
            ),
            "accelerator.kernel_overhead_s": Provenance(
                ASSUMPTIONS, "assumed", "ASSUMED", lambda: assumed("kernel_overhead_us", "cpu") * US
            ),
            "link.bandwidth_bytes_per_s": Provenance(
                ASSUMPTIONS, "assumed", "ASSUMED", lambda: cpu["loopback_gb_per_s"] * GB
            ),
            "link.latency_s": Provenance(
                ASSUMPTIONS,
                "assumed",
                "ASSUMED",
                lambda: assumed("link_latency_us", "loopback") * US,
            ),
        },
    )
    return table


PROVENANCE = build_table()


# --- what the catalogue sets ------------------------------------------------------------------


def _set_fields(obj: object, prefix: str) -> dict[str, object]:
    """The numeric fields of a dataclass that differ from their defaults (a default is no
    figure: 1.0 for a fraction not modelled, 0 for a cost not counted)."""
    out: dict[str, object] = {}
    for f in dataclasses.fields(obj):  # type: ignore[arg-type]
        value = getattr(obj, f.name)
        if isinstance(value, (bool, str)) or value is None:
            continue
        if f.default is not dataclasses.MISSING and value == f.default:
            continue
        if f.name == "peak_flops_per_s":
            out |= {f"{prefix}peak_flops_per_s.{d}": v for d, v in value.items()}
        elif isinstance(value, (int, float, tuple)):
            out[prefix + f.name] = value
    return out


def catalogue_fields(spec: HardwareSpec) -> dict[str, object]:
    """Every figure an entry sets, by the field names of :data:`PROVENANCE`."""
    out = _set_fields(spec.accelerator, "accelerator.")
    for name in ("link", "inter_node_link"):
        link = getattr(spec, name)
        if isinstance(link, Link):
            out |= _set_fields(link, f"{name}.")
    for name in ("devices_per_node", "torus_columns", "message_overhead_s"):
        value = getattr(spec, name)
        if value not in (None, 0, 0.0):
            out[name] = value
    return out


def _params() -> list[Any]:
    params = []
    for (entry, field), row in sorted(PROVENANCE.items()):
        marks = (
            [pytest.mark.xfail(strict=True, reason=f"DISAGREES: {row.disagrees}")]
            if row.disagrees
            else []
        )
        params.append(pytest.param(entry, field, row, id=f"{entry}:{field}", marks=marks))
    return params


def _equal(catalogue: object, derived: object) -> None:
    if isinstance(catalogue, tuple):
        assert isinstance(derived, tuple) and len(derived) == len(catalogue), derived
        for (flops, share), (d_flops, d_share) in zip(catalogue, derived, strict=True):
            assert flops == pytest.approx(d_flops, rel=1e-12)
            assert share == pytest.approx(d_share, rel=1e-12)
    else:
        assert isinstance(derived, (int, float))
        assert catalogue == pytest.approx(derived, rel=1e-12)


@pytest.mark.parametrize(("entry", "field", "row"), _params())
def test_each_constant_equals_what_its_record_gives(
    entry: str, field: str, row: Provenance
) -> None:
    """The catalogue's figure equals the one derived in code from its record (rounded as the
    catalogue states it). A row that says DISAGREES is a strict expected failure."""
    _equal(catalogue_fields(hardware(entry))[field], row.derive())


def test_every_figure_of_every_entry_has_a_provenance_row() -> None:
    """A new entry, or a new figure of one, fails here until its row says where it comes from;
    a row naming a figure the entry no longer sets fails too."""
    set_by_catalogue = {
        (name, field) for name, spec in CATALOGUE.items() for field in catalogue_fields(spec)
    }
    assert sorted(set_by_catalogue - set(PROVENANCE)) == []
    assert sorted(set(PROVENANCE) - set_by_catalogue) == []


def test_every_row_names_a_stored_record_and_a_kind() -> None:
    for (entry, field), row in PROVENANCE.items():
        assert row.kind in KINDS, (entry, field, row.kind)
        assert row.how, (entry, field)
        for name in row.record.split(", "):
            assert (MEASUREMENTS / name).is_file(), (entry, field, name)


def test_every_entry_names_its_source() -> None:
    for name, spec in CATALOGUE.items():
        assert isinstance(spec.accelerator, Accelerator)
        assert spec.accelerator.source.strip(), name
        assert spec.description.strip(), name


def test_every_cited_record_says_where_it_is_from_and_whether_it_was_verified() -> None:
    """Each stored record of a cited figure names its source and says whether the figures were
    checked against it; an unverified one says why in a note."""
    files = sorted(CITED.glob("*.json"))
    assert files
    for path in files:
        data = json.loads(path.read_text())
        assert str(data.get("source", "")).strip(), path.name
        documents = data["entries"].values() if "entries" in data else [data]
        for document in documents:
            assert str(document.get("source", "")).strip(), path.name
            assert isinstance(document.get("verified"), bool), path.name
            if not document["verified"]:
                assert str(document.get("note", "")).strip(), path.name


def test_the_zero_bubble_record_is_the_reproductions_table() -> None:
    """The stored T_comm record holds the figures the zero-bubble reproduction states."""
    from validation.reproduce.zero_bubble import MICROBATCH_SIZE, SEQUENCE, SHAPES_3, TABLE_5

    zb = record("cited/zero-bubble-2401.10241-table6.json")
    assert [
        (r["model"], r["p"], r["m"], (r["t_f_ms"], r["t_b_ms"], r["t_w_ms"], r["t_comm_ms"]))
        for r in zb["profiled_rows"]
    ] == [(model, p, m, times) for model, p, m, times, _ in TABLE_5]
    for model, (hidden, heads) in SHAPES_3.items():
        setup = zb["table_3_setups"][model]
        assert (setup["hidden"], setup["attention_heads"]) == (hidden, heads)
        assert setup["microbatch_size"] == MICROBATCH_SIZE[model]
        assert setup["sequence_tokens"] == SEQUENCE


def test_the_fitted_overhead_is_the_fit_through_every_row_of_the_record() -> None:
    """What the record gives: through all 12 rows the intercept is 0.237 ms, through each
    model's first row (the rows the reproduction compares) 0.257 ms; the catalogue states the
    first, to 0.01 ms (0.24; it stated 0.25, neither fit's, until 2026-11-27)."""
    sizes, times = message_bytes_and_t_comm()
    every = statistics.linear_regression(sizes, times).intercept
    first = {}
    for size, time, row in zip(
        sizes,
        times,
        record("cited/zero-bubble-2401.10241-table6.json")["profiled_rows"],
        strict=True,
    ):
        first.setdefault(row["model"], (size, time))
    firsts = statistics.linear_regression(*zip(*first.values(), strict=True)).intercept
    assert round(every, 3) == 0.237 and round(firsts, 3) == 0.257
    assert round(every, 2) == pytest.approx(hardware("a100").message_overhead_s * 1e3)


def test_the_h200_matmul_curve_is_the_stored_records() -> None:
    """The h200 entry's matmul efficiency curve, point by point, from the record's square bf16
    products (rounded to 0.1 TFLOP/s as the catalogue states them) over the bf16 peak. It was
    set from a run that was never stored (179.8 TFLOP/s at 1,024 against the record's 126.8)."""
    h200 = record("h200-layers.json")
    accelerator = hardware("h200").accelerator
    peak = accelerator.peak_flops_per_s["bf16"]
    derived = [
        (float(row["flops"]), round(row["flops_per_s"] / 1e12, 1) * 1e12 / peak)
        for row in h200["square_matmuls"]
        if row["n"] >= 1024
    ]
    assert len(derived) == len(accelerator.matmul_efficiency) == 8
    for (flops, fraction), (entry_flops, entry_fraction) in zip(
        derived, accelerator.matmul_efficiency, strict=True
    ):
        assert entry_flops == pytest.approx(flops, rel=1e-12)
        assert entry_fraction == pytest.approx(fraction, rel=1e-12)


def test_the_ndr_rule_agrees_with_what_nccl_tests_319_states() -> None:
    """NDR's 48 GB/s is the catalogue's rule (twice nccl-tests#119's 24 GB/s per HDR NIC);
    NVIDIA/nccl-tests#319 states 'around 48GB/s' per 400G NIC, the same figure."""
    stated = record("cited/nccl-tests-319.json")["busbw_per_400g_cx7_nic_gb_per_s"]
    assert infiniband_collective("ndr") == pytest.approx(stated * GB, rel=1e-12)
