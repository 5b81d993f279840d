"""The runner on the CPU, end to end: one tiny suite profiled once with real torch, then its document checked.

The suite covers GQA with cross-attention (kv_heads < q_heads, seq_kv != seq_q) on the math, flash and
GPU-only backends, causal self- and cross-attention, MQA through the naive target, and the block target,
forward and forward+backward. Every case has a few samples only: what is checked is structure and exact
arithmetic, not speed.
"""

from __future__ import annotations

import gzip
import json
import statistics
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from attnprof.core.documents import Case, ResultDocument, parse_result, result_json_schema
from attnprof.core.measure.kernels import kernel_records
from attnprof.core.measure.runner import ProfileOptions, SuiteSession, profile_suite, safe_name
from attnprof.core.measure.timing import PAIRED_TIMING_METHOD, TIMING_KEY, TIMING_METHOD
from attnprof.core.suite import Suite, parse_suite
from tests.profiling_support import suite_text

CASES = """
[[cases]]
name = "gqa_cross"
target = "sdpa"
backends = ["math", "flash", "cudnn", "efficient"]
batch = 2
q_heads = 4
kv_heads = 2
seq_q = 8
seq_kv = 12
head_dim = 8
dtype = "fp32"
pass = ["fwd", "fwd_bwd"]

[[cases]]
name = "causal"
target = "sdpa"
backend = "math"
q_heads = 2
seq_q = 16
head_dim = 8
dtype = "fp32"
causal = true

[[cases]]
name = "causal_cross"
target = "sdpa"
backend = "default"
q_heads = 2
seq_q = 8
seq_kv = 12
head_dim = 8
dtype = "fp32"
causal = true

[[cases]]
name = "naive"
target = "naive"
q_heads = 4
kv_heads = 1
seq_q = 16
head_dim = 8
dtype = "fp32"
causal = true
pass = ["fwd", "fwd_bwd"]

[[cases]]
name = "block"
target = "block"
q_heads = 2
seq_q = 8
head_dim = 8
dtype = "fp32"
pass = "fwd_bwd"
"""

OK_IDS = [
    "gqa_cross[backend=math,pass=fwd]",
    "gqa_cross[backend=math,pass=fwd_bwd]",
    "gqa_cross[backend=flash,pass=fwd]",
    "gqa_cross[backend=flash,pass=fwd_bwd]",
    "causal",
    "causal_cross",
    "naive[pass=fwd]",
    "naive[pass=fwd_bwd]",
    "block",
]
SKIPPED_IDS = [
    "gqa_cross[backend=cudnn,pass=fwd]",
    "gqa_cross[backend=cudnn,pass=fwd_bwd]",
    "gqa_cross[backend=efficient,pass=fwd]",
    "gqa_cross[backend=efficient,pass=fwd_bwd]",
]
UNFUSED_IDS = [i for i in OK_IDS if "math" in i or i.startswith("naive") or i == "causal"]


class Run:
    def __init__(self, suite: Suite, doc: ResultDocument, trace_dir: Path, events: list[tuple[str, int, int, str]]):
        self.suite = suite
        self.doc = doc
        self.trace_dir = trace_dir
        self.events = events

    def case(self, case_id: str) -> Case:
        case = self.doc.case(case_id)
        assert case is not None, f"no case {case_id!r} in {[c.id for c in self.doc.cases]}"
        return case


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, peaks_cache: Path) -> Run:
    suite = parse_suite(suite_text("tiny", CASES), source="tiny.toml")
    trace_dir = tmp_path_factory.mktemp("traces")
    events: list[tuple[str, int, int, str]] = []
    options = ProfileOptions(device="cpu", trace_dir=trace_dir, cache_dir=peaks_cache, command="test")
    doc = profile_suite(suite, options, progress=lambda *event: events.append(event))
    return Run(suite, doc, trace_dir, events)


def pairs(sq: int, skv: int, causal: bool) -> int:
    """Attended (query, key) pairs, counted one by one: the bottom-right causal mask keeps j <= i + skv - sq."""
    if not causal:
        return sq * skv
    if sq == skv:
        return sq * skv // 2  # the FlashAttention benchmarks' convention for causal self-attention
    return sum(1 for i in range(sq) for j in range(skv) if j <= i + skv - sq)


def expected_flops(params: dict[str, Any]) -> float:
    forward = 4 * params["batch"] * params["q_heads"] * pairs(params["seq_q"], params["seq_kv"], params["causal"])
    forward *= params["head_dim"]
    return forward * 3.5 if params["pass"] == "fwd_bwd" else forward


