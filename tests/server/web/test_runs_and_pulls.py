"""Uploads are runs like any other on the dashboard: the runs page lists jobs' runs and uploads alike (filters, paging,
a 422 page naming a bad filter), a pull request's page gathers its jobs in every state and its uploads with the
latest verdict on top, the overview and the jobs list count a pull request's uploads; and a job's page prints the
suite's path to reproduce it and a failed job's log as it was written, with the worker that ran it."""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import literal_column, update

from attnprof.server.db import make_engine
from attnprof.server.jobs.models import Job
from attnprof.server.runs.models import Run
from attnprof.server.web.pages import runs_list
from tests.server.web.pages import Project, fresh_project, http, upload
from tests.server.web.stack import CPU_SUITE, Site, docs, sign_in

LOG = (
    "profiling the suite failed (exit 1); the last lines of its output:\n"
    "Traceback (most recent call last):\n"
    '  File "/job/src/mypkg/attention.py", line 42, in make_case\n'
    "    raise RuntimeError('block_n must divide seq_kv')\n"
    "RuntimeError: block_n must divide seq_kv"
)


@dataclass
class PullSite:
    site: Site
    project: Project
    testbed: str
    main_runs: list[str]  # oldest first
    upload_102: dict[str, Any]  # pull request 102: uploads only
    jobs_12: dict[str, str]  # pull request 12: its jobs by what happened to them
    upload_12: dict[str, Any]


def _set(site: Site, job_id: str, **values: Any) -> None:
    engine = make_engine(site.db_url)
    try:
        with engine.begin() as conn:
            conn.execute(update(Job).where(Job.id == job_id).values(updated_at=datetime.now(UTC), **values))
    finally:
        engine.dispose()


@pytest.fixture(scope="module")
def ps(site: Site) -> PullSite:
    project = fresh_project(site, "pulls")
    commits = [hashlib.sha1(f"main {i}".encode()).hexdigest() for i in range(3)]
    main = []
    for i, commit in enumerate(commits):
        main.append(upload(site, project, docs.h200(jitter=0.001 * i), commit=commit, ancestors=commits[:i][::-1]))
    testbed = main[0]["testbed"]
    common = {"base_commit": commits[-1], "ancestors": commits[::-1], "repo": "acme/attn"}
    up_102 = upload(site, project, docs.h200(slower=1.3), branch="feat-102", commit="e" * 40, pr=102, **common)
    up_12 = upload(site, project, docs.h200(slower=1.3), branch="feat-12", commit="b" * 40, pr=12, **common)
    jobs: dict[str, str] = {}
    with site.api(project.tokens.submit) as client:
        for what, commit in (("failed", "c" * 40), ("queued", "d" * 40)):
            data = {"branch": "feat-12", "commit": commit, "testbed": testbed, "pr": "12"}
            data["suite_path"] = "benches/cpu suite.toml"
            answer = client.post(
                f"/api/v1/projects/{project.name}/jobs",
                files={"spec": ("cpu.toml", CPU_SUITE.read_bytes(), "application/toml")},
                data=data,
            )
            assert answer.status_code == 202, answer.text
            jobs[what] = answer.json()["id"]
    now = datetime.now(UTC)
    # The failed one ran after the upload and failed: its log, and the worker that ran it, kept on the row.
    _set(
        site,
        jobs["failed"],
        status="failed",
        reason=LOG,
        attempts=1,
        claimed_by="gpu-host-7/pid42",
        started_at=Job.created_at + literal_column("interval '20 seconds'"),
        finished_at=Job.created_at + literal_column("interval '95 seconds'"),
    )
    # A job on main whose worker stored the first main run, as the worker's result call writes it.
    with site.api(project.tokens.submit) as client:
        answer = client.post(
            f"/api/v1/projects/{project.name}/jobs",
            files={"spec": ("cpu.toml", CPU_SUITE.read_bytes(), "application/toml")},
            data={"branch": "main", "commit": commits[0], "testbed": testbed},
        )
        assert answer.status_code == 202, answer.text
        jobs["done"] = answer.json()["id"]
    _set(site, jobs["done"], status="done", verdict="pass", run_id=main[0]["run_id"], finished_at=now)
    engine = make_engine(site.db_url)
    try:
        with engine.begin() as conn:
            conn.execute(update(Run).where(Run.id == main[0]["run_id"]).values(job_id=jobs["done"], attempt=1))
    finally:
        engine.dispose()
    return PullSite(site, project, testbed, [m["run_id"] for m in main], up_102, jobs, up_12)


