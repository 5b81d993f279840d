"""The PR comment rendered from real comparison documents (tests/data/results)."""

from __future__ import annotations

from pathlib import Path

from attnprof.core.analysis import compare
from attnprof.core.documents import load_result
from attnprof.core.documents.comparison import FieldChange, Finding
from attnprof.core.documents.result import CaseError, ResultDocument
from attnprof.server.github.comment import CommentInput, case_outcomes, marker, render
from attnprof.server.github.tables import achieved

RESULTS = Path(__file__).resolve().parents[2] / "data" / "results"


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
        "suite_path": "benches/llama7b.toml",
    }
    base.update(kw)
    return CommentInput(**base)  # type: ignore[arg-type]


def test_regression_comment_shows_verdict_table_kernels_links_and_reproduction() -> None:
    text = render(_input())
    assert text.splitlines()[0] == marker("flash") == "<!-- attnprof:flash -->"
    assert "**fail** on `h200`" in text
    assert "| 🔴 | `prefill[backend=cudnn]` | latency | 87.0 µs | 91.7 µs | +5.3% | [+3.8%, +7.1%] (95%) |" in text
    assert "#### `prefill[backend=flash]`: latency +5.1%" in text
    assert "`cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16`" in text
    assert "Whole case: bandwidth 584 GB/s → 552 GB/s; FLOP rate 793 TFLOP/s → 750 TFLOP/s; bound latency." in text
    assert "<details><summary>All" in text
    # The comment is read by people: its links open the dashboard's pages, never the API's routes.
    assert "[job](https://perf.example/ui/p/flash/jobs/j-1)" in text
    assert "[run](https://perf.example/ui/p/flash/runs/r-1)" in text
    assert "[comparison](https://perf.example/ui/p/flash/comparisons/c-1)" in text
    assert "/api/v1/" not in text
    # The regressed cases lead, one line each, the largest (in µs added to the case's median) first; the
    # reproduction profiles them in that order.
    lines = text.split("### Regressed cases, largest first (3)\n\n", 1)[1].splitlines()[:3]
    assert lines[0] == (
        "- `prefill[backend=efficient]` +5.3% (268.0 → 282.1 µs): "
        "`fmha_cutlassF_bf16_aligned_64x128_rf_sm80` +14.0 µs (+5.3% [+4.7%, +5.8%])"
    )
    assert [line.split("`")[1] for line in lines[1:]] == ["prefill[backend=flash]", "prefill[backend=cudnn]"]
    assert (
        "attnprof profile benches/llama7b.toml --case 'prefill[backend=efficient]' --case 'prefill[backend=flash]'"
        in text
    )
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


def test_a_job_that_ended_without_a_verdict_says_so_why_and_what_to_do() -> None:
    reason = "every case failed (1): boom: RuntimeError\nTraceback (most recent call last):\nRuntimeError: boom"
    failed = render(_input(status="failed", reason=reason, comparison=None, comparison_id=None, run_id=None))
    lines = failed.splitlines()
    assert lines[0] == marker("flash")
    assert lines[1] == "## ⛔ attnprof `flash`: **no verdict** (job failed) on `h200`"
    assert "**This commit has no verdict:** the job failed before its results were compared" in failed
    assert "A verdict on an earlier commit of this pull request no longer applies." in failed
    assert "```text\n" + reason + "\n```" in failed  # the whole reason, verbatim, in a block
    assert "`/attnprof rerun`" in failed and "[job](https://perf.example/ui/p/flash/jobs/j-1)" in failed
    # no table, no kernels, no comparison step in the reproduction: there was nothing to compare
    assert "| Case |" not in failed and "| Kernel |" not in failed and "[comparison]" not in failed
    assert "attnprof profile benches/llama7b.toml --out candidate.json" in failed and "attnprof compare" not in failed
    timed_out = render(_input(status="timed_out", reason="the wall-clock limit of 12 s", comparison=None, pr=None))
    assert "(job timed out)" in timed_out and "wall-clock limit" in timed_out and "earlier commit" not in timed_out
    cancelled = render(_input(status="cancelled", reason="cancelled by a user", comparison=None))
    assert "(job was cancelled)" in cancelled and "Reproduce locally" not in cancelled
    fenced = render(_input(status="failed", reason="output:\n```\nboom\n```", comparison=None))
    assert "````text\noutput:\n```\nboom\n```\n````" in fenced  # a fence in the reason cannot close the block
    long = render(_input(status="failed", reason="x" * 10_000 + "the end", comparison=None))
    assert "…" in long and "the end" in long and len(long) < 6000


