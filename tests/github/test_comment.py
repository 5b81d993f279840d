"""The PR comment rendered from real comparison documents (tests/data/results)."""

from __future__ import annotations

from pathlib import Path

from profiler_core.analysis import compare
from profiler_core.documents import load_result
from profiler_core.documents.comparison import FieldChange, Finding
from profiler_core.documents.result import ResultDocument
from service.github.comment import CommentInput, marker, render

RESULTS = Path(__file__).resolve().parents[1] / "data" / "results"


def _docs() -> tuple[list[ResultDocument], ResultDocument]:
    baselines = [load_result(p) for p in sorted(RESULTS.glob("synthetic-h200-baseline-*.json"))]
    return baselines, load_result(RESULTS / "synthetic-h200-candidate-5pct-slower.json")


def _input(**kw: object) -> CommentInput:
    baselines, candidate = _docs()
    base: dict[str, object] = {
        "project": "flash",
        "job_id": "j-1",
        "status": "done",
        "suite_name": "llama7b",
        "testbed": "h200",
        "branch": "feature",
        "commit": "abcdef0123456789",
        "public_url": "https://perf.example/",
        "pr": 7,
        "run_id": "r-1",
        "comparison_id": "c-1",
        "comparison": compare(baselines, candidate),
        "candidate": candidate,
        "baseline": baselines[0],
    }
    base.update(kw)
    return CommentInput(**base)  # type: ignore[arg-type]


def test_regression_comment_shows_verdict_table_kernels_links_and_reproduction() -> None:
    text = render(_input())
    assert text.splitlines()[0] == marker("flash") == "<!-- attnprof:flash -->"
    assert "**fail** on `h200`" in text
    assert "| 🔴 | `prefill[backend=cudnn]` | latency | 87.01 us | 91.66 us | +5.3% | [+3.8%, +7.1%] (95%) |" in text
    assert "#### `prefill[backend=flash]`: latency +5.1%" in text
    assert "`cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16`" in text
    assert "Whole case: GB/s 583.7 → 552; TFLOP/s 792.8 → 749.7; bound latency." in text
    assert "<details><summary>All" in text
    assert "[run](https://perf.example/api/v1/projects/flash/runs/r-1)" in text
    assert "[comparison](https://perf.example/api/v1/projects/flash/comparisons/c-1)" in text
    assert "attnprof profile llama7b.toml --case 'prefill[backend=cudnn]' --case 'prefill[backend=efficient]'" in text
    assert "attnprof compare baseline.json candidate.json" in text


def test_kernel_launch_changes_backend_switch_variance_and_accuracy_are_called_out() -> None:
    inp = _input()
    assert inp.comparison is not None
    doc = inp.comparison.model_copy(deep=True)
    move = doc.findings[0].kernels[0]
    move.launch.append(FieldChange(field="registers_per_thread", baseline=128, candidate=168, change=0.3125))
    move.rates.append(FieldChange(field="bandwidth_util", baseline=0.61, candidate=0.52, change=-0.15))
    case = doc.findings[0].case
    doc.findings += [
        Finding(case=case, metric="backend", status="regressed", verdict="fail", baseline="cudnn", candidate="math"),
        Finding(case=case, metric="variance", status="regressed", verdict="warn", change=0.8, detail="cv 1% -> 1.8%"),
        Finding(case=case, metric="accuracy", status="regressed", verdict="fail", baseline=1e-3, candidate=0.2),
    ]
    text = render(_input(comparison=doc))
    assert "registers_per_thread 128 → 168 (+31.2%)" in text
    assert "bandwidth_util 0.61 → 0.52 (-15.0%)" in text
    assert "backend switch `cudnn` → `math`" in text
    assert "run-to-run variance +80.0%" in text and "cv 1% -> 1.8%" in text
    assert "accuracy 0.001 → 0.2" in text


def test_unchanged_candidate_passes_and_a_failed_job_has_no_table() -> None:
    baselines, _ = _docs()
    same = load_result(RESULTS / "synthetic-h200-candidate-same.json")
    text = render(_input(comparison=compare(baselines, same), candidate=same))
    assert "**pass**" in text and "### Regressions" not in text
    failed = render(_input(status="failed", reason="the worker ran out of memory", comparison=None, run_id=None))
    assert failed.startswith(marker("flash")) and "**failed**" in failed and "out of memory" in failed
