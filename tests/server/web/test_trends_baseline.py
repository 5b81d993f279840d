"""The trends page as a Bencher user reads it, in Chromium: the baseline each run was compared with and the
minimum-effect band around it, the runs whose comparison failed marked, the alert at its step with no text on the
plot (listed under it, acknowledged there by an admin), a pull request's run drawn over the default branch just
after its merge base (and hidden on request), the commit-order axis that keeps runs stored within a second apart,
and the case that regressed last opened first.

The history (a project of its own): twenty default-branch runs uploaded one after the other (a few ms apart), every
case wiggling by 0.6% (under the 2% minimum effect), and ``sdpa[backend=math,pass=fwd]`` (not the first case in
any order) 30% slower from run 12 on; a pull request off commit 8 whose run is 25% slower on that case.

``ATTNPROF_SCREENSHOTS=docs/img .venv/bin/pytest tests/server/web/test_trends_baseline.py -k screenshot`` writes
``docs/img/trends.png``.
"""

from __future__ import annotations

import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.server.web.pages import Project, csrf_of, fresh_project, http, upload
from tests.server.web.stack import Site, docs, sign_in

SLOW = "sdpa[backend=math,pass=fwd]"
RUNS, STEP, BASE = 20, 12, 8


def _commit(i: int) -> str:
    return f"{i:02d}" + "c" * 38


@dataclass
class History:
    site: Site
    project: Project
    runs: list[str]
    pr_run: str

    def url(self, query: str = "") -> str:
        return f"{self.site.url}/ui/p/{self.project.name}/trends" + (f"?{query}" if query else "")


