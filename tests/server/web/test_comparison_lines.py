"""The comparison page's answer, without a browser: the PR comment's lines turned into HTML (names as code, nothing
a case id holds read as markup), in the comment's order, a failed case's stored error clipped."""

from __future__ import annotations

from attnprof.core import units
from attnprof.core.analysis import compare
from attnprof.core.documents import parse_result
from attnprof.core.documents.result import ResultDocument
from attnprof.server.github import regressions as ranked
from attnprof.server.web.pages import figures
from attnprof.server.web.pages.comparisons import ERROR_MAX_CHARS, answer_lines, comment_line_html
from tests.server.web.comparison_documents import (
    ERROR_MESSAGE,
    FAILED_CASE,
    SOFTMAX_CASE,
    SOFTMAX_KERNEL,
    SOFTMAX_SLOWER,
    broken,
    slower_kernel,
)
from tests.server.web.stack import docs


def test_a_comment_line_reads_as_html_with_its_names_as_code() -> None:
    line = "- `sdpa[backend=math]` +6.6% (3,428 → 3,654 µs): `softmax<float, 11>` +208 µs (+61%), memory-bound"
    assert str(comment_line_html(line)) == (
        "<code>sdpa[backend=math]</code> +6.6% (3,428 → 3,654 µs): <code>softmax&lt;float, 11&gt;</code> +208 µs "
        "(+61%), memory-bound"
    )
    # A case id is the user's: markup in it is text.
    assert str(comment_line_html("- `<script>x</script>`: status `ok` → `failed`")) == (
        "<code>&lt;script&gt;x&lt;/script&gt;</code>: status <code>ok</code> → <code>failed</code>"
    )
    # An unpaired backtick (a name that holds one) gives no code span rather than a wrong one.
    assert str(comment_line_html("- `a`b` +1%")) == "`a`b` +1%"


def test_the_answer_is_the_comments_lines_in_its_order_with_the_failed_cases_error() -> None:
    baseline = parse_result(docs.h200())
    candidate = parse_result(broken(slower_kernel(docs.h200(), SOFTMAX_CASE, SOFTMAX_KERNEL, SOFTMAX_SLOWER)))
    doc = compare([baseline], candidate)
    lines = answer_lines(doc, baseline, candidate)
    order = ranked.by_impact(doc, baseline, candidate)
    assert [a.case for a in lines] == [r.case for r in order]
    assert [a.html for a in lines] == [comment_line_html(ranked.line(r, baseline, candidate)) for r in order]
    failed, *rest = lines
    assert failed.case == FAILED_CASE and failed.broken
    full = f"torch.OutOfMemoryError: {ERROR_MESSAGE}"
    assert failed.error == full[:ERROR_MAX_CHARS] and failed.error_chars == len(full) > ERROR_MAX_CHARS
    assert all(a.error is None and not a.broken for a in rest)
    assert any(SOFTMAX_KERNEL in str(a.html) for a in rest)


def test_a_passing_comparison_has_no_lines() -> None:
    baseline = parse_result(docs.h200())
    doc = compare([baseline], parse_result(docs.h200()))
    assert doc.verdict == "pass" and answer_lines(doc, baseline, parse_result(docs.h200())) == []


def test_a_lines_change_is_its_findings_estimate_over_all_baseline_runs_as_the_chart_plots_it() -> None:
    """Three baseline runs 2% apart: the line's change and medians are the finding's (the runs pooled), not the first
    run's, for a memory-bound case (a bandwidth finding, its drop read as the time's rise), a compute-bound one
    (throughput) and a latency-bound one; and the chart plots the same change."""
    runs = [parse_result(docs.variant(docs.h200(), jitter=j)) for j in (-0.02, 0.0, 0.02)]
    slowed = {"sdpa[backend=cudnn,pass=fwd]": "throughput", "sdpa[backend=flash,pass=fwd]": "latency"}
    raw = slower_kernel(docs.h200(), SOFTMAX_CASE, SOFTMAX_KERNEL, SOFTMAX_SLOWER)
    candidate = parse_result(docs.variant(raw, slower=1.08, cases=list(slowed)))
    doc = compare(runs, candidate)
    timing = {f.case: f for f in doc.findings if f.metric in ranked.CASE_TIME}
    assert {c: timing[c].metric for c in [SOFTMAX_CASE, *slowed]} == {SOFTMAX_CASE: "bandwidth", **slowed}
    regs = {r.case: r for r in ranked.by_impact(doc, runs[0], candidate)}
    for case in [SOFTMAX_CASE, *slowed]:
        f = timing[case]
        assert f.status == "regressed" and f.change is not None, f
        worse = ranked.time_change(f.change, ranked.is_rate(f))
        assert worse is not None
        charted = figures.worse_percent(f)
        assert charted is not None and abs(charted[0] - 100 * worse) < 1e-9  # the chart's point
        line = ranked.line(regs[case], runs[0], candidate)
        assert line.startswith(f"- `{case}` {units.fmt_change(worse)} ("), line
        first = _median(runs[0], case)  # what the line used to compare with: 2% under the pooled baseline
        assert units.fmt_change(_median(candidate, case) / first - 1.0) != units.fmt_change(worse)
        # the medians printed are the finding's: their ratio is the change printed
        reg = regs[case]
        assert reg.baseline_us is not None and reg.candidate_us is not None
        assert abs(reg.candidate_us / reg.baseline_us - 1.0 - worse) < 1e-9
        assert abs(reg.candidate_us - _median(candidate, case)) < 0.01 * reg.candidate_us
        assert abs(reg.baseline_us - _median(runs[1], case)) < 0.005 * reg.baseline_us  # the middle run's level


def _median(doc: ResultDocument, case: str) -> float:
    found = doc.case(case)
    assert found is not None and found.latency_us is not None
    return float(found.latency_us.median)
