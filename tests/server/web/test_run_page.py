"""The run page in a real browser and over HTTP: environment and provenance, the case table, each case's kernels
and roofline (one point per kernel that does floating-point work), the backend chart, the trace download and its
hand-over to Perfetto, the baseline actions with the keyboard, and what a reader or another project sees."""

from __future__ import annotations

import html as html_lib
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from attnprof.core.attribution import load_trace, reconcile
from attnprof.core.documents import Case, Kernel, Peaks, parse_result
from attnprof.server.web.pages.figures import backend_groups, case_anchor, on_roofline, roofline
from tests.server.web.pages import (
    Project,
    csrf_of,
    fresh_project,
    login,
    rules,
    seed_pair,
    tab_to,
    upload,
    watch_errors,
)
from tests.server.web.stack import Site, docs, sign_in

TRACES = Path(docs.H200).parent


@pytest.fixture(scope="module")
def trace(site: Site) -> tuple[str, bytes]:
    """The first case's real trace, attached to the seeded pull-request run."""
    name = docs.h200()["cases"][0]["trace"]
    data = (TRACES / name).read_bytes()
    with site.api(site.tokens.submit) as client:
        answer = client.put(
            f"/api/v1/projects/{site.project}/runs/{site.pr_run}/traces/{name}",
            content=data,
            headers={"Content-Type": "application/gzip"},
        )
        assert answer.status_code == 204, answer.text
    return name, data


@pytest.fixture(scope="module")
def own(site: Site) -> Iterator[Project]:
    """A project of this module's own: its baseline rules cannot reach the shared site's comparisons."""
    project = fresh_project(site, "runs")
    seed_pair(site, project, bases=2)
    yield project


def _run_url(site: Site, run_id: str, project: str | None = None) -> str:
    return f"{site.url}/ui/p/{project or site.project}/runs/{run_id}"


def _points(tab: Any, chart: str) -> int:
    return int(tab.locator(f"{chart} .scatterlayer .trace .points path.point").count())


def test_the_run_page_draws_its_cases_kernels_and_rooflines(page: Any, site: Site, trace: tuple[str, bytes]) -> None:
    errors = watch_errors(page)
    sign_in(page, site, site.tokens.read)
    page.goto(_run_url(site, site.pr_run))
    page.wait_for_selector("#latency[data-drawn=true] .main-svg")
    doc = docs.h200()
    cases = doc["cases"]
    # The lead chart: one bar per case.
    assert page.locator("#latency .bars .point").count() == len(cases)
    text = page.inner_text("main")
    for expected in ("NVIDIA H200", "580.159.04", "torch 2.11.0+cu130", "CUDA 13.0", "cuDNN 91900", "Triton 3.6.0"):
        assert expected in text, expected
    assert "605db806abde3bc2" in text and "PR #7" in text and "SM 1,965 MHz of 1,980 MHz max" in text
    assert "throttled: sw_power_cap" in text
    # The case table: one row per case, the regressed case with its backend.
    table = page.locator("section:has(#h-cases) tbody tr")
    assert table.count() == len(cases)
    assert "cudnn" in table.first.inner_text()
    # The first case is open and its roofline has one point per kernel.
    first = page.locator(f"details#{case_anchor(cases[0]['id'])}")
    assert first.get_attribute("open") is not None
    page.wait_for_selector("#roofline-1[data-drawn=true] .main-svg")
    assert _points(page, "#roofline-1") == len(cases[0]["kernels"]) == 1
    # A closed case draws its roofline when opened: every kernel of `block` does floating-point work.
    index = next(i for i, c in enumerate(cases) if c["id"] == "block")
    block = cases[index]
    chart = f"#roofline-{index + 1}"
    assert page.locator(chart).get_attribute("data-drawn") is None
    page.locator(f"details#{case_anchor('block')} > summary").click()
    page.wait_for_selector(f"{chart}[data-drawn=true] .main-svg")
    assert _points(page, chart) == len(block["kernels"]) == 7
    assert page.locator(f"details#{case_anchor('block')} table.kernels tbody tr").count() == len(block["kernels"])
    # The math backend launches copies and fills: they are listed under the chart, the others are points.
    index = next(i for i, c in enumerate(cases) if c["id"] == "sdpa[backend=math,pass=fwd]")
    math = cases[index]
    drawn = [k for k in math["kernels"] if on_roofline(Kernel.model_validate(k))]
    assert 0 < len(drawn) < len(math["kernels"])
    page.locator(f"details#{case_anchor(math['id'])} > summary").click()
    page.wait_for_selector(f"#roofline-{index + 1}[data-drawn=true] .main-svg")
    assert _points(page, f"#roofline-{index + 1}") == len(drawn)
    off = page.locator(f"details#{case_anchor(math['id'])} p:has-text('Not on the roofline')").inner_text()
    assert f"{len(math['kernels']) - len(drawn)} kernels that only move data" in off
    # The ceilings come from the document's peaks.
    legend = str(page.locator("#roofline-1 .legend").text_content())
    assert "DRAM bandwidth ceiling 4,202 GB/s (measured)" in legend and "bf16 compute ceiling 777 TFLOP/s" in legend
    # Backends side by side: the four sdpa backends, twice (fwd and fwd_bwd).
    page.wait_for_selector("#backends[data-drawn=true] .main-svg")
    assert page.locator("#backends .bars .point").count() == 8
    legend = page.locator("#backends .legend .traces").all_text_contents()
    assert set(legend) == {"cudnn", "flash", "efficient", "math"}
    # Accuracy of every case, and of each gradient where the case ran backward.
    grads = sum(len(c["accuracy"].get("grads") or []) for c in cases)
    assert grads > 0
    assert page.locator("section:has(#h-accuracy) tbody tr").count() == len(cases) + grads
    # The verdict links to the comparison.
    page.get_by_role("link", name="open the comparison").click()
    page.wait_for_url(f"**/comparisons/{site.pr_comparison}")
    assert errors == []


