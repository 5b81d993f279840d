"""Attribution rules on small hand-built Kineto traces: joins, threads, phases, aggregation."""

from __future__ import annotations

from typing import Any

import pytest

from attnprof.core.attribution import (
    AttributedKernel,
    KernelEvent,
    PhaseContext,
    aggregate,
    attribute,
    classify_phase,
    cpu_kernels,
    parse_trace,
    quantile,
)

GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_kernel__5x_cublas"
SOFTMAX = "void (anonymous namespace)::softmax_warp_forward<float, float, float, 11, false, false>(float*)"
CUDNN_BWD = "cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_3_64x128x128_4x1x1_cga1x1x1_kernel0_0"
CUDNN_FWD = "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x128_4x1x1_cga1x1x1_kernel0_0"
ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul> >()"


def op(
    name: str, ts: float, dur: float, ext: int | None = None, tid: int = 1, dims: list[list[int]] | None = None
) -> dict[str, Any]:
    a: dict[str, Any] = {}
    if ext is not None:
        a["External id"] = ext
    if dims is not None:
        a["Input Dims"] = dims
        a["Input type"] = ["float"] * len(dims)
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": a}


def ann(name: str, ts: float, dur: float, tid: int = 1) -> dict[str, Any]:
    return {"ph": "X", "cat": "user_annotation", "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur}


def kern(
    name: str, ts: float, dur: float, ext: int | None = None, corr: int | None = None, **args: Any
) -> dict[str, Any]:
    a: dict[str, Any] = {"device": 0, "stream": 7, "grid": [4, 1, 1], "block": [128, 1, 1]} | args
    if ext is not None:
        a["External id"] = ext
    if corr is not None:
        a["correlation"] = corr
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur, "args": a}


def launch(ts: float, corr: int, ext: int | None = None, tid: int = 1) -> dict[str, Any]:
    a: dict[str, Any] = {"correlation": corr}
    if ext is not None:
        a["External id"] = ext
    return {
        "ph": "X",
        "cat": "cuda_runtime",
        "name": "cudaLaunchKernel",
        "pid": 1,
        "tid": tid,
        "ts": ts,
        "dur": 1,
        "args": a,
    }


def trace(*events: dict[str, Any]) -> dict[str, Any]:
    return {"schemaVersion": 1, "deviceProperties": [{"id": 0, "numSms": 132}], "traceEvents": list(events)}


QKV = [[1, 4, 256, 64]] * 3


def fwd_bwd_trace() -> dict[str, Any]:
    """Two iterations of a cuDNN forward + backward; autograd's ops run on thread 2."""
    events: list[dict[str, Any]] = []
    for i, base in enumerate((0.0, 1000.0)):
        ext = 100 * (i + 1)
        events += [
            ann(f"attnprof/iter/{i}", base, 900),
            op("aten::scaled_dot_product_attention", base + 10, 100, ext, dims=QKV),
            op("aten::_cudnn_attention_forward", base + 20, 80, ext + 1, dims=QKV),
            launch(base + 30, ext + 2, ext + 1),
            kern(CUDNN_FWD, base + 200, 50, ext + 1, ext + 2),
            ann("attnprof/backward", base + 300, 500),
            op("autograd::engine::evaluate_function: ScaledDotProductCudnnAttentionBackward0", base + 310, 200, tid=2),
            op("ScaledDotProductCudnnAttentionBackward0", base + 311, 190, ext + 3, tid=2),
            op("aten::_cudnn_attention_backward", base + 312, 180, ext + 4, tid=2),
            kern(CUDNN_BWD, base + 600, 120, ext + 4),
            op("autograd::engine::evaluate_function: torch::autograd::AccumulateGrad", base + 520, 30, tid=2),
            op("aten::add_", base + 525, 20, ext + 5, tid=2),
            kern(ADD, base + 730, 5, ext + 5),
        ]
    events.append(kern(ADD, 5000, 3, 999))  # launched after profiling's last iteration
    return trace(*events)


def test_backward_on_another_thread_lands_in_its_iteration() -> None:
    parsed = parse_trace(fwd_bwd_trace())
    assert parsed.iterations == [0, 1]
    assert parsed.annotated
    bwd = [k for k in parsed.kernels if k.name == CUDNN_BWD]
    assert [k.iteration for k in bwd] == [0, 1]
    assert bwd[1].op_stack[:3] == ("attnprof/iter/1", "attnprof/backward", bwd[1].op_stack[2])
    assert bwd[1].op == "aten::_cudnn_attention_backward"
    phases = {(a.key, a.phase) for a in attribute(parsed)}
    assert phases == {
        ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16", "fused_attention"),
        ("cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16", "backward"),
        ("elementwise:add", "backward"),
    }


