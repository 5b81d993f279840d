"""The verdict rules (docs/architecture.md, "Deciding a regression"; docs/regression-method.md), one by one."""

from __future__ import annotations

import json

import pytest

from attnprof.core.analysis import compare, render_table
from attnprof.core.documents import ResultDocument, Thresholds, parse_result
from attnprof.core.documents.comparison import ComparisonDocument, Finding
from tests.core.result_documents import make_case, make_doc, make_kernels, runs, scaled


def _find(c: ComparisonDocument, metric: str, case: str | None = None) -> Finding:
    hits = [f for f in c.findings if f.metric == metric and (case is None or f.case == case)]
    assert hits, f"no {metric} finding in {[(f.case, f.metric) for f in c.findings]}"
    return hits[0]


def test_identical_runs_pass() -> None:
    base = runs(3)
    c = compare(base, base[0])
    assert c.verdict == "pass"
    assert all(f.status == "unchanged" for f in c.findings)


def test_unchanged_code_with_run_to_run_noise_passes() -> None:
    c = compare(runs(3, seed=1), runs(1, seed=2, prefix="cand")[0])
    assert c.verdict == "pass"


def test_five_percent_slower_fails_and_names_the_kernel() -> None:
    c = compare(runs(3, seed=1), runs(1, seed=2, factor=1.05, prefix="cand")[0])
    assert c.verdict == "fail"
    f = _find(c, "latency")
    assert f.status == "regressed" and f.verdict == "fail"
    assert f.change is not None and 0.03 < f.change < 0.07
    assert f.ci is not None and f.ci.low > 0 and f.ci.level == 0.95
    assert f.q is not None and f.q <= c.settings.fdr
    assert f.kernels and f.kernels[0].key.startswith("cudnn_generated")
    assert c.findings[0] is f, "regressions come first"


def test_faster_is_improved_and_passes() -> None:
    c = compare(runs(3, seed=1), runs(1, seed=2, factor=0.9, prefix="cand")[0])
    assert c.verdict == "pass"
    assert _find(c, "latency").status == "improved"


def test_change_below_minimum_effect_is_not_a_regression() -> None:
    # Many samples make 1% significant within one run, but it is below the 2% minimum and the floor.
    base = runs(3, seed=1, run_sd=0.0, n=2000, cv=0.002)
    cand = runs(1, seed=2, run_sd=0.0, n=2000, cv=0.002, factor=1.01, prefix="cand")[0]
    c = compare(base, cand)
    assert c.verdict == "pass"
    assert _find(c, "latency").status == "unchanged"


def test_change_within_the_spread_between_baseline_runs_is_not_a_regression() -> None:
    base = [runs(1, seed=s, run_sd=0.0, factor=f)[0] for s, f in enumerate([1.0, 1.06, 0.97])]
    c = compare(base, runs(1, seed=9, run_sd=0.0, factor=1.05, prefix="cand")[0])
    f = _find(c, "latency")
    assert f.threshold is not None and f.threshold > 0.08
    assert f.status != "regressed"


def test_memory_bound_case_is_a_bandwidth_finding() -> None:
    base = runs(3, seed=1, bound="memory")
    c = compare(base, runs(1, seed=2, factor=1.05, bound="memory", prefix="cand")[0])
    f = _find(c, "bandwidth")
    assert f.unit == "GB/s" and f.higher_is_better
    assert f.change is not None and f.change < -0.03
    assert f.ci is not None and f.ci.high < 0
    assert f.status == "regressed" and c.verdict == "fail"


def test_compute_bound_case_is_a_throughput_finding() -> None:
    c = compare(runs(3, seed=1, bound="compute"), runs(1, seed=2, factor=1.05, bound="compute", prefix="c")[0])
    f = _find(c, "throughput")
    assert f.unit == "TFLOP/s" and f.status == "regressed"
    assert isinstance(f.baseline, float) and 700 < f.baseline < 850  # 68.7 GFLOP in ~87 us


def test_variance_only_change_warns() -> None:
    base = runs(3, seed=1, cv=0.008)
    c = compare(base, runs(1, seed=2, cv=0.03, prefix="cand")[0])
    f = _find(c, "variance")
    assert f.status == "regressed" and f.verdict == "warn"
    assert c.verdict == "warn"


def test_backend_change_fails() -> None:
    base = runs(2)
    cand = make_doc("cand", [make_case(backend="math", median_us=87.0)])
    cand.cases[0].id = base[0].cases[0].id
    c = compare(base, cand)
    f = _find(c, "backend")
    assert f.verdict == "fail" and f.baseline == "cudnn" and f.candidate == "math"
    assert c.verdict == "fail"


