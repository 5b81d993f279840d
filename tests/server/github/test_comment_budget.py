"""The PR comment fits GitHub's limit whatever the suite, and what GitHub refuses is not sent again as it is.

The comment of 100 regressed cases with real H200 kernel tables (``tests.server.github.bigsuite``), posted by the
service on the migrated Postgres through the outbox to the GitHub stand-in, which refuses a body over 65,536 characters
as GitHub does; kernels that share a name (the two ``aten::bmm`` of the committed CPU run) are both shown.
"""

from __future__ import annotations

import re

import pytest

from attnprof.core.analysis import compare
from attnprof.core.documents import parse_result
from attnprof.core.documents.comparison import Finding
from attnprof.server.github import outbox
from attnprof.server.github.budget import COMMENT_BUDGET_CHARS, GITHUB_COMMENT_MAX_CHARS, github_chars
from attnprof.server.github.client import GitHubClient, GitHubError
from attnprof.server.github.comment import CommentInput, marker, render
from tests.server import documents as docs
from tests.server.github import bigsuite
from tests.server.github.fakegithub import FakeGitHub
from tests.server.github.feedstack import REPO, _stack

CASES = 100
HEADING = "### Regressed cases, largest first"


def _comment_posts(github: FakeGitHub) -> list[str]:
    """The bodies of every comment create or update sent to the stand-in, in order."""
    return [r.body["body"] for r in github.requests() if r.method in ("POST", "PATCH") and "/comments" in r.path]


def _lines(body: str) -> list[str]:
    """The regressed cases' lines the comment leads with."""
    after = body.split(HEADING, 1)[1].split("\n\n", 1)[1]
    return [line for line in after.split("\n\n", 1)[0].splitlines() if line.startswith("- `")]


def test_100_regressed_cases_of_real_kernel_tables_post_under_the_limit_with_the_top_regression_first(
    db, pg_url, github, tenant, worker_token
) -> None:
    s = _stack(db, pg_url, github, tenant, worker_token)
    base = bigsuite.suite(CASES)
    factors = {c["id"]: 1.10 + 0.5 * i / (CASES - 1) for i, c in enumerate(base["cases"])}
    candidate = bigsuite.planted(base, factors, every_kernel=True)
    s.baseline(doc=base)
    job = s.analyse(s.job("b1", result=candidate))
    assert job.verdict == "fail" and job.reason is None and job.feedback_due_at is None

    comments = github.comments(REPO, 7)
    assert len(comments) == 1 and len(_comment_posts(github)) == 1  # posted at the first try
    body = comments[0]["body"]
    assert body.startswith(marker(tenant.name))
    assert len(body) <= github_chars(body) <= COMMENT_BUDGET_CHARS < GITHUB_COMMENT_MAX_CHARS
    # Every regressed case has its line (they fit), the one whose median gained the most µs first.
    added_us = {
        c["id"]: c["latency_us"]["median"] - b["latency_us"]["median"]
        for b, c in zip(base["cases"], candidate["cases"], strict=True)
    }
    top = max(added_us, key=lambda case: added_us[case])
    lines = _lines(body)
    assert len(lines) == CASES and f"{HEADING} ({CASES})" in body
    assert lines[0].startswith(f"- `{top}` +")
    # Those that fail the verdict, by µs added, then those that only warn (a case marked suspect), by µs added.
    r = s.client.get(f"/api/v1/jobs/{job.id}/comparison", headers=tenant.h("read"))
    found = r.json()["document"]["findings"]
    fails = {f["case"] for f in found if f["status"] == "regressed" and f["verdict"] == "fail"}
    assert 0 < len(fails) < CASES
    order = [(line.split("`")[1] not in fails, -added_us[line.split("`")[1]]) for line in lines]
    assert order == sorted(order)
    # "<case> +x% (a → b µs): `<kernel>` +n µs (+y%), <bound>-bound, <bandwidth|compute> use p% → q%"
    one = r"- `[^`]+` \+\d+\.\d% \([\d,.]+( µs| ms)? → [\d,.]+ (µs|ms)\): `[^`]+` \+[\d,.]+ (µs|ms) \(\+\d+\.\d%\), "
    assert re.match(one + r"(compute|memory|latency|balanced)-bound, (bandwidth|compute) use \d+% → \d+%", lines[0])
    # Then the kernel tables that fit, the top case's first; then what was left out and where it all is.
    assert body.index(f"#### `{top}`: ") > body.index(lines[-1]) and "| Kernel |" in body
    assert f"**Left out** to keep this comment under GitHub's limit of {GITHUB_COMMENT_MAX_CHARS:,} characters" in body
    assert "the kernel tables of " in body and f"/ui/p/{tenant.name}/comparisons/" in body
    assert "/api/v1/" not in body