def test_a_link_to_a_case_opens_it(page: Any, site: Site) -> None:
    sign_in(page, site, site.tokens.read)
    anchor = case_anchor("flex[pass=fwd]")
    page.goto(_run_url(site, site.pr_run) + f"#{anchor}")
    page.wait_for_selector(f"details#{anchor}[open] .chart[data-drawn=true]")


def test_the_trace_downloads_and_opens_in_perfetto(page: Any, site: Site, trace: tuple[str, bytes]) -> None:
    name, data = trace
    sign_in(page, site, site.tokens.read)
    page.goto(_run_url(site, site.pr_run))
    assert "ui.perfetto.dev → Open trace file" in page.inner_text("section:has(#h-traces)")
    link = page.get_by_role("link", name="Download (gzip)")
    assert link.count() == 1
    answer = page.request.get(site.url + str(link.get_attribute("href")))
    assert answer.status == 200
    assert answer.body() == data and data[:2] == b"\x1f\x8b"
    assert answer.headers["content-type"] == "application/gzip"
    assert f'filename="{name}"' in answer.headers["content-disposition"]
    # Perfetto's side of the protocol, played by a page that answers PONG and reports what it received: the real
    # ui.perfetto.dev is not reachable from the test machine.
    stub = """<!doctype html><title>waiting</title><script>
      window.addEventListener("message", (e) => {
        if (e.data === "PING") e.source.postMessage("PONG", "*");
        else if (e.data && e.data.perfetto) {
          const b = new Uint8Array(e.data.perfetto.buffer);
          document.title = `received ${b.length} bytes ${b[0]} ${b[1]} ${e.data.perfetto.title}`;
        }
      });</script>"""
    page.context.route("https://ui.perfetto.dev/**", lambda route: route.fulfill(body=stub, content_type="text/html"))
    button = page.get_by_role("button", name="Open in Perfetto")
    assert button.is_visible()
    with page.expect_popup() as popup_info:
        button.click()
    popup = popup_info.value
    popup.wait_for_function("document.title.startsWith('received')", timeout=15_000)
    assert popup.title() == f"received {len(data)} bytes 31 139 {docs.h200()['cases'][0]['id']} · run {site.pr_run[:8]}"