def test_kernel_set_change_within_backend_warns() -> None:
    base = runs(2)
    kernels = make_kernels("cudnn", 87.0)
    extra = kernels[0].model_copy(update={"key": "cudnn::fusion::convert_dq_to_16bits", "phase": "cast"})
    cand = make_doc("cand", [make_case(kernels=[*kernels, extra], seed=5)])
    c = compare(base, cand)
    f = _find(c, "backend")
    assert f.verdict == "warn" and "appeared: cudnn::fusion::convert_dq_to_16bits" in (f.detail or "")
    assert c.verdict == "warn"
    timing = _find(c, "latency")
    assert timing.status == "unchanged"


def test_accuracy_past_tolerance_fails() -> None:
    c = compare(runs(2), make_doc("cand", [make_case(accuracy_ok=False, rel_l2_err=0.05)]))
    f = _find(c, "accuracy")
    assert f.verdict == "fail" and f.status == "regressed"
    assert c.verdict == "fail"


def test_accuracy_tolerance_override_from_thresholds() -> None:
    strict = Thresholds(accuracy=1e-3)
    c = compare(runs(2, rel_l2_err=5e-4), make_doc("cand", [make_case(rel_l2_err=4e-3)]), config=strict)
    assert _find(c, "accuracy").verdict == "fail"
    c = compare(runs(2, rel_l2_err=5e-4), make_doc("cand", [make_case(rel_l2_err=4e-3)]))
    assert c.verdict == "pass"


def test_accuracy_already_bad_in_baseline_is_not_a_regression() -> None:
    base = runs(2, accuracy_ok=False, rel_l2_err=0.05)
    c = compare(base, make_doc("cand", [make_case(accuracy_ok=False, rel_l2_err=0.05)]))
    assert not [f for f in c.findings if f.metric == "accuracy"]


def test_case_failed_now_fails() -> None:
    c = compare(runs(2), make_doc("cand", [make_case(status="failed")]))
    f = _find(c, "status")
    assert f.verdict == "fail" and f.candidate == "failed" and "No available kernel" in (f.detail or "")
    assert c.verdict == "fail"


def test_case_skipped_now_warns() -> None:
    c = compare(runs(2), make_doc("cand", [make_case(status="skipped")]))
    assert _find(c, "status").verdict == "warn" and c.verdict == "warn"


def test_case_only_in_candidate_warns_no_baseline() -> None:
    cand = make_doc("cand", [make_case(), make_case("decode[backend=cudnn]", seed=3)])
    c = compare(runs(2), cand)
    f = _find(c, "status", "decode[backend=cudnn]")
    assert f.verdict == "warn" and "no baseline" in (f.detail or "")
    assert c.verdict == "warn"


def test_case_missing_from_candidate_warns() -> None:
    base = runs(2, backends=("cudnn", "flash"))
    c = compare(base, runs(1, seed=3, prefix="cand")[0])
    assert c.verdict == "warn"
    assert any("absent from the candidate" in n and "flash" in n for n in c.notes)


def test_testbed_mismatch_warns_loudly() -> None:
    cand = make_doc("cand", [make_case(seed=4)], testbed_key="a100-550.54-cuda")
    c = compare(runs(2), cand)
    assert c.testbed_mismatch and c.verdict == "warn"
    assert any(n.startswith("TESTBED MISMATCH") for n in c.notes)
    assert "TESTBED MISMATCH" in render_table(c)
    assert c.testbed_baseline == ["h200-580.159-cuda"] and c.testbed_candidate == "a100-550.54-cuda"


def test_testbed_mismatch_does_not_hide_a_failure() -> None:
    cand = make_doc("cand", [make_case(factor=1.2, seed=4)], testbed_key="other")
    assert compare(runs(3), cand).verdict == "fail"


def test_software_versions_diff_is_shown() -> None:
    cand = make_doc("cand", [make_case(seed=4)], torch="2.12.0+cu130")
    c = compare(runs(2), cand)
    torch = [s for s in c.software if s.name == "torch"]
    assert torch and torch[0].baseline == "2.11.0+cu130" and torch[0].candidate == "2.12.0+cu130"
    assert c.verdict == "pass"
    assert "torch 2.11.0+cu130 -> 2.12.0+cu130" in render_table(c)


def _with_timing(doc: ResultDocument, method: str | None) -> ResultDocument:
    software = {k: v for k, v in doc.environment.software.items() if k != "attnprof timing"}
    if method is not None:
        software["attnprof timing"] = method
    return doc.model_copy(update={"environment": doc.environment.model_copy(update={"software": software})})


