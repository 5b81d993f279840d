"""Why the backend ran: the SDPA calls read back from a trace, PyTorch's reasons carried into the comparison's finding
and the report, and on the CPU a plain word that PyTorch was not asked."""

from __future__ import annotations

from pathlib import Path

from attnprof.core.analysis.checks import backend_finding
from attnprof.core.attribution.kineto import CpuOp, ParsedTrace, load_trace
from attnprof.core.attribution.sdpa_calls import (
    SDPA_OP,
    backends_line,
    call_changes,
    call_of,
    call_words,
    is_contiguous,
    refusal_words,
    sdpa_calls,
)
from attnprof.core.documents import Case, SdpaCall, SdpaTensor
from attnprof.core.measure.sdpa_reasons import NOT_ON_CPU, ask_backends, reasons_of
from attnprof.core.report import sdpa_line
from tests.core.result_documents import make_case

FLASH_MASK = "Flash attention does not support non-null attn_mask."


def _op(dims: list[list[int]], types: list[str], strides: list[list[int]], concrete: list[str], **kw: object) -> CpuOp:
    return CpuOp(
        SDPA_OP,
        float(kw.get("ts", 0.0)),  # type: ignore[arg-type]
        10.0,
        1,
        None,
        tuple(tuple(d) for d in dims),
        tuple(types),
        iteration=0,
        input_strides=tuple(tuple(s) for s in strides),
        concrete_inputs=tuple(concrete),
    )


QKV_DIMS = [[2, 8, 128, 64], [2, 2, 128, 64], [2, 2, 128, 64]]
QKV_STRIDES = [[65536, 8192, 64, 1], [16384, 8192, 64, 1], [16384, 64, 128, 1]]  # the value's rows interleaved


def masked_op(ts: float = 0.0) -> CpuOp:
    return _op(
        [*QKV_DIMS, [1, 1, 128, 128], [], [], [], []],
        ["c10::BFloat16"] * 3 + ["bool", "Scalar", "Scalar", "", "Scalar"],
        [*QKV_STRIDES, [16384, 16384, 128, 1], [], [], [], []],
        ["", "", "", "", "0.", "True", "", "True"],
        ts=ts,
    )


def test_the_real_h200_traces_read_back_the_call_each_backend_ran() -> None:
    # Kineto's own events (record_shapes) from an H200: query, key and value of [1, 32, 2048, 128] in bf16, no mask
    for backend in ("flash", "cudnn", "efficient", "math"):
        calls = sdpa_calls(load_trace(f"tests/data/h200/trace_{backend}.json"))
        assert len(calls) == 1, backend
        call = calls[0]
        assert call.query.shape == [1, 32, 2048, 128] and call.query.dtype == "c10::BFloat16"
        assert call.query.strides == [8388608, 262144, 128, 1] and is_contiguous(call.key)
        assert call.attn_mask is None and not call.is_causal and call.dropout_p == 0.0 and not call.enable_gqa
        assert call_words(call) == (
            "q bfloat16 [1, 32, 2048, 128], k bfloat16 [1, 32, 2048, 128], v bfloat16 [1, 32, 2048, 128], no attn_mask"
        )


def test_a_call_reads_its_mask_scalars_and_strides_and_repeats_count_once() -> None:
    parsed = ParsedTrace([], [masked_op(0.0), masked_op(20.0)], [], [0], on_gpu=True)
    (call,) = sdpa_calls(parsed)
    assert call.calls == 2 and call.is_causal and call.enable_gqa and call.dropout_p == 0.0
    assert call.attn_mask is not None and call.attn_mask.dtype == "bool" and call.attn_mask.shape == [1, 1, 128, 128]
    assert not is_contiguous(call.value) and is_contiguous(call.query)
    words = call_words(call)
    assert "v bfloat16 [2, 2, 128, 64] non-contiguous (strides [16384, 64, 128, 1])" in words
    assert "attn_mask bool [1, 1, 128, 128]" in words and "is_causal" in words and "2 calls per iteration" in words


def test_a_trace_without_shapes_holds_no_call() -> None:
    bare = CpuOp(SDPA_OP, 0.0, 1.0, 1, None, (), (), iteration=0)
    assert call_of(bare) is None
    assert sdpa_calls(ParsedTrace([], [bare], [], [0], on_gpu=False)) == []


def _call(mask: SdpaTensor | None = None, refused: dict[str, list[str]] | None = None) -> SdpaCall:
    t = SdpaTensor(shape=[1, 8, 1, 128], strides=[1024, 128, 128, 1], dtype="c10::BFloat16")
    kv = SdpaTensor(shape=[1, 8, 4096, 128], strides=[4194304, 524288, 128, 1], dtype="c10::BFloat16")
    eligible = None if refused is None else [b for b in ("cudnn", "flash", "efficient") if b not in refused]
    return SdpaCall(query=t, key=kv, value=kv, attn_mask=mask, refused=refused, eligible=eligible)  # type: ignore[arg-type]


MASK = SdpaTensor(shape=[1, 1, 1, 4096], strides=[4096, 4096, 4096, 1], dtype="bool")


def _with(case: Case, backend: str, calls: list[SdpaCall]) -> Case:
    return case.model_copy(update={"backend_used": backend, "sdpa_calls": calls})


