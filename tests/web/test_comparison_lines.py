"""The comparison page's answer, without a browser: the PR comment's lines turned into HTML (names as code, nothing
a case id holds read as markup), in the comment's order, a failed case's stored error clipped."""

from __future__ import annotations

from profiler_core.analysis import compare
from profiler_core.documents import parse_result
from service.github import regressions as ranked
from service.web.pages.comparisons import ERROR_MAX_CHARS, answer_lines, comment_line_html
from tests.web.cmpdocs import (
    ERROR_MESSAGE,
    FAILED_CASE,
    SOFTMAX_CASE,
    SOFTMAX_KERNEL,
    SOFTMAX_SLOWER,
    broken,
    slower_kernel,
)
from tests.web.webstack import docs


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