def test_the_tables_read_without_javascript(browser: Any, site: Site) -> None:
    context = browser.new_context(java_script_enabled=False)
    try:
        tab = context.new_page()
        sign_in(tab, site, site.tokens.read)
        tab.goto(_run_url(site, site.pr_run))
        cases = docs.h200()["cases"]
        assert tab.locator("section:has(#h-cases) tbody tr").count() == len(cases)
        assert tab.locator("table.kernels").count() == len(cases)
        # A closed case opens without JavaScript, and its kernel table is there.
        tab.locator(f"details#{case_anchor('block')} > summary").click()
        assert tab.locator(f"details#{case_anchor('block')} table.kernels").is_visible()
        # Without JavaScript, the Perfetto button (which needs it) stays hidden; the download link works.
        perfetto = tab.locator("button[data-perfetto]")
        assert perfetto.count() == 0 or not perfetto.first.is_visible()
    finally:
        context.close()


def test_pin_exclude_and_remove_with_the_keyboard(page: Any, site: Site, own: Project) -> None:
    run_id = own.runs[0]
    sign_in(page, site, own.tokens.admin)
    page.goto(_run_url(site, run_id, own.name))
    tab_to(page, "#reason-pin")
    page.keyboard.type("known good")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Pin as baseline"
    with page.expect_navigation():
        page.keyboard.press("Enter")
    assert "Pinned: this run is now a baseline" in page.inner_text(".notice")
    assert "Pinned as baseline" in page.inner_text("#baselines")
    assert [(r["kind"], r["run_id"], r["reason"]) for r in rules(site, own)] == [("pin", run_id, "known good")]
    # Exclude: the reason is required; Enter in the field submits the form.
    tab_to(page, "#reason-exclude")
    page.keyboard.type("clocks throttled")
    with page.expect_navigation():
        page.keyboard.press("Enter")
    assert "Excluded: this run never serves" in page.inner_text(".notice")
    expected = {("pin", "known good"), ("exclude", "clocks throttled")}
    assert {(r["kind"], r["reason"]) for r in rules(site, own)} == expected
    # Unpin, then un-exclude.
    for kind, label, left in (("pin", "Unpin", {"exclude"}), ("exclude", "Un-exclude", set())):
        tab_to(page, f"#baselines form[action$='/{kind}/remove'] button")
        assert page.evaluate("document.activeElement.textContent") == label
        with page.expect_navigation():
            page.keyboard.press("Enter")
        assert {r["kind"] for r in rules(site, own)} == left
    assert "No longer excluded" in page.inner_text(".notice")


def test_excluding_needs_a_reason_and_changes_nothing_without_one(site: Site, own: Project) -> None:
    run_id = own.runs[1]
    with httpx.Client(base_url=site.url) as client:
        login(client, own.tokens.admin)
        csrf = csrf_of(client.get(f"/ui/p/{own.name}/runs/{run_id}").text)
        answer = client.post(f"/ui/p/{own.name}/runs/{run_id}/baselines/exclude", data={"csrf": csrf, "reason": "  "})
        assert answer.status_code == 422
        assert "reason: excluding a run from baselines needs a reason" in answer.text
        unknown = client.post(f"/ui/p/{own.name}/runs/{run_id}/baselines/ignore", data={"csrf": csrf})
        assert unknown.status_code == 422 and "text/html" in unknown.headers["content-type"]
    assert rules(site, own) == []


def test_a_reader_sees_no_forms_and_a_forged_post_is_refused(site: Site, own: Project) -> None:
    run_id = own.runs[0]
    path = f"/ui/p/{own.name}/runs/{run_id}"
    with httpx.Client(base_url=site.url) as reader:
        login(reader, own.tokens.read)
        html = reader.get(path).text
        assert "/baselines/" not in html and "Pin as baseline" not in html
        assert "Not pinned." in html
        # A reader's own form token does not make it an admin.
        refused = reader.post(f"{path}/baselines/pin", data={"csrf": csrf_of(html)})
        assert refused.status_code == 403 and "cannot change baselines" in refused.text
    with httpx.Client(base_url=site.url) as admin:
        login(admin, own.tokens.admin)
        for data in ({"csrf": "forged", "reason": "x"}, {"reason": "x"}):
            forged = admin.post(f"{path}/baselines/exclude", data=data)
            assert forged.status_code == 403 and "text/html" in forged.headers["content-type"]
            assert "security token" in forged.text
    assert rules(site, own) == []


