"""Attribution on real traces: four H200 SDPA traces and CPU traces recorded with PyTorch 2.13."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from attnprof.core.attribution import (
    ParsedTrace,
    TraceError,
    aggregate,
    attribute,
    backend_of,
    cpu_kernels,
    detect_backend,
    load_trace,
    parse_trace,
)
from attnprof.core.documents import Kernel
from attnprof.core.errors import AttnprofError

DATA = Path(__file__).resolve().parents[1] / "data"
H200 = DATA / "h200"
CPU = DATA / "cpu"


def h200(backend: str) -> ParsedTrace:
    return load_trace(H200 / f"trace_{backend}.json")


def cpu(name: str) -> ParsedTrace:
    return load_trace(CPU / f"trace_{name}.json.gz")


# ---------------------------------------------------------------------------------------------
# H200 traces (one forward SDPA call each, no iteration annotations)


@pytest.mark.parametrize("backend", ["cudnn", "flash", "efficient", "math"])
def test_h200_backend_is_read_from_what_ran(backend: str) -> None:
    parsed = h200(backend)
    assert parsed.on_gpu
    assert parsed.iterations == [0]
    assert not parsed.annotated
    assert backend_of(parsed) == backend


@pytest.mark.parametrize("backend", ["cudnn", "flash", "efficient"])
def test_h200_fused_backends_yield_one_fused_kernel(backend: str) -> None:
    rows = aggregate(attribute(h200(backend)), [0])
    assert [r.phase for r in rows] == ["fused_attention"]
    assert rows[0].launches_per_iter == 1


def test_h200_cudnn_kernel_row() -> None:
    parsed = h200("cudnn")
    (row,) = aggregate(attribute(parsed), parsed.iterations)
    assert row.name.startswith("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_")
    assert row.key == "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16"
    assert row.duration_median_us == pytest.approx(113.216)
    assert row.grid == (132, 1, 1)
    assert row.block == (384, 1, 1)
    assert row.registers_per_thread == 168
    assert row.shared_mem_bytes == 232448
    assert row.op == "aten::_cudnn_attention_forward"
    assert row.input_dims[0] == (1, 32, 2048, 128)


def test_h200_memset_is_not_a_kernel() -> None:
    parsed = h200("cudnn")
    assert len(parsed.kernels) == 1
    assert [m.name for m in parsed.memory_events] == ["Memset (Device)"]
    assert parsed.other_events == {"gpu_memset": 1}
    assert parsed.memory_events[0].op == "aten::_cudnn_attention_forward"


def test_h200_kernels_join_their_launching_op() -> None:
    (k,) = h200("flash").kernels
    assert k.op == "aten::_flash_attention_forward"
    assert k.op_stack == (
        "aten::scaled_dot_product_attention",
        "aten::_scaled_dot_product_flash_attention",
        "aten::_flash_attention_forward",
    )
    assert k.correlation == 43
    assert k.iteration == 0


def test_h200_flash_and_efficient_keys() -> None:
    keys = {b: attribute(h200(b))[0].key for b in ("flash", "efficient")}
    assert keys == {"flash": "pytorch_flash::flash_fwd_kernel", "efficient": "fmha_cutlassF_bf16_aligned_sm80"}


def test_h200_math_phases_in_launch_order() -> None:
    attributed = attribute(h200("math"))
    phases = [a.phase for a in attributed]
    assert phases == [
        "cast", "cast", "cast",  # q, k, v bf16 -> fp32
        "mask", "mask",  # the scale, split over q and k
        "qk_matmul",
        "softmax", "softmax", "softmax", "softmax", "softmax",  # softmax + safe-softmax passes
        "cast",  # probabilities fp32 -> bf16
        "av_matmul",
        "cast",  # output back to bf16
    ]  # fmt: skip
    by_phase = {a.phase: a for a in attributed if a.phase in ("qk_matmul", "av_matmul")}
    assert by_phase["qk_matmul"].kernel.dur_us == pytest.approx(856.6)
    assert "_tn_" in by_phase["qk_matmul"].kernel.name
    assert by_phase["av_matmul"].kernel.dur_us == pytest.approx(818.2)
    assert "_nn_" in by_phase["av_matmul"].kernel.name
    softmax_keys = [a.key for a in attributed if a.phase == "softmax"]
    assert softmax_keys == [
        "softmax_warp_forward",
        "elementwise:isneginf",
        "reduce:and",
        "elementwise:fill",
        "elementwise:where",
    ]


def test_h200_math_table() -> None:
    parsed = h200("math")
    rows = aggregate(attribute(parsed), parsed.iterations)
    table = [(r.phase, r.key, r.launches_per_iter) for r in rows]
    assert table[:3] == [
        ("cast", "elementwise:copy", 3.0),
        ("mask", "elementwise:mul", 2.0),
        ("qk_matmul", "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_ffma", 1.0),
    ]
    assert ("av_matmul", "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_ffma", 1.0) in table
    assert ("cast", "elementwise:copy_bf16", 2.0) in table
    copies = next(r for r in rows if r.key == "elementwise:copy")
    assert copies.duration_median_us == pytest.approx(25.632 + 25.888 + 26.111)
    assert sum(r.duration_median_us for r in rows) == pytest.approx(sum(k.dur_us for k in parsed.kernels))
    for row in rows:
        Kernel.model_validate(row.to_document().model_dump())


def test_h200_math_gemm_launch_config() -> None:
    rows = aggregate(attribute(h200("math")), [0])
    qk = next(r for r in rows if r.phase == "qk_matmul")
    assert (qk.grid, qk.block, qk.registers_per_thread, qk.shared_mem_bytes) == ((32, 8, 32), (128, 1, 1), 255, 33280)
    assert qk.input_dims == ((32, 2048, 128), (32, 128, 2048))
    assert qk.input_types == ("float", "float")


# ---------------------------------------------------------------------------------------------
# CPU traces recorded by tests/data/make_cpu_traces.py (3 annotated iterations each)


@pytest.mark.parametrize("name", ["sdpa_math_fwd", "sdpa_fwd_bwd", "naive_fwd", "naive_fwd_bwd"])
def test_cpu_trace_iterations(name: str) -> None:
    parsed = cpu(name)
    assert not parsed.on_gpu
    assert parsed.annotated
    assert parsed.iterations == [0, 1, 2]
    assert parsed.kernels == []
    records = cpu_kernels(parsed)
    assert {k.iteration for k in records} == {0, 1, 2}
    per_iter = [sum(1 for k in records if k.iteration == i) for i in (0, 1, 2)]
    assert len(set(per_iter)) == 1, per_iter
    assert all(k.grid is None and k.block is None and k.registers_per_thread is None for k in records)
    assert all(k.dur_us > 0 and k.name == k.op for k in records)


@pytest.mark.parametrize(
    ("name", "backend"),
    [("sdpa_math_fwd", "math"), ("sdpa_fwd_bwd", "cpu_flash"), ("naive_fwd", "eager"), ("naive_fwd_bwd", "eager")],
)
def test_cpu_backend(name: str, backend: str) -> None:
    assert backend_of(cpu(name)) == backend


def test_cpu_records_are_working_ops_not_views() -> None:
    names = {k.name for k in cpu_kernels(cpu("sdpa_math_fwd"))}
    assert "aten::bmm" in names  # has resolve_conj children, still the GEMM
    assert "aten::mul" in names  # converts its Python scalar in a child op, still the multiply
    assert not names & {"aten::as_strided", "aten::transpose", "aten::empty", "aten::view", "aten::resolve_conj"}
    assert not names & {"aten::matmul", "aten::_scaled_dot_product_attention_math", "aten::softmax"}  # wrappers


def test_cpu_fused_attention_is_one_record() -> None:
    rows = aggregate(attribute(cpu("sdpa_fwd_bwd")), [0, 1, 2])
    fused = [r for r in rows if r.phase == "fused_attention"]
    assert [r.key for r in fused] == ["aten::_scaled_dot_product_flash_attention_for_cpu"]
    assert fused[0].launches_per_iter == 1
    assert fused[0].input_dims[0] == (1, 2, 64, 32)


def test_cpu_backward_ops_are_backward() -> None:
    attributed = attribute(cpu("sdpa_fwd_bwd"))
    backward = [a for a in attributed if a.phase == "backward"]
    assert "aten::_scaled_dot_product_flash_attention_for_cpu_backward" in {a.key for a in backward}
    assert "aten::add_" in {a.key for a in backward}  # gradient accumulation
    assert all(
        any(n == "attnprof/backward" or n.startswith("autograd::engine") for n in a.kernel.op_stack) for a in backward
    )
    assert {a.phase for a in attributed} == {"fused_attention", "backward"}


def test_cpu_naive_phases() -> None:
    parsed = cpu("naive_fwd")
    rows = aggregate(attribute(parsed), parsed.iterations)
    phases = [r.phase for r in rows]
    assert phases.index("qk_matmul") < phases.index("softmax") < phases.index("av_matmul")
    assert {r.key for r in rows if r.phase in ("qk_matmul", "av_matmul")} == {"aten::bmm"}
    qk = next(r for r in rows if r.phase == "qk_matmul")
    av = next(r for r in rows if r.phase == "av_matmul")
    assert qk.input_dims[:2] == ((2, 64, 32), (2, 32, 64))
    assert av.input_dims[:2] == ((2, 64, 64), (2, 64, 32))
    mask = {r.key for r in rows if r.phase == "mask"}
    assert {"aten::mul", "aten::triu", "aten::masked_fill_"} <= mask
    assert {r.key for r in rows if r.phase == "softmax"} == {"aten::_softmax"}
    assert "other" not in phases


def test_cpu_naive_backward_keeps_forward_phases() -> None:
    parsed = cpu("naive_fwd_bwd")
    rows = aggregate(attribute(parsed), parsed.iterations)
    fwd = [r.phase for r in rows if r.phase != "backward"]
    assert fwd.count("qk_matmul") == 1 and fwd.count("av_matmul") == 1
    bwd = {r.key: r for r in rows if r.phase == "backward"}
    assert bwd["aten::bmm"].launches_per_iter == 4  # dQ, dK, dP, dV
    assert "aten::_softmax_backward_data" in bwd


def test_cpu_math_sdpa_phases() -> None:
    parsed = cpu("sdpa_math_fwd")
    phases = [a.phase for a in attribute(parsed) if a.kernel.iteration == 1]
    assert phases[:3] == ["mask", "mask", "qk_matmul"]
    assert phases[-1] == "av_matmul"
    assert set(phases[3:-1]) == {"softmax"}


def test_cpu_durations_do_not_double_count() -> None:
    parsed = cpu("sdpa_fwd_bwd")
    records = cpu_kernels(parsed)
    for it in parsed.iterations:
        window = next(op for op in parsed.ops if op.name == f"attnprof/iter/{it}")
        total = sum(k.dur_us for k in records if k.iteration == it)
        assert 0 < total <= window.dur_us


# ---------------------------------------------------------------------------------------------
# Errors


def test_not_a_trace_is_a_clear_error() -> None:
    with pytest.raises(TraceError, match="traceEvents"):
        parse_trace({"foo": 1})
    with pytest.raises(TraceError, match="JSON object"):
        parse_trace([1, 2])  # type: ignore[arg-type]
    assert issubclass(TraceError, AttnprofError)


def test_truncated_json_is_a_clear_error(tmp_path: Path) -> None:
    text = (H200 / "trace_cudnn.json").read_text()
    path = tmp_path / "cut.json"
    path.write_text(text[: len(text) // 2])
    with pytest.raises(TraceError, match=r"cut\.json: not valid JSON .*truncated"):
        load_trace(path)


def test_truncated_gzip_is_a_clear_error(tmp_path: Path) -> None:
    raw = (CPU / "trace_naive_fwd.json.gz").read_bytes()
    path = tmp_path / "cut.json.gz"
    path.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(TraceError, match=r"cut\.json\.gz: cannot read the trace"):
        load_trace(path)


def test_garbage_and_missing_files(tmp_path: Path) -> None:
    junk = tmp_path / "junk.json"
    junk.write_bytes(b"\x00\xff\xfe garbage")
    with pytest.raises(TraceError, match=r"junk\.json"):
        load_trace(junk)
    with pytest.raises(TraceError, match="cannot read"):
        load_trace(tmp_path / "absent.json")
    valid_json = tmp_path / "list.json"
    valid_json.write_text("[1, 2, 3]")
    with pytest.raises(TraceError, match=r"list\.json: a Kineto trace is a JSON object"):
        load_trace(valid_json)


def test_gzip_and_plain_json_read_the_same(tmp_path: Path) -> None:
    data = json.loads((H200 / "trace_flash.json").read_text())
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(json.dumps(data).encode()))
    assert load_trace(path).kernels == h200("flash").kernels


def test_detect_backend_none_when_no_attention() -> None:
    assert detect_backend([], []) is None
    assert detect_backend(["void at::native::vectorized_elementwise_kernel<4, X>"], ["aten::add"]) is None
