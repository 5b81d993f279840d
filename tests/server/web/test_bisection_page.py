"""A bisection's page in a real browser: what it searched, its culprit, each probe on the chart and in the table
with its paired job's link, the commits left while it runs; the alert's row on the overview links to it; another
project's bisection and a missing one answer 404."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy.orm import Session

from attnprof.server.bisections.models import Bisection, BisectionProbe
from attnprof.server.comparisons.models import Alert
from attnprof.server.db import make_engine, utcnow
from attnprof.server.projects import repository as projects
from attnprof.server.runs.models import Run
from tests.server.web.pages import Project, fresh_project, http, seed_pair, watch_errors
from tests.server.web.stack import Site, docs, sign_in

COMMITS = [f"{0xABC000 + i:040x}" for i in range(9)]


def _bisection(
    site: Site,
    project: Project,
    *,
    status: str,
    probes: list[tuple[int, int, str | None, float | None]],
    alert: bool = True,
) -> int:
    """A bisection of ``COMMITS`` in ``project`` with ``probes`` (good index, candidate index, outcome, effect), and
    (``alert``) an alert on the project's runs pointing at it."""
    engine = make_engine(site.db_url)
    try:
        with Session(engine) as session:
            found = projects.get_by_name(session, project.name)
            assert found is not None
            run = session.get(Run, project.runs[-1])
            assert run is not None
            now = utcnow()
            b = Bisection(
                project_id=found.id,
                testbed_id=run.testbed_id,
                repo="acme/kernels",
                good=COMMITS[0],
                bad=COMMITS[-1],
                spec="",
                suite_name="kernels",
                cases=["decode"],
                effect=0.2,
                low=0.18,
                high=0.22,
                commits=COMMITS,
                merges=[],
                trees={},
                status=status,
                culprit=COMMITS[5] if status == "confirmed" else None,
                summary="made the step" if status == "confirmed" else None,
                requested_by="alert",
                requested_via="alert",
                comment_attempts=0,
                created_at=now,
                updated_at=now,
            )
            session.add(b)
            session.flush()
            for good, candidate, outcome, effect in probes:
                session.add(
                    BisectionProbe(
                        bisection_id=b.id,
                        good=COMMITS[good],
                        candidate=COMMITS[candidate],
                        job_id=None,
                        outcome=outcome,
                        effect=effect,
                        low=None if effect is None else effect - 0.02,
                        high=None if effect is None else effect + 0.02,
                        created_at=now,
                    )
                )
            if alert:
                session.add(
                    Alert(
                        project_id=found.id,
                        testbed_id=run.testbed_id,
                        case_id="decode",
                        metric="latency",
                        unit="us",
                        before_run_id=project.runs[0],
                        run_id=run.id,
                        before=100.0,
                        after=120.0,
                        change=0.2,
                        ci_low=0.18,
                        ci_high=0.22,
                        p=0.001,
                        regression=True,
                        created_at=now,
                        notify_attempts=0,
                        bisection_id=b.id,
                        culprit=b.culprit,
                    )
                )
            session.commit()
            return b.id
    finally:
        engine.dispose()


@pytest.fixture(scope="module")
def project(site: Site) -> Project:
    made = fresh_project(site, "bisect")
    seed_pair(site, made)
    return made


def test_a_confirmed_bisection_shows_its_culprit_probes_and_chart(site: Site, project: Project, page: Any) -> None:
    done = _bisection(
        site,
        project,
        status="confirmed",
        probes=[(0, 4, "good", 0.0), (4, 6, "bad", 0.2), (4, 5, "bad", 0.21)],
    )
    errors = watch_errors(page)
    sign_in(page, site, project.tokens.read, next_path=f"/ui/p/{project.name}/bisections/{done}")
    assert page.locator("h1").inner_text().startswith(f"Bisection {done}")
    assert f"Culprit {COMMITS[5]}" in page.locator(".reason-box").inner_text()
    rows = page.locator("table tbody tr")
    assert rows.count() == 3 and "bad" in rows.nth(1).inner_text() and "+20.0%" in rows.nth(1).inner_text()
    page.wait_for_selector("#bisection-probes .main-svg")  # the chart drew
    assert page.locator("#bisection-probes .point").count() == 3
    assert "Left to search" not in page.content()
    # The alert's row on the overview names the culprit and links here.
    page.goto(f"{site.url}/ui/p/{project.name}")
    link = page.locator(f"a[href='/ui/p/{project.name}/bisections/{done}']")
    assert "culprit" in link.first.inner_text()
    assert errors == []


def test_a_running_bisection_lists_what_is_left_and_others_get_404(site: Site, project: Project) -> None:
    running = _bisection(site, project, status="running", probes=[(0, 4, "bad", 0.2), (0, 2, None, None)], alert=False)
    with http(site, project.tokens.read) as client:
        html = client.get(f"/ui/p/{project.name}/bisections/{running}").text
        assert "Left to search" in html and html.count("<li><code>") == 4  # commits 1 to 4
        assert "running" in html
        assert client.get(f"/ui/p/{project.name}/bisections/999999").status_code == 404
    other = fresh_project(site, "bisect-other")
    with http(site, other.tokens.read) as client:
        assert client.get(f"/ui/p/{other.name}/bisections/{running}").status_code == 404
        assert client.get(f"/ui/p/{project.name}/bisections/{running}").status_code in (403, 404)


def test_a_submit_token_bisects_an_alerts_step_from_the_trends_page_and_a_reader_cannot(site: Site) -> None:
    from tests.server.web.pages import csrf_of

    made = fresh_project(site, "bisect-form")
    seed_pair(site, made)
    case = docs.h200()["cases"][0]["id"]
    engine = make_engine(site.db_url)
    try:
        with Session(engine) as session:
            found = projects.get_by_name(session, made.name)
            run = session.get(Run, made.runs[2])
            assert found is not None and run is not None
            alert = Alert(
                project_id=found.id,
                testbed_id=run.testbed_id,
                case_id=case,
                metric="latency",
                unit="us",
                before_run_id=made.runs[1],
                run_id=made.runs[2],
                before=100.0,
                after=120.0,
                change=0.2,
                ci_low=0.18,
                ci_high=0.22,
                p=0.001,
                regression=True,
                created_at=utcnow(),
                notify_attempts=0,
            )
            session.add(alert)
            session.commit()
            alert_id = alert.id
    finally:
        engine.dispose()
    trend = f"/ui/p/{made.name}/trends?case={case}&metric=latency"
    action = f"/ui/p/{made.name}/alerts/{alert_id}/bisect"
    with http(site, made.tokens.read) as client:
        html = client.get(trend).text
        assert f'id="alert-{alert_id}"' in html and action not in html  # a reader gets no form
        r = client.post(action, data={"csrf": csrf_of(html)})
        assert r.status_code == 403 and "needs submit or admin" in r.text
    with http(site, made.tokens.submit) as client:
        html = client.get(trend).text
        assert action in html
        assert client.post(action, data={"csrf": "stale"}).status_code == 403
        r = client.post(action, data={"csrf": csrf_of(html)})
        assert r.status_code == 303 and "/bisections/" in r.headers["location"]
        page_html = client.get(r.headers["location"]).text
        # These runs were uploaded, not profiled by the service: the bisection says it has no suite to run.
        assert "failed" in page_html and "uploaded, not profiled" in page_html
        assert "dashboard" in page_html
        html = client.get(trend).text
        assert "Searched by" in html and action in html  # it ended without a culprit: it may be asked again