def test_a_backend_switch_lists_the_kernels_that_vanished_and_appeared() -> None:
    inp = _input()
    assert inp.comparison is not None and inp.candidate is not None and inp.baseline is not None
    case = inp.comparison.findings[0].case
    candidate = inp.candidate.model_copy(deep=True)
    found = candidate.case(case)
    assert found is not None and found.kernels
    gone = found.kernels[0].key
    found.kernels[0] = found.kernels[0].model_copy(update={"key": "bmm", "phase": "qk_matmul"})
    doc = inp.comparison.model_copy(deep=True)
    doc.findings.insert(
        0, Finding(case=case, metric="backend", status="regressed", verdict="fail", baseline="cudnn", candidate="math")
    )
    text = render(_input(comparison=doc, candidate=candidate))
    section = text.split("backend switch `cudnn` → `math`", 1)[1]
    assert "| Kernel | Phase | Baseline | Candidate | Bound |" in section
    assert f"| `{gone}` (gone) | " in section and "| `bmm` (new) | qk_matmul | – | " in section


def test_trace_links_open_the_dashboard_and_only_for_stored_traces() -> None:
    inp = _input()
    assert inp.candidate is not None
    candidate = inp.candidate.model_copy(deep=True)
    for case in candidate.cases:
        case.trace = f"{case.id}.trace.json.gz"
    stored = "prefill[backend=cudnn].trace.json.gz"
    # An upload's summary: the client sends every trace the document names after the answer.
    every = render(_input(candidate=candidate))
    link = "[trace of `prefill[backend=cudnn]`](https://perf.example/ui/p/flash/runs/r-1/traces/prefill%5Bbackend%3Dcudnn%5D.trace.json.gz)"
    assert link in every and "[trace of `prefill[backend=flash]`]" in every
    # A job's comment: only the traces stored with the run; another would open a 404.
    some = render(_input(candidate=candidate, traces=frozenset({stored})))
    assert link in some and "[trace of `prefill[backend=flash]`]" not in some
    assert "[trace of" not in render(_input(candidate=candidate, traces=frozenset()))


def test_the_summary_counts_cases_not_findings() -> None:
    inp = _input()
    doc = inp.comparison
    assert doc is not None
    outcomes = case_outcomes(doc)
    # every compared case once, whatever number of metrics it has findings for
    assert set(outcomes) == {f.case for f in doc.findings} and len(doc.findings) > len(outcomes)
    for case, outcome in outcomes.items():
        statuses = {f.status for f in doc.findings if f.case == case}
        assert outcome == next(s for s in ("regressed", "improved", "inconclusive", "unchanged") if s in statuses)
    counts = {
        s: sum(1 for v in outcomes.values() if v == s) for s in ("regressed", "improved", "inconclusive", "unchanged")
    }
    assert sum(counts.values()) == len(outcomes) <= doc.summary.compared
    line = (
        f"{counts['regressed']} regressed, {counts['improved']} improved, {counts['inconclusive']} inconclusive, "
        f"{counts['unchanged']} unchanged ({len(doc.findings)} finding(s) over their metrics)."
    )
    assert line in render(inp)


