"""Sign-in comes back to the very page that asked for it, for every page of the dashboard: its path as the browser
sent it (percent-encoded parts kept, so a trace named ``a b?c=%`` is still one segment) and its query."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest

from attnprof.contract.links import PATHS
from tests.server.web.stack import Site


def _pages(site: Site) -> list[str]:
    p = site.project
    return [
        PATHS.ui_project(p),
        PATHS.ui_jobs(p, status="queued", branch="feature"),
        PATHS.ui_job(p, site.job_id),
        PATHS.ui_job_states(p, [site.job_id]),
        PATHS.ui_run(p, site.pr_run) + "?done=pin",
        PATHS.ui_run_comparison(p, site.pr_run),
        PATHS.ui_trace(p, site.pr_run, "sdpa_backend=cudnn_pass=fwd_.trace.json.gz"),
        PATHS.ui_trace(p, site.pr_run, "odd name?x=1&y=%.gz"),
        PATHS.ui_comparison(p, site.pr_comparison) + "?case=sdpa%5Bbackend%3Dcudnn%5D&metric=latency",
        PATHS.ui_trends(p, case="sdpa[backend=cudnn,pass=fwd]", metric="latency", branch="main", x="commit"),
    ]


def _form(client: httpx.Client, location: str) -> tuple[str, str]:
    form = client.get(location)
    assert form.status_code == 200, form.text[:300]
    csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
    nxt = re.search(r'name="next" value="([^"]*)"', form.text)
    assert csrf is not None and nxt is not None
    return csrf.group(1), nxt.group(1).replace("&amp;", "&")


def test_every_page_comes_back_after_sign_in_with_its_query(site: Site) -> None:
    for target in _pages(site):
        with httpx.Client(base_url=site.url) as client:
            first = client.get(target)
            assert first.status_code == 303, target
            csrf, nxt = _form(client, first.headers["location"])
            assert nxt == target
            signed = client.post("/ui/login", data={"token": site.tokens.read, "csrf": csrf, "next": nxt})
            assert signed.status_code == 303
            assert signed.headers["location"] == target
            after = client.get(target)
            assert not after.headers.get("location", "").startswith("/ui/login"), target


def test_the_browser_comes_back_to_the_exact_url(site: Site, page: Any) -> None:
    target = site.url + PATHS.ui_trends(site.project, case="sdpa[backend=cudnn,pass=fwd]", metric="latency")
    page.goto(target)
    assert page.url.startswith(site.url + "/ui/login?next=")
    page.fill("#token", site.tokens.read)
    with page.expect_navigation():
        page.keyboard.press("Enter")
    assert page.url == target


def test_a_form_posted_after_the_session_ended_comes_back_to_the_page_that_held_it(site: Site) -> None:
    run_page = PATHS.ui_run(site.project, site.pr_run) + "?done=pin"
    with httpx.Client(base_url=site.url) as client:
        posted = client.post(
            PATHS.ui_run_rule(site.project, site.pr_run, "pin"),
            data={"csrf": "x", "reason": "r"},
            headers={"Referer": site.url + run_page},
        )
        assert posted.status_code == 303
        _, nxt = _form(client, posted.headers["location"])
        assert nxt == run_page
        # A referer on another site is never where sign-in leads.
        posted = client.post(
            PATHS.ui_run_rule(site.project, site.pr_run, "pin"),
            data={"csrf": "x"},
            headers={"Referer": "https://evil.example/ui/p/x"},
        )
        assert posted.headers["location"] == PATHS.ui_login()


@pytest.mark.parametrize(
    "target",
    ["/ui/p/x\r\nSet-Cookie: a=b", "/ui/p/x\ty", "/ui/" + "a" * 2100, "/ui", "/uix/p", "http://evil.example/ui/"],
)
def test_a_next_that_is_not_a_page_here_is_dropped(site: Site, target: str) -> None:
    with httpx.Client(base_url=site.url) as client:
        csrf, nxt = _form(client, f"/ui/login?{httpx.QueryParams({'next': target})}")
        assert nxt == ""
        posted_next = target if len(target) <= 2000 else ""  # the form's field takes 2,000 characters
        signed = client.post("/ui/login", data={"token": site.tokens.read, "csrf": csrf, "next": posted_next})
        assert signed.status_code == 303
        assert signed.headers["location"] == PATHS.ui_project(site.project)