def test_a_backend_switch_says_why_in_pytorchs_words_and_what_changed_in_the_call() -> None:
    base = _with(make_case("decode"), "flash", [_call(refused={"cudnn": ["cuDNN refuses"]})])
    cand = _with(make_case("decode"), "efficient", [_call(MASK, refused={"flash": [FLASH_MASK], "cudnn": ["x"]})])
    finding = backend_finding("decode", [base], cand)
    assert finding is not None and finding.verdict == "fail"
    assert finding.detail is not None
    assert finding.detail.startswith("the backend that ran changed: flash -> efficient")
    assert f"PyTorch refused flash: {FLASH_MASK}" in finding.detail
    assert "the SDPA call changed: attn_mask none → bool [1, 1, 1, 4096]" in finding.detail


def test_a_switch_without_pytorchs_reasons_claims_none() -> None:
    # The CPU, or a document older than the field: no reason is invented
    base = _with(make_case("decode"), "flash", [_call()])
    cand = _with(make_case("decode"), "math", [_call()])
    finding = backend_finding("decode", [base], cand)
    assert finding is not None and finding.detail == "the backend that ran changed: flash -> math"
    older = backend_finding("decode", [make_case("decode", backend="flash")], make_case("decode", backend="math"))
    assert older is not None and older.detail == "the backend that ran changed: flash -> math"


def test_a_kernel_set_change_within_a_backend_names_the_call_that_changed() -> None:
    # the case: an explicit all-true mask kept cuDNN but moved it to another plan
    base = make_case("decode", backend="cudnn")
    cand = make_case("decode", backend="cudnn")
    renamed = [k.model_copy(update={"key": k.key + "_masked", "name": k.name + "_masked"}) for k in cand.kernels]
    cand = cand.model_copy(update={"kernels": renamed, "sdpa_calls": [_call(MASK)]})
    base = base.model_copy(update={"sdpa_calls": [_call()]})
    finding = backend_finding("decode", [base], cand)
    assert finding is not None and finding.verdict == "warn" and finding.detail is not None
    assert "kernel set changed within backend cudnn" in finding.detail
    assert finding.detail.endswith("the SDPA call changed: attn_mask none → bool [1, 1, 1, 4096]")


def test_call_changes_pair_calls_in_order_and_count_the_rest() -> None:
    assert call_changes([_call()], [_call()]) == []
    assert call_changes([_call()], [_call(), _call(MASK)])[0].startswith("1 more SDPA call(s): q bfloat16")
    assert call_changes([_call(), _call()], []) == ["2 SDPA call(s) fewer: no SDPA call now"]


def test_refusals_distinguish_not_asked_from_not_refused() -> None:
    assert refusal_words([_call()], "flash") is None  # never asked
    assert refusal_words([_call(refused={})], "flash") is None  # asked, and flash took it
    many = [_call(refused={"flash": ["a", "b", "c", "d"]})]
    assert refusal_words(many, "flash") == "PyTorch refused flash: a; b; c; and 1 more"
    assert refusal_words(many, "math") is None


def test_the_report_line_names_each_refused_backend_or_why_none_was_asked() -> None:
    case = _with(make_case("decode"), "efficient", [_call(MASK, refused={"flash": [FLASH_MASK], "cudnn": ["no"]})])
    assert sdpa_line(case) == (
        f"SDPA (1 distinct call): ran efficient; cudnn refused (no); flash refused ({FLASH_MASK})"
    )
    cpu = _with(make_case("decode"), "cpu_flash", ask_backends([_call()], device="cpu", requires_grad=False))
    assert sdpa_line(cpu) == f"SDPA (1 distinct call): ran cpu_flash; reasons not asked: {NOT_ON_CPU}"
    assert backends_line([], "flash") is None


def test_pytorchs_warnings_become_reasons_without_headers_or_source_locations() -> None:
    messages = [
        "Flash attention kernel not used because:",
        f"{FLASH_MASK} (Triggered internally at /pytorch/aten/src/ATen/native/transformers/sdp_utils_cpp.h:261.)",
        FLASH_MASK,
    ]
    assert reasons_of(messages) == [FLASH_MASK]


def test_key_and_value_heads_expanded_before_the_call_are_found_in_a_real_trace(tmp_path: Path) -> None:
    # GQA written the two common ways: repeat_interleave, and expand + reshape; then passed without enable_gqa
    import torch
    from torch.profiler import profile

    q, k = torch.randn(1, 8, 16, 8), torch.randn(1, 2, 16, 8)
    with profile(record_shapes=True) as prof:
        torch.nn.functional.scaled_dot_product_attention(q, k.repeat_interleave(4, dim=1), k.repeat_interleave(4, 1))
        kk = k[:, :, None].expand(1, 2, 4, 16, 8).reshape(1, 8, 16, 8)
        torch.nn.functional.scaled_dot_product_attention(q[:, :, :8], kk, kk)
        torch.nn.functional.scaled_dot_product_attention(q[:, :, :4], k, k, enable_gqa=True)
        torch.nn.functional.scaled_dot_product_attention(q[:, :, :2], q, q)  # no GQA at all
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    calls = sdpa_calls(load_trace(path))
    assert [c.kv_heads_expanded_from for c in calls] == [2, 2, None, None]
    assert "key and value expanded from 2 heads" in call_words(calls[0])
