"""The comparison page answers in ten seconds, on the committed H200 run (``tests/data/h200/attnprof/result.json``):

- ``softmax``: a pull request whose ``softmax_warp_forward`` in the math backend's forward case is 61% slower (the
  case is memory-bound, so its finding is a bandwidth drop); the page leads with that line, in the PR comment's
  words, within the first screen at 1440×900, the kernel diff above the unchanged findings, and the chart plots the
  bandwidth drop as a positive (worse) change;
- ``broken``: the same, and one case failed with a long stored error, another switched backend; both are lines of
  the answer and flags on the chart, the failed case's error in a box that scrolls on its own.

``ATTNPROF_SCREENSHOTS=docs/img .venv/bin/pytest tests/server/web/test_comparison_answer.py -k screenshot`` writes
``docs/img/comparison.png``; without the variable the picture goes to the test's temporary folder.
"""

from __future__ import annotations

import os
import re
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from html import unescape
from pathlib import Path
from typing import Any

import pytest

from attnprof.core.documents import parse_result
from attnprof.core.documents.comparison import ComparisonDocument
from attnprof.server.github import regressions as ranked
from attnprof.server.web.pages.comparisons import ANSWER_LINES_OPEN
from tests.server.web.comparison_documents import (
    ERROR_MESSAGE,
    FAILED_CASE,
    SOFTMAX_CASE,
    SOFTMAX_KERNEL,
    SOFTMAX_SLOWER,
    SWITCHED_CASE,
    broken,
    slower_kernel,
)
from tests.server.web.pages import Project, fresh_project, http, upload, watch_errors
from tests.server.web.stack import Site, docs, sign_in


@dataclass
class Scenario:
    project: Project
    softmax: str = ""
    broken: str = ""
    everything: str = ""
    documents: dict[str, dict[str, Any]] = field(default_factory=dict)  # by the service's run id


@pytest.fixture(scope="module")
def scenario(site: Site) -> Iterator[Scenario]:
    project = fresh_project(site, "answer")
    found = Scenario(project)
    commits = [f"{i:040x}" for i in range(1, 4)]
    for i, commit in enumerate(commits):
        doc = docs.h200(jitter=0.002 * (i - 1))
        upload(site, project, doc, commit=commit, ancestors=commits[:i][::-1])
        found.documents[project.runs[-1]] = doc
    for name, pr, make in (("softmax", 11, lambda d: d), ("broken", 12, broken)):
        doc = make(slower_kernel(docs.h200(), SOFTMAX_CASE, SOFTMAX_KERNEL, SOFTMAX_SLOWER))
        upload(
            site,
            project,
            doc,
            branch=name,
            commit=f"{pr:040x}",
            base_commit=commits[-1],
            ancestors=commits[::-1],
            pr=pr,
        )
        found.documents[project.runs[-1]] = doc
        setattr(found, name, project.comparisons[-1])
    doc = docs.h200(slower=1.25)  # every case: more lines than the answer shows open
    upload(site, project, doc, branch="all", commit=f"{13:040x}", base_commit=commits[-1], ancestors=commits[::-1])
    found.documents[project.runs[-1]] = doc
    found.everything = project.comparisons[-1]
    yield found


def _open(browser: Any, site: Site, scenario: Scenario, comparison_id: str) -> tuple[Any, Any]:
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    tab = context.new_page()
    sign_in(tab, site, scenario.project.tokens.read)
    tab.goto(f"{site.url}/ui/p/{scenario.project.name}/comparisons/{comparison_id}")
    return context, tab


def _comment_lines(site: Site, scenario: Scenario, comparison_id: str) -> list[str]:
    """The PR comment's lines of the comparison, as ``attnprof.server.github.comment`` writes them (against the first
    baseline run), in plain text: the list dash and the backticks dropped."""
    with site.api(scenario.project.tokens.read) as client:
        answer = client.get(f"/api/v1/projects/{scenario.project.name}/comparisons/{comparison_id}")
        assert answer.status_code == 200, answer.text
        body = answer.json()
    doc = ComparisonDocument.model_validate(body["document"])
    baseline = parse_result(scenario.documents[body["baseline"][0]])
    candidate = parse_result(scenario.documents[body["run_id"]])
    lines = [ranked.line(r, baseline, candidate) for r in ranked.by_impact(doc, baseline, candidate)]
    return [line.removeprefix("- ").replace("`", "") for line in lines]


