"""Decode, custom Triton kernels and the bound rule on real H200 traces, recomputed without a GPU.

``tests/data/h200/truth/`` holds the first of the five processes behind ``bench/reports/h200-truth.md``
(PyTorch 2.11, cuDNN 9.19, Triton 3.6): the result documents of the example suite and the validation set,
and the traces of the decode cases, the custom Triton kernel (which declared its work through
``launch_metadata`` while the trace was taken), cross-attention, head dim 64 and a short math case. Each
trace goes back through ``kernel_records`` with that run's environment and the case's spec.
"""

from __future__ import annotations

import gzip
import json
from functools import cache
from typing import Any

import pytest

from attnprof.core.attribution import DECLARED_KEY, factory_work_for, launch_metadata_work
from attnprof.core.documents import Kernel, ResultDocument, parse_result
from attnprof.core.measure.kernels import kernel_records
from attnprof.core.model import attention_flops
from attnprof.core.model.work import AttentionShape, case_work
from attnprof.core.report import render_markdown
from attnprof.core.suite import CaseSpec, load_suite
from tests.profiling_support import DATA, REPO

RUN = DATA / "h200" / "truth"
SUITES = {"llama7b": REPO / "examples" / "llama7b.toml", "validation": REPO / "bench" / "validation" / "suite.toml"}
DECODE = [
    "decode[backend=cudnn,batch=1,seq_kv=4096]",
    "decode[backend=cudnn,batch=1,seq_kv=32768]",
    "decode[backend=cudnn,batch=16,seq_kv=4096]",
    "decode[backend=cudnn,batch=16,seq_kv=32768]",
    "decode[backend=flash,batch=1,seq_kv=4096]",
    "decode[backend=flash,batch=1,seq_kv=32768]",
    "decode[backend=flash,batch=16,seq_kv=4096]",
    "decode[backend=flash,batch=16,seq_kv=32768]",
    "decode-mqa[backend=cudnn]",
    "decode-mqa[backend=flash]",
]


@cache
def doc(suite: str) -> ResultDocument:
    with gzip.open(RUN / f"{suite}.json.gz", "rt") as f:
        return parse_result(json.load(f))


@cache
def spec(suite: str, case_id: str) -> CaseSpec:
    return next(s for s in load_suite(SUITES[suite]).cases if s.id == case_id)


@cache
def trace(suite: str, case_id: str) -> dict[str, Any]:
    case = doc(suite).case(case_id)
    assert case is not None and case.trace is not None
    with gzip.open(RUN / "traces" / case.trace, "rt") as f:
        data: dict[str, Any] = json.load(f)
    return data


@cache
def kernels(suite: str, case_id: str) -> tuple[Kernel, ...]:
    records, _ = kernel_records(trace(suite, case_id), spec(suite, case_id), doc(suite).environment)
    return tuple(records)


@pytest.mark.parametrize("case_id", DECODE)
def test_decode_kernels_are_fused_attention_with_a_bound_each(case_id: str) -> None:
    ks = kernels("llama7b", case_id)
    assert [k.phase for k in ks] == ["fused_attention"] * len(ks)
    main = ks[0]
    shape = AttentionShape.from_params(spec("llama7b", case_id).params)
    assert shape is not None and shape.seq_q == 1
    # the split-KV (or cuDNN decode) kernel does the whole forward: every cached key for the one query
    assert main.flops == attention_flops(shape, "fwd") == 4 * shape.batch * shape.q_heads * shape.seq_kv * 128
    for k in ks:
        if (k.share or 0) >= 0.05:
            assert k.bound is not None, k.key
    assert main.work_source == "model"


@pytest.mark.parametrize("case_id", [c for c in DECODE if "flash" in c])
def test_the_split_kv_combine_step_has_its_own_small_model(case_id: str) -> None:
    split, combine = kernels("llama7b", case_id)
    assert "splitkv_kernel" in split.name and "combine" in combine.name
    assert combine.flops is not None and split.flops is not None and combine.flops < split.flops / 100
    assert combine.bytes is not None and split.bytes is not None and combine.bytes < split.bytes


