"""The comparison page in a real browser and over HTTP: the verdict in words, the change chart with its
intervals, the findings with the regression first and its kernels side by side, the testbed warning, accepting
the change with the keyboard, and what a reader, a forger or another project gets."""

from __future__ import annotations

import copy
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import delete, insert, select

from attnprof.server.comparisons.models import Comparison
from attnprof.server.db import make_engine
from attnprof.server.runs import documents
from attnprof.server.web.pages import runs as run_pages
from attnprof.server.web.pages.comparisons import linked_notes
from tests.server.web.pages import (
    Project,
    csrf_of,
    fresh_project,
    http,
    hundred_cases,
    login,
    rules,
    seed_pair,
    tab_to,
    upload,
    watch_errors,
)
from tests.server.web.stack import Site, docs, sign_in


@pytest.fixture(scope="module")
def own(site: Site) -> Iterator[Project]:
    """A project of this module's own, with two default-branch runs and a pull-request run 25% slower in one case."""
    project = fresh_project(site, "cmp")
    seed_pair(site, project, bases=2)
    yield project


def _url(site: Site, comparison_id: str, project: str | None = None) -> str:
    return f"{site.url}/ui/p/{project or site.project}/comparisons/{comparison_id}"


def test_the_comparison_page_leads_with_the_verdict_and_the_regression(page: Any, site: Site) -> None:
    errors = watch_errors(page)
    sign_in(page, site, site.tokens.read)
    # The run's latest comparison is one redirect away.
    page.goto(f"{site.url}/ui/p/{site.project}/runs/{site.pr_run}/comparison")
    assert page.url == _url(site, site.pr_comparison)
    slow = docs.h200()["cases"][0]["id"]
    # The answer: the verdict, then the regressed case in the PR comment's words, its kernel named.
    verdict = page.locator("#verdict").inner_text()
    assert verdict.startswith(f"FAIL {slow} +25.0% (88.1 → 110.2 µs): cudnn_generated_fort_native_sdpa_sm90"), verdict
    assert "+21.0 µs (+25.0%), compute-bound, compute use 53% → 42%" in verdict
    assert "regressed beyond its minimum effect" in page.locator("#answer").inner_text()
    assert "Testbed key 605db806abde3bc2" in page.inner_text("main")
    page.wait_for_selector("#changes[data-drawn=true] .main-svg")
    # The chart: one marker per case (one timing finding each), the regression a legend entry in words.
    cases = docs.h200()["cases"]
    traces = page.evaluate("document.getElementById('changes').data.map(t => [t.name, t.x.length])")
    assert sum(n for name, n in traces if name in ("regressed", "improved", "unchanged", "inconclusive")) == len(cases)
    legend = page.locator("#changes .legend .traces").all_text_contents()
    assert "regressed" in legend and "unchanged" in legend
    assert page.locator("#changes .shapelayer path").count() >= 1  # the minimum-effect band
    # The findings: the regression first, with its numbers; the unchanged ones folded, counted in their summary.
    first = page.locator("#findings tbody tr").first
    cells = first.locator("td").all_inner_texts()
    assert cells[0] == slow and cells[1] == "throughput" and cells[2].startswith("regressed")
    assert cells[5] == "−20.0%" and "…" in cells[6] and cells[9] == "±2.0%"
    shown, folded = page.locator("#findings tbody tr").count(), page.locator("#findings-unchanged tbody tr").count()
    assert shown + folded == 2 * len(cases) and folded > shown
    assert not page.locator("#findings-unchanged").is_visible()
    assert page.locator("details#unchanged > summary").inner_text() == f"{folded} unchanged findings"
    # Its kernel, side by side: 83.8 µs in the baseline, 104.8 µs in the candidate.
    row = page.locator("#kernel-diff table.moved tbody tr").first.locator("td").all_inner_texts()
    assert row[0].startswith("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16")
    assert row[1].startswith(slow) and row[3].startswith("+21.0 µs (+25.0%)")
    assert row[4] == "83.8 µs" and row[5] == "104.8 µs"
    assert "132×1×1" in row and "384×1×1" in row and "168" in row
    assert any(cell.startswith("52.6% → 42.2%") for cell in row)  # compute utilisation fell
    # The baseline runs, each a link to its page.
    links = page.locator("section:has(#h-baseline-runs) tbody a")
    assert links.count() == 3
    hrefs = {str(links.nth(i).get_attribute("href")).rsplit("/", 1)[-1] for i in range(3)}
    assert hrefs <= set(site.main_runs)
    assert "No recorded version differs" in page.inner_text("section:has(#h-software)")
    # A reader sees no form.
    assert page.locator("form[action*='/baselines/']").count() == 0
    assert errors == []