def _spec_traces(tab: Any) -> list[dict[str, Any]]:
    tab.wait_for_selector("#changes[data-drawn=true] .main-svg")
    found: list[dict[str, Any]] = tab.evaluate(
        "document.getElementById('changes').data.map(t => ({name: t.name, x: t.x, y: t.y,"
        " up: t.error_y ? t.error_y.array : null, down: t.error_y ? t.error_y.arrayminus : null}))"
    )
    return found


def test_the_answer_names_the_kernel_within_the_first_screen(browser: Any, site: Site, scenario: Scenario) -> None:
    context, tab = _open(browser, site, scenario, scenario.softmax)
    try:
        errors = watch_errors(tab)
        lead = tab.locator("#answer-lead")
        text = lead.inner_text()
        # The PR comment's lead line, word for word.
        assert [text] == _comment_lines(site, scenario, scenario.softmax)
        assert re.match(re.escape(SOFTMAX_CASE) + r" \+[56]\.\d% \(3,4\d\d → 3,6\d\d µs\): ", text), text
        assert f"{SOFTMAX_KERNEL} +208.1 µs (+61.0%), memory-bound, bandwidth use 75% → 47%" in text
        assert tab.locator("#verdict .badge").inner_text() == "FAIL"
        box = lead.bounding_box()
        assert box is not None and box["y"] + box["height"] < 900, box  # on the first screen, whole
        # The kernel diff: the softmax kernel first (the largest slowdown), above the folded unchanged findings.
        first = tab.locator("#kernel-diff table.moved tbody tr").first.locator("td").all_inner_texts()
        assert first[0].startswith(SOFTMAX_KERNEL) and first[1].startswith(SOFTMAX_CASE)
        assert first[3].startswith("+208.1 µs (+61.0%)"), first
        deltas = tab.evaluate(
            "[...document.querySelectorAll('#kernel-diff > .scroll table.moved tbody tr td:nth-child(4) strong')]"
            ".map(s => s.textContent)"
        )
        assert deltas[0] == "+208.1 µs" and len(deltas) >= 1
        diff_top = tab.locator("#kernel-diff").bounding_box()
        unchanged = tab.locator("details#unchanged")
        assert diff_top is not None and unchanged.bounding_box()["y"] > diff_top["y"] + diff_top["height"] - 1
        assert unchanged.get_attribute("open") is None
        assert tab.locator("#findings tbody tr").first.locator("td").first.inner_text() == SOFTMAX_CASE
        # The chart: the bandwidth drop plots as a positive change of time, the case's slowdown.
        regressed = next(t for t in _spec_traces(tab) if t["name"] == "regressed")
        assert regressed["x"] == [SOFTMAX_CASE]
        assert 6.0 < regressed["y"][0] < 7.0 and regressed["down"][0] < regressed["y"][0]
        axis = str(tab.locator("#changes .ytitle").text_content())
        assert "worse" in axis and "time" in axis
        others = [y for t in _spec_traces(tab) if t["name"] in ("unchanged", "improved") for y in t["y"]]
        assert others and all(abs(y) < 2.0 for y in others)
        assert errors == []
    finally:
        context.close()