def test_every_case_is_recorded_in_suite_order(run: Run) -> None:
    assert [c.id for c in run.doc.cases] == [s.id for s in run.suite.cases]
    assert sorted(c.id for c in run.doc.cases if c.status == "ok") == sorted(OK_IDS)
    assert sorted(c.id for c in run.doc.cases if c.status == "skipped") == sorted(SKIPPED_IDS)
    assert run.doc.run.mode == "cpu" and run.doc.run.counters == "none" and run.doc.run.command == "test"
    assert run.doc.environment.device.kind == "cpu"
    assert run.doc.environment.peaks.dram_gbps.source == "measured"
    assert set(run.doc.environment.peaks.tflops) == {"fp32", "fp16", "bf16"}
    assert run.doc.environment.software[TIMING_KEY] == TIMING_METHOD["cpu"]  # how it timed, beside torch's version
    assert run.doc.suite.name == "tiny" and run.doc.suite.source_sha256 == run.suite.source_sha256
    # progress: one "case" event per case, in order, then "done"
    assert [e[3] for e in run.events if e[0] == "case"] == [s.id for s in run.suite.cases]
    assert run.events[-1][:3] == ("done", len(run.suite.cases), len(run.suite.cases))


def test_a_paired_side_names_its_timing_apart_from_a_profile_run(peaks_cache: Path) -> None:
    # a paired head's run may become another run's baseline: its document says it was timed in pairs
    suite = parse_suite(suite_text("tiny", CASES), source="tiny.toml")
    options = ProfileOptions(device="cpu", cache_dir=peaks_cache, command="test")
    side = SuiteSession(suite, options, round_config=suite.timing.paired_round_config())
    assert side.environment.software[TIMING_KEY] == PAIRED_TIMING_METHOD["cpu"] != TIMING_METHOD["cpu"]
    assert SuiteSession(suite, options).environment.software[TIMING_KEY] == TIMING_METHOD["cpu"]


def test_document_validates_against_the_json_schema_after_a_json_round_trip(run: Run) -> None:
    data = json.loads(run.doc.to_json())
    schema = result_json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.Draft202012Validator(schema).validate(data)
    assert parse_result(data) == run.doc


@pytest.mark.parametrize("case_id", OK_IDS)
def test_case_flops_equal_the_attention_formula(run: Run, case_id: str) -> None:
    case = run.case(case_id)
    assert case.work is not None
    if case.target == "block":
        p = case.params
        t, h, f = p["batch"] * p["seq_q"], p["q_heads"] * p["head_dim"], p["ffn_hidden"]
        qkv = 2 * t * h * (p["q_heads"] + 2 * p["kv_heads"]) * p["head_dim"]
        projections_and_ffn = qkv + 2 * t * h * h + 2 * 2 * t * h * f
        # forward and backward: each matmul runs forward, then for dX and for dW
        assert case.work.flops == expected_flops(p) + 3 * projections_and_ffn
    else:
        assert case.work.flops == expected_flops(case.params)


def test_flops_cover_gqa_cross_and_causal_shapes(run: Run) -> None:
    gqa = run.case("gqa_cross[backend=math,pass=fwd]")
    assert gqa.params["kv_heads"] < gqa.params["q_heads"] and gqa.params["seq_kv"] != gqa.params["seq_q"]
    # GQA shares k and v between query heads: the FLOPs follow the query heads.
    assert gqa.work is not None and gqa.work.flops == 4 * 2 * 4 * 8 * 12 * 8
    fwd_bwd = run.case("gqa_cross[backend=math,pass=fwd_bwd]")
    assert fwd_bwd.work is not None and fwd_bwd.work.flops == 3.5 * gqa.work.flops
    causal = run.case("causal")
    assert causal.work is not None and causal.work.flops == 4 * 1 * 2 * 16 * 16 * 8 / 2
    # causal cross-attention, bottom-right aligned (the last query sees all 12 keys): rows keep 5, 6, ..., 12
    cross = run.case("causal_cross")
    assert cross.work is not None and cross.work.flops == 4 * 1 * 2 * sum(range(5, 13)) * 8


def test_fused_bytes_min_follow_the_gqa_formula(run: Run) -> None:
    case = run.case("gqa_cross[backend=flash,pass=fwd]")
    b, hq, hkv, sq, skv, d, e = 2, 4, 2, 8, 12, 8, 4
    assert case.work is not None
    assert case.work.bytes_min == e * (2 * b * hq * sq * d + 2 * b * hkv * skv * d) + 4 * b * hq * sq


