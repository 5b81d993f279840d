"""The Nsight Compute pass without a GPU: its CSV parsing, name matching and merging on recorded H200 data.

``tests/data/ncu/probe-elementwise.txt`` is the real output of ``ncu --csv --print-units base`` on an
H200 (one elementwise multiply); ``tests/data/h200/attnprof/result-ncu.json`` is a real
``attnprof profile --counters ncu`` run of ``examples/llama7b.toml``.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from attnprof.core.documents import Case, load_result
from attnprof.core.errors import AttnprofError, CountersUnavailable
from attnprof.core.measure.counters import (
    METRICS,
    NcuKernel,
    base_name,
    find_ncu,
    kernel_regex,
    merge_counters,
    parse_ncu_csv,
)
from attnprof.core.model import counter_bound
from tests.profiling_support import DATA

PROBE = DATA / "ncu" / "probe-elementwise.txt"
NCU_RUN = DATA / "h200" / "attnprof" / "result-ncu.json"

KINETO_MUL = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<float, float, float, "
    "at::native::binary_internal::MulFunctor<float> >, std::array<char*, 2ul> >(int, "
    "at::native::AUnaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> >, "
    "std::array<char*, 2ul>)"
)
NCU_MUL = (
    "void vectorized_elementwise_kernel<4, AUnaryFunctor<float, float, float, MulFunctor<float>>, "
    "array<char *, 2>>(int, T2, T3)"
)


def test_parse_ncu_csv_on_real_output() -> None:
    text = PROBE.read_text()
    assert text.startswith("name, driver_version")  # the probe's own preamble comes before ncu's table
    ((name, grid, block, values),) = parse_ncu_csv(text)
    assert name == NCU_MUL
    assert grid == (16384, 1, 1) and block == (128, 1, 1)
    # thousands separators removed, base units kept: nanoseconds and bytes
    assert values == {
        "dram__bytes_read.sum": 67_118_592.0,
        "gpu__time_duration.sum": 31_456.0,
        "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active": 0.0,
    }
    # 64 MiB of fp32 read in 31.5 µs: 2.1 TB/s, a plausible half of an H200's DRAM bandwidth
    assert values["dram__bytes_read.sum"] / values["gpu__time_duration.sum"] == pytest.approx(2134, rel=1e-3)


def test_parse_ncu_csv_orders_kernels_by_id_and_skips_bad_values() -> None:
    header = '"ID","Kernel Name","Block Size","Grid Size","Metric Name","Metric Unit","Metric Value"'
    rows = [
        '"10","k_b","(64, 1, 1)","(2, 3, 1)","gpu__time_duration.sum","ns","1,000"',
        '"2","k_a","(128, 1, 1)","(4, 1, 1)","gpu__time_duration.sum","ns","500"',
        '"2","k_a","(128, 1, 1)","(4, 1, 1)","sm__throughput.avg.pct_of_peak_sustained_elapsed","%","n/a"',
        '"2","k_a","(128, 1, 1)","(4, 1, 1)","dram__bytes_read.sum","byte","2,048"',
    ]
    parsed = parse_ncu_csv("==PROF== Connected to process 1\n" + "\n".join([header, *rows]))
    assert parsed == [
        ("k_a", (4, 1, 1), (128, 1, 1), {"gpu__time_duration.sum": 500.0, "dram__bytes_read.sum": 2048.0}),
        ("k_b", (2, 3, 1), (64, 1, 1), {"gpu__time_duration.sum": 1000.0}),
    ]
    assert parse_ncu_csv("==ERROR== no kernels were profiled\n") == []


@pytest.mark.parametrize(
    ("kineto", "ncu", "base"),
    [
        (KINETO_MUL, NCU_MUL, "vectorized_elementwise_kernel"),
        (
            "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, "
            "cutlass::bfloat16_t, Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, false, true, "
            "false, false, true, true, false, false>(pytorch_flash::Flash_fwd_params)",
            "void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, bfloat16_t, "
            "Flash_kernel_traits<128, 128, 64, 4, bfloat16_t>>, false, true, false, false, true, true, false, "
            "false>(Flash_fwd_params)",
            "flash_fwd_kernel",
        ),
        (
            "void (anonymous namespace)::softmax_warp_forward<float, float, float, 11, false, false>"
            "(float*, float const*, int, int, int, bool const*, int, bool)",
            "void (anonymous namespace)::softmax_warp_forward<float, float, float, 11, false, false>"
            "(T3 *, const T1 *, int, int, int, const bool *, int, bool)",
            "softmax_warp_forward",
        ),
        (
            "void at::native::(anonymous namespace)::cunn_SoftMaxBackwardSmem<4, float, float, float, "
            "at::native::(anonymous namespace)::SoftMaxBackwardEpilogue>(float*, float const*, float const*, long)",
            "void cunn_SoftMaxBackwardSmem<4, float, float, float, SoftMaxBackwardEpilogue>(T2 *, const T4 *, "
            "const T4 *, long)",
            "cunn_SoftMaxBackwardSmem",
        ),
        (
            "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x128_4x1x1_cga1x1x1_kernel0_0",
            "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x128_4x1x1_cga1x1x1_kernel0_0",
            "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x128_4x1x1_cga1x1x1_kernel0_0",
        ),
    ],
)
def test_base_name_agrees_between_kineto_and_ncu(kineto: str, ncu: str, base: str) -> None:
    assert base_name(kineto) == base_name(ncu) == base


def test_kernel_regex_never_matches_everything() -> None:
    names = [KINETO_MUL, NCU_MUL, "void (anonymous namespace)::softmax_warp_forward<float>(float*)", "flash_fwd"]
    assert kernel_regex(names) == "vectorized_elementwise_kernel|softmax_warp_forward|flash_fwd"
    assert kernel_regex(["fmha_cutlassF_bf16_aligned_64x128_rf_sm80(PyTorchMemEffAttention::Params)"]) == (
        "fmha_cutlassF_bf16_aligned_64x128_rf_sm80"
    )


def ncu_rows(case: Case) -> list[NcuKernel]:
    """The counters of a case as ncu rows, one per launch (ncu reports every launch), in launch order.

    Later launches of a kernel carry other values, as a real replay does; only the first is the kernel's.
    """
    rows: list[NcuKernel] = []
    for k in case.kernels:
        if not k.counters:
            continue
        grid, block = tuple(k.grid) if k.grid else None, tuple(k.block) if k.block else None
        rows.append((k.name, grid, block, dict(k.counters)))
        for n in range(1, round(k.launches_per_iter)):
            rows.append((k.name, grid, block, {m: -float(n) for m in k.counters}))
    return rows


def stripped(case: Case) -> Case:
    bare = copy.deepcopy(case)
    for k in bare.kernels:
        k.counters = None
        k.counter_bound = None
    return bare


@pytest.fixture(scope="module")
def ncu_cases() -> list[Case]:
    doc = load_result(NCU_RUN)
    assert doc.run.counters == "ncu"
    return [c for c in doc.cases if any(k.counters for k in c.kernels)]


def test_the_ncu_run_has_counters_on_every_case(ncu_cases: list[Case]) -> None:
    assert len(ncu_cases) == len(load_result(NCU_RUN).cases) == 15
    for case in ncu_cases:
        for k in case.kernels:
            if k.counters:
                assert set(k.counters) == set(METRICS)


def test_merge_counters_attaches_each_row_to_its_kernel(ncu_cases: list[Case]) -> None:
    for case in ncu_cases:
        rows = ncu_rows(case)
        bare = stripped(case)
        assert merge_counters(bare, rows) == sum(1 for k in case.kernels if k.counters)
        for mine, theirs in zip(bare.kernels, case.kernels, strict=True):
            assert mine.counters == theirs.counters, (case.id, mine.key)
            if theirs.counters:  # the stored run's bound is by the older rule (with "balanced"): recompute it
                c = theirs.counters
                expected = counter_bound(
                    c["sm__throughput.avg.pct_of_peak_sustained_elapsed"],
                    c["gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"],
                    c["sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"],
                )
                assert mine.counter_bound == expected, (case.id, mine.key)


def test_merge_counters_matches_ncu_names_to_kineto_names(ncu_cases: list[Case]) -> None:
    """A row with ncu's spelling of a kernel (no namespaces) lands on the kernel Kineto named."""
    math = next(c for c in ncu_cases if c.id == "sdpa[backend=math,pass=fwd]")
    target = next(k for k in math.kernels if "softmax_warp_forward" in k.name)
    assert target.grid is not None and target.block is not None and target.counters is not None
    ncu_name = "void softmax_warp_forward<float, float, float, 11, false, false>(T3 *, const T1 *, int, int, int)"
    bare = stripped(math)
    assert merge_counters(bare, [(ncu_name, tuple(target.grid), tuple(target.block), dict(target.counters))]) == 1
    (got,) = [k for k in bare.kernels if k.counters]
    assert got.name == target.name and got.counters == target.counters
    sm = target.counters["sm__throughput.avg.pct_of_peak_sustained_elapsed"]
    memory = target.counters["gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"]
    tensor = target.counters["sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"]
    assert got.counter_bound == counter_bound(sm, memory, tensor)


