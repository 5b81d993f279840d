"""Datasheet peaks: the fallback when the peaks cannot be measured on the host.

Measured peaks (a large device copy, a large matmul per dtype) are preferred: a GPU rarely sustains its
datasheet figures (the H200 here copies at 4.27 TB/s of a 4.8 TB/s datasheet and multiplies bf16 at
715-790 of 989 TFLOP/s), so utilisations against datasheet peaks read low. Every value below is the
vendor's dense figure (tensor-core fp16/bf16 with fp32 accumulation, no structured sparsity: half the
"with sparsity" figure where only that is printed) and carries its source. ``dram_gbps`` is 10^9 bytes/s,
``tflops`` 10^12 FLOP/s; fp32 is the CUDA-core (non-tensor) rate. CPU peaks come from a host
calibration, not from this table.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from attnprof.core.documents.result import Peaks, PeakValue


@dataclass(frozen=True)
class DatasheetEntry:
    """One GPU model's datasheet peaks; ``patterns`` are regexes matched case-insensitively."""

    name: str
    patterns: tuple[str, ...]
    dram_gbps: float
    tflops: Mapping[str, float]
    source: str


def _tf(fp32: float, half: float) -> dict[str, float]:
    return {"fp32": fp32, "fp16": half, "bf16": half}


_A100 = (
    "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/"
    "nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf"
)
_H100 = "https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet"
_H200 = "https://www.nvidia.com/en-us/data-center/h200/"