@pytest.mark.parametrize(
    ("case_id", "backend"),
    [
        ("gqa_cross[backend=math,pass=fwd]", "math"),
        ("gqa_cross[backend=math,pass=fwd_bwd]", "math"),
        ("causal", "math"),
        ("gqa_cross[backend=flash,pass=fwd]", "cpu_flash"),
        ("gqa_cross[backend=flash,pass=fwd_bwd]", "cpu_flash"),
        ("causal_cross", "cpu_flash"),
        ("naive[pass=fwd]", "eager"),
        ("naive[pass=fwd_bwd]", "eager"),
        ("block", "cpu_flash"),
    ],
)
def test_backend_used_is_read_from_the_kernels(run: Run, case_id: str, backend: str) -> None:
    case = run.case(case_id)
    assert case.backend_used == backend
    ops = {k.op for k in case.kernels}
    if backend == "cpu_flash":
        assert "aten::_scaled_dot_product_flash_attention_for_cpu" in ops
        assert any(k.phase == "fused_attention" for k in case.kernels)
    else:
        assert not any(k.phase == "fused_attention" for k in case.kernels)


@pytest.mark.parametrize("case_id", UNFUSED_IDS)
def test_unfused_paths_show_qk_softmax_and_av_phases_in_order(run: Run, case_id: str) -> None:
    case = run.case(case_id)
    phases = [k.phase for k in case.kernels]
    first = {p: phases.index(p) for p in ("qk_matmul", "softmax", "av_matmul")}
    assert first["qk_matmul"] < first["softmax"] < first["av_matmul"], phases
    # The GEMM itself is aten::bmm. (Its aten::matmul wrapper may show up beside it: on ops this small,
    # the CPU attribution sometimes finds the wrapper's own dispatch time longer than the bmm's.)
    (qk,) = [k for k in case.kernels if k.phase == "qk_matmul" and k.op == "aten::bmm"]
    (av,) = [k for k in case.kernels if k.phase == "av_matmul" and k.op == "aten::bmm"]
    # a GEMM's FLOPs come from its recorded operands: the score matrix for QKᵀ, the output for PV
    p = case.params
    assert qk.flops == 2 * p["batch"] * p["q_heads"] * p["seq_q"] * p["seq_kv"] * p["head_dim"]
    assert av.flops == qk.flops


@pytest.mark.parametrize("case_id", SKIPPED_IDS)
def test_gpu_only_backends_are_skipped_with_a_reason(run: Run, case_id: str) -> None:
    case = run.case(case_id)
    assert case.status == "skipped"
    assert case.error is not None and case.error.type == "Skipped"
    assert case.backend_requested in case.error.message and "CUDA" in case.error.message
    assert case.latency_us is None and case.kernels == [] and case.trace is None and case.backend_used is None


@pytest.mark.parametrize("case_id", [i for i in OK_IDS if "fwd_bwd" in i or i == "block"])
def test_fwd_bwd_cases_have_backward_kernels_and_gradient_accuracy(run: Run, case_id: str) -> None:
    case = run.case(case_id)
    assert case.params["pass"] == "fwd_bwd"
    backward = [k for k in case.kernels if k.phase == "backward"]
    assert backward, [k.phase for k in case.kernels]
    # the forward kernels come first, the backward ones after them
    assert case.kernels.index(backward[0]) > 0 and all(k.phase == "backward" for k in case.kernels[-len(backward) :])
    assert case.accuracy is not None and case.accuracy.grads is not None
    names = {g.tensor for g in case.accuracy.grads}
    assert names == ({"dx", "dw_qkv", "dw_o", "dw1", "dw2"} if case.target == "block" else {"dq", "dk", "dv"})
    for g in case.accuracy.grads:
        assert g.ok and g.rel_l2_err < 1e-5 and g.tolerance == pytest.approx(2.5e-3)


def test_forward_only_cases_have_no_backward_work(run: Run) -> None:
    for case_id in ("gqa_cross[backend=math,pass=fwd]", "naive[pass=fwd]", "causal", "causal_cross"):
        case = run.case(case_id)
        assert not any(k.phase == "backward" for k in case.kernels)
        assert case.accuracy is not None and case.accuracy.grads is None


