"""The project overview in a real browser: signed in with the keyboard, the verdict chart drawn by Plotly from
the locally served library, the tables, and a job's status that changes without a reload."""

from __future__ import annotations

from typing import Any

from sqlalchemy import update

from attnprof.server.db import make_engine
from attnprof.server.jobs.models import Job
from tests.server.web.stack import Site, sign_in


def _set_status(site: Site, job_id: str, status: str) -> None:
    engine = make_engine(site.db_url)
    try:
        with engine.begin() as conn:
            conn.execute(update(Job).where(Job.id == job_id).values(status=status))
    finally:
        engine.dispose()


def test_overview_leads_with_the_verdict_chart(page: Any, site: Site) -> None:
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    sign_in(page, site, site.tokens.read)
    assert page.url == f"{site.url}/ui/p/{site.project}"
    page.wait_for_selector("#verdicts[data-drawn=true] .main-svg")
    assert page.locator("#verdicts .bars .point").count() == len(site.main_runs)
    assert page.get_by_role("heading", name="Testbeds").is_visible()
    assert page.locator("table").nth(1).locator("tbody tr").count() == len(site.main_runs)
    # Nothing is fetched from another host: the charting library comes from this server.
    assert all(url.startswith(site.url) for url in requests), [u for u in requests if not u.startswith(site.url)]


def test_a_queued_job_updates_in_place(page: Any, site: Site) -> None:
    _set_status(site, site.job_id, "queued")
    sign_in(page, site, site.tokens.read)
    status = page.locator(f'[data-field="{site.job_id}.status"]')
    assert status.inner_text() == "queued"
    page.evaluate("window.__same_page = true")
    _set_status(site, site.job_id, "running")
    page.wait_for_function(
        f"document.querySelector('[data-field=\"{site.job_id}.status\"]').textContent === 'running'", timeout=10_000
    )
    assert page.evaluate("window.__same_page") is True


def test_tables_read_without_javascript(browser: Any, site: Site) -> None:
    context = browser.new_context(java_script_enabled=False)
    try:
        tab = context.new_page()
        sign_in(tab, site, site.tokens.read)
        assert tab.url.endswith(f"/ui/p/{site.project}")
        rows = tab.locator("section:has(#h-runs) tbody tr")
        assert rows.count() == len(site.main_runs)
        assert "Charts need JavaScript" in tab.content()
    finally:
        context.close()