DATASHEET: dict[str, DatasheetEntry] = {
    # A100: 1,555 GB/s (40GB HBM2), 2,039 GB/s (80GB SXM HBM2e), 1,935 GB/s (80GB PCIe); FP32 19.5,
    # BF16/FP16 tensor 312 TFLOP/s dense (624 with sparsity).
    # More specific entries first: equally long matches go to the first declared.
    "A100 SXM4 80GB": DatasheetEntry(
        "NVIDIA A100 SXM4 80GB", (r"a100.*80\s*gb", r"a100.*sxm.*80"), 2039, _tf(19.5, 312), _A100
    ),
    "A100 PCIe 80GB": DatasheetEntry(
        "NVIDIA A100 PCIe 80GB", (r"a100.*80\s*gb.*pcie", r"a100.*pcie.*80\s*gb"), 1935, _tf(19.5, 312), _A100
    ),
    "A100 PCIe 40GB": DatasheetEntry("NVIDIA A100 PCIe 40GB", (r"a100.*pcie",), 1555, _tf(19.5, 312), _A100),
    "A100 SXM4 40GB": DatasheetEntry("NVIDIA A100 SXM4 40GB", (r"\ba100\b",), 1555, _tf(19.5, 312), _A100),
    # H100 SXM: 3.35 TB/s, FP32 67, BF16/FP16 1,979 with sparsity -> 989.5 dense.
    "H100 SXM": DatasheetEntry("NVIDIA H100 SXM", (r"\bh100\b",), 3350, _tf(67, 989.5), _H100),
    # H100 PCIe: 2 TB/s, FP32 51, BF16/FP16 1,513 with sparsity -> 756.5 dense.
    "H100 PCIe": DatasheetEntry("NVIDIA H100 PCIe", (r"h100.*pcie",), 2000, _tf(51, 756.5), _H100),
    # H100 NVL: 3.9 TB/s, FP32 60, BF16/FP16 1,671 with sparsity -> 835.5 dense.
    "H100 NVL": DatasheetEntry("NVIDIA H100 NVL", (r"h100.*nvl",), 3900, _tf(60, 835.5), _H100),
    # H200 SXM: 4.8 TB/s, FP32 67, BF16/FP16 1,979 with sparsity -> 989.5 dense.
    "H200 SXM": DatasheetEntry("NVIDIA H200 SXM", (r"\bh200\b",), 4800, _tf(67, 989.5), _H200),
    # H200 NVL: 4.8 TB/s, FP32 60, BF16/FP16 1,671 with sparsity -> 835.5 dense.
    "H200 NVL": DatasheetEntry("NVIDIA H200 NVL", (r"h200.*nvl",), 4800, _tf(60, 835.5), _H200),
    # L4: 300 GB/s, FP32 30.3, BF16/FP16 242 with sparsity -> 121 dense.
    "L4": DatasheetEntry(
        "NVIDIA L4", (r"\bl4\b",), 300, _tf(30.3, 121), "https://www.nvidia.com/en-us/data-center/l4/"
    ),
    # L40S: 864 GB/s, FP32 91.6, BF16/FP16 362.05 dense (733 with sparsity).
    "L40S": DatasheetEntry(
        "NVIDIA L40S", (r"\bl40s\b",), 864, _tf(91.6, 362.05), "https://www.nvidia.com/en-us/data-center/l40s/"
    ),
    # A10: 600 GB/s, FP32 31.2, BF16/FP16 125 dense (250 with sparsity).
    "A10": DatasheetEntry(
        "NVIDIA A10", (r"\ba10\b",), 600, _tf(31.2, 125), "https://www.nvidia.com/en-us/data-center/products/a10-gpu/"
    ),
    # A10G (AWS G5 only; NVIDIA publishes no datasheet for it): 600 GB/s, FP32 35, BF16/FP16 70 dense,
    # AWS's figures as tabulated by Baseten.
    "A10G": DatasheetEntry(
        "NVIDIA A10G",
        (r"\ba10g\b",),
        600,
        _tf(35, 70),
        "https://www.baseten.co/blog/nvidia-a10-vs-a10g-for-ml-model-inference/",
    ),
    # GeForce RTX 4090: 1,008 GB/s, FP32 82.6, FP16/BF16 tensor with FP32 accumulate 165.2 dense (the
    # 330.3 figure accumulates in FP16, which attention kernels do not do). Ada whitepaper, appendix A.
    "RTX 4090": DatasheetEntry(
        "NVIDIA GeForce RTX 4090",
        (r"rtx\s*4090",),
        1008,
        _tf(82.6, 165.2),
        "https://images.nvidia.com/aem-dam/Solutions/geforce/ada/nvidia-ada-gpu-architecture.pdf",
    ),
    # MI300X: 5.3 TB/s, FP32 163.4 (vector and matrix), BF16/FP16 1,307.4 dense (2,614.9 with sparsity).
    "MI300X": DatasheetEntry(
        "AMD Instinct MI300X",
        (r"mi300x",),
        5300,
        _tf(163.4, 1307.4),
        "https://www.amd.com/en/products/accelerators/instinct/mi300/mi300x.html",
    ),
}


def datasheet_entry(device_name: str) -> DatasheetEntry | None:
    """The table entry for a device name as the driver reports it, or None when none matches.

    Matching is case-insensitive; the most specific pattern wins, measured as the longest stretch of
    the name it matches (``"NVIDIA H100 PCIe"``: ``h100.*pcie`` over ``\\bh100\\b``); ties go to the first
    entry declared.
    """
    best: tuple[int, DatasheetEntry] | None = None
    for entry in DATASHEET.values():
        for pattern in entry.patterns:
            match = re.search(pattern, device_name, flags=re.IGNORECASE)
            if match and (best is None or match.end() - match.start() > best[0]):
                best = (match.end() - match.start(), entry)
    return None if best is None else best[1]


def datasheet_peaks(device_name: str) -> Peaks | None:
    """Datasheet peaks of a GPU (GB/s and TFLOP/s per dtype, source ``datasheet``), or None if unknown."""
    entry = datasheet_entry(device_name)
    if entry is None:
        return None
    detail = f"{entry.name} datasheet: {entry.source}"
    return Peaks(
        dram_gbps=PeakValue(value=entry.dram_gbps, source="datasheet", detail=detail),
        tflops={
            dtype: PeakValue(value=value, source="datasheet", detail=detail) for dtype, value in entry.tflops.items()
        },
    )