@pytest.mark.parametrize("case_id", OK_IDS)
def test_latency_statistics_are_consistent(run: Run, case_id: str) -> None:
    lat = run.case(case_id).latency_us
    assert lat is not None
    assert 3 <= len(lat.samples) <= 5
    assert lat.min <= lat.p25 <= lat.median <= lat.p75 <= lat.max
    assert lat.min == pytest.approx(min(lat.samples), abs=1e-3)
    assert lat.max == pytest.approx(max(lat.samples), abs=1e-3)
    assert lat.median == pytest.approx(statistics.median(lat.samples), abs=1e-3)
    assert lat.cv >= 0 and lat.min > 0
    assert lat.warmup == 1
    assert lat.stopped_by in ("precision", "budget", "max_samples")
    # GPU-only readings stay null on the CPU
    assert lat.host_us is None and lat.sm_clock_mhz_min is None and lat.sm_clock_mhz_max is None


@pytest.mark.parametrize("case_id", OK_IDS)
def test_kernels_on_cpu(run: Run, case_id: str) -> None:
    case = run.case(case_id)
    assert case.kernels
    assert sum(k.share or 0 for k in case.kernels) == pytest.approx(1.0, abs=0.01)
    for k in case.kernels:
        assert k.launches_per_iter > 0
        assert k.duration_us.p25 <= k.duration_us.median <= k.duration_us.p75
        # launch configuration and occupancy are GPU notions
        assert k.grid is None and k.block is None and k.theoretical_occupancy is None and k.counters is None
    assert case.achieved is not None and case.achieved.tflops is not None and case.achieved.tflops > 0


@pytest.mark.parametrize("case_id", OK_IDS)
def test_trace_is_a_gzip_chrome_trace_that_reproduces_the_kernels(run: Run, case_id: str) -> None:
    case = run.case(case_id)
    assert case.trace == f"{safe_name(case_id)}.trace.json.gz"
    path = run.trace_dir / case.trace
    assert path.read_bytes()[:2] == b"\x1f\x8b"
    with gzip.open(path, "rt") as f:
        trace = json.load(f)
    events = trace["traceEvents"]
    assert isinstance(events, list) and events
    assert any(e.get("name") == "attnprof/iter/0" for e in events)
    # the saved trace is the one the document's kernels were read from
    spec = next(s for s in run.suite.cases if s.id == case_id)
    kernels, backend = kernel_records(trace, spec, run.doc.environment)
    assert backend == case.backend_used
    assert [(k.key, k.phase, k.launches_per_iter) for k in kernels] == [
        (k.key, k.phase, k.launches_per_iter) for k in case.kernels
    ]


def test_no_trace_is_written_for_skipped_cases(run: Run) -> None:
    written = sorted(p.name for p in run.trace_dir.iterdir())
    assert written == sorted(f"{safe_name(i)}.trace.json.gz" for i in OK_IDS)


@pytest.mark.parametrize("case_id", OK_IDS)
def test_fp32_accuracy_is_ok(run: Run, case_id: str) -> None:
    acc = run.case(case_id).accuracy
    assert acc is not None
    assert acc.ok and acc.tolerance == 1e-3
    assert acc.rel_l2_err < 1e-5 and acc.max_abs_err < 1e-4
    assert "float64" in acc.reference


def test_each_sdpa_case_records_its_call_and_that_pytorch_was_not_asked_on_the_cpu(run: Run) -> None:
    # The call read back from the case's own trace: the suite's shapes, GQA's heads, the causal flag
    gqa = run.case("gqa_cross[backend=math,pass=fwd]")
    assert gqa.sdpa_calls is not None and len(gqa.sdpa_calls) == 1
    call = gqa.sdpa_calls[0]
    assert call.query.shape == [2, 4, 8, 8] and call.key.shape[1:3] == [2, 12] and call.query.dtype == "float"
    assert call.refused is None and call.not_asked is not None and "only for CUDA" in call.not_asked
    causal = run.case("causal")
    assert causal.sdpa_calls is not None
    assert causal.sdpa_calls[0].is_causal or causal.sdpa_calls[0].attn_mask is not None
    # the naive target makes no SDPA call
    assert run.case("naive[pass=fwd]").sdpa_calls is None


def test_only_the_block_case_times_its_path_into_the_output_projection(run: Run) -> None:
    # the output rule is for the block target alone, tried beside its SDPA call's rules and kept whether or not it
    # helped; the other cases got advice from the other rules, none from this one
    (output,) = [a for a in run.case("block").advice or [] if a.rule == "output"]
    assert output.call is None and output.current_us > 0 and output.alternative_us > 0
    others = [c for c in run.doc.cases if c.id != "block" and c.advice]
    assert others and not [c.id for c in others if any(a.rule == "output" for a in c.advice or [])]
