"""Helpers of the dashboard page tests: a project of their own (baseline rules act per project, so the
shared site's comparisons never see them), HTTP sign-in, and keyboard navigation in the browser."""

from __future__ import annotations

import copy
import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx

from tests.server.web.stack import Site, Tokens, _project, _upload, docs


@dataclass
class Project:
    """A project made for one test module, with its tokens and the runs uploaded to it."""

    name: str
    tokens: Tokens
    runs: list[str] = field(default_factory=list)
    comparisons: list[str] = field(default_factory=list)


def fresh_project(site: Site, prefix: str) -> Project:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    return Project(name=name, tokens=_project(site.db_url, name))


def upload(site: Site, project: Project, doc: dict[str, Any], **kw: Any) -> dict[str, Any]:
    """Upload a result document to ``project``; its run id and comparison id are recorded."""
    with site.api(project.tokens.submit) as client:
        body = _upload(client, project.name, doc, **kw)
    project.runs.append(body["run_id"])
    project.comparisons.append(body.get("comparison_id") or "")
    return body


def seed_pair(site: Site, project: Project, *, slower: float = 1.25, bases: int = 3) -> None:
    """``bases`` default-branch runs of the H200 document, then a pull-request run whose first case is slower."""
    commits = [f"{i:040x}" for i in range(1, bases + 1)]
    for i, commit in enumerate(commits):
        upload(site, project, docs.h200(jitter=0.002 * ((i % 3) - 1)), commit=commit, ancestors=commits[:i][::-1])
    slow = docs.h200()["cases"][0]["id"]
    upload(
        site,
        project,
        docs.h200(slower=slower, cases=[slow]),
        branch="feature",
        commit="f" * 40,
        base_commit=commits[-1],
        ancestors=commits[::-1],
        pr=3,
    )


def login(client: httpx.Client, token: str) -> None:
    form = client.get("/ui/login")
    csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
    assert csrf is not None
    answer = client.post("/ui/login", data={"token": token, "csrf": csrf.group(1), "next": ""})
    assert answer.status_code == 303, answer.text


@contextmanager
def http(site: Site, token: str) -> Iterator[httpx.Client]:
    """An HTTP client signed in through the form (CSRF cookie and field), as a browser would be."""
    with httpx.Client(base_url=site.url, timeout=60) as client:
        login(client, token)
        yield client


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found is not None
    return found.group(1)


def rules(site: Site, project: Project) -> list[dict[str, Any]]:
    """The project's baseline rules, through the API."""
    with site.api(project.tokens.read) as client:
        answer = client.get(f"/api/v1/projects/{project.name}/baselines")
        assert answer.status_code == 200, answer.text
        found: list[dict[str, Any]] = answer.json()["rules"]
        return found


def tab_to(tab: Any, selector: str, limit: int = 400) -> None:
    """Press Tab until the element matching ``selector`` has the focus (keyboard only, as a person would)."""
    for _ in range(limit):
        tab.keyboard.press("Tab")
        if tab.evaluate("(s) => document.activeElement && document.activeElement.matches(s)", selector):
            return
    raise AssertionError(f"{selector} never took the focus in {limit} presses of Tab")


def watch_errors(tab: Any) -> list[str]:
    """Console errors, uncaught exceptions and failed requests of a tab, as they happen."""
    errors: list[str] = []
    tab.on("console", lambda m: errors.append(f"console: {m.text} at {m.location}") if m.type == "error" else None)
    tab.on("pageerror", lambda e: errors.append(f"page error: {e}"))
    tab.on("requestfailed", lambda r: errors.append(f"request failed: {r.url}"))
    tab.on("response", lambda r: errors.append(f"HTTP {r.status}: {r.url}") if r.status >= 400 else None)
    return errors


def hundred_cases(doc: dict[str, Any], n: int = 100) -> dict[str, Any]:
    """``doc`` with its cases repeated to ``n`` (a size a real suite reaches), each copy a distinct case: the
    copies carry a ``rep`` parameter in their id and params, and name no trace."""
    cases = doc["cases"]
    out = []
    for i in range(n):
        case = copy.deepcopy(cases[i % len(cases)])
        rep = i // len(cases)
        if rep:
            case_id = str(case["id"])
            case["id"] = case_id[:-1] + f",rep={rep}]" if case_id.endswith("]") else f"{case_id}[rep={rep}]"
            case["params"]["rep"] = rep
            case["trace"] = None
        out.append(case)
    return {**doc, "cases": out}