def test_kernels_outside_iterations_are_left_out() -> None:
    parsed = parse_trace(fwd_bwd_trace())
    stray = [k for k in parsed.kernels if k.external_id == 999]
    assert stray and stray[0].iteration is None
    attributed = attribute(parsed)
    assert all(a.kernel.external_id != 999 for a in attributed)
    rows = aggregate(attributed, parsed.iterations)
    assert [(r.phase, r.launches_per_iter) for r in rows] == [
        ("fused_attention", 1.0),
        ("backward", 1.0),
        ("backward", 1.0),
    ]


def test_join_falls_back_to_correlation_then_enclosing_op() -> None:
    parsed = parse_trace(
        trace(
            op("aten::bmm", 10, 50, 5, dims=[[2, 8, 4], [2, 4, 8]]),
            launch(20, corr=77),  # the launch call carries no External id
            kern(GEMM, 100, 30, corr=77),  # neither does the kernel
        )
    )
    (k,) = parsed.kernels
    assert k.op == "aten::bmm" and k.iteration == 0 and k.launch_ts_us == 20
    assert k.input_dims == ((2, 8, 4), (2, 4, 8))


def test_join_through_flow_event_when_correlation_is_missing() -> None:
    flow = {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": 31, "pid": 0, "tid": 7, "ts": 100, "bp": "e"}
    parsed = parse_trace(trace(op("aten::mm", 10, 50, 5), launch(20, corr=31, ext=5), kern(GEMM, 100, 30), flow))
    (k,) = parsed.kernels
    assert (k.correlation, k.op) == (31, "aten::mm")


def test_old_category_names_and_missing_fields() -> None:
    events = [
        {"ph": "X", "cat": "Operator", "name": "aten::softmax", "pid": 1, "tid": 1, "ts": 0, "dur": 10},
        {"ph": "X", "cat": "Runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 2, "dur": 1,
         "args": {"correlation": 3}},
        {"ph": "X", "cat": "Kernel", "name": SOFTMAX, "pid": 0, "tid": 7, "ts": "20.5", "args": {"correlation": 3}},
        {"ph": "X", "cat": "Memcpy", "name": "Memcpy HtoD", "pid": 0, "tid": 7, "ts": 30, "dur": 2},
        {"ph": "X", "cat": "kernel", "pid": 0, "tid": 7, "ts": 40},  # no name: skipped
        "not an event",
        {"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "python"}},
    ]  # fmt: skip
    parsed = parse_trace({"traceEvents": events})
    (k,) = parsed.kernels
    assert (k.op, k.ts_us, k.dur_us, k.grid, k.registers_per_thread, k.shared_mem_bytes) == (
        "aten::softmax", 20.5, 0.0, None, None, None
    )  # fmt: skip
    assert parsed.other_events == {"gpu_memcpy": 1}
    assert parsed.device_properties == []
    assert [a.phase for a in attribute(parsed)] == ["softmax"]


def test_triton_kernel_joins_its_inductor_range() -> None:
    parsed = parse_trace(
        trace(
            ann("attnprof/iter/0", 0, 100),
            ann("triton_red_fused__softmax_0", 10, 5),
            launch(11, corr=4),
            kern("triton_red_fused__softmax_0", 50, 8, corr=4),
        )
    )
    (a,) = attribute(parsed)
    assert (a.kernel.op, a.key, a.phase) == ("triton_red_fused__softmax_0", "triton_red_fused__softmax", "softmax")


def _gemm_iteration(dims: list[list[int]] | None, with_softmax: bool) -> list[str]:
    """An iteration of bmm, (softmax), bmm with no attention op: the whole iteration is attention."""
    events = [ann("attnprof/iter/0", 0, 1000), op("aten::bmm", 10, 10, 1, dims=dims), kern(GEMM, 100, 10, 1)]
    if with_softmax:
        events += [op("aten::_softmax", 30, 10, 2, dims=[[1, 2, 64, 64]]), kern(SOFTMAX, 120, 5, 2)]
    events += [op("aten::bmm", 50, 10, 3, dims=dims), kern(GEMM, 130, 10, 3)]
    events += [op("aten::bmm", 70, 10, 4, dims=dims), kern(GEMM, 150, 10, 4)]
    return [a.phase for a in attribute(parse_trace(trace(*events)))]


def test_gemm_roles_when_dims_cannot_tell() -> None:
    square = [[2, 64, 64], [2, 64, 64]]  # S_kv == head dim
    assert _gemm_iteration(square, with_softmax=True) == ["qk_matmul", "softmax", "av_matmul", "av_matmul"]
    assert _gemm_iteration(None, with_softmax=False) == ["qk_matmul", "av_matmul", "qk_matmul"]


def _k(
    op_name: str | None, dims: tuple[tuple[int, ...], ...] = (), stack: tuple[str, ...] = (), **kw: Any
) -> KernelEvent:
    fields: dict[str, Any] = {
        "name": GEMM, "ts_us": 0.0, "dur_us": 1.0, "stream": 7, "external_id": None, "correlation": None,
        "grid": None, "block": None, "registers_per_thread": None, "shared_mem_bytes": None,
        "op": op_name, "op_stack": stack or ((op_name,) if op_name else ()), "iteration": 0, "input_dims": dims,
    }  # fmt: skip
    fields.update(kw)
    return KernelEvent(**fields)


def test_dims_decide_gemm_role_over_position() -> None:
    qk = _k("aten::bmm", ((4, 128, 32), (4, 32, 512)))  # contracts over D=32, yields S_kv=512 columns
    pv = _k("aten::bmm", ((4, 128, 512), (4, 512, 32)))
    ctx_after = PhaseContext(seq_kv=512, head_dim=32, after_softmax=True)
    ctx_before = PhaseContext(seq_kv=512, head_dim=32, after_softmax=False, gemm_index=1)
    assert classify_phase(qk, context=ctx_after) == "qk_matmul"
    assert classify_phase(pv, context=ctx_before) == "av_matmul"
    assert classify_phase(_k("aten::baddbmm", ((), (4, 128, 32), (4, 32, 512))), context=ctx_after) == "qk_matmul"


def test_explicit_phase_wins_except_over_backward() -> None:
    proj = _k("aten::mm", stack=("attnprof/iter/0", "attnprof/phase/qkv_proj", "aten::linear", "aten::mm"))
    assert classify_phase(proj) == "qkv_proj"
    ffn = _k(None, stack=("attnprof/phase/ffn", "attnprof/phase/softmax"), name=SOFTMAX)
    assert classify_phase(ffn) == "softmax"  # the innermost annotation counts
    bogus = _k("aten::mm", stack=("attnprof/phase/bogus", "aten::linear", "aten::mm"))
    assert classify_phase(bogus) == "other"  # unknown phase ignored; a projection is no QK^T
    in_bwd = _k("aten::mm", stack=("attnprof/phase/out_proj", "attnprof/backward", "aten::mm"))
    assert classify_phase(in_bwd) == "backward"
    autograd = _k("aten::mm", stack=("attnprof/phase/ffn", "MmBackward0", "aten::mm"))
    assert classify_phase(autograd) == "backward"


def test_region_limits_mask_and_gemm_roles() -> None:
    outside = PhaseContext(attention_region=False)
    assert classify_phase(_k("aten::mul", name=ADD), context=outside) == "other"
    assert classify_phase(_k("aten::bmm"), context=outside) == "other"
    scale = _k("aten::mul", stack=("aten::scaled_dot_product_attention", "aten::mul"), name=ADD)
    assert classify_phase(scale) == "mask"


def test_cast_needs_a_dtype_change() -> None:
    copy = (
        "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)>()"
    )
    cast_stack = ("aten::to", "aten::_to_copy", "aten::copy_")
    upcast = _k("aten::copy_", stack=cast_stack, name=copy, input_types=("float", "c10::BFloat16", "Scalar"))
    same = _k("aten::copy_", stack=("aten::contiguous", "aten::clone", "aten::copy_"), name=copy,
              input_types=("float", "float", "Scalar"))  # fmt: skip
    unknown = _k("aten::copy_", stack=cast_stack, name=copy)
    assert [classify_phase(k) for k in (upcast, same, unknown)] == ["cast", "other", "cast"]


# ---------------------------------------------------------------------------------------------
# aggregate


def _ak(
    name: str, it: int, ts: float, dur: float, phase: str = "softmax", key: str | None = None, **kw: Any
) -> AttributedKernel:
    k = _k("aten::x", name=name, iteration=it, ts_us=ts, dur_us=dur, **kw)
    return AttributedKernel(kernel=k, key=key or name, phase=phase)  # type: ignore[arg-type]


def test_aggregate_statistics_count_missing_iterations_as_zero() -> None:
    rows = aggregate([_ak("a", 0, 1, 10.0), _ak("a", 1, 1, 20.0), _ak("a", 1, 2, 2.0)], [0, 1, 2])
    (row,) = rows
    assert row.per_iter_us == [10.0, 22.0, 0.0]
    assert row.launches_per_iter == pytest.approx(1.0)
    assert (row.duration_median_us, row.duration_p25_us, row.duration_p75_us) == (10.0, 5.0, 16.0)


def test_aggregate_groups_by_name_and_phase_and_sorts_by_first_launch() -> None:
    kernels = [
        _ak("copy", 0, 1, 1.0, phase="cast", key="elementwise:copy"),
        _ak("gemm", 0, 2, 5.0, phase="qk_matmul"),
        _ak("copy", 0, 3, 1.0, phase="other", key="elementwise:copy"),
        _ak("copy2", 0, 4, 1.0, phase="cast", key="elementwise:copy"),
        _ak("late", 1, 0.5, 1.0, phase="other"),  # first in its own iteration
        _ak("ignored", 7, 0, 1.0),
    ]
    rows = aggregate(kernels, [0, 1])
    assert [(r.name, r.phase) for r in rows] == [
        ("copy", "cast"),
        ("late", "other"),
        ("gemm", "qk_matmul"),
        ("copy", "other"),
        ("copy2", "cast"),
    ]
    assert aggregate(kernels, []) == []


def test_aggregate_launch_config_is_the_most_common() -> None:
    small: dict[str, Any] = {"grid": (1, 1, 1), "block": (32, 1, 1), "registers_per_thread": 16, "shared_mem_bytes": 0}
    big: dict[str, Any] = {
        "grid": (8, 1, 1),
        "block": (128, 1, 1),
        "registers_per_thread": 64,
        "shared_mem_bytes": 1024,
    }
    (row,) = aggregate([_ak("k", 0, 1, 1, **small), _ak("k", 1, 1, 1, **big), _ak("k", 2, 1, 1, **big)], [0, 1, 2])
    assert (row.grid, row.block, row.registers_per_thread, row.shared_mem_bytes) == tuple(big.values())
    (tie,) = aggregate([_ak("k", 0, 1, 1, **small), _ak("k", 1, 1, 1, **big)], [0, 1])
    assert tie.grid == (1, 1, 1)


def test_aggregate_keeps_every_launch_input_of_the_first_iteration() -> None:
    a = _ak("c", 0, 1, 1, input_dims=((4,),))
    b = _ak("c", 0, 2, 1, input_dims=((8,),))
    c = _ak("c", 1, 1, 1, input_dims=((16,),))
    (row,) = aggregate([a, b, c], [0, 1])
    assert row.input_dims == ((4,),)
    assert [d for d, _ in row.launch_inputs] == [((4,),), ((8,),)]
    assert row.to_document().duration_us.median == pytest.approx(1.5)  # per iteration: 2 and 1


def test_quantile() -> None:
    assert quantile([], 0.5) == 0.0
    assert quantile([3.0], 0.25) == 3.0
    assert quantile([4.0, 1.0, 3.0, 2.0], 0.5) == 2.5
    assert quantile([1.0, 2.0, 3.0, 4.0, 5.0], 0.25) == 2.0


def test_sdpas_dispatching_wrappers_are_never_cpu_kernels() -> None:
    """A tiny math-path case on a busy host: the wrappers' own time (the dispatcher's) outweighs their children's,
    yet only the ops that compute play kernels, so no 'fused attention' kernel appears on the math backend."""
    events = [
        ann("attnprof/iter/0", 0, 1000),
        op("aten::scaled_dot_product_attention", 10, 900, 1, dims=QKV),
        op("aten::_scaled_dot_product_attention_math", 20, 850, 2, dims=QKV),
        op("aten::mul", 30, 3, 3, dims=[[1, 4, 256, 64], []]),
        op("aten::bmm", 40, 4, 4, dims=[[4, 256, 64], [4, 64, 256]]),
        op("aten::_softmax", 50, 3, 5, dims=[[4, 256, 256]]),
        op("aten::bmm", 60, 4, 6, dims=[[4, 256, 256], [4, 256, 64]]),
    ]
    names = [k.name for k in cpu_kernels(parse_trace(trace(*events)))]
    assert names == ["aten::mul", "aten::bmm", "aten::_softmax", "aten::bmm"]