def _ui(ps: PullSite, path: str) -> str:
    return f"/ui/p/{ps.project.name}{path}"


def _error(html: str) -> str:
    found = re.search(r'<p class="error" role="alert">(.*?)</p>', html, re.S)
    assert found is not None, html[:400]
    return found.group(1)


# --- the runs page ------------------------------------------------------------------------------------------


def test_the_runs_page_lists_jobs_runs_and_uploads_newest_first_with_how_each_came(page: Any, ps: PullSite) -> None:
    sign_in(page, ps.site, ps.project.tokens.read)
    page.goto(ps.site.url + _ui(ps, "/runs"))
    assert page.locator('nav[aria-label="Project"] a[aria-current="page"]').inner_text() == "Runs"
    page.wait_for_selector("#run-verdicts[data-drawn=true] .main-svg")
    bars = page.evaluate("document.getElementById('run-verdicts').data[0].customdata")
    assert bars[-1] == _ui(ps, f"/runs/{ps.upload_12['run_id']}")  # the newest on the right
    rows = page.locator("section:has(#h-runs) tbody tr")
    texts = rows.all_inner_texts()
    assert len(texts) == 5 and all(t.endswith("upload") for t in texts[:4])
    assert texts[4].endswith(f"job {ps.jobs_12['done'][:8]}")  # the oldest: a job's worker stored it
    first = rows.first
    assert ps.upload_12["run_id"][:8] in first.inner_text() and "#12" in first.inner_text()
    assert first.locator("a", has_text="#12").get_attribute("href") == _ui(ps, "/pulls/12")
    verdict = first.locator(f'a[href="{_ui(ps, "/comparisons/" + ps.upload_12["comparison_id"])}"]')
    assert verdict.inner_text() == ps.upload_12["verdict"]
    assert ps.main_runs[0][:8] in rows.last.inner_text()  # oldest last

    page.fill("#f-pr", "102")
    with page.expect_navigation():
        page.click('form[aria-label="Filter the runs"] button[type=submit]')
    assert rows.count() == 1 and ps.upload_102["run_id"][:8] in rows.first.inner_text()
    notice = page.locator("p.notice").inner_text()
    assert "Pull request #102: 0 jobs and 1 upload" in notice


def test_a_jobs_run_links_the_job_that_made_it(ps: PullSite) -> None:
    with http(ps.site, ps.project.tokens.read) as client:
        html = client.get(_ui(ps, "/runs"), params={"branch": "main"}).text
    assert html.count("<td>upload</td>") == 2
    assert f'<a href="{_ui(ps, "/jobs/" + ps.jobs_12["done"])}">job {ps.jobs_12["done"][:8]}</a>' in html


@pytest.mark.parametrize(
    ("params", "count"),
    [({"branch": "main"}, 3), ({"branch": "feat-12"}, 1), ({"pr": "12"}, 1), ({"branch": "nope"}, 0)],
)
def test_the_runs_page_filters_by_branch_pr_and_testbed(ps: PullSite, params: dict[str, str], count: int) -> None:
    with http(ps.site, ps.project.tokens.read) as client:
        answer = client.get(_ui(ps, "/runs"), params=params)
        assert answer.status_code == 200
        assert len(re.findall(r'<a href="/ui/p/[^/]+/runs/[0-9a-f-]{36}">', answer.text)) == count
        by_testbed = client.get(_ui(ps, "/runs"), params={**params, "testbed": ps.testbed})
        assert len(re.findall(r'<a href="/ui/p/[^/]+/runs/[0-9a-f-]{36}">', by_testbed.text)) == count


@pytest.mark.parametrize(
    ("params", "named", "says"),
    [
        ({"pr": "abc"}, "pr", "not a pull request number"),
        ({"pr": "0"}, "pr", "not a pull request number"),
        ({"pr": "99999999999"}, "pr", "not a pull request number"),
        ({"testbed": "no-such-testbed"}, "testbed", "not a testbed this project has runs on"),
        ({"branch": "a\x01b"}, "branch", "control characters"),
        ({"before": "zzz"}, "before", "not a page link"),
    ],
)
def test_a_bad_filter_is_a_422_page_naming_it(ps: PullSite, params: dict[str, str], named: str, says: str) -> None:
    with http(ps.site, ps.project.tokens.read) as client:
        answer = client.get(_ui(ps, "/runs"), params=params)
    assert answer.status_code == 422 and "text/html" in answer.headers["content-type"]
    detail = _error(answer.text)
    assert detail.startswith(f"{named}:") and says in detail, detail


