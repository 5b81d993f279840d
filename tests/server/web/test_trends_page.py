"""The trends page in a real browser and over HTTP: one point per run with the p25-p75 band, the change point
the service found and the baseline pins and exclusions marked, a click on a point opening its run, the form used
with the keyboard alone and without JavaScript, paging of the numbers, 422 pages for bad values; and the
downsampling that keeps marked points (unit tests).

The trend data lives in a project of its own on the shared test site: twelve default-branch runs, the first case
30 % slower from the seventh on (a change point the upload's analysis records), one run pinned and one excluded.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from sqlalchemy import select

from attnprof.server.comparisons.models import Alert
from attnprof.server.db import make_engine
from attnprof.server.web.pages import trends
from tests.server.web.pages import http
from tests.server.web.stack import Site, Tokens, _project, _upload, docs, sign_in

RUNS, SLOW_FROM = 12, 6


@dataclass
class TrendSite:
    site: Site
    project: str
    tokens: Tokens
    case: str
    kernel: str
    runs: list[str]
    pinned: str
    excluded: str
    alert_run: str
    alert_change: float
    testbed: str

    def url(self, query: str = "") -> str:
        return f"{self.site.url}/ui/p/{self.project}/trends" + (f"?{query}" if query else "")


@pytest.fixture(scope="module")
def ts(site: Site) -> TrendSite:
    name = f"trend-{site.project[-8:]}"
    tokens = _project(site.db_url, name)
    template = docs.h200()
    case = template["cases"][0]["id"]
    kernel = template["cases"][0]["kernels"][0]["key"]
    runs: list[str] = []
    commits = [f"{i + 0xA0:040x}" for i in range(RUNS)]
    with site.api(tokens.submit) as client:
        for i, commit in enumerate(commits):
            jitter = 0.003 * ((i % 3) - 1)
            doc = docs.h200(slower=1.3 if i >= SLOW_FROM else 1.0, cases=[case], jitter=jitter)
            body = _upload(client, name, doc, commit=commit, ancestors=list(reversed(commits[:i])), pr=40 + i)
            runs.append(body["run_id"])
            testbed = body["testbed"]
        _upload(client, name, docs.h200(), branch="feature", commit="b" * 40, base_commit=commits[-1], pr=99)
    with site.api(tokens.admin) as client:
        base = f"/api/v1/projects/{name}/baselines"
        assert client.post(f"{base}/pins", json={"run_id": runs[2]}).status_code == 201
        r = client.post(f"{base}/exclusions", json={"run_id": runs[3], "reason": "thermal throttling on the host"})
        assert r.status_code == 201, r.text
    engine = make_engine(site.db_url)
    try:
        with engine.connect() as conn:
            alerts = conn.execute(select(Alert.run_id, Alert.change).where(Alert.case_id == case)).all()
    finally:
        engine.dispose()
    found = [a for a in alerts if a.run_id in runs]
    assert len(found) == 1 and found[0].run_id == runs[SLOW_FROM], found  # the analysis found the step
    return TrendSite(
        site, name, tokens, case, kernel, runs, runs[2], runs[3], found[0].run_id, float(found[0].change), testbed
    )


def _trace(tab: Any, name: str) -> dict[str, Any]:
    found: dict[str, Any] = tab.evaluate(
        "(name) => { const t = document.getElementById('trend').data.find((d) => d.name === name);"
        " return t ? {x: t.x, y: t.y, customdata: t.customdata, fill: t.fill, symbol: t.marker && t.marker.symbol,"
        " index: document.getElementById('trend').data.indexOf(t)} : null; }",
        name,
    )
    assert found is not None, f"no trace {name!r}"
    return found


def _open(tab: Any, ts: TrendSite, query: str) -> None:
    sign_in(tab, ts.site, ts.tokens.read)
    tab.goto(ts.url(query))
    tab.wait_for_selector("#trend[data-drawn=true] .main-svg")


# --- the chart ----------------------------------------------------------------------------------------------


def test_chart_draws_each_run_with_its_band(page: Any, ts: TrendSite) -> None:
    errors: list[str] = []
    failed: list[str] = []
    page.on("console", lambda m: errors.append(f"{m.text} {m.location}") if m.type == "error" else None)
    page.on("response", lambda r: failed.append(r.url) if r.status >= 400 else None)
    _open(page, ts, f"case={ts.case}")
    median = _trace(page, "median")
    assert len(median["x"]) == RUNS
    assert median["customdata"] == [f"/ui/p/{ts.project}/runs/{r}" for r in ts.runs]
    band = _trace(page, "p25–p75 band")
    assert band["fill"] == "tonexty" and len(band["x"]) == RUNS
    low = _trace(page, "p25")
    assert all(lo <= m <= hi for lo, m, hi in zip(low["y"], median["y"], band["y"], strict=True))
    # Drawn by Plotly: one marker per run on the median trace, and the band's filled area.
    traces = page.locator("#trend .scatterlayer .trace")
    assert traces.nth(median["index"]).locator("path.point").count() == RUNS
    # Two filled areas: the minimum-effect band around the baseline, and the p25-p75 band.
    fills = page.locator("#trend .scatterlayer path.js-fill")
    assert fills.count() == 2 and all(len(fills.nth(i).get_attribute("d") or "") > 20 for i in range(2))
    assert page.locator("#drawn").inner_text().startswith(f"Drawn: {RUNS} of {RUNS} points")
    assert not failed, failed
    # The browser's own favicon request is the framework's (base.html), not this page's.
    assert not [e for e in errors if "/favicon.ico" not in e], errors


def test_change_point_pin_and_exclusion_are_marked(page: Any, ts: TrendSite) -> None:
    _open(page, ts, f"case={ts.case}")
    median = _trace(page, "median")
    by_run = dict(zip(median["customdata"], median["x"], strict=True))
    for name, run_id, symbol in (
        ("alert (step)", ts.alert_run, "diamond"),
        ("baseline pin", ts.pinned, "star"),
        ("excluded from baselines", ts.excluded, "x-thin-open"),
    ):
        mark = _trace(page, name)
        assert mark["x"] == [by_run[f"/ui/p/{ts.project}/runs/{run_id}"]], name
        assert mark["symbol"] == symbol
        legend = page.locator("#trend .legend .traces").filter(has_text=name)
        assert legend.count() == 1, name
    # No text is written on the plot (labels of neighbouring alerts overprinted): the alert is in the list below.
    assert page.evaluate("(document.getElementById('trend').layout.annotations || []).length") == 0
    assert page.evaluate("(document.getElementById('trend').layout.shapes || []).length") == 0
    item = page.locator(".alert-list li")
    assert item.count() == 1 and f"Regression +{ts.alert_change * 100:.1f}% (" in item.inner_text()
    assert 0.25 < ts.alert_change < 0.35
    # The same marks in the numbers table, with the exclusion's reason.
    table = page.locator("section:has(#h-numbers) tbody")
    assert "thermal throttling on the host" in table.inner_text()
    assert table.locator(".mark-pin").count() == 1 and table.locator(".mark-change").count() == 1


def test_hover_shows_commit_pr_date_and_value_with_unit(page: Any, ts: TrendSite) -> None:
    _open(page, ts, f"case={ts.case}")
    median = _trace(page, "median")
    point = page.locator("#trend .scatterlayer .trace").nth(median["index"]).locator("path.point").nth(RUNS - 1)
    box = point.bounding_box()
    assert box is not None
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    label = page.locator("#trend .hoverlayer .hovertext").first
    label.wait_for()
    text = label.evaluate("(el) => Array.from(el.querySelectorAll('tspan.line')).map((t) => t.textContent).join('\\n')")
    assert f"commit {f'{RUNS - 1 + 0xA0:040x}'[:10]}" in text
    assert f"PR #{40 + RUNS - 1}" in text
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", text)
    assert re.search(r"median [\d.]+ µs", text)


def test_click_on_a_point_opens_its_run(page: Any, ts: TrendSite) -> None:
    _open(page, ts, f"case={ts.case}")
    median = _trace(page, "median")
    point = page.locator("#trend .scatterlayer .trace").nth(median["index"]).locator("path.point").nth(RUNS - 1)
    box = point.bounding_box()
    assert box is not None
    page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.wait_for_url(f"**/ui/p/{ts.project}/runs/{ts.runs[-1]}", timeout=10_000)


def test_kernel_trend_with_occupancy(page: Any, ts: TrendSite) -> None:
    _open(page, ts, f"case={ts.case}&kernel={ts.kernel}&metric=occupancy")
    median = _trace(page, "median")
    assert len(median["x"]) == RUNS
    assert all(0 < y <= 1 for y in median["y"])
    title = page.evaluate("document.getElementById('trend').layout.yaxis.title.text")
    assert title == "theoretical occupancy (%)"
    assert page.locator("#f-kernel").input_value() == ts.kernel


def test_a_downsampled_chart_keeps_its_marked_runs(page: Any, ts: TrendSite, monkeypatch: pytest.MonkeyPatch) -> None:
    whole = trends.downsample
    monkeypatch.setattr(trends, "downsample", lambda values, keep, budget: whole(values, keep, 6))
    _open(page, ts, f"case={ts.case}")
    drawn = _trace(page, "median")["customdata"]
    assert len(drawn) < RUNS
    for run_id in (ts.alert_run, ts.pinned, ts.excluded, ts.runs[0], ts.runs[-1]):
        assert f"/ui/p/{ts.project}/runs/{run_id}" in drawn
    assert page.locator("#drawn").inner_text().startswith(f"Drawn: {len(drawn)} of {RUNS} points")
    # The table still lists every run.
    assert page.locator("section:has(#h-numbers) tbody tr").count() == RUNS


def test_a_project_without_runs_says_so(site: Site) -> None:
    name = f"empty-{site.project[-8:]}"
    tokens = _project(site.db_url, name)
    with http(site, tokens.read) as client:
        answer = client.get(f"/ui/p/{name}/trends")
    assert answer.status_code == 200 and "No runs yet" in answer.text


# --- the form -----------------------------------------------------------------------------------------------


def test_form_works_with_the_keyboard_alone(page: Any, ts: TrendSite) -> None:
    sign_in(page, ts.site, ts.tokens.read)
    page.goto(ts.url())
    page.wait_for_selector("#trend[data-drawn=true]")
    for _ in range(40):  # Tab from the top of the page to the metric select
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.id") == "f-metric":
            break
    else:
        raise AssertionError("the metric select is not reachable with Tab")
    outline = page.evaluate("getComputedStyle(document.activeElement).outlineStyle")
    assert outline != "none"  # focus is visible
    page.keyboard.type("throughput")
    assert page.locator("#f-metric").input_value() == "throughput"
    for _ in range(20):
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.type") == "submit":
            break
    with page.expect_navigation():
        page.keyboard.press("Enter")
    query = parse_qs(urlsplit(page.url).query)
    assert query["metric"] == ["throughput"]
    page.wait_for_selector("#trend[data-drawn=true]")
    assert page.evaluate("document.getElementById('trend').layout.yaxis.title.text") == "throughput (TFLOP/s)"


def test_form_and_table_work_without_javascript(browser: Any, ts: TrendSite, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trends, "TABLE_ROWS", 5)
    context = browser.new_context(java_script_enabled=False)
    try:
        tab = context.new_page()
        sign_in(tab, ts.site, ts.tokens.read)
        tab.goto(ts.url())
        tab.select_option("#f-case", ts.case)
        tab.select_option("#f-branch", "main")
        with tab.expect_navigation():
            tab.click("form.trend-form button[type=submit]")
        assert parse_qs(urlsplit(tab.url).query)["case"] == [ts.case]
        rows = tab.locator("section:has(#h-numbers) tbody tr")
        assert rows.count() == 5
        # Newest first: the first row is the newest run, and "Older" pages on.
        assert ts.runs[-1] in rows.first.locator("a").get_attribute("href")
        assert "Page 1 of 3" in tab.locator(".pager").inner_text()
        with tab.expect_navigation():
            tab.click("text=Older")
        rows = tab.locator("section:has(#h-numbers) tbody tr")
        assert ts.runs[-6] in rows.first.locator("a").get_attribute("href")
        assert "Page 2 of 3" in tab.locator(".pager").inner_text()
    finally:
        context.close()


def test_branch_defaults_to_the_default_branch_and_switches(ts: TrendSite) -> None:
    with http(ts.site, ts.tokens.read) as client:
        main = client.get(f"/ui/p/{ts.project}/trends", params={"case": ts.case})
        assert main.status_code == 200
        assert f"of {RUNS} points" in main.text and '<option value="main" selected>' in main.text
        feature = client.get(f"/ui/p/{ts.project}/trends", params={"case": ts.case, "branch": "feature"})
        assert feature.status_code == 200 and "Drawn: 1 of 1 points" in feature.text
        assert re.search(r"app;dur=[\d.]+", feature.headers["server-timing"]) is not None


@pytest.mark.parametrize(
    ("params", "named"),
    [
        ({"metric": "speed"}, "metric"),
        ({"metric": "occupancy"}, "metric"),
        ({"since": "yesterday"}, "since"),
        ({"until": "2026-13-01"}, "until"),
        ({"since": "2026-05-02", "until": "2026-05-01"}, "since"),
        ({"testbed": "no-such-testbed"}, "testbed"),
        ({"branch": "no-such-branch"}, "branch"),
        ({"page": "0"}, "page"),
        ({"page": "x"}, "page"),
        ({"page": "99"}, "page"),
        ({"x": "wallclock"}, "x"),
        ({"prs": "maybe"}, "prs"),
    ],
)
def test_bad_values_are_a_422_page_naming_the_parameter(ts: TrendSite, params: dict[str, str], named: str) -> None:
    with http(ts.site, ts.tokens.read) as client:
        answer = client.get(f"/ui/p/{ts.project}/trends", params=params)
    assert answer.status_code == 422, answer.text[:300]
    assert "text/html" in answer.headers["content-type"]
    detail = re.search(r'<p class="error" role="alert">(.*?)</p>', answer.text, re.S)
    assert detail is not None and named in detail.group(1), answer.text[:500]


def test_another_projects_trends_are_404(ts: TrendSite) -> None:
    with http(ts.site, ts.site.other_tokens.read) as client:
        assert client.get(f"/ui/p/{ts.project}/trends", params={"case": ts.case}).status_code == 404
        # Its own trends page shows none of this project's runs.
        own = client.get(f"/ui/p/{ts.site.other_project}/trends", params={"case": ts.case})
        assert own.status_code == 200 and not any(r in own.text for r in ts.runs)


# --- downsampling -------------------------------------------------------------------------------------------


def test_downsample_keeps_short_series_whole() -> None:
    assert trends.downsample([1.0, 2.0, 3.0], [], 600) == [0, 1, 2]


def test_downsample_keeps_marked_points_ends_and_spikes() -> None:
    n = 10_000
    values: list[float | None] = [100.0 + math.sin(i / 50) for i in range(n)]
    values[4321] = 500.0  # a spike
    values[777] = 1.0  # a dip
    marked = [10, 2500, 2501, 9998]
    kept = trends.downsample(values, marked, 600)
    assert kept == sorted(set(kept))
    assert len(kept) <= 600
    assert {0, n - 1, 4321, 777, *marked} <= set(kept)
    # Every bucket's lowest and highest survive: the drawn curve spans what the series spans.
    drawn = [values[i] for i in kept]
    assert min(drawn) == min(v for v in values if v is not None) and max(drawn) == 500.0  # type: ignore[type-var]


def test_downsample_keeps_every_marked_point_even_over_budget() -> None:
    values: list[float | None] = [float(i % 7) for i in range(2000)]
    marked = list(range(0, 2000, 3))  # 667 marked points, more than the budget
    kept = trends.downsample(values, marked, 600)
    assert set(marked) <= set(kept)


def test_downsample_skips_gaps() -> None:
    values: list[float | None] = [None if 100 <= i < 900 else 1.0 + (i == 950) for i in range(1000)]
    kept = trends.downsample(values, [], 60)
    assert all(values[i] is not None for i in kept if i not in (0, 999))
    assert 950 in kept