def _big_input() -> CommentInput:
    baseline, candidate, doc = bigsuite.regressed(CASES, CASES, every_kernel=True)
    return CommentInput(
        project="flash",
        job_id="j-1",
        status="done",
        suite_name="llama7b",
        testbed="h200",
        branch="feature",
        commit="abcdef0123456789",
        public_url="https://perf.example",
        pr=7,
        run_id="r-1",
        comparison_id="c-1",
        comparison=doc,
        candidate=candidate,
        baseline=baseline,
    )


def test_the_stand_in_refuses_a_body_over_the_limit_as_github_does_and_it_is_not_sent_again(github) -> None:
    unbounded = render(_big_input(), budget_chars=10**7)  # every table: what the comment was without its budget
    assert len(unbounded) > GITHUB_COMMENT_MAX_CHARS
    with GitHubClient(github.url, "test-token-1", attempts=4, backoff_s=0.0) as gh:
        with pytest.raises(GitHubError) as refused:
            gh.upsert_comment(REPO, 7, marker=marker("flash"), body=unbounded)
        assert gh.retries == 0
    err = refused.value
    assert err.status == 422 and err.too_long and not err.retryable
    assert err.errors == ("Body is too long (maximum is 65536 characters)",)
    assert "Validation Failed" in str(err) and len(_comment_posts(github)) == 1
    assert github.comments(REPO, 7) == []
    # The budgeted comment of the same comparison, and its compact form, are taken.
    bounded = render(_big_input())
    compact = render(_big_input(), budget_chars=8000, kernel_tables=False)
    assert github_chars(compact) <= 8000 < github_chars(bounded) <= COMMENT_BUDGET_CHARS
    assert "| Kernel |" not in compact and _lines(compact)[0] == _lines(bounded)[0]
    with GitHubClient(github.url, "test-token-1") as gh:
        gh.upsert_comment(REPO, 7, marker=marker("flash"), body=bounded)
        gh.upsert_comment(REPO, 7, marker=marker("flash"), body=compact)
    assert [c["body"] for c in github.comments(REPO, 7)] == [compact]


def test_thousands_of_regressed_cases_keep_the_top_lines_and_count_the_rest() -> None:
    inp = _big_input()
    assert inp.comparison is not None
    doc = inp.comparison.model_copy(deep=True)
    regressed = [f for f in doc.findings if f.status == "regressed"]
    many = [f.model_copy(update={"case": f"{f.case}#{i}"}) for i in range(40) for f in regressed]
    doc.findings = many
    body = render(CommentInput(**{**inp.__dict__, "comparison": doc}))
    lines = _lines(body)
    assert github_chars(body) <= COMMENT_BUDGET_CHARS and 100 < len(lines) < len(many)
    assert f"- … and {len(many) - len(lines)} more" in body
    assert f"the lines of {len(many) - len(lines)} more regressed cases" in body


def _feedback_job(s) -> str:
    """A pull request's regressed job, its verdict committed, whose feedback is owed and not yet sent."""
    s.baseline()
    return str(s.job("b1"))


