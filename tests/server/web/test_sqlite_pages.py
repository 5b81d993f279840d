"""Every dashboard page on SQLite, the embedded mode's database (``attnprof demo`` serves the dashboard from it):
the pages' queries take other paths there (no LATERAL, no JSONB, no array parameters), so each page is fetched
over HTTP from an app on a migrated SQLite file, filled through the API, and read for what it must show."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from attnprof.server import migrate
from attnprof.server.app import create_app
from attnprof.server.auth import service as auth
from attnprof.server.db import make_engine, make_sessionmaker
from attnprof.server.projects import service as projects
from tests.server.stack import make_settings
from tests.server.web.pages import csrf_of, login
from tests.server.web.stack import CPU_SUITE, docs


@dataclass
class Lite:
    client: TestClient
    project: str
    admin: str
    runs: list[str]
    pr_run: str
    comparison: str
    job: str
    case: str
    kernel: str
    testbed: str


@pytest.fixture(scope="module")
def lite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lite]:
    url = f"sqlite:///{tmp_path_factory.mktemp('lite') / 'attnprof.db'}"
    migrate.upgrade(url)
    engine = make_engine(url)
    with make_sessionmaker(engine)() as session:
        project = projects.create(session, name="lite")
        admin = auth.create_project_token(session, project_id=project.id, role="admin")[1]
        session.commit()
    engine.dispose()
    app = create_app(make_settings(url, public_url="http://testserver"))
    with TestClient(app, follow_redirects=False) as client:
        api = {"Authorization": f"Bearer {admin}"}
        commits = [f"{i:040x}" for i in range(1, 5)]
        runs = []
        for i, commit in enumerate(commits):
            body = docs.upload_body(docs.h200(jitter=0.002 * ((i % 3) - 1)), commit=commit, ancestors=commits[:i][::-1])
            answer = client.post("/api/v1/projects/lite/results", json=body, headers=api)
            assert answer.status_code == 201, answer.text
            runs.append(answer.json()["run_id"])
        template = docs.h200()
        case = template["cases"][0]["id"]
        body = docs.upload_body(
            docs.h200(slower=1.25, cases=[case]),
            branch="feature",
            commit="f" * 40,
            base_commit=commits[-1],
            ancestors=commits[::-1],
            pr=7,
        )
        pr = client.post("/api/v1/projects/lite/results", json=body, headers=api)
        assert pr.status_code == 201, pr.text
        job = client.post(
            "/api/v1/projects/lite/jobs",
            files={"spec": ("cpu.toml", CPU_SUITE.read_bytes())},
            data={"branch": "feature", "commit": "e" * 40, "pr": "7", "testbed": pr.json()["testbed"]},
            headers=api,
        )
        assert job.status_code == 202, job.text
        login(client, admin)
        yield Lite(
            client=client,
            project="lite",
            admin=admin,
            runs=runs,
            pr_run=pr.json()["run_id"],
            comparison=pr.json()["comparison_id"],
            job=job.json()["id"],
            case=case,
            kernel=template["cases"][0]["kernels"][0]["key"],
            testbed=pr.json()["testbed"],
        )


def _page(lite: Lite, path: str, **params: Any) -> str:
    answer = lite.client.get(f"/ui/p/{lite.project}{path}", params=params)
    assert answer.status_code == 200, (path, answer.text[:2000])
    return answer.text


def _numbers(html: str) -> int:
    """How many table rows the page has."""
    return len(re.findall(r"<tr\b", html))


def test_overview_lists_the_testbed_and_the_latest_default_branch_runs(lite: Lite) -> None:
    html = _page(lite, "")
    assert lite.testbed in html
    for run in lite.runs:
        assert f"/runs/{run}" in html
    assert f"/runs/{lite.pr_run}" not in html


def test_case_trend_has_a_point_per_default_branch_run(lite: Lite) -> None:
    html = _page(lite, "/trends", case=lite.case, testbed=lite.testbed)
    for run in lite.runs:
        assert run in html
    assert _numbers(html) >= len(lite.runs)


@pytest.mark.parametrize("metric", ["latency", "occupancy"])
def test_kernel_trend_has_a_point_per_default_branch_run(lite: Lite, metric: str) -> None:
    html = _page(lite, "/trends", case=lite.case, testbed=lite.testbed, kernel=lite.kernel, metric=metric)
    for run in lite.runs:
        assert run in html


def test_run_page_shows_its_cases_and_its_comparison(lite: Lite) -> None:
    html = _page(lite, f"/runs/{lite.pr_run}")
    assert lite.case in html
    assert lite.comparison in html


def test_comparison_page_names_the_regressed_case(lite: Lite) -> None:
    html = _page(lite, f"/comparisons/{lite.comparison}")
    assert lite.case in html
    assert "regress" in html.lower()


def test_jobs_list_job_page_and_its_poll(lite: Lite) -> None:
    assert lite.job in _page(lite, "/jobs")
    assert lite.job in _page(lite, f"/jobs/{lite.job}")
    state = lite.client.get(f"/ui/p/{lite.project}/jobs/state", params={"ids": lite.job})
    assert state.status_code == 200, state.text


def test_an_admin_pins_a_run_and_takes_the_pin_back(lite: Lite) -> None:
    run = lite.runs[0]
    csrf = csrf_of(_page(lite, f"/runs/{run}"))
    pinned = lite.client.post(f"/ui/p/{lite.project}/runs/{run}/baselines/pin", data={"csrf": csrf})
    assert pinned.status_code in (200, 303), pinned.text
    rules = lite.client.get(
        f"/api/v1/projects/{lite.project}/baselines", headers={"Authorization": f"Bearer {lite.admin}"}
    ).json()["rules"]
    assert [r["run_id"] for r in rules if r["kind"] == "pin"] == [run]
    removed = lite.client.post(f"/ui/p/{lite.project}/runs/{run}/baselines/pin/remove", data={"csrf": csrf})
    assert removed.status_code in (200, 303), removed.text
    rules = lite.client.get(
        f"/api/v1/projects/{lite.project}/baselines", headers={"Authorization": f"Bearer {lite.admin}"}
    ).json()["rules"]
    assert [r for r in rules if r["kind"] == "pin"] == []


def test_the_database_is_sqlite(lite: Lite) -> None:
    assert Path(str(lite.client.app.state.engine.url.database)).name == "attnprof.db"  # type: ignore[attr-defined]