def test_the_runs_page_pages_newest_first(ps: PullSite, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runs_list, "PAGE_RUNS", 2)
    seen: list[str] = []
    with http(ps.site, ps.project.tokens.read) as client:
        answer = client.get(_ui(ps, "/runs"))
        for _ in range(5):
            seen += re.findall(r'<a href="/ui/p/[^/]+/runs/([0-9a-f-]{36})">', answer.text)
            older = re.search(r'<a href="([^"]+)" rel="next">Older runs</a>', answer.text)
            if older is None:
                break
            answer = client.get(older.group(1).replace("&amp;", "&"))
    expected = [ps.upload_12["run_id"], ps.upload_102["run_id"], *reversed(ps.main_runs)]
    assert seen == expected


def test_another_projects_runs_page_is_404(ps: PullSite) -> None:
    with http(ps.site, ps.site.other_tokens.read) as client:
        assert client.get(_ui(ps, "/runs")).status_code == 404
        assert client.get(_ui(ps, "/pulls/12")).status_code == 404


# --- a pull request's page ----------------------------------------------------------------------------------


def test_a_pull_requests_page_gathers_its_jobs_in_every_state_and_its_uploads(page: Any, ps: PullSite) -> None:
    sign_in(page, ps.site, ps.project.tokens.read)
    page.goto(ps.site.url + _ui(ps, "/pulls/12"))
    assert page.locator("h1").inner_text() == "Pull request #12"
    assert "2 jobs and 1 upload" in page.locator("p.sub").first.inner_text()
    latest = page.locator("section:has(#h-latest)")
    text = latest.inner_text()
    # The newest verdict is the upload's; the newer jobs say what became of them.
    assert ps.upload_12["verdict"] in text and "b" * 10 in text and "an upload" in text
    link = latest.locator("a", has_text="Open its comparison")
    assert link.get_attribute("href") == _ui(ps, f"/comparisons/{ps.upload_12['comparison_id']}")
    assert f"{ps.jobs_12['queued'][:8]} for commit {'d' * 10} is queued" in text
    assert f"{ps.jobs_12['failed'][:8]} for commit {'c' * 10} ended failed without a verdict" in text
    rows = page.locator("section:has(#h-all) tbody tr").all_inner_texts()
    assert len(rows) == 3
    assert rows[0].startswith(datetime.now(UTC).strftime("%Y-%m-%d")) and "queued" in rows[0]
    assert "failed" in rows[1] and ps.jobs_12["failed"][:8] in rows[1]
    assert LOG.splitlines()[0] in rows[1] and "Traceback" not in rows[1]  # the reason's first line only
    assert "upload" in rows[2] and ps.upload_12["verdict"] in rows[2]
    hrefs = page.locator("section:has(#h-all) tbody a").evaluate_all("els => els.map(e => e.getAttribute('href'))")
    assert _ui(ps, f"/jobs/{ps.jobs_12['failed']}") in hrefs and _ui(ps, f"/runs/{ps.upload_12['run_id']}") in hrefs


def test_a_pull_request_profiled_only_on_a_runner_shows_its_uploads(ps: PullSite) -> None:
    with http(ps.site, ps.project.tokens.read) as client:
        html = client.get(_ui(ps, "/pulls/102")).text
        assert "0 jobs and 1 upload" in html and ps.upload_102["run_id"][:8] not in html.split("h-all")[0]
        assert _ui(ps, f"/comparisons/{ps.upload_102['comparison_id']}") in html
        none = client.get(_ui(ps, "/pulls/4242"))
        assert none.status_code == 200 and "No job or upload of" in none.text


@pytest.mark.parametrize("number", ["abc", "0", "-3", "99999999999"])
def test_a_bad_pull_request_number_is_a_422_page_naming_it(ps: PullSite, number: str) -> None:
    with http(ps.site, ps.project.tokens.read) as client:
        answer = client.get(_ui(ps, f"/pulls/{number}"))
    assert answer.status_code == 422 and _error(answer.text).startswith("number:")