def test_a_change_of_the_timing_method_is_listed_as_software() -> None:
    # the runner names how it times among the document's software: a comparison across a change of it says so,
    # a baseline written before it was recorded says "not recorded", and several baseline values stay apart
    new = "hold, then a read sweep; rounds, each built anew; one stream"
    cand = _with_timing(make_doc("cand", [make_case(seed=4)]), new)
    c = compare(runs(2), cand)
    assert [(s.name, s.baseline, s.candidate) for s in c.software] == [("attnprof timing", "not recorded", new)]
    assert c.verdict == "pass"
    assert f"software: attnprof timing not recorded -> {new}" in render_table(c)
    old = "a zero_() flush; one round"
    base = [_with_timing(b, old if k else None) for k, b in enumerate(runs(2))]
    c = compare(base, cand)
    assert c.software[0].baseline == f"not recorded | {old}"
    assert compare([_with_timing(b, new) for b in runs(2)], cand).software == []
    # a candidate that lacks it (written by an older attnprof) against baselines that hold it
    assert compare([_with_timing(b, new) for b in runs(2)], _with_timing(cand, None)).software[0].candidate == (
        "not recorded"
    )


def test_suspect_candidate_never_fails() -> None:
    cand = make_doc("cand", [make_case(factor=1.3, seed=4)], suspect=["SM clock throttled: HW slowdown"])
    c = compare(runs(3), cand)
    assert c.verdict == "warn"
    assert c.suspect == ["SM clock throttled: HW slowdown"]
    assert any("would fail" in n and "suspect" in n for n in c.notes)
    assert _find(c, "latency").status == "regressed"


def test_suspect_candidate_that_passes_warns() -> None:
    cand = make_doc("cand", [make_case(seed=4)], suspect=["another process on the GPU"])
    assert compare(runs(2), cand).verdict == "warn"


def test_no_baseline_at_all_passes_with_null_baseline() -> None:
    c = compare([], runs(1)[0])
    assert c.verdict == "pass" and c.baseline is None and c.findings == []
    doc = json.loads(c.to_json())
    assert doc["baseline"] is None and doc["schema"] == "attnprof.comparison/v1"
    assert "first run" in render_table(c)


def test_dram_bytes_growth_is_its_own_finding() -> None:
    base = runs(2, counters=True)
    cand_case = make_case(seed=7, counters=True)
    for k in cand_case.kernels:
        assert k.counters is not None
        k.counters["dram__bytes_read.sum"] *= 1.5
    c = compare(base, make_doc("cand", [cand_case]))
    f = _find(c, "dram_bytes")
    assert f.status == "regressed" and f.verdict == "fail" and f.change is not None and f.change > 0.3
    assert _find(c, "latency").status == "unchanged"


def test_no_dram_finding_without_counters_on_both_sides() -> None:
    c = compare(runs(2, counters=True), make_doc("cand", [make_case(seed=7)]))
    assert not [f for f in c.findings if f.metric == "dram_bytes"]


def test_kernel_launch_changes_are_reported() -> None:
    base = runs(3, seed=1)
    cand = runs(1, seed=2, factor=1.06, prefix="cand")[0]
    k = cand.cases[0].kernels[0]
    k.registers_per_thread = 232
    k.theoretical_occupancy = 0.0625
    c = compare(base, cand)
    move = _find(c, "latency").kernels[0]
    fields = {ch.field: (ch.baseline, ch.candidate) for ch in move.launch}
    assert fields["registers_per_thread"] == (168, 232)
    assert fields["theoretical_occupancy"] == (0.125, 0.0625)
    assert "registers_per_thread 168->232" in render_table(c)


def test_kernel_appeared_and_vanished() -> None:
    base = runs(2, backends=("math",))
    cand = runs(1, seed=5, factor=1.1, backends=("math",), prefix="cand")[0]
    ks = cand.cases[0].kernels
    ks[3] = ks[3].model_copy(update={"key": "safe_softmax_where", "name": "where_kernel"})
    c = compare(base, cand)
    moves = {m.key: m for m in _find(c, "latency").kernels}
    assert moves["safe_softmax_where"].appeared and moves["isneginf_kernel"].vanished
    deltas = [abs(m.delta_us or 0) for m in moves.values()]
    assert deltas == sorted(deltas, reverse=True)


def test_one_baseline_uses_the_noise_floor() -> None:
    base = runs(1, seed=1)
    c = compare(base, runs(1, seed=2, factor=1.10, prefix="cand")[0])
    assert c.verdict == "fail"
    assert "noise floor alone" in (_find(c, "latency").detail or "")
    c = compare(base, runs(1, seed=2, factor=1.10, prefix="cand")[0], noise_floor=0.15)
    assert c.verdict != "fail" and c.settings.noise_floor_source == "argument"


def test_cpu_mode_uses_larger_thresholds() -> None:
    def cpu(doc_id: str, factor: float, seed: int):
        return make_doc(
            doc_id,
            [make_case(median_us=320.0, cv=0.2, n=300, seed=seed, factor=factor)],
            mode="cpu",
            testbed_key="cpu-2core",
        )

    base = [cpu(f"b{i}", f, i) for i, f in enumerate([1.0, 1.1, 0.92])]
    c = compare(base, cpu("c", 1.15, 9))
    assert c.settings.mode == "cpu" and c.settings.thresholds["latency"] >= 0.2
    assert c.verdict != "fail"
    assert compare(base, cpu("c", 2.5, 9)).verdict == "fail"


