"""Kernel keys: short, deterministic, and the same across recompiles and autotuning picks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attnprof.core.attribution import MAX_KEY_LEN, detect_backend, kernel_key

H200 = Path(__file__).resolve().parents[1] / "data" / "h200"

CASES = [
    (
        "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x128_4x1x1_cga1x1x1_kernel0_0",
        "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16",
    ),
    (
        "cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_3_64x128x128_4x1x1_cga1x1x1_kernel1_0",
        "cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_kernel1",
    ),
    (
        "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize64x256x8_stage3_warpsize1x4x1_ffma_aligna4_alignc4"
        "_execute_kernel__5x_cublas",
        "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_ffma",
    ),
    ("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", "nvjet_sm90_tst_NNT"),
    ("ampere_sgemm_128x64_tn", "ampere_sgemm_tn"),
    ("triton_red_fused__softmax_0", "triton_red_fused__softmax"),
    ("triton_tem_fused_flex_attention_12", "triton_tem_fused_flex_attention"),
    (
        "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, "
        "cutlass::bfloat16_t, Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, false, false, "
        "false, false, true, true, false, false>(pytorch_flash::Flash_fwd_params)",
        "pytorch_flash::flash_fwd_kernel",
    ),
    (
        "fmha_cutlassF_bf16_aligned_64x128_rf_sm80(PyTorchMemEffAttention::AttentionKernel<cutlass::bfloat16_t, "
        "cutlass::arch::Sm80, true, 64, 128, 128, true, true>::Params)",
        "fmha_cutlassF_bf16_aligned_sm80",
    ),
    ("fmha_cutlassB_bf16_aligned_64x64_k128_sm80(PyTorchMemEffAttention::AttentionBackwardKernel<>::Params)",
     "fmha_cutlassB_bf16_aligned_sm80"),
    (
        "void at::native::vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<float, float, float, "
        "at::native::binary_internal::MulFunctor<float> >, std::array<char*, 2ul> >(int, "
        "at::native::AUnaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> >, "
        "std::array<char*, 2ul>)",
        "elementwise:mul",
    ),
    (
        "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)"
        "::{lambda()#3}::operator()() const::{lambda()#7}::operator()() const::{lambda(float)#1}, "
        "std::array<char*, 2ul>, 4>(int)",
        "elementwise:copy",
    ),
    (
        "void at::native::vectorized_elementwise_kernel<8, at::native::bfloat16_copy_kernel_cuda("
        "at::TensorIteratorBase&)::{lambda(float)#1}, std::array<char*, 2ul> >(int)",
        "elementwise:copy_bf16",
    ),
    (
        "void at::native::vectorized_elementwise_kernel<4, at::native::(anonymous namespace)::isneginf_kernel_impl("
        "at::TensorIteratorBase&)::{lambda()#1}::operator()() const, std::array<char*, 2ul> >(int)",
        "elementwise:isneginf",
    ),
    (
        "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::"
        "(anonymous namespace)::where_kernel_impl(at::TensorIterator&)::{lambda()#1}>(at::TensorIteratorBase&)"
        "::{lambda(int)#1}>(int)",
        "elementwise:where",
    ),
    (
        "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul> >"
        "(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)",
        "elementwise:fill",
    ),
    (
        "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
        "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul>)",
        "elementwise:add",
    ),
    (
        "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<bool, at::native::func_wrapper_t<bool, "
        "at::native::and_kernel_cuda(at::TensorIterator&)::{lambda()#1}::operator()() const::"
        "{lambda(bool, bool)#1}>, unsigned int, bool, 4, 4> >(at::native::ReduceOp<bool>)",
        "reduce:and",
    ),
    (
        "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float, "
        "float, float>, unsigned int, float, 4, 4> >(at::native::ReduceOp<float>)",
        "reduce:mean",
    ),
    (
        "void (anonymous namespace)::softmax_warp_forward<float, float, float, 11, false, false>"
        "(float*, float const*, int, int, int, bool const*, int, bool)",
        "softmax_warp_forward",
    ),
    (
        "void at::native::(anonymous namespace)::triu_tril_kernel<float, int, false, 4, true>"
        "(at::cuda::detail::TensorInfo<float, int>, long, long)",
        "triu_tril_kernel",
    ),
    (
        "void cudnn::fusion::compute_dot_do_o_specialized<true, 128, 4, __nv_bfloat16>(int, int, float*)",
        "cudnn::fusion::compute_dot_do_o_specialized",
    ),
    (
        "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8>"
        "(cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8::Params)",
        "cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_tn",
    ),
    ("aten::bmm", "aten::bmm"),
    ("aten::_scaled_dot_product_flash_attention_for_cpu", "aten::_scaled_dot_product_flash_attention_for_cpu"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "key"), CASES, ids=[k for _, k in CASES])
def test_kernel_key(name: str, key: str) -> None:
    assert kernel_key(name) == key


def test_keys_of_the_committed_traces_are_short() -> None:
    for path in sorted(H200.glob("trace_*.json")):
        for ev in json.loads(path.read_text())["traceEvents"]:
            if ev.get("cat") == "kernel":
                key = kernel_key(ev["name"])
                assert 0 < len(key) <= MAX_KEY_LEN
                assert "<" not in key and "(" not in key


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (
            "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x128_4x1x1_cga1x1x1_kernel0_0",
            "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_12_128x128x64_2x1x1_cga2x1x1_kernel0_0",
        ),
        (
            "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize64x64x8_stage3_warpsize1x4x1_ffma_aligna4_alignc4"
            "_execute_kernel__5x_cublas",
            "sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize128x32x8_stage4_warpsize2x2x1_ffma_aligna1_alignc1"
            "_execute_kernel__5x_cublas",
        ),
        ("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", "nvjet_sm90_tst_128x64_64x3_2x1_v_bz_coopB_NNT"),
        ("triton_poi_fused_mul_0", "triton_poi_fused_mul_17"),
        ("fmha_cutlassF_f16_aligned_64x64_rf_sm80(X)", "fmha_cutlassF_f16_aligned_32x128_gmem_sm80(X)"),
        (
            "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4>, true>(P)",
            "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 64, 32, 8>, false>(P)",
        ),
    ],
)
def test_recompiles_and_retuning_keep_the_key(a: str, b: str) -> None:
    assert kernel_key(a) == kernel_key(b)


def test_what_distinguishes_algorithms_stays() -> None:
    tn = kernel_key("sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize64x256x8_stage3_warpsize1x4x1_ffma_aligna4")
    nn = kernel_key("sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize64x256x8_stage3_warpsize1x4x1_ffma_aligna4")
    hmma = kernel_key("sm80_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize64x256x8_stage3_warpsize1x4x1_hmma_aligna4")
    assert len({tn, nn, hmma}) == 3
    fwd = kernel_key("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x128_kernel0_0")
    bwd = kernel_key("cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_7_64x128x128_kernel0_0")
    assert fwd != bwd
    f16, f32 = (kernel_key(f"fmha_cutlassF_{t}_aligned_64x64_rf_sm80(X)") for t in ("f16", "f32"))
    assert f16 != f32


def test_long_keys_are_bounded_and_deterministic() -> None:
    long_name = "my_custom_kernel_" + "_".join(f"stage{i}name" for i in range(40))
    key = kernel_key(long_name)
    assert len(key) == MAX_KEY_LEN
    assert key == kernel_key(long_name)
    assert key != kernel_key(long_name + "_other")
    assert kernel_key("") == ""


@pytest.mark.parametrize(
    ("kernels", "ops", "backend"),
    [
        (["cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7"], [], "cudnn"),
        ([], ["aten::_scaled_dot_product_cudnn_attention"], "cudnn"),
        (["void pytorch_flash::flash_fwd_kernel<X>(P)"], [], "flash"),
        ([], ["aten::_scaled_dot_product_flash_attention"], "flash"),
        (["fmha_cutlassF_bf16_aligned_64x128_rf_sm80(P)"], [], "efficient"),
        ([], ["aten::_scaled_dot_product_flash_attention_for_cpu"], "cpu_flash"),
        (["triton_tem_fused_flex_attention_0"], ["aten::bmm"], "flex"),
        ([], ["aten::_scaled_dot_product_attention_math", "aten::bmm", "aten::_softmax"], "math"),
        (["triton_red_fused__softmax_0", "nvjet_sm90_tst_NNT"], ["aten::bmm"], "triton"),
        ([], ["cpp_fused__softmax_0", "aten::bmm"], "compiled"),
        (["nvjet_sm90_tst_NNT", "softmax_warp_forward"], ["aten::matmul", "aten::softmax"], "eager"),
        (["nvjet_sm90_tst_NNT"], ["aten::mm", "aten::addmm"], None),
        ([], [], None),
    ],
)
def test_detect_backend(kernels: list[str], ops: list[str], backend: str | None) -> None:
    assert detect_backend(kernels, ops) == backend