def test_findings_read_without_javascript(browser: Any, site: Site) -> None:
    context = browser.new_context(java_script_enabled=False)
    try:
        tab = context.new_page()
        sign_in(tab, site, site.tokens.read)
        tab.goto(_url(site, site.pr_comparison))
        # Without JavaScript the folded findings are still in the page, a click on their summary away.
        rows = tab.locator("#findings tbody tr").count() + tab.locator("#findings-unchanged tbody tr").count()
        assert rows == 2 * len(docs.h200()["cases"])
        assert tab.locator("#kernel-diff table.moved tbody tr").count() >= 1
    finally:
        context.close()


def test_accept_and_unaccept_with_the_keyboard(page: Any, site: Site, own: Project) -> None:
    comparison_id, candidate = own.comparisons[-1], own.runs[-1]
    sign_in(page, site, own.tokens.admin)
    page.goto(_url(site, comparison_id, own.name))
    assert page.locator("#verdict").inner_text().startswith("FAIL")
    tab_to(page, "#reason-accept")
    page.keyboard.type("new tiling is slower by design")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Accept this change"
    with page.expect_navigation():
        page.keyboard.press("Enter")
    assert page.url.startswith(_url(site, comparison_id, own.name) + "?done=accept")
    assert "Accepted as an intended change" in page.inner_text(".notice")
    assert [(r["kind"], r["run_id"], r["reason"]) for r in rules(site, own)] == [
        ("accept", candidate, "new tiling is slower by design")
    ]
    tab_to(page, "#baselines form[action$='/accept/remove'] button")
    with page.expect_navigation():
        page.keyboard.press("Enter")
    assert "No longer accepted" in page.inner_text(".notice")
    assert rules(site, own) == []


def test_a_forged_or_readers_post_changes_nothing(site: Site, own: Project) -> None:
    path = f"/ui/p/{own.name}/comparisons/{own.comparisons[-1]}"
    with httpx.Client(base_url=site.url) as reader:
        login(reader, own.tokens.read)
        html = reader.get(path).text
        assert "Accept this change" not in html and "Not accepted as an intended change." in html
        refused = reader.post(f"{path}/baselines/accept", data={"csrf": csrf_of(html)})
        assert refused.status_code == 403 and "cannot change baselines" in refused.text
    with httpx.Client(base_url=site.url) as admin:
        login(admin, own.tokens.admin)
        forged = admin.post(f"{path}/baselines/accept", data={"csrf": "forged"})
        assert forged.status_code == 403 and "security token" in forged.text
        csrf = csrf_of(admin.get(path).text)
        # Only the candidate can be accepted from a comparison; pins and exclusions belong to a run's page.
        pin = admin.post(f"{path}/baselines/pin", data={"csrf": csrf})
        assert pin.status_code == 422
    assert rules(site, own) == []


def test_differing_testbeds_are_a_loud_warning_and_versions_are_diffed(site: Site, own: Project) -> None:
    # A stored comparison never changes (the server keeps each one it read): the mismatch is stored as one more
    # comparison of the candidate, older than its real one, so that nothing else the module reads moves.
    engine = make_engine(site.db_url)
    forged = str(uuid.uuid4())
    try:
        with engine.begin() as conn:
            row = conn.execute(select(Comparison.__table__).where(Comparison.id == own.comparisons[-1])).one()
            stored = row.document
            document = copy.deepcopy(stored)
            document.update(
                testbed_mismatch=True,
                testbed_baseline=["0123456789abcdef"],
                software=[{"name": "torch", "baseline": "2.11.0+cu130", "candidate": "2.12.0+cu130"}],
            )
            older = row.created_at - timedelta(seconds=1)
            conn.execute(
                insert(Comparison).values({**row._asdict(), "id": forged, "document": document, "created_at": older})
            )
        with httpx.Client(base_url=site.url) as client:
            login(client, own.tokens.read)
            html = client.get(f"/ui/p/{own.name}/comparisons/{forged}").text
        assert 'role="alert"><strong>Testbeds differ' in html
        assert "<code>0123456789abcdef</code>" in html and f"<code>{stored['testbed_candidate']}</code>" in html
        assert "<tr><td>torch</td><td>2.11.0+cu130</td><td>2.12.0+cu130</td></tr>" in html
    finally:
        with engine.begin() as conn:
            conn.execute(delete(Comparison).where(Comparison.id == forged))
        engine.dispose()


def test_other_projects_and_unknown_comparisons_are_404(site: Site) -> None:
    with httpx.Client(base_url=site.url) as client:
        login(client, site.tokens.read)
        for path in (
            f"/ui/p/{site.project}/comparisons/no-such-comparison",
            f"/ui/p/{site.project}/runs/{site.other_run}/comparison",
            f"/ui/p/{site.project}/runs/no-such-run/comparison",
        ):
            answer = client.get(path)
            assert answer.status_code == 404, path
            assert answer.headers["content-type"].startswith("text/html")
    with httpx.Client(base_url=site.url) as other:
        login(other, site.other_tokens.admin)
        assert other.get(f"/ui/p/{site.other_project}/comparisons/{site.pr_comparison}").status_code == 404
        assert other.get(f"/ui/p/{site.project}/comparisons/{site.pr_comparison}").status_code == 404
        page_of_own = other.get(f"/ui/p/{site.other_project}/runs/{site.other_run}")
        csrf = csrf_of(page_of_own.text)
        accepted = other.post(
            f"/ui/p/{site.other_project}/comparisons/{site.pr_comparison}/baselines/accept", data={"csrf": csrf}
        )
        assert accepted.status_code == 404