def test_long_decode_is_memory_bound_and_short_decode_latency_bound() -> None:
    # batch 16 over a 32k cache reads 2 GiB of KV: ~100% of the copy bandwidth, memory-bound under ncu too
    long_ = kernels("llama7b", "decode[backend=flash,batch=16,seq_kv=32768]")[0]
    assert long_.bound == "memory" and (long_.bandwidth_util or 0) > 0.9
    # batch 1 over 4k keys: a few microseconds, nothing busy
    short = kernels("llama7b", "decode[backend=flash,batch=1,seq_kv=4096]")[0]
    assert short.bound == "latency"


def test_the_triton_kernel_declared_its_work_in_the_trace() -> None:
    declared = launch_metadata_work(trace("validation", "triton[causal=true]"))
    assert list(declared) == ["_attn_fwd_body"]
    shape = AttentionShape.from_params(spec("validation", "triton[causal=true]").params)
    assert shape is not None
    # the kernel halves its FLOPs for its causal mask, as the case formula does
    assert declared["_attn_fwd_body"].flops_per_launch == attention_flops(shape, "fwd")
    assert trace("validation", "triton[causal=true]")[DECLARED_KEY]["iterations"] == 3


@pytest.mark.parametrize(
    ("case_id", "source"),
    [
        ("triton[causal=false]", "launch_metadata"),
        ("triton[causal=true]", "launch_metadata"),
        ("triton-undeclared", "case"),
    ],
)
def test_a_custom_triton_kernel_gets_its_work_and_a_phase(case_id: str, source: str) -> None:
    (k,) = kernels("validation", case_id)
    assert k.work_source == source
    assert k.phase == "fused_attention"  # the kernel doing the whole attention-shaped custom case
    work = case_work("bench.validation.triton_attention:make_case", None, spec("validation", case_id).params)
    assert work is not None and k.flops == work.flops
    assert k.bound is not None and k.compute_util is not None and k.bandwidth_util is not None


def test_the_report_says_where_each_kernel_s_work_came_from() -> None:
    text = render_markdown(doc("validation"))
    header = next(line for line in text.splitlines() if line.startswith("| phase |"))
    column = header.split(" | ").index("work from")
    sources = {}
    for block in text.split("\n## ")[1:]:
        case_id, _, body = block.partition("\n")
        rows = [line for line in body.splitlines() if line.startswith("| ") and not line.startswith("| phase")]
        sources[case_id] = {row.split(" | ")[column] for row in rows}
    assert sources["triton[causal=false]"] == {"launch_metadata"}
    assert sources["triton-undeclared"] == {"case's work"}
    assert "model" in sources["hd64[backend=flash]"]


def test_the_stored_documents_agree_with_the_recomputation() -> None:
    for suite, case_id in [("validation", "triton[causal=true]"), ("llama7b", "decode-mqa[backend=flash]")]:
        stored = doc(suite).case(case_id)
        assert stored is not None
        got = kernels(suite, case_id)
        assert [(k.key, k.flops, k.bytes, k.work_source) for k in got] == [
            (k.key, k.flops, k.bytes, k.work_source) for k in stored.kernels
        ]


def test_causal_cross_attention_runs_bottom_right_with_its_flops() -> None:
    causal = doc("validation").case("cross[backend=flash,causal=true]")
    full = doc("validation").case("cross[backend=flash,causal=false]")
    assert causal is not None and full is not None and causal.work and full.work
    # 512 queries at the end of 8192 keys: Sq*Skv - Sq*(Sq-1)/2 pairs, most of the non-causal work
    sq, skv = 512, 8192
    assert causal.work.flops == full.work.flops * (sq * skv - sq * (sq - 1) // 2) / (sq * skv)
    assert causal.accuracy is not None and causal.accuracy.ok  # against the bottom-right float64 reference


def test_factory_work_matches_the_longest_fragment() -> None:
    declared = {"attn": {"flops": 1.0, "bytes": 2.0}, "attn_fwd": {"flops": 3.0, "bytes": None}}
    assert factory_work_for("_attn_fwd_body", declared) == (3.0, None)
    assert factory_work_for("my_attn_kernel", declared) == (1.0, 2.0)
    assert factory_work_for("gemm", declared) is None