def test_other_projects_and_unknown_runs_are_404(site: Site, trace: tuple[str, bytes]) -> None:
    name, _ = trace
    with httpx.Client(base_url=site.url) as client:
        login(client, site.tokens.read)
        for path in (
            f"/ui/p/{site.project}/runs/{site.other_run}",
            f"/ui/p/{site.project}/runs/no-such-run",
            f"/ui/p/{site.other_project}/runs/{site.other_run}",
            f"/ui/p/{site.project}/runs/{site.other_run}/traces/{name}",
            f"/ui/p/{site.project}/runs/{site.pr_run}/traces/no-such.trace.json.gz",
        ):
            answer = client.get(path)
            assert answer.status_code == 404, path
            assert answer.headers["content-type"].startswith("text/html"), path
    with httpx.Client(base_url=site.url) as other:
        login(other, site.other_tokens.admin)
        answer = other.get(f"/ui/p/{site.other_project}/runs/{site.pr_run}")
        assert answer.status_code == 404
        assert other.get(f"/ui/p/{site.other_project}/runs/{site.other_run}").status_code == 200
        csrf = csrf_of(other.get(f"/ui/p/{site.other_project}/runs/{site.other_run}").text)
        # An admin of another project cannot pin this project's run through their own project's path.
        pinned = other.post(f"/ui/p/{site.other_project}/runs/{site.pr_run}/baselines/pin", data={"csrf": csrf})
        assert pinned.status_code == 404
    with httpx.Client(base_url=site.url) as anonymous:
        answer = anonymous.get(f"/ui/p/{site.project}/runs/{site.pr_run}/traces/{name}")
        assert answer.status_code == 303 and answer.headers["location"].startswith("/ui/login")


def test_counters_and_a_failed_case_show_as_they_are(site: Site, own: Project) -> None:
    """The ncu run: DRAM bytes, achieved occupancy and the counter bound beside each kernel; a failed case reads
    with its error and no numbers."""
    ncu = docs.variant(json.loads((TRACES / "result-ncu.json").read_text()))
    failed = ncu["cases"][-1]
    failed.update(
        status="failed",
        error={"type": "OutOfMemoryError", "message": "CUDA out of memory"},
        latency_us=None,
        achieved=None,
        accuracy=None,
        kernels=[],
        trace=None,
    )
    (html,) = _run_pages(site, own, "counters", {"c" * 40: ncu})
    assert "hardware counters from ncu" in html
    first = ncu["cases"][0]["kernels"][0]
    counters = first["counters"]
    assert "DRAM bytes / iter.</th>" in html and "tensor pipe (%)</th>" in html
    dram = (counters["dram__bytes_read.sum"] + counters["dram__bytes_write.sum"]) * first["launches_per_iter"]
    assert f'<td class="num">{dram:,.0f}</td>' in html
    achieved = counters["sm__warps_active.avg.pct_of_peak_sustained_active"]
    assert f"{achieved:.1f}% / {100 * first['theoretical_occupancy']:.1f}%" in html
    assert f"{first['bound']} (ncu: {first['counter_bound']})" in html
    assert "failed: OutOfMemoryError: CUDA out of memory" in html


def _run_pages(site: Site, project: Project, branch: str, by_commit: dict[str, dict[str, Any]]) -> list[str]:
    """Upload each document on ``branch`` at its commit; the run page of each, in order, as a reader sees it."""
    run_ids = [upload(site, project, doc, branch=branch, commit=commit)["run_id"] for commit, doc in by_commit.items()]
    with httpx.Client(base_url=site.url) as client:
        login(client, project.tokens.read)
        return [client.get(f"/ui/p/{project.name}/runs/{run_id}").text for run_id in run_ids]


