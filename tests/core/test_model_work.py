"""FLOPs and minimum bytes of attention cases and kernels, checked against hand-computed numbers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attnprof.core.model import (
    AttentionShape,
    attended_pairs,
    attention_flops,
    case_work,
    dtype_bytes,
    fused_bytes_min,
    kernel_work,
    unfused_bytes_min,
)

DATA = Path(__file__).resolve().parents[1] / "data" / "h200"

LLAMA = {"batch": 1, "q_heads": 32, "seq_q": 2048, "head_dim": 128, "dtype": "bf16"}


def shape(**overrides: object) -> AttentionShape:
    s = AttentionShape.from_params({**LLAMA, **overrides})
    assert s is not None
    return s


def test_from_params_defaults_and_missing_keys() -> None:
    s = AttentionShape.from_params({"q_heads": 8, "seq_q": 64, "head_dim": 32})
    assert s == AttentionShape(1, 8, 8, 64, 64, 32, False, "bf16")
    assert AttentionShape.from_params({"q_heads": 8, "seq_q": 64}) is None
    assert AttentionShape.from_params({"seq_q": 64, "head_dim": 32}) is None
    assert AttentionShape.from_params({"q_heads": 8, "head_dim": 32, "seq_q": None}) is None
    with pytest.raises(ValueError, match="dtype"):
        AttentionShape.from_params({"q_heads": 8, "seq_q": 64, "head_dim": 32, "dtype": "int8"})


def test_dtype_bytes() -> None:
    assert (dtype_bytes("fp32"), dtype_bytes("fp16"), dtype_bytes("bf16")) == (4, 2, 2)
    with pytest.raises(ValueError):
        dtype_bytes("fp8")


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        # LLaMA-7B layer: 4·1·32·2048·2048·128
        ({}, 68_719_476_736),
        # GQA: the FLOPs count query heads only, 4·1·32·2048·2048·128 whatever Hkv is
        ({"kv_heads": 8}, 68_719_476_736),
        # cross-attention: 4·2·16·128·4096·64
        ({"batch": 2, "q_heads": 16, "seq_q": 128, "seq_kv": 4096, "head_dim": 64}, 4_294_967_296),
        # causal self-attention: exactly half of 4·1·32·2048·2048·128
        ({"causal": True}, 34_359_738_368),
        # causal self-attention of odd length: half of 4·1·1·3·3·8 = 144, no rounding
        ({"q_heads": 1, "seq_q": 3, "head_dim": 8, "causal": True}, 144),
        # causal cross, Sq=4 < Skv=6, bottom-right: pairs 3+4+5+6 = 18, 4·1·2·18·16 = 2304
        ({"q_heads": 2, "seq_q": 4, "seq_kv": 6, "head_dim": 16, "causal": True}, 2304),
        # decode, one query against 4096 cached keys, causal: it sees every key, 4·8·32·4096·128
        ({"batch": 8, "seq_q": 1, "seq_kv": 4096, "kv_heads": 8, "causal": True}, 536_870_912),
        # causal cross, Sq=6 > Skv=4, bottom-right: the first 2 queries see nothing: 1+2+3+4 = 10
        ({"q_heads": 2, "seq_q": 6, "seq_kv": 4, "head_dim": 16, "causal": True}, 1280),
    ],
)
def test_forward_flops_match_the_formula(overrides: dict[str, object], expected: int) -> None:
    assert attention_flops(shape(**overrides), "fwd") == expected


def test_attended_pairs_match_a_brute_force_bottom_right_mask_for_cross_attention() -> None:
    for sq in range(1, 13):
        for skv in range(1, 13):
            s = AttentionShape(1, 1, 1, sq, skv, 8, causal=True)
            # torch.nn.attention.bias.causal_lower_right(sq, skv): row i keeps columns j <= i + skv - sq
            tril = sum(1 for i in range(sq) for j in range(skv) if j <= i + skv - sq)
            if sq == skv:
                # the benchmark convention: half the square, not the tril count sq·(sq+1)/2
                assert 2 * attended_pairs(s) == sq * skv - (sq * skv) % 2
                assert tril == sq * (sq + 1) // 2
            else:
                assert attended_pairs(s) == tril
            assert attended_pairs(AttentionShape(1, 1, 1, sq, skv, 8)) == sq * skv


def test_a_sliding_window_keeps_the_pairs_a_brute_force_mask_keeps() -> None:
    # the flex target's mask (measure/targets.py): query i sits at key position i + skv - sq; causal keeps keys at or
    # before it, a window keeps keys fewer than W positions behind it (and, not causal, every key ahead)
    for sq in range(1, 12):
        for skv in range(1, 12):
            for causal in (False, True):
                plain = attended_pairs(AttentionShape(1, 1, 1, sq, skv, 8, causal=causal))
                for w in range(1, 14):
                    kept = sum(
                        1
                        for i in range(sq)
                        for j in range(skv)
                        if (not causal or j <= i + skv - sq) and i + skv - sq - j < w
                    )
                    unwindowed = sum(1 for i in range(sq) for j in range(skv) if not causal or j <= i + skv - sq)
                    shape = AttentionShape(1, 1, 1, sq, skv, 8, causal=causal, window=w)
                    # the unwindowed figure (its convention included) less the pairs behind the windows
                    assert attended_pairs(shape) == plain - (unwindowed - kept), (sq, skv, causal, w)
                    if w > 1:  # a narrower window never counts more
                        narrower = AttentionShape(1, 1, 1, sq, skv, 8, causal=causal, window=w - 1)
                        assert attention_flops(narrower, "fwd") <= attention_flops(shape, "fwd")


def test_a_sliding_window_cuts_the_flops_of_a_flex_case_and_says_so() -> None:
    params = {**LLAMA, "seq_q": 4096, "causal": True, "pass": "fwd"}
    full = case_work("flex", None, params)
    windowed = case_work("flex", None, {**params, "window": 128})
    assert full is not None and windowed is not None
    # each of the 4096 queries sees at most 128 keys: 128·129/2 + (4096 - 128)·128 pairs, less half the diagonal
    # (the causal self-attention convention), against 4096²/2
    pairs = 128 * 129 // 2 + (4096 - 128) * 128 - 4096 // 2
    assert windowed.flops == 4 * 32 * pairs * 128
    assert full.flops == 4 * 32 * (4096 * 4096 // 2) * 128
    assert full.flops / windowed.flops > 15
    assert "sliding window W=128" in windowed.formula and "window=128" in windowed.formula
    # a window as wide as the keys changes nothing
    assert case_work("flex", None, {**params, "window": 4096}).flops == full.flops  # type: ignore[union-attr]
    # decode under a window reads only the keys in it: one query, 32768 keys, a 1024-key window
    decode = {**LLAMA, "seq_q": 1, "seq_kv": 32768, "kv_heads": 8, "causal": True, "pass": "fwd"}
    whole, near = case_work("flex", None, decode), case_work("flex", None, {**decode, "window": 1024})
    assert whole is not None and near is not None
    q_o = 2 * 2 * 32 * 128 + 4 * 32  # q and o in bf16, the fp32 logsumexp
    assert whole.bytes_min == q_o + 2 * 2 * 8 * 32768 * 128 and near.bytes_min == q_o + 2 * 2 * 8 * 1024 * 128
    assert whole.flops == 32 * near.flops
    with pytest.raises(ValueError, match="window must be positive, got 0"):
        AttentionShape(1, 1, 1, 4, 4, 8, window=0)


@pytest.mark.parametrize(
    "overrides",
    [{}, {"kv_heads": 4}, {"causal": True}, {"seq_q": 7, "causal": True}, {"seq_q": 5, "seq_kv": 9, "causal": True}],
)
def test_backward_is_2_5x_and_fwd_bwd_3_5x_forward_exactly(overrides: dict[str, object]) -> None:
    s = shape(**overrides)
    fwd = attention_flops(s, "fwd")
    assert 2 * attention_flops(s, "bwd") == 5 * fwd
    assert 2 * attention_flops(s, "fwd_bwd") == 7 * fwd


def test_fused_bytes_for_the_llama_7b_shape() -> None:
    s = shape()
    # q, o: 1·32·2048·128 = 8,388,608 elements each; k, v the same; lse 32·2048 = 65,536 fp32 rows.
    # forward: 2·(8,388,608·4) + 4·65,536 = 67,108,864 + 262,144
    assert fused_bytes_min(s, "fwd") == 67_371_008
    # backward: 2·4·(8,388,608 + 8,388,608) + 12·65,536 = 134,217,728 + 786,432
    assert fused_bytes_min(s, "bwd") == 135_004_160
    assert fused_bytes_min(s, "fwd_bwd") == 67_371_008 + 135_004_160
    # causal changes no tensor size
    assert fused_bytes_min(shape(causal=True), "fwd") == 67_371_008


def test_fused_bytes_for_gqa() -> None:
    # k, v: 1·8·2048·128 = 2,097,152 elements each: 2·(2·8,388,608 + 2·2,097,152) + 4·65,536
    assert fused_bytes_min(shape(kv_heads=8), "fwd") == 42_205_184


def test_unfused_bytes_add_the_score_round_trips() -> None:
    s = shape()
    # scores 32·2048·2048 = 134,217,728 entries; forward 4 passes of 4 bytes = 2,147,483,648
    assert unfused_bytes_min(s, "fwd", 4) == 67_371_008 + 2_147_483_648
    # backward 6 passes of 2 bytes = 1,610,612,736
    assert unfused_bytes_min(s, "bwd", 2) == 135_004_160 + 1_610_612_736


def test_case_work_picks_fused_or_unfused_by_target_and_backend() -> None:
    fused = 67_371_008
    for target, backend in [
        ("sdpa", "cudnn"),
        ("sdpa", "flash"),
        ("sdpa", "efficient"),
        ("sdpa", "default"),
        ("flex", None),
        ("compiled_naive", None),
        ("mypkg.attention:make_case", None),
    ]:
        w = case_work(target, backend, LLAMA)
        assert w is not None
        assert (w.flops, w.bytes_min) == (68_719_476_736, fused), target
    math = case_work("sdpa", "math", LLAMA)
    assert math is not None
    assert math.bytes_min == fused + 4 * 134_217_728 * 4  # fp32 scores after the upcast
    naive = case_work("naive", None, LLAMA)
    assert naive is not None
    assert naive.bytes_min == fused + 4 * 134_217_728 * 2  # bf16 scores
    assert "unfused" in naive.formula and "Sq=2048" in naive.formula
    assert case_work("sdpa", "cudnn", {"seq_q": 128}) is None


def test_case_work_fwd_bwd_and_document() -> None:
    w = case_work("sdpa", "flash", {**LLAMA, "causal": True, "pass": "fwd_bwd"})
    assert w is not None
    assert w.flops == 7 * 34_359_738_368 // 2
    assert w.bytes_min == 67_371_008 + 135_004_160
    doc = w.to_document()
    assert (doc.flops, doc.bytes_min, doc.formula) == (w.flops, w.bytes_min, w.formula)


def test_block_adds_projections_and_ffn() -> None:
    w = case_work("block", None, {**LLAMA, "causal": True})
    assert w is not None
    # T = 2048 tokens, H = 32·128 = 4096, QKV width (32 + 2·32)·128 = 12288, F = 4·4096 = 16384
    qkv = 2 * 2048 * 4096 * 12288  # 206,158,430,208
    out = 2 * 2048 * 4096 * 4096  # 68,719,476,736
    ffn = 2 * 2 * 2048 * 4096 * 16384  # 549,755,813,888
    assert w.flops == 34_359_738_368 + qkv + out + ffn == 858_993_459_200
    # bf16 bytes of X·W + W + Y per matmul: qkv 2·(8,388,608 + 50,331,648 + 25,165,824) = 167,772,160;
    # out 2·(3·... ) = 67,108,864; ffn up and down 2·(8,388,608 + 67,108,864 + 33,554,432) = 218,103,808 each
    assert w.bytes_min == 67_371_008 + 167_772_160 + 67_108_864 + 2 * 218_103_808
    gqa_small = case_work(
        "block", None, {"q_heads": 4, "kv_heads": 2, "seq_q": 8, "head_dim": 2, "dtype": "fp32", "ffn_hidden": 10}
    )
    assert gqa_small is not None
    # attention 4·4·8·8·2 = 2048; H = 8, T = 8: qkv 2·8·8·16 = 2048, out 2·8·8·8 = 1024, ffn 4·8·8·10 = 2560
    assert gqa_small.flops == 2048 + 2048 + 1024 + 2560


def test_gemm_kernel_work_from_the_math_trace_dims() -> None:
    flops, nbytes = kernel_work(
        "qk_matmul", "aten::bmm", [[32, 2048, 128], [32, 128, 2048]], ["float", "float"], None, "fwd"
    )
    assert flops == 2 * 32 * 2048 * 2048 * 128
    # fp32: A 32·2048·128 + B 32·128·2048 + C 32·2048·2048 = 150,994,944 elements · 4
    assert nbytes == 603_979_776


@pytest.mark.parametrize(
    ("op", "dims", "types", "expected"),
    [
        (
            "aten::mm",
            [[64, 32], [32, 16]],
            ["c10::BFloat16", "c10::BFloat16"],
            (2 * 64 * 16 * 32, 2 * (2048 + 512 + 1024)),
        ),
        # bias [16] fp32 with bf16 matrices: 16·4 bytes more
        (
            "aten::addmm",
            [[16], [64, 32], [32, 16], [], []],
            ["float", "c10::BFloat16", "c10::BFloat16", "Scalar", "Scalar"],
            (2 * 64 * 16 * 32, 2 * (2048 + 512 + 1024) + 64),
        ),
        # broadcast batch 2×3 of [4,5]@[5,6]: 2·6·4·6·5 FLOPs; A 120, B 90, C 6·24 = 144 elements of 2 bytes
        ("aten::matmul", [[2, 3, 4, 5], [3, 5, 6]], ["c10::Half", "c10::Half"], (1440, 2 * (120 + 90 + 144))),
        # linear: x [2, 10, 8] · W[16, 8]ᵀ + b[16]: M = 20
        (
            "aten::linear",
            [[2, 10, 8], [16, 8], [16]],
            ["float", "float", "float"],
            (2 * 20 * 16 * 8, 4 * (160 + 128 + 16 + 320)),
        ),
        (
            "aten::baddbmm",
            [[3, 4, 6], [3, 4, 5], [3, 5, 6], [], []],
            ["float"] * 3 + ["Scalar"] * 2,
            (2 * 3 * 4 * 6 * 5, 4 * (72 + 60 + 90 + 72)),
        ),
    ],
)
def test_gemm_kernel_work(op: str, dims: list[list[int]], types: list[str], expected: tuple[int, int]) -> None:
    assert kernel_work("other", op, dims, types, None, "fwd") == expected


def _math_trace_kernels() -> list[tuple[str, str, list[list[int]], list[str]]]:
    events = json.loads((DATA / "trace_math.json").read_text())["traceEvents"]
    ops = {e["args"]["External id"]: e for e in events if e.get("cat") == "cpu_op"}
    out = []
    for k in (e for e in events if e.get("cat") == "kernel"):
        op = ops[k["args"]["External id"]]
        out.append((k["name"], op["name"], op["args"]["Input Dims"], op["args"]["Input type"]))
    return out


def test_every_math_trace_kernel_has_a_model() -> None:
    scores = 32 * 2048 * 2048  # 134,217,728
    qkv = 32 * 2048 * 128  # 8,388,608
    expected = {
        # bf16 -> fp32 casts: read 2, write 4 bytes per element
        "aten::copy_ float<-bf16": (0, qkv * 6),
        # scale: read and write fp32, one multiply each
        "aten::mul": (qkv, qkv * 8),
        "aten::bmm QK": (2 * 32 * 2048 * 2048 * 128, (2 * qkv + scores) * 4),
        # softmax: read and write fp32 scores, 5 FLOPs each; 1.07 GB in 280 µs is the facts' 3.8 TB/s
        "aten::_softmax": (5 * scores, 8 * scores),
        # isneginf: read fp32, write bool
        "aten::isneginf": (scores, 5 * scores),
        # all over the last dim: read the bools; the [.., 2048, 1] result is left out
        "aten::all": (scores, scores),
        "aten::fill_": (0, 0),
        # where(rows [1,32,2048,1] bool, 0., softmax) with its out= operand: read 65,536 + 4·scores, write 4·scores
        "aten::where": (0, 32 * 2048 + 8 * scores),
        "aten::copy_ bf16<-float": (0, scores * 6),
        "aten::bmm PV": (2 * 32 * 2048 * 128 * 2048, (2 * qkv + scores) * 4),
        "aten::copy_ bf16<-float o": (0, qkv * 6),
    }
    got = {}
    for _name, op, dims, types in _math_trace_kernels():
        key = op
        if op == "aten::copy_":
            key = (
                "aten::copy_ float<-bf16"
                if types[0] == "float"
                else ("aten::copy_ bf16<-float" if dims[0][-1] == 2048 else "aten::copy_ bf16<-float o")
            )
        elif op == "aten::bmm":
            key = "aten::bmm QK" if dims[0][-1] == 128 else "aten::bmm PV"
        got[key] = kernel_work("other", op, dims, types, None, "fwd")
    assert got == expected


def test_fused_kernels_get_the_case_formulas() -> None:
    s = shape(causal=True)
    fwd = (34_359_738_368, 67_371_008)
    assert kernel_work("fused_attention", "aten::_cudnn_attention_forward", None, None, s, "fwd") == fwd
    assert kernel_work("fused_attention", None, None, None, None, "fwd") == (None, None)
    bwd = (5 * 34_359_738_368 // 2, 135_004_160)
    main = "cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_3"
    op = "aten::_scaled_dot_product_cudnn_attention_backward"
    assert kernel_work("backward", op, None, None, s, "fwd_bwd", kernel_name=main) == bwd
    assert kernel_work("backward", op, None, None, s, "fwd_bwd") == bwd
    # delta pre-pass: 2·8,388,608 FLOPs; reads o and dO (2·2·8,388,608 B), writes 4·65,536 B
    pre = kernel_work(
        "backward", op, None, None, s, "fwd_bwd", kernel_name="cudnn::fusion::compute_dot_do_o_specialized"
    )
    assert pre == (16_777_216, 33_554_432 + 262_144)
    # dq cast: read fp32 dq accumulator, write bf16: (4 + 2)·8,388,608
    conv = kernel_work(
        "backward",
        "aten::_flash_attention_backward",
        None,
        None,
        s,
        "fwd_bwd",
        kernel_name="flash_bwd_convert_dq_kernel",
    )
    assert conv == (0, 50_331_648)
    # a backward accumulation add is an elementwise op when its operands are recorded, unknown otherwise
    add = kernel_work("backward", "aten::add_", [[4, 8], [4, 8]], ["float", "float"], s, "fwd_bwd")
    assert add == (32, 3 * 32 * 4)
    assert kernel_work("backward", "aten::add_", None, None, s, "fwd_bwd") == (None, None)
    # in a forward-only case every fused kernel does forward work
    assert (
        kernel_work(
            "fused_attention",
            "aten::_flash_attention_forward",
            None,
            None,
            s,
            "fwd",
            kernel_name="flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel",
        )
        == fwd
    )
    assert kernel_work("softmax", "triton_red_fused__softmax_0", None, None, s, "fwd") == (None, None)