def test_merge_counters_requires_the_launch_configuration_to_match(ncu_cases: list[Case]) -> None:
    cudnn = next(c for c in ncu_cases if c.id == "sdpa[backend=cudnn,pass=fwd]")
    (k,) = cudnn.kernels
    assert k.counters is not None
    row = (k.name, (66, 1, 1), (384, 1, 1), dict(k.counters))
    bare = stripped(cudnn)
    assert merge_counters(bare, [row]) == 0
    assert bare.kernels[0].counters is None


def test_find_ncu_refuses_the_cpu() -> None:
    with pytest.raises(CountersUnavailable, match="needs a CUDA device") as info:
        find_ncu("cpu")
    assert isinstance(info.value, AttnprofError)


def test_find_ncu_names_the_missing_executable(tmp_path: Path) -> None:
    missing = tmp_path / "nsight" / "ncu"
    with pytest.raises(CountersUnavailable, match="not an executable Nsight Compute") as info:
        find_ncu("cuda", str(missing))
    assert str(missing) in str(info.value)
    not_executable = tmp_path / "ncu"
    not_executable.write_text("#!/bin/sh\n")
    with pytest.raises(CountersUnavailable):
        find_ncu("cuda", str(not_executable))
    not_executable.chmod(0o755)
    assert find_ncu("cuda", str(not_executable)) == str(not_executable)