def test_precedence_case_over_config_over_suite() -> None:
    base = runs(3, seed=1)
    cand = runs(1, seed=2, factor=1.05, prefix="cand")[0]
    cand.suite.thresholds = Thresholds(latency=0.01)
    assert compare(base, cand, config=Thresholds(latency=0.10)).verdict != "fail"
    cand.cases[0].thresholds = Thresholds(latency=0.03)
    c = compare(base, cand, config=Thresholds(latency=0.10))
    assert c.verdict == "fail" and _find(c, "latency").threshold == pytest.approx(0.03)
    assert c.settings.thresholds["latency"] == 0.10


def test_suite_thresholds_apply_without_config() -> None:
    base = runs(3, seed=1)
    cand = runs(1, seed=2, factor=1.05, prefix="cand")[0]
    cand.suite.thresholds = Thresholds(latency=0.08)
    assert compare(base, cand).verdict != "fail"


def test_document_roundtrips_and_is_deterministic() -> None:
    base, cand = runs(3, seed=1), runs(1, seed=2, factor=1.04, prefix="cand")[0]
    a = compare(base, cand, seed=7)
    b = compare(base, cand, seed=7)
    assert a.to_json() == b.to_json()
    assert ComparisonDocument.model_validate_json(a.to_json()) == a


def test_scaled_copy_of_a_run_is_still_the_same_run() -> None:
    base = runs(3, seed=1)
    assert compare(base, parse_result(json.loads(base[0].to_json()))).verdict == "pass"
    assert compare(base, scaled(base[0], 1.25)).verdict == "fail"


def _on_gpu(doc: object, uuid: str) -> None:
    doc.environment.device.uuid = uuid  # type: ignore[attr-defined]


def test_a_candidate_on_another_gpu_of_its_testbed_is_named_without_changing_the_verdict() -> None:
    # Two H200s of one testbed read the same cases up to 1% apart (docs/findings.md#another-gpu-of-the-same-testbed).
    base = runs(3)
    for b, uuid in zip(base, ["GPU-108a6f97-9285", "GPU-108a6f97-9285", "GPU-ddbdc582-e24e"], strict=True):
        _on_gpu(b, uuid)
    cand = runs(1, seed=2, prefix="cand")[0]
    _on_gpu(cand, "GPU-108a6f97-9285")
    c = compare(base, cand)
    notes = [n for n in c.notes if n.startswith("OTHER GPU")]
    assert len(notes) == 1 and c.verdict == "pass"
    assert (
        "candidate ran on GPU 108a6f97, 1 of the 3 baseline run(s) whose GPU is known "
        "on another of its testbed (ddbdc582)" in notes[0]
    )
    assert "OTHER GPU" in render_table(c)


def test_the_same_gpu_or_an_unknown_one_gives_no_gpu_note() -> None:
    base, cand = runs(2), runs(1, seed=2, prefix="cand")[0]
    assert not any(n.startswith("OTHER GPU") for n in compare(base, cand).notes)  # no UUIDs at all (CPU, no NVML)
    for b in base:
        _on_gpu(b, "GPU-108a6f97")
    _on_gpu(cand, "GPU-108a6f97")
    assert not any(n.startswith("OTHER GPU") for n in compare(base, cand).notes)


def test_a_testbed_mismatch_is_the_only_word_on_the_environment() -> None:
    base = runs(2)
    for b in base:
        _on_gpu(b, "GPU-aaaa")
    cand = make_doc("cand", [make_case(seed=4)], testbed_key="a100-550.54-cuda")
    _on_gpu(cand, "GPU-bbbb")
    c = compare(base, cand)
    assert any(n.startswith("TESTBED MISMATCH") for n in c.notes)
    assert not any(n.startswith("OTHER GPU") for n in c.notes)


def test_baselines_whose_gpu_is_unknown_are_left_out_of_the_count() -> None:
    base = runs(3)
    _on_gpu(base[0], "GPU-ddbdc582-e24e")  # the others: no UUID (NVML could not say)
    cand = runs(1, seed=2, prefix="cand")[0]
    _on_gpu(cand, "GPU-108a6f97-9285")
    notes = [n for n in compare(base, cand).notes if n.startswith("OTHER GPU")]
    assert len(notes) == 1 and "1 of the 1 baseline run(s) whose GPU is known" in notes[0]
    # a candidate whose own GPU is unknown cannot be said to be on another one
    unknown = runs(1, seed=3, prefix="cand")[0]
    assert not any(n.startswith("OTHER GPU") for n in compare(base, unknown).notes)
