"""The portability page: a project's runs on an H200 and on an H100 read apart, in a real browser (the chart draws,
each case's reading in the table: the hardware for a memory-bound case, the code for one that uses the H100 worse);
without runs chosen it offers the latest run of each testbed; a run of another project is a 404."""

from __future__ import annotations

from typing import Any

from attnprof.core.documents import ResultDocument
from tests.core.test_portability import COMPUTE, MEMORY, h100_variant
from tests.server.web.pages import fresh_project, http, upload, watch_errors
from tests.server.web.stack import Site, docs, sign_in


def test_two_gpu_models_are_read_apart_on_the_portability_page(site: Site, page: Any) -> None:
    made = fresh_project(site, "port")
    h200 = docs.h200()
    h100 = h100_variant(ResultDocument.model_validate(h200)).model_dump(mode="json", by_alias=True)
    h100["run"]["id"] = h200["run"]["id"] + "-h100"
    upload(site, made, h200, commit="a" * 40)
    upload(site, made, h100, commit="a" * 40)
    run_h200, run_h100 = made.runs
    with http(site, made.tokens.read) as client:
        offer = client.get(f"/ui/p/{made.name}/portability").text
        assert run_h200 in offer and run_h100 in offer and "against" in offer
        html = client.get(f"/ui/p/{made.name}/portability", params={"a": run_h200, "b": run_h100}).text
        assert "NVIDIA H200" in html and "NVIDIA H100 80GB HBM3" in html
        row = html[html.index(f"<code>{MEMORY}</code>") :]
        assert "hardware: the hardware" in row[: row.index("</tr>")]
        row = html[html.index(f"<code>{COMPUTE}</code>") :]
        assert "worse" in row[: row.index("</tr>")]
        other = fresh_project(site, "port-other")
        with http(site, other.tokens.read) as theirs:
            r = theirs.get(f"/ui/p/{other.name}/portability", params={"a": run_h200, "b": run_h100})
            assert r.status_code == 404 and "no run" in r.text
    errors = watch_errors(page)
    sign_in(page, site, made.tokens.read, next_path=f"/ui/p/{made.name}/fleet")
    page.click("text=Compare this project's runs on two GPU models")
    page.fill("#pa", run_h200)
    page.fill("#pb", run_h100)
    with page.expect_navigation():
        page.click("button:has-text('Compare')")
    page.wait_for_selector("#portability-ratio .main-svg")
    assert page.locator("#portability-ratio .point, #portability-ratio .bars .point").count() >= 2
    assert errors == []
