"""Pages fit the window, on a 390-px phone and a 1440-px desktop: the page itself never scrolls sideways, and a
table wider than the page scrolls inside its own box (kernel tables most of all) instead of being cut off."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.server.web.stack import Site, sign_in

WIDTHS = (390, 1440)

PAGES: dict[str, Callable[[Site], str]] = {
    "run": lambda s: f"/ui/p/{s.project}/runs/{s.pr_run}",
    "comparison": lambda s: f"/ui/p/{s.project}/comparisons/{s.pr_comparison}",
    "overview": lambda s: f"/ui/p/{s.project}",
    "jobs": lambda s: f"/ui/p/{s.project}/jobs",
    "job": lambda s: f"/ui/p/{s.project}/jobs/{s.job_id}",
    "trends": lambda s: f"/ui/p/{s.project}/trends",
    "runs": lambda s: f"/ui/p/{s.project}/runs",
    "pull": lambda s: f"/ui/p/{s.project}/pulls/7",
}

# Every table: the box that scrolls it sideways (overflow-x auto or scroll), if any, and how it sits in the window.
TABLES_JS = """() => [...document.querySelectorAll("main table")].filter(t => t.offsetParent !== null).map(t => {
  let box = t.parentElement;
  while (box && box !== document.body && !["auto", "scroll"].includes(getComputedStyle(box).overflowX)) {
    box = box.parentElement;
  }
  const scrolls = box && box !== document.body;
  const r = (scrolls ? box : t).getBoundingClientRect();
  return {
    kernels: t.classList.contains("kernels"),
    scrolls: Boolean(scrolls),
    left: r.left,
    right: r.right,
    tableWidth: t.scrollWidth,
    boxWidth: scrolls ? box.clientWidth : null,
    boxScrollWidth: scrolls ? box.scrollWidth : null,
  };
})"""


@pytest.fixture(params=WIDTHS, ids=[f"{w}px" for w in WIDTHS])
def sized(browser: Any, request: pytest.FixtureRequest) -> Any:
    context = browser.new_context(viewport={"width": request.param, "height": 900})
    tab = context.new_page()
    yield tab
    context.close()


@pytest.mark.parametrize("name", list(PAGES))
def test_the_page_never_scrolls_sideways_and_wide_tables_scroll_in_their_box(sized: Any, site: Site, name: str) -> None:
    sign_in(sized, site, site.tokens.read)
    sized.goto(site.url + PAGES[name](site))
    sized.wait_for_load_state("networkidle")
    if name == "run":
        sized.wait_for_selector("#latency[data-drawn=true] .main-svg")
    width = sized.evaluate("window.innerWidth")
    scroll_width = sized.evaluate("document.documentElement.scrollWidth")
    assert scroll_width <= width, f"{name} page is {scroll_width} px wide in a {width}-px window"
    tables = sized.evaluate(TABLES_JS)
    assert tables or name == "job", f"no table on the {name} page"
    for t in tables:
        # Each table, or the box it scrolls in, lies within the window: nothing cut off at either edge...
        assert t["left"] >= -0.5 and t["right"] <= width + 0.5, t
        # ...and a table wider than its place scrolls there, reachable, rather than overflowing it.
        if not t["scrolls"]:
            assert t["tableWidth"] <= t["right"] - t["left"] + 1, t


@pytest.mark.parametrize("name", ["run", "comparison"])
def test_kernel_tables_scroll_in_their_own_box(sized: Any, site: Site, name: str) -> None:
    sign_in(sized, site, site.tokens.read)
    sized.goto(site.url + PAGES[name](site))
    sized.wait_for_load_state("networkidle")
    width = sized.evaluate("window.innerWidth")
    kernels = [t for t in sized.evaluate(TABLES_JS) if t["kernels"]]
    assert kernels, f"no kernel table shown on the {name} page"
    for t in kernels:
        assert t["scrolls"], t
        assert t["boxWidth"] <= width
        assert t["boxScrollWidth"] >= t["tableWidth"]  # the whole table is inside the box: it scrolls, never clips
        if width == 390:
            assert t["boxScrollWidth"] > t["boxWidth"], t  # too wide for a phone: it scrolls in its box
    assert sized.evaluate("document.documentElement.scrollWidth") <= width
