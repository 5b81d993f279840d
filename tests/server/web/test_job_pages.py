"""The jobs list and a job's page in a real browser and over HTTP: the live state changing in place (no reload)
until the run and comparison links appear, the reason of a failed job shown plainly, the suite spec folded away,
filters and paging, 422 pages for bad filters, and another project's job answering 404.

Jobs live in a project of their own on the shared test site, submitted through the API; their state is then
written to the row the way the worker's calls write it (status, attempts, times, run), so each step is seen.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import update

from attnprof.server.db import make_engine
from attnprof.server.jobs.models import Job
from attnprof.server.web.pages import jobs as jobs_page
from tests.server.web.pages import http
from tests.server.web.stack import CPU_SUITE, Site, Tokens, _project, _upload, docs, sign_in

JOBS = 5


@dataclass
class JobSite:
    site: Site
    project: str
    tokens: Tokens
    jobs: list[str]  # oldest first
    run_id: str  # a run of this project with a comparison
    testbed: str

    def url(self, path: str = "") -> str:
        return f"{self.site.url}/ui/p/{self.project}/jobs{path}"


def _set(site: Site, job_id: str, **values: Any) -> None:
    engine = make_engine(site.db_url)
    try:
        with engine.begin() as conn:
            conn.execute(update(Job).where(Job.id == job_id).values(updated_at=datetime.now(UTC), **values))
    finally:
        engine.dispose()


@pytest.fixture(scope="module")
def js(site: Site) -> JobSite:
    name = f"jobs-{site.project[-8:]}"
    tokens = _project(site.db_url, name)
    commits = [f"{i + 0xC0:040x}" for i in range(3)]
    with site.api(tokens.submit) as client:
        for i, commit in enumerate(commits):
            body = _upload(client, name, docs.h200(), commit=commit, ancestors=list(reversed(commits[:i])))
        testbed = body["testbed"]
        pr_run = _upload(
            client,
            name,
            docs.h200(slower=1.2),
            branch="feat-x",
            commit="d" * 40,
            base_commit=commits[-1],
            ancestors=list(reversed(commits[:-1])),
            pr=12,
        )
        assert pr_run.get("comparison_id"), pr_run
        made = []
        for i in range(JOBS):
            data = {"branch": "feat-x" if i % 2 else "main", "commit": f"{i:x}" * 40, "testbed": testbed}
            if i % 2:
                data["pr"] = "12"
            answer = client.post(
                f"/api/v1/projects/{name}/jobs",
                files={"spec": ("cpu.toml", CPU_SUITE.read_bytes(), "application/toml")},
                data=data,
            )
            assert answer.status_code == 202, answer.text
            made.append(answer.json()["id"])
    return JobSite(site, name, tokens, made, pr_run["run_id"], testbed)


def _field(tab: Any, key: str) -> Any:
    return tab.locator(f'[data-field="{key}"]')


# --- one job ------------------------------------------------------------------------------------------------


def test_job_page_follows_the_job_until_its_run_and_comparison_appear(page: Any, js: JobSite) -> None:
    job = js.jobs[0]
    _set(js.site, job, status="queued", attempts=0, started_at=None, finished_at=None, run_id=None, verdict=None)
    sign_in(page, js.site, js.tokens.read)
    page.goto(js.url(f"/{job}"))
    assert _field(page, f"{job}.status").inner_text() == "queued"
    assert page.locator(f'[data-link="{job}.run"]').is_hidden()
    assert page.locator(f'[data-link="{job}.comparison"]').is_hidden()
    assert page.locator("ol.timeline li").nth(1).locator("time").inner_text() == ""
    page.evaluate("window.__same_page = true")

    started = datetime.now(UTC).replace(second=0, microsecond=0)
    _set(js.site, job, status="running", attempts=1, started_at=started, claimed_by="gpu-host-1")
    page.wait_for_function(
        f"document.querySelector('[data-field=\"{job}.status\"]').textContent === 'running'", timeout=15_000
    )
    assert _field(page, f"{job}.started_at").inner_text() == started.strftime("%Y-%m-%d %H:%M UTC")
    assert _field(page, f"{job}.attempts").inner_text() == "1 of 3"
    assert "status-running" in (_field(page, f"{job}.status").get_attribute("class") or "")

    _set(
        js.site,
        job,
        status="done",
        verdict="fail",
        finished_at=started + timedelta(minutes=3),
        run_id=js.run_id,
    )
    run_link = page.locator(f'[data-link="{job}.run"]')
    run_link.wait_for(state="visible", timeout=15_000)
    assert run_link.get_attribute("href") == f"/ui/p/{js.project}/runs/{js.run_id}"
    comparison = page.locator(f'[data-link="{job}.comparison"]')
    assert comparison.is_visible()
    assert comparison.get_attribute("href") == f"/ui/p/{js.project}/runs/{js.run_id}/comparison"
    assert _field(page, f"{job}.verdict").inner_text() == "fail"
    page.wait_for_selector("[data-live=done]")
    assert page.evaluate("window.__same_page") is True  # no reload happened


@pytest.mark.parametrize(
    ("status", "ending", "reason"),
    [
        ("failed", "The job failed.", "CUDA out of memory on gpu-host-1 at case prefill (seq_q 2048): lower seq_q"),
        ("timed_out", "The job timed out.", "no heartbeat from gpu-host-1 for 300 s"),
        ("cancelled", "The job was cancelled.", "cancelled by a project admin"),
    ],
)
def test_a_job_that_ended_badly_shows_why(page: Any, js: JobSite, status: str, ending: str, reason: str) -> None:
    job = js.jobs[1]
    now = datetime.now(UTC)
    _set(js.site, job, status=status, reason=reason, attempts=3, started_at=now, finished_at=now, run_id=None)
    sign_in(page, js.site, js.tokens.read)
    page.goto(js.url(f"/{job}"))
    box = page.locator(".reason-box")
    assert box.is_visible()
    assert ending in box.inner_text() and reason in box.inner_text()
    assert _field(page, f"{job}.status").inner_text() == status
    assert page.locator("[data-poll]").count() == 0  # a finished job is not polled
    assert page.locator(f'[data-link="{job}.run"]').is_hidden()


def test_reason_box_is_hidden_while_nothing_went_wrong(page: Any, js: JobSite) -> None:
    job = js.jobs[2]
    _set(js.site, job, status="queued", reason=None, attempts=0, started_at=None, finished_at=None)
    sign_in(page, js.site, js.tokens.read)
    page.goto(js.url(f"/{job}"))
    assert page.locator(".reason-box").is_hidden()


def test_job_page_shows_provenance_and_folded_spec(page: Any, js: JobSite) -> None:
    job = js.jobs[1]
    sign_in(page, js.site, js.tokens.read)
    page.goto(js.url(f"/{job}"))
    facts = page.locator("dl.facts").inner_text()
    assert "1" * 40 in facts and "feat-x" in facts and "#12" in facts and js.testbed in facts
    spec = page.locator("details pre")
    assert spec.is_hidden()
    page.locator("details summary").focus()
    page.keyboard.press("Enter")  # opens with the keyboard
    assert spec.is_visible() and spec.inner_text().strip() == CPU_SUITE.read_text().strip()


def test_another_projects_job_is_404(js: JobSite) -> None:
    job = js.jobs[0]
    with http(js.site, js.site.other_tokens.read) as client:
        assert client.get(f"/ui/p/{js.project}/jobs/{job}").status_code == 404
        answer = client.get(f"/ui/p/{js.site.other_project}/jobs/{job}")
        assert answer.status_code == 404 and "text/html" in answer.headers["content-type"]
        state = client.get(f"/ui/p/{js.site.other_project}/jobs/state", params={"ids": job}).json()
        assert state["fields"] == {} and state["links"] == {}
    with http(js.site, js.tokens.read) as client:
        assert client.get(f"/ui/p/{js.project}/jobs/{js.site.job_id}").status_code == 404  # the web project's job
        assert client.get(f"/ui/p/{js.project}/jobs/no-such-job").status_code == 404


# --- the list -----------------------------------------------------------------------------------------------


def test_jobs_list_filters_without_javascript(browser: Any, js: JobSite) -> None:
    _set(js.site, js.jobs[1], status="done")
    _set(js.site, js.jobs[3], status="failed", reason="worker lost")
    context = browser.new_context(java_script_enabled=False)
    try:
        tab = context.new_page()
        sign_in(tab, js.site, js.tokens.read)
        tab.goto(js.url())
        rows = tab.locator("section:has(#h-jobs) tbody tr")
        assert rows.count() == JOBS
        tab.fill("#f-pr", "12")
        with tab.expect_navigation():
            tab.click('form[aria-label="Filter the jobs"] button[type=submit]')
        assert rows.count() == 2 and all("PR #12" in t for t in rows.all_inner_texts())
        tab.select_option("#f-status", "failed")
        with tab.expect_navigation():
            tab.click('form[aria-label="Filter the jobs"] button[type=submit]')
        assert rows.count() == 1 and js.jobs[3][:8] in rows.first.inner_text()
        tab.goto(js.url("?branch=main"))
        assert rows.count() == 3
    finally:
        context.close()


def test_jobs_list_pages_newest_first(js: JobSite, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jobs_page, "PAGE_JOBS", 2)
    with http(js.site, js.tokens.read) as client:
        seen: list[str] = []
        answer = client.get(f"/ui/p/{js.project}/jobs")
        for _ in range(5):
            assert answer.status_code == 200
            seen += re.findall(rf'<a href="/ui/p/{js.project}/jobs/([0-9a-f-]{{36}})">', answer.text)
            older = re.search(r'<a href="([^"]+)" rel="next">Older jobs</a>', answer.text)
            if older is None:
                break
            answer = client.get(older.group(1).replace("&amp;", "&"))
    assert seen == list(reversed(js.jobs))


def test_jobs_list_updates_live(page: Any, js: JobSite) -> None:
    job = js.jobs[4]
    _set(js.site, job, status="queued", run_id=None, finished_at=None)
    sign_in(page, js.site, js.tokens.read)
    page.goto(js.url())
    _set(js.site, job, status="analyzing", attempts=2)
    page.wait_for_function(
        f"document.querySelector('[data-field=\"{job}.status\"]').textContent === 'analyzing'", timeout=15_000
    )
    assert _field(page, f"{job}.attempts").inner_text() == "2 of 3"


@pytest.mark.parametrize(
    ("params", "named"),
    [({"status": "exploded"}, "status"), ({"pr": "abc"}, "pr"), ({"pr": "0"}, "pr"), ({"before": "zzz"}, "before")],
)
def test_bad_filters_are_a_422_page_naming_them(js: JobSite, params: dict[str, str], named: str) -> None:
    with http(js.site, js.tokens.read) as client:
        answer = client.get(f"/ui/p/{js.project}/jobs", params=params)
    assert answer.status_code == 422
    detail = re.search(r'<p class="error" role="alert">(.*?)</p>', answer.text, re.S)
    assert detail is not None and detail.group(1).startswith(f"{named}:"), answer.text[:400]


def test_jobs_list_leads_with_a_chart_of_wait_and_run_times(page: Any, js: JobSite) -> None:
    now = datetime.now(UTC)
    _set(js.site, js.jobs[2], status="done", started_at=now - timedelta(seconds=50), finished_at=now)
    sign_in(page, js.site, js.tokens.read)
    page.goto(js.url())
    page.wait_for_selector("#job-times[data-drawn=true] .main-svg")
    data = page.evaluate(
        "document.getElementById('job-times').data.map((t) => ({name: t.name, y: t.y, links: t.customdata}))"
    )
    assert [t["name"] for t in data] == ["waited in the queue (s)", "ran (s)"]
    assert data[0]["links"] == [f"/ui/p/{js.project}/jobs/{j}" for j in js.jobs]  # oldest on the left
    assert 49 <= data[1]["y"][2] <= 51
    assert page.locator("#job-times .trace.bars").first.locator(".point").count() == JOBS


def test_the_tallest_bars_status_has_room_above_it() -> None:
    """The job chart's y axis reaches past the tallest stack (waited + ran), so the status written over it is not cut
    at the top of the plot."""
    now = datetime.now(UTC)
    jobs = [
        {"id": f"{i:08d}-job", "status": status, "branch": "b", "pr": None, "created_at": now - timedelta(seconds=s)}
        | {"started_at": None, "finished_at": None}
        for i, (status, s) in enumerate([("queued", 120), ("queued", 10)])
    ]
    spec = jobs_page.durations_chart("p", jobs, now)
    top = spec["layout"]["yaxis"]["range"][1]
    assert top >= 1.15 * max(spec["data"][0]["y"]) and 118 <= max(spec["data"][0]["y"]) <= 121
    assert jobs_page.durations_chart("p", [], now)["layout"]["yaxis"]["range"] == [0, 1.0]