@pytest.fixture(scope="module")
def hist(site: Site) -> History:
    project = fresh_project(site, "bencher")
    runs = []
    for i in range(RUNS):
        wiggle = 0.006 if (i // 4) % 2 else 0.0
        doc = docs.h200(slower=1.3 if i >= STEP else 1.0, cases=[SLOW], jitter=wiggle + 0.0005 * ((i * 7) % 3 - 1))
        ancestors = [_commit(j) for j in range(i - 1, -1, -1)]
        runs.append(upload(site, project, doc, commit=_commit(i), ancestors=ancestors)["run_id"])
    pr = upload(
        site,
        project,
        docs.h200(slower=1.25, cases=[SLOW]),
        branch="feature",
        commit="f" * 40,
        base_commit=_commit(BASE),
        ancestors=[_commit(j) for j in range(BASE, -1, -1)],
        pr=77,
    )
    assert pr["verdict"] == "fail"
    return History(site, project, runs, pr["run_id"])


def _trace(tab: Any, name: str) -> dict[str, Any] | None:
    found: dict[str, Any] | None = tab.evaluate(
        "(name) => { const t = document.getElementById('trend').data.find((d) => d.name === name);"
        " return t ? {x: t.x, y: t.y, customdata: t.customdata, fill: t.fill, text: t.text,"
        " symbol: t.marker && t.marker.symbol} : null; }",
        name,
    )
    return found


def _open(tab: Any, hist: History, query: str = "", token: str | None = None) -> None:
    sign_in(tab, hist.site, token or hist.project.tokens.read)
    tab.goto(hist.url(query))
    tab.wait_for_selector("#trend[data-drawn=true] .main-svg")


def _link(hist: History, run_id: str) -> str:
    return f"/ui/p/{hist.project.name}/runs/{run_id}"


def test_the_case_that_regressed_last_is_opened_first(page: Any, hist: History) -> None:
    _open(page, hist)
    assert page.locator("#f-case").input_value() == SLOW
    options = page.locator("#f-case option").all_inner_texts()
    assert options.index(SLOW) > 0  # not the first case in the list: it was chosen, not fallen back on


def test_commit_order_keeps_close_runs_apart_and_labels_commits(page: Any, hist: History) -> None:
    _open(page, hist, f"case={SLOW}")
    median = _trace(page, "median")
    assert median is not None
    assert median["x"] == list(range(RUNS)) and median["customdata"] == [_link(hist, r) for r in hist.runs]
    layout = page.evaluate("document.getElementById('trend').layout.xaxis")
    assert layout["type"] == "linear" and layout["title"]["text"].startswith("commit, in first-parent order")
    assert set(layout["ticktext"]) <= {_commit(i)[:7] for i in range(RUNS)} and _commit(0)[:7] in layout["ticktext"]
    # Drawn: one marker per run, each at its own place.
    xs = page.evaluate(
        "() => Array.from(document.querySelectorAll('#trend .scatterlayer .trace')).map((t) =>"
        " Array.from(t.querySelectorAll('path.point')).map((p) => p.getAttribute('transform')))"
    )
    assert any(len(set(t)) == RUNS for t in xs)
    # The time axis on request: the same runs, by when they were stored (ms apart).
    page.goto(hist.url(f"case={SLOW}&x=time"))
    page.wait_for_selector("#trend[data-drawn=true] .main-svg")
    assert page.evaluate("document.getElementById('trend').layout.xaxis.type") == "date"
    assert page.locator("#f-x").input_value() == "time"


def test_baseline_and_minimum_effect_band(page: Any, hist: History) -> None:
    _open(page, hist, f"case={SLOW}")
    baseline = _trace(page, "baseline")
    band = _trace(page, "minimum-effect band (±2.0%)")
    low = _trace(page, "baseline −2.0%")
    median = _trace(page, "median")
    assert baseline is not None and band is not None and low is not None and median is not None
    assert baseline["y"][0] is None  # the first run of all was compared with nothing
    assert band["fill"] == "tonexty"
    for b, hi, lo in zip(baseline["y"][1:], band["y"][1:], low["y"][1:], strict=True):
        assert hi == pytest.approx(b * 1.02, rel=1e-5) and lo == pytest.approx(b * 0.98, rel=1e-5)
    # Before the step the baseline sits on the runs; at the step the run leaves the band, and the baseline follows
    # the new level a few runs on (the latest three runs are the baseline).
    assert abs(median["y"][5] / baseline["y"][5] - 1) < 0.02
    assert median["y"][STEP] / baseline["y"][STEP] - 1 > 0.25
    assert abs(median["y"][-1] / baseline["y"][-1] - 1) < 0.02
    # Its hover says the baseline and the change against it, with units.
    assert re.search(r"baseline [\d,.]+ (µs|ms) \(\+\d+\.\d% against it\)", median["text"][STEP])
    legend = page.locator("#trend-legend").inner_text()
    assert "minimum-effect band (±2.0%" in legend


def test_fail_and_alert_marks_and_no_text_on_the_plot(page: Any, hist: History) -> None:
    _open(page, hist, f"case={SLOW}")
    fail = _trace(page, "comparison failed")
    alert = _trace(page, "alert (step)")
    assert fail is not None and alert is not None
    assert _link(hist, hist.runs[STEP]) in fail["customdata"]
    assert all(hist.runs.index(link.rsplit("/", 1)[1]) >= STEP for link in fail["customdata"])
    assert alert["customdata"] == [_link(hist, hist.runs[STEP])] and alert["x"] == [STEP]
    assert re.search(r"alert: regression \+30\.\d% \([\d,.]+ → [\d,.]+ µs\)", alert["text"][0]), alert["text"][0]
    assert "comparison failed: bandwidth" in alert["text"][0]  # the math case is memory-bound: a bandwidth finding
    assert page.evaluate("(document.getElementById('trend').layout.annotations || []).length") == 0
    items = page.locator(".alert-list li")
    assert items.count() == 1
    text = items.first.inner_text()
    assert re.search(r"Regression \+30\.\d% \([\d,.]+ → [\d,.]+ (µs|ms)\)", text), text
    assert _commit(STEP - 1)[:10] in text and _commit(STEP)[:10] in text and "95% CI" in text
    # A read token sees no acknowledgement form.
    assert page.locator(".alert-ack-form").count() == 0


def test_a_pull_request_run_is_drawn_after_its_merge_base_and_hidden_on_request(page: Any, hist: History) -> None:
    _open(page, hist, f"case={SLOW}")
    prs = _trace(page, "pull-request runs")
    assert prs is not None and prs["symbol"] == "circle-open"
    assert prs["customdata"] == [_link(hist, hist.pr_run)] and prs["x"] == [BASE + 0.5]
    assert "PR #77 · feature" in prs["text"][0]
    page.select_option("#f-prs", "off")
    with page.expect_navigation():
        page.click("form.trend-form button[type=submit]")
    page.wait_for_selector("#trend[data-drawn=true] .main-svg")
    assert _trace(page, "pull-request runs") is None and "prs=off" in page.url


def test_an_admin_acknowledges_the_alert_on_the_page(browser: Any, hist: History) -> None:
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    try:
        tab = context.new_page()
        _open(tab, hist, f"case={SLOW}", token=hist.project.tokens.admin)
        form = tab.locator(".alert-ack-form")
        assert form.count() == 1
        tab.fill(".alert-ack-form input[name=note]", "math backend dropped on purpose, see the design note")
        with tab.expect_navigation():
            tab.click(".alert-ack-form button[type=submit]")
        assert tab.url.split("#")[-1].startswith("alert-")
        item = tab.locator(".alert-list li").first
        assert "Acknowledged by" in item.inner_text() and "(admin, dashboard)" in item.inner_text()
        assert "math backend dropped on purpose" in item.inner_text()
        assert tab.locator(".alert-ack-form").count() == 0
    finally:
        context.close()
    with hist.site.api(hist.project.tokens.read) as client:
        alert = client.get(f"/api/v1/projects/{hist.project.name}/alerts").json()["alerts"][0]
    assert alert["acknowledged"]["note"] == "math backend dropped on purpose, see the design note"


def test_acknowledging_from_the_page_needs_an_admin_and_a_note(hist: History) -> None:
    with hist.site.api(hist.project.tokens.read) as client:
        alert_id = client.get(f"/api/v1/projects/{hist.project.name}/alerts").json()["alerts"][0]["id"]
    action = f"/ui/p/{hist.project.name}/alerts/{alert_id}/acknowledgement"
    for role in ("read", "submit"):
        with http(hist.site, getattr(hist.project.tokens, role)) as client:
            csrf = csrf_of(client.get(f"/ui/p/{hist.project.name}/trends").text)
            answer = client.post(action, data={"csrf": csrf, "note": "seen"})
            assert answer.status_code == 403 and "needs admin" in answer.text
    with http(hist.site, hist.project.tokens.admin) as client:
        csrf = csrf_of(client.get(f"/ui/p/{hist.project.name}/trends").text)
        blank = client.post(action, data={"csrf": csrf, "note": "  "})
        assert blank.status_code == 422 and "note:" in blank.text
        stale = client.post(action, data={"csrf": "nope", "note": "x"})
        assert stale.status_code == 403
        missing = client.post(action.replace(str(alert_id), "999999"), data={"csrf": csrf, "note": "x"})
        assert missing.status_code == 404


def _png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", head[16:24])
    return int(width), int(height)


def test_screenshot_of_the_trends_page(browser: Any, hist: History, tmp_path: Path) -> None:
    """The picture of ``docs/img/trends.png``: the regressed case's trend at 1400 px, chart and alert list."""
    folder = Path(os.environ.get("ATTNPROF_SCREENSHOTS") or tmp_path)
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    try:
        tab = context.new_page()
        _open(tab, hist, token=hist.project.tokens.read)
        end = tab.evaluate("document.getElementById('h-numbers').getBoundingClientRect().top + window.scrollY")
        height = int(min(end, 1400))
        path = folder / "trends.png"
        tab.screenshot(path=str(path), full_page=True, clip={"x": 0, "y": 0, "width": 1400, "height": height})
        assert _png_size(path) == (1400, height)
    finally:
        context.close()


def test_the_alert_list_and_its_form_fit_a_phone(browser: Any, hist: History) -> None:
    context = browser.new_context(viewport={"width": 390, "height": 844})
    try:
        tab = context.new_page()
        sign_in(tab, hist.site, hist.project.tokens.admin)
        tab.goto(hist.url(f"case={SLOW}&x=time"))
        tab.wait_for_selector("#trend[data-drawn=true] .main-svg")
        assert tab.locator(".alert-list li").count() == 1
        assert tab.evaluate("document.documentElement.scrollWidth") <= 390
    finally:
        context.close()


def test_the_overview_lists_the_step_once_in_its_unit_with_its_commits_and_acknowledgement(hist: History) -> None:
    name = hist.project.name
    with hist.site.api(hist.project.tokens.read) as client:
        alerts = client.get(f"/api/v1/projects/{name}/alerts").json()["alerts"]
    assert len(alerts) == 1
    if alerts[0]["acknowledged"] is None:
        with hist.site.api(hist.project.tokens.admin) as client:
            done = client.post(
                f"/api/v1/projects/{name}/alerts/{alerts[0]['id']}/acknowledgement",
                json={"note": "math backend dropped on purpose, see the design note"},
            )
            assert done.status_code < 300, done.text
    with http(hist.site, hist.project.tokens.read) as client:
        html = client.get(f"/ui/p/{name}").text
    section = html[html.index('id="h-alerts"') : html.index('id="h-jobs"')]
    rows = re.findall(r"<tr class=\"(regression|improvement)\">(.*?)</tr>", section, re.S)
    assert [kind for kind, _ in rows] == ["regression"]
    row = rows[0][1]
    assert SLOW in row and "µs" in row and re.search(r"\+\d\d\.\d%", row)  # +30.0% (… → … µs)
    assert "95% CI" in row
    assert _commit(STEP - 1)[:8] in row and _commit(STEP)[:8] in row
    assert "acknowledged by" in row and "math backend dropped on purpose" in row
    href = re.search(r'href="([^"]*#alert-\d+)"', row)
    assert href is not None and "testbed=" in href.group(1)
    with http(hist.site, hist.project.tokens.read) as client:
        page = client.get(href.group(1).replace("&amp;", "&"))
    assert page.status_code == 200 and f'id="alert-{alerts[0]["id"]}"' in page.text