def test_the_sm_clock_under_load_shows_where_the_run_read_it(site: Site, own: Project) -> None:
    """A run whose clock pass read the SM clock: the case's clock under load and a column of each kernel's; a run
    without it (CPU, or no Triton) has neither."""
    doc = docs.variant(json.loads((TRACES / "result-ncu.json").read_text()))
    case = doc["cases"][0]
    case["sm_clock_mhz"] = 1712.4
    for n, k in enumerate(case["kernels"]):
        k["sm_clock_mhz"] = 1650.0 + n
    plain = docs.variant(json.loads((TRACES / "result-ncu.json").read_text()))
    html, bare = _run_pages(site, own, "clock", {"d" * 40: doc, "e" * 40: plain})
    assert "SM clock under load 1,712 MHz" in html
    assert "SM clock under load</th>" in html and '<td class="num">1,650 MHz</td>' in html
    assert "SM clock under load" not in bare


def test_each_kernel_says_where_its_work_came_from(site: Site, own: Project) -> None:
    """The kernel table's "Work from" column: the source each kernel's FLOPs and bytes came from; a kernel of an
    older document, which does not say, reads "–"."""
    doc = docs.variant(json.loads((TRACES / "result-ncu.json").read_text()))
    case = next(c for c in doc["cases"] if c["id"] == "block")  # seven kernels
    kernels = case["kernels"]
    for k, source in zip(kernels, ("launch_metadata", "case", "factory", "model"), strict=False):
        k["work_source"] = source
    for k in kernels[4:]:
        k.pop("work_source", None)
    (html,) = _run_pages(site, own, "work-from", {"f" * 40: doc})
    assert ">Work from</th>" in html
    section = html.split(f'<details id="{case_anchor("block")}"', 1)[1]
    table = section.split('<table class="kernels">', 1)[1].split("</table>", 1)[0]
    # the plain cells of each row: phase, kernel, bound, work from
    cells = [html_lib.unescape(row.split("<td>")[4].split("</td>")[0]) for row in table.split("<tr>")[2:]]
    named = {"launch_metadata": "launch_metadata", "case": "case's work", "factory": "factory", "model": "model"}
    assert cells == [named[k["work_source"]] if "work_source" in k else "–" for k in kernels]


def test_the_peaks_say_where_they_came_from(site: Site, own: Project) -> None:
    """Cached peaks with their date, peaks measured now with why they were not cached; an older document says
    nothing more."""
    cached = docs.variant(json.loads((TRACES / "result-ncu.json").read_text()))
    cached["environment"]["peaks"].update(origin="cached", measured_at="2026-11-30T08:15:00+00:00", note=None)
    loaded = docs.variant(json.loads((TRACES / "result-ncu.json").read_text()))
    note = "other processes used 60% of the host's CPU time (limit 25%) in 2 of 2 calibration rounds"
    loaded["environment"]["peaks"].update(origin="measured now", note=note)
    older = docs.variant(json.loads((TRACES / "result-ncu.json").read_text()))
    for key in ("origin", "note", "measured_at"):
        older["environment"]["peaks"].pop(key, None)
    pages = _run_pages(site, own, "peaks-origin", {"1" * 40: cached, "2" * 40: loaded, "3" * 40: older})
    lines = [html_lib.unescape(page.split("<dt>Peaks</dt><dd>", 1)[1].split("</dd>", 1)[0]) for page in pages]
    assert lines[0].endswith(" · cached, 2026-11-30 08:15 UTC")
    assert lines[1].endswith(f" · measured now · not cached: {note}")
    assert " · cached" not in lines[2] and "measured now" not in lines[2]