def _forget_run_page() -> None:
    run_pages.rendered_runs.clear()
    documents.results.clear()


def test_both_pages_of_a_100_case_run_draw_every_case(site: Site) -> None:
    """Three default-branch runs of 100 cases and a pull-request run with one case slower: the run page draws
    every case, first drawn (its kept model dropped) and kept alike, and the comparison page names the slower one.
    How long they take is measured by ``bench/dashboard_load.py`` (bench/reports/dashboard-load.md), not here."""
    project = fresh_project(site, "perf")
    base = hundred_cases(docs.h200())
    commits = [f"{i:040x}" for i in range(1, 4)]
    for i, commit in enumerate(commits):
        upload(site, project, docs.variant(base, jitter=0.002 * (i - 1)), commit=commit, ancestors=commits[:i][::-1])
    slow = base["cases"][0]["id"]
    upload(
        site,
        project,
        docs.variant(base, slower=1.25, cases=[slow]),
        branch="feature",
        commit="f" * 40,
        base_commit=commits[-1],
        ancestors=commits[::-1],
    )
    run_path = f"/ui/p/{project.name}/runs/{project.runs[-1]}"
    comparison_path = f"/ui/p/{project.name}/comparisons/{project.comparisons[-1]}"
    with httpx.Client(base_url=site.url, timeout=60) as client:
        login(client, project.tokens.read)
        first = client.get(run_path)
        assert first.status_code == 200 and first.text.count('<details id="case-') == 100
        print(f"run page, 100 cases: {len(first.content) / 1e6:.2f} MB of HTML; comparison page:", end=" ")
        print(f"{len(client.get(comparison_path).content) / 1e6:.2f} MB")
        _forget_run_page()
        redrawn = client.get(run_path)
        assert redrawn.status_code == 200 and redrawn.text.count('<details id="case-') == 100
        assert redrawn.text == client.get(run_path).text, "the kept page differs from the one first drawn"
        compared = client.get(comparison_path)
        assert compared.status_code == 200 and slow in compared.text


def test_the_notes_link_the_runs_they_cite_by_either_id(site: Site) -> None:
    """A note cites a run by the service's id (an accepted change) or by its result document's (a suspect pinned
    baseline): both are links to that run's page, which opens; an id of no run of the project stays text."""
    project = fresh_project(site, "notes")
    upload(site, project, docs.h200(), commit="1" * 40)
    accepted = project.runs[-1]
    suspect_doc = docs.variant(docs.h200(), suspect=True)
    upload(site, project, suspect_doc, commit="2" * 40)
    suspect = project.runs[-1]
    pr = {"branch": "feature", "commit": "f" * 40, "pr": 4}
    with site.api(project.tokens.admin) as api:
        assert api.post(f"/api/v1/projects/{project.name}/baselines/accepted", json={"run_id": accepted}).is_success
        upload(site, project, docs.h200(slower=1.1), **pr)
        assert api.post(f"/api/v1/projects/{project.name}/baselines/pins", json={"run_id": suspect}).is_success
        upload(site, project, docs.h200(slower=1.1), **pr)
    cited = {
        project.comparisons[-2]: (f"an accepted change (run {accepted}) cut the history", accepted, accepted),
        project.comparisons[-1]: (
            f"baseline run {suspect_doc['run']['id']} is suspect",
            suspect_doc["run"]["id"],
            suspect,
        ),
    }
    with http(site, project.tokens.read) as client:
        for comparison, (note, shown, run) in cited.items():
            html = client.get(f"/ui/p/{project.name}/comparisons/{comparison}").text
            notes = html.split('<ul class="cmp-notes">', 1)[1].split("</ul>", 1)[0]
            href = f"/ui/p/{project.name}/runs/{run}"
            words, rest = note.split(shown)
            assert f'{words}<a href="{href}"><code>{shown}</code></a>{rest}' in notes, notes
            opened = client.get(href)
            assert opened.status_code == 200 and run in opened.text
    # An id that names no run of the project, and markup, stay text.
    other = str(uuid.uuid4())
    out = linked_notes([f"run {other} <b>x</b>", f"baseline run {accepted}"], "p", {accepted: accepted})
    assert [str(n) for n in out] == [
        f"run {other} &lt;b&gt;x&lt;/b&gt;",
        f'baseline run <a href="/ui/p/p/runs/{accepted}"><code>{accepted}</code></a>',
    ]