def test_a_case_that_stopped_running_shows_its_stored_error() -> None:
    inp = _input()
    assert inp.comparison is not None and inp.candidate is not None
    candidate = inp.candidate.model_copy(deep=True)
    case = candidate.cases[0]
    case.status = "failed"
    message = "CUDA out of memory. Tried to allocate 2.00 GiB\n```oops```"
    case.error = CaseError(type="OutOfMemoryError", message=message)
    doc = inp.comparison.model_copy(deep=True)
    doc.findings.append(
        Finding(case=case.id, metric="status", status="regressed", verdict="fail", baseline="ok", candidate="failed")
    )
    text = render(_input(comparison=doc, candidate=candidate))
    assert f"`{case.id}`: `ok` → `failed`" in text
    block = text.split(f"`{case.id}`: `ok` → `failed`", 1)[1]
    # a fence longer than the message's own: the message is shown as it is, and its backticks end nothing
    assert "````text\nOutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n```oops```\n````" in block


def test_reproduce_locally_profiles_the_suite_by_its_stored_path_or_says_none_was_sent() -> None:
    """The job's suite path is printed, quoted for a POSIX shell; a job sent without one (an older client) and an
    upload (which sends none) say so, and the job's points at the page that holds its spec."""
    spaced = render(_input(suite_path="perf suites/llama 7b.toml"))
    assert "git checkout abcdef0123456789\nattnprof profile 'perf suites/llama 7b.toml' --case " in spaced
    assert "llama7b.toml" not in spaced and "No path was sent" not in spaced
    older = render(_input(suite_path=None))
    assert (
        "No path was sent for the suite `llama7b` (an older `attnprof submit`): save its spec from "
        "[the job's page](https://perf.example/ui/p/flash/jobs/j-1) as `attnprof.toml`, then:" in older
    )
    assert "attnprof profile attnprof.toml --case " in older and "llama7b.toml" not in older
    upload = render(_input(suite_path=None, job_id=""))
    said = "An upload sends no path for its suite `llama7b`: put the suite file's path in place of `attnprof.toml`:"
    assert said in upload and "/jobs/" not in upload
    assert "attnprof profile attnprof.toml --case " in upload


def test_a_change_of_the_timing_method_is_listed_with_each_value_whole() -> None:
    # the method's words hold commas and semicolons: each value stands in a code span of its own
    baselines, candidate = _docs()
    method = "hold, then a read sweep before each iteration; rounds over the suite, each built anew; one stream"
    software = {**candidate.environment.software, "attnprof timing": method}
    candidate = candidate.model_copy(
        update={"environment": candidate.environment.model_copy(update={"software": software})}
    )
    text = render(_input(comparison=compare(baselines, candidate), candidate=candidate))
    assert f"attnprof timing `not recorded` → `{method}`" in text


def test_a_cpu_case_s_flop_rate_reads_in_gflop_s() -> None:
    baselines, candidate = _docs()
    case = candidate.cases[0]
    assert case.achieved is not None and baselines[0].case(case.id) is not None
    slow = candidate.model_copy(deep=True)
    slow.cases[0].achieved = case.achieved.model_copy(update={"tflops": 0.0123, "gbps": 0.85})
    lines = achieved(baselines[0], slow, case.id)
    assert lines and "→ 12.3 GFLOP/s" in lines[0] and "→ 0.85 GB/s" in lines[0]
    assert "0.0123" not in lines[0]


def test_a_regressed_case_gets_one_line_of_advice_measured_in_the_same_job() -> None:
    from attnprof.core.documents import Advice

    baselines, candidate = _docs()
    helped = Advice(
        rule="mask",
        call=0,
        suggestion="pass is_causal=True instead of the mask <script>",
        current_us=91.7,
        alternative_us=70.2,
        helps=True,
        note="where the mask is the causal pattern",
    )
    tried = Advice(rule="head_dim", call=0, suggestion="pad", current_us=91.7, alternative_us=95.0, helps=False)
    for case in candidate.cases:
        case.advice = [tried, helped] if case.id == "prefill[backend=flash]" else [tried]
    text = render(_input(candidate=candidate, comparison=compare(baselines, candidate)))
    section = text.split("#### `prefill[backend=flash]`: latency", 1)[1].split("####", 1)[0]
    assert "💡 ADVICE (mask): pass is_causal=True instead of the mask \\<script>: would take 70.2 µs" in section
    assert "instead of 91.7 µs (23% less, measured here); where the mask is the causal pattern" in section
    assert text.count("💡") == 1  # advice that did not help is never shown