def test_a_case_whose_rounds_landed_on_levels_says_so(site: Site, own: Project) -> None:
    """A case whose rounds' medians fall into two groups 3.5% apart: the page names the levels under the case; the
    same samples without their round counts, and the other cases, show no such line."""
    doc = docs.variant(json.loads((TRACES / "result-ncu.json").read_text()))
    case = doc["cases"][0]
    base = case["latency_us"]["median"]
    samples = [base * (1.0 + 0.035 * (r % 2)) * (1.0 + 0.001 * (i % 5 - 2)) for r in range(6) for i in range(20)]
    case["latency_us"].update(samples=samples, rounds=6, round_samples=[20] * 6)
    plain = docs.variant(json.loads((TRACES / "result-ncu.json").read_text()))
    html, bare = _run_pages(site, own, "levels", {"a" * 40: doc, "b" * 40: plain})
    assert html.count('<p class="sub levels">') == 1
    assert "Levels: rounds on 2 levels 3.5% apart (" in html and "×3, " in html
    assert "a change that another draw of levels could make warns instead of failing" in html
    assert '<p class="sub levels">' not in bare


def test_the_roofline_ceilings_follow_the_documents_peaks() -> None:
    doc = docs.h200()
    peaks = doc["environment"]["peaks"]
    case = next(c for c in doc["cases"] if c["id"] == "block")
    spec = roofline(Case.model_validate(case), Peaks.model_validate(peaks))
    assert spec is not None
    bandwidth, bf16, fp32 = spec["data"][:3]
    gbps = peaks["dram_gbps"]["value"]
    # The bandwidth roof: TFLOP/s = FLOP/byte x GB/s / 1000, up to the highest compute roof, where that starts.
    for x, y in zip(bandwidth["x"], bandwidth["y"], strict=True):
        assert abs(y - x * gbps / 1000) < 1e-9 * y
    assert bandwidth["y"][-1] == bf16["y"][0] == peaks["tflops"]["bf16"]["value"]
    assert bf16["x"][0] == bandwidth["x"][-1]
    assert fp32["y"] == [peaks["tflops"]["fp32"]["value"]] * 2 and fp32["line"]["dash"] == "dash"
    points = [t for t in spec["data"] if t["mode"] == "markers"]
    assert sum(len(t["x"]) for t in points) == len(case["kernels"])
    # One trace per phase, each with its own marker symbol (not colour alone).
    assert len({t["marker"]["symbol"] for t in points}) == len(points)
    # A case whose kernels do no floating-point work has no roofline.
    moves_only = [{**k, "flops": 0, "tflops": 0.0, "arithmetic_intensity": None} for k in case["kernels"]]
    copies = {**case, "kernels": moves_only}
    assert roofline(Case.model_validate(copies), Peaks.model_validate(peaks)) is None


def test_backend_groups_pair_cases_that_differ_only_in_the_backend() -> None:
    groups = backend_groups(parse_result(docs.h200()).cases)
    assert sorted(groups) == ["sdpa[pass=fwd]", "sdpa[pass=fwd_bwd]"]
    for members in groups.values():
        assert [b for b, _ in members] == ["cudnn", "flash", "efficient", "math"]


def test_each_kernel_table_has_its_sum_beside_the_latency(site: Site, own: Project) -> None:
    """Under each kernel table, the kernels' sum beside the case latency and the gap named: as the document recorded
    it, or for a document older than that, from its kernels and latency alone."""
    doc = docs.h200()
    naive = next(c for c in doc["cases"] if c["id"] == "naive[pass=fwd]")
    case = Case.model_validate(naive)
    assert case.latency_us is not None
    recorded = reconcile(case.kernels, case.latency_us.median, parsed=load_trace(TRACES / naive["trace"]))
    assert recorded is not None
    naive["reconciliation"] = recorded.model_dump(mode="json")
    (html,) = _run_pages(site, own, "reconcile", {"e" * 40: doc})
    assert (
        "Kernels 1,586 µs of 1,709 µs case latency (93%); gap 123.6 µs: launch gaps / host time between kernels "
        "(traced iteration: kernels busy 1,586 µs of its 1,726 µs span)</p>"
    ) in html
    assert html.count('<p class="sub reconciliation">') == sum(1 for c in doc["cases"] if c["kernels"])