def test_a_comment_refused_as_too_long_is_replaced_by_its_compact_form_not_sent_again(
    db, pg_url, github, tenant, worker_token
) -> None:
    s = _stack(db, pg_url, github, tenant, worker_token)
    job_id = _feedback_job(s)
    # The status and the comments' page pass; the comment is refused as too long (a GitHub with a lower limit).
    github.fail_next("pass", "pass", "too_long")
    job = s.analyse(job_id)
    posts = _comment_posts(github)
    assert len(posts) == 2 and "| Kernel |" in posts[0] and "| Kernel |" not in posts[1]
    assert len(posts[1]) < len(posts[0]) and HEADING in posts[1]
    assert [c["body"] for c in github.comments(REPO, 7)] == [posts[1]]
    assert job.feedback_due_at is None and job.reason is None and job.verdict == "fail"


@pytest.mark.parametrize("refusals", [("422",), ("too_long", "pass", "too_long")])
def test_a_422_is_recorded_and_never_sent_again_as_it_is(db, pg_url, github, tenant, worker_token, refusals) -> None:
    s = _stack(db, pg_url, github, tenant, worker_token)
    job_id = _feedback_job(s)
    github.fail_next("pass", "pass", *refusals)
    job = s.analyse(job_id)
    posts = _comment_posts(github)
    assert len(posts) == len([r for r in refusals if r != "pass"]) and len(set(posts)) == len(posts)
    assert github.comments(REPO, 7) == []
    # Refused for good: noted on the job, owed no more; a later delivery (the sweep's) sends nothing.
    assert job.feedback_due_at is None and job.verdict == "fail"
    assert "GitHub feedback failed: " in (job.reason or "") and "HTTP 422" in (job.reason or "")
    assert "refused for good, not sent again" in (job.reason or "")
    assert outbox.deliver_owed(s.sessions, s.settings, [job_id]) == {"delivered": 0, "undelivered": 0}
    assert _comment_posts(github) == posts


def test_kernels_that_share_a_name_are_both_shown() -> None:
    """The committed CPU run's unfused attention launches ``aten::bmm`` twice (QKᵀ and AV): both stay."""
    case = "naive[pass=fwd]"
    baseline = parse_result(docs.cpu())
    # The run holds one traced round per kernel (an older document): a kernel's change is named only past twice the
    # case's own spread, which this busy host's samples put at 2.5 times their median: sixfold is past it.
    candidate = parse_result(docs.cpu(slower=6.0, cases=[case]))
    keys = [(k.key, k.phase) for k in candidate.case(case).kernels]  # type: ignore[union-attr]
    assert ("aten::bmm", "qk_matmul") in keys and ("aten::bmm", "av_matmul") in keys
    # The committed CPU run is suspect (a busy host): its slowdown is not failed; called a regression here.
    doc = compare([baseline], candidate)
    doc.findings = [
        f.model_copy(update={"status": "regressed", "verdict": "fail"})
        if f.case == case and f.metric == "latency"
        else f
        for f in doc.findings
    ]
    inp = CommentInput(
        project="p",
        job_id="j",
        status="done",
        suite_name="cpu",
        testbed="cpu",
        branch="f",
        commit="c" * 12,
        public_url="https://perf.example",
        pr=7,
        comparison=doc,
        candidate=candidate,
        baseline=baseline,
    )
    timing = render(inp).split(f"#### `{case}`: ", 1)[1]
    assert "| `aten::bmm` | qk_matmul |" in timing and "| `aten::bmm` | av_matmul |" in timing
    # A backend switch lists both sides' kernels by key, phase and occurrence: none is lost to another's name.
    switch = Finding(case=case, metric="backend", status="regressed", verdict="fail", baseline="a", candidate="b")
    twice = candidate.model_copy(deep=True)
    found = twice.case(case)
    assert found is not None
    found.kernels = [k.model_copy(update={"phase": "qk_matmul"}) if k.key == "aten::bmm" else k for k in found.kernels]
    other = doc.model_copy(update={"findings": [switch]})
    table = render(CommentInput(**{**inp.__dict__, "comparison": other, "baseline": candidate, "candidate": twice}))
    section = table.split("backend switch `a` → `b`", 1)[1]
    assert (
        "| `aten::bmm` | qk_matmul |" in section
        and "| `aten::bmm` (#2) (new) | qk_matmul |" in section
        and "| `aten::bmm` (gone) | av_matmul |" in section
    )