def test_every_other_regression_is_a_line_and_a_failed_case_shows_its_error(
    browser: Any, site: Site, scenario: Scenario
) -> None:
    context, tab = _open(browser, site, scenario, scenario.broken)
    try:
        errors = watch_errors(tab)
        expected = _comment_lines(site, scenario, scenario.broken)
        # The case that broke leads (a failure outranks any slowdown), then the others by the µs they added.
        assert expected[0].startswith(f"{FAILED_CASE}: status ok → failed")
        shown = [tab.locator("#answer-lead").inner_text(), *tab.locator("ol.cmp-lines > li").all_inner_texts()]
        assert [s.split("\n")[0] for s in shown] == expected
        assert any(line.startswith(f"{SWITCHED_CASE}") and "backend" in line for line in expected)
        assert any(SOFTMAX_KERNEL in line for line in expected)
        cases = len(docs.h200()["cases"])
        assert (
            f"Cases by their worst finding: 3 regressed · 0 improved · 0 inconclusive · {cases - 3} unchanged; "
            f"{cases} of the {cases} cases had a baseline" in tab.locator("#answer").inner_text()
        )
        # The stored error: in a code block under its line, clipped, scrolling in its own box.
        error = tab.locator("#answer pre.cmp-error").first
        assert error.is_visible()
        code = error.inner_text()
        assert code.startswith("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 8.00 GiB.")
        full = len("torch.OutOfMemoryError: ") + len(ERROR_MESSAGE)
        assert len(code) == 2000 < full
        assert f"The first 2,000 of {full:,} characters" in tab.locator("#answer").inner_text()
        sizes = error.evaluate("e => [e.scrollHeight, e.clientHeight, getComputedStyle(e).overflowY]")
        assert sizes[0] > sizes[1] and sizes[2] == "auto", sizes
        assert tab.evaluate("document.documentElement.scrollWidth") <= 1440
        # The chart: the failed case and the backend switch are flags in words; the slowdown still plots positive.
        traces = {t["name"]: t for t in _spec_traces(tab)}
        assert traces["case failed"]["x"] == [FAILED_CASE]
        assert traces["backend switched"]["x"] == [SWITCHED_CASE]
        assert traces["case failed"]["y"][0] > max(traces["regressed"]["y"])
        assert SOFTMAX_CASE in traces["regressed"]["x"]
        legend = tab.locator("#changes .legend .traces").all_text_contents()
        assert "case failed" in legend and "backend switched" in legend
        assert errors == []
    finally:
        context.close()


def _text(html: str) -> str:
    return re.sub(r"\s+", " ", unescape(re.sub(r"<[^>]+>", "", html))).strip()


def test_a_suite_that_regressed_as_a_whole_keeps_the_first_lines_open_and_the_kernels_by_microseconds(
    site: Site, scenario: Scenario
) -> None:
    expected = _comment_lines(site, scenario, scenario.everything)
    assert len(expected) == len(docs.h200()["cases"]) > ANSWER_LINES_OPEN
    with http(site, scenario.project.tokens.read) as client:
        html = client.get(f"/ui/p/{scenario.project.name}/comparisons/{scenario.everything}").text
    lead = re.search(r'<span id="answer-lead" class="cmp-lead">(.*?)</span></p>', html, re.S)
    assert lead is not None
    lists = re.findall(r'<ol class="cmp-lines"[^>]*>(.*?)</ol>', html, re.S)
    items = [[_text(li) for li in re.findall(r"<li[^>]*>(.*?)</li>", ol, re.S)] for ol in lists]
    # The lead and the next lines open, in the comment's order; the rest behind a summary that counts them.
    assert [_text(lead.group(1)), *items[0]] == expected[:ANSWER_LINES_OPEN]
    assert items[1] == expected[ANSWER_LINES_OPEN:]
    more = len(expected) - ANSWER_LINES_OPEN
    assert f'<details class="cmp-more"><summary>{more} more regressed cases, by impact</summary>' in html
    # The kernel diff: every row's change (µs) no larger than the one above it.
    diff = html.split('id="kernel-diff"', 1)[1].split("</section>", 1)[0]
    deltas = [_text(d) for d in re.findall(r'<td class="num"><strong>(.*?)</strong>', diff)]
    assert len(deltas) > len(expected)
    values = [
        float(d.replace("+", "").replace("−", "-").replace(",", "").split()[0]) * (1000 if " ms" in d else 1)
        for d in deltas
    ]
    assert values == sorted(values, reverse=True) and values[0] > 0


def _png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", head[16:24])
    return int(width), int(height)


def test_screenshot_of_the_comparison_page(browser: Any, site: Site, scenario: Scenario, tmp_path: Path) -> None:
    """The picture of ``docs/img/comparison.png``: the broken candidate's page at 1440 px, its first 1,800 px."""
    folder = Path(os.environ.get("ATTNPROF_SCREENSHOTS") or tmp_path)
    context, tab = _open(browser, site, scenario, scenario.broken)
    try:
        tab.wait_for_selector("#changes[data-drawn=true] .main-svg")
        height = min(int(tab.evaluate("document.documentElement.scrollHeight")), 1800)
        path = folder / "comparison.png"
        tab.screenshot(path=str(path), full_page=True, clip={"x": 0, "y": 0, "width": 1440, "height": height})
        assert _png_size(path) == (1440, height)
    finally:
        context.close()