def test_durations_past_10_ms_read_in_ms_with_rates_in_their_units(site: Site, own: Project) -> None:
    """A CPU run's cases take 13-220 ms: each duration in ms, never ``1.041e+04``; µs below 10 ms; rates named."""
    (html,) = _run_pages(site, own, "cpu-units", {"c" * 40: docs.cpu()})
    # naive[pass=fwd_bwd]: median 219,928.7 µs, p25-p75 214.4-222.4 ms; its kernel aten::bmm (backward) 62,869.5 µs
    assert '<td class="num">219.9 ms (214.4–222.4 ms)</td>' in html
    assert '<td class="num">62.9 ms (' in html
    assert "545.9 µs (461.0 µs–20.0 ms)" in html  # below 10 ms: µs; a spread across both units names both
    assert '<td class="num">0.13 GFLOP/s</td><td class="num">0.019 GB/s</td>' in html
    assert not re.search(r"\de[+-]\d", html.split("<script")[0])  # the page's text, before its chart data


def test_a_case_says_why_its_backend_ran_in_pytorchs_words(site: Site, own: Project) -> None:
    """A case whose SDPA call PyTorch refused flash for: the call, the backends it would take and the reason, escaped
    (the document is the uploader's); a case of an older document shows no such part."""
    doc = docs.variant(json.loads((TRACES / "result-ncu.json").read_text()))
    tensor = {"shape": [1, 8, 1, 128], "strides": [1024, 128, 128, 1], "dtype": "c10::BFloat16"}
    reason = "Flash attention does not support non-null attn_mask <b>."
    doc["cases"][0]["sdpa_calls"] = [
        {
            "query": tensor,
            "key": tensor,
            "value": tensor,
            "attn_mask": {"shape": [1, 1, 1, 1], "strides": None, "dtype": "bool"},
            "eligible": ["efficient", "math"],
            "refused": {"flash": [reason], "cudnn": ["cuDNN needs a head dimension divisible by 8"]},
        }
    ]
    plain = docs.variant(json.loads((TRACES / "result-ncu.json").read_text()))
    html, bare = _run_pages(site, own, "sdpa-why", {"7" * 40: doc, "8" * 40: plain})
    part = html.split('<div class="sdpa-calls">', 1)[1].split("</div>", 1)[0]
    assert "attn_mask bool [1, 1, 1, 1]" in part and "would take efficient, math" in part
    assert "<li>flash refused: Flash attention does not support non-null attn_mask &lt;b&gt;.</li>" in part
    assert part.index("cudnn refused") < part.index("flash refused")
    assert 'class="sdpa-calls"' not in bare


def test_a_case_shows_the_advice_measured_in_its_run(site: Site, own: Project) -> None:
    """Advice that helped, with both times, escaped; advice that did not help is counted, not shown."""
    doc = docs.variant(json.loads((TRACES / "result-ncu.json").read_text()))
    doc["cases"][0]["advice"] = [
        {
            "rule": "mask",
            "call": 0,
            "suggestion": "drop the mask <i>",
            "current_us": 209.3,
            "alternative_us": 199.7,
            "helps": True,
            "note": "where it keeps every position (an all-true padding mask)",
        },
        {
            "rule": "head_dim",
            "call": 0,
            "suggestion": "pad",
            "current_us": 209.3,
            "alternative_us": 230.0,
            "helps": False,
        },
    ]
    doc["cases"][1]["advice"] = [
        {
            "rule": "backend",
            "call": 0,
            "suggestion": "take math",
            "current_us": 10.0,
            "alternative_us": 50.0,
            "helps": False,
        }
    ]
    plain = docs.variant(json.loads((TRACES / "result-ncu.json").read_text()))
    html, bare = _run_pages(site, own, "advice", {"5" * 40: doc, "6" * 40: plain})
    first, second = html.split('<div class="advice">')[1:3]
    assert "2 changes to this case" in first and "the ones at least 5% faster:" in first
    assert "ADVICE (mask): drop the mask &lt;i&gt;: would take 199.7 µs instead of 209.3 µs" in first
    assert first.split("</div>", 1)[0].count("<li>") == 1  # the head_dim try that did not help is not listed
    assert "1 change to this case" in second and "none was at least 5% faster." in second
    assert '<div class="advice">' not in bare