def test_the_overview_and_the_jobs_list_count_a_pull_requests_uploads(ps: PullSite) -> None:
    with http(ps.site, ps.project.tokens.read) as client:
        overview = client.get(_ui(ps, "")).text
        pulls = overview.split('id="h-pulls"')[1].split("</section>")[0]
        row_102 = re.search(r'<tr><td><a href="[^"]+/pulls/102">#102</a></td>(.*?)</tr>', pulls, re.S)
        assert row_102 is not None and re.findall(r'<td class="num">(\d+)</td>', row_102.group(1)) == ["0", "1"]
        row_12 = re.search(r'<tr><td><a href="[^"]+/pulls/12">#12</a></td>(.*?)</tr>', pulls, re.S)
        assert row_12 is not None and re.findall(r'<td class="num">(\d+)</td>', row_12.group(1)) == ["2", "1"]
        assert pulls.index("#12<") < pulls.index("#102<")  # the latest activity first
        jobs = client.get(_ui(ps, "/jobs"), params={"pr": "102"}).text
        assert "Pull request #102: 0 jobs and 1 upload" in jobs and _ui(ps, "/pulls/102") in jobs


# --- a job's page -------------------------------------------------------------------------------------------


def test_a_failed_jobs_page_shows_its_log_as_written_with_its_worker_and_how_to_reproduce_it(
    page: Any, ps: PullSite
) -> None:
    sign_in(page, ps.site, ps.project.tokens.read)
    page.set_viewport_size({"width": 390, "height": 800})
    page.goto(ps.site.url + _ui(ps, f"/jobs/{ps.jobs_12['failed']}"))
    log = page.locator(".reason-box pre.log")
    assert log.inner_text() == LOG  # every line kept, none joined
    assert log.evaluate("e => getComputedStyle(e).whiteSpace") == "pre"
    assert log.evaluate("e => e.scrollWidth > e.clientWidth")  # the long line scrolls in its box ...
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")  # ... not the page
    assert "worker gpu-host-7/pid42" in page.locator(".reason-box").inner_text()
    assert "gpu-host-7/pid42 (attempt 1)" in page.locator("dl.facts").inner_text()
    reproduce = page.locator("section:has(#h-reproduce) pre").inner_text()
    assert reproduce == f"git checkout {'c' * 40}\nattnprof profile 'benches/cpu suite.toml' --out result.json"


# --- the pictures of docs/dashboard.md ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "path"),
    [
        ("dashboard-runs.png", lambda ps: "/runs"),
        ("dashboard-pull.png", lambda ps: "/pulls/12"),
        ("dashboard-job-failed.png", lambda ps: f"/jobs/{ps.jobs_12['failed']}"),
    ],
)
def test_screenshot(browser: Any, ps: PullSite, tmp_path: Path, name: str, path: Any) -> None:
    """``ATTNPROF_SCREENSHOTS=docs/img .venv/bin/pytest tests/server/web/test_runs_and_pulls.py -k screenshot`` writes
    the pictures of the runs page, a pull request's page and a failed job's page (1440 px wide)."""
    folder = Path(os.environ.get("ATTNPROF_SCREENSHOTS") or tmp_path)
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    try:
        tab = context.new_page()
        sign_in(tab, ps.site, ps.project.tokens.read)
        tab.goto(ps.site.url + _ui(ps, path(ps)))
        tab.wait_for_load_state("networkidle")
        height = min(int(tab.evaluate("document.documentElement.scrollHeight")), 1400)
        tab.screenshot(path=str(folder / name), clip={"x": 0, "y": 0, "width": 1440, "height": height}, full_page=True)
        assert (folder / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    finally:
        context.close()


def test_an_uploads_undelivered_github_feedback_is_said_on_its_run_page(ps: PullSite) -> None:
    note = "GitHub feedback failed: POST /repos/acme/attn/statuses/bbbb: HTTP 403 (refused for good, not sent again)"
    engine = make_engine(ps.site.db_url)
    try:
        with engine.begin() as conn:
            conn.execute(
                update(Run).where(Run.id == ps.upload_12["run_id"]).values(feedback_note=note, feedback_attempts=1)
            )
        with http(ps.site, ps.project.tokens.read) as client:
            html = client.get(_ui(ps, f"/runs/{ps.upload_12['run_id']}")).text
            assert "The GitHub feedback of this upload was not delivered" in html and "HTTP 403" in html
            other = client.get(_ui(ps, f"/runs/{ps.upload_102['run_id']}")).text
            assert "GitHub feedback of this upload" not in other
    finally:
        with engine.begin() as conn:
            conn.execute(update(Run).where(Run.id == ps.upload_12["run_id"]).values(feedback_note=None))
        engine.dispose()
