"""A paired comparison on the dashboard, server-rendered: the comparison page says it is a paired run on one GPU
with its rounds, minimum effect and stopping reasons, each finding's rounds; the base side's id is text, never a
link; the stored-history comparison of the same run is beside it, and the run page and its comparison link put
the paired one first."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import httpx
import pytest
from markupsafe import escape
from sqlalchemy import delete, insert, select, update

from attnprof.server.comparisons.models import Comparison
from attnprof.server.db import make_engine, make_sessionmaker
from attnprof.server.jobs.models import Job
from attnprof.server.projects.models import Project as ProjectRow
from attnprof.server.runs.models import Run
from attnprof.server.testbeds.models import Testbed as StoredTestbed
from attnprof.server.web import repository
from tests.core.paired_docs import AMBIGUOUS, BASE_RUN, SAME, paired_comparison, paired_sides
from tests.server.web.pages import Project, fresh_project, login, upload
from tests.server.web.stack import CPU_SUITE, Site


@pytest.fixture(scope="module")
def paired_job(site: Site) -> Iterator[tuple[Project, str, str, Any]]:
    """A run of a paired job's head with its stored-history comparison (made by the upload) and its paired one
    stored after it, as the analysis stores them: (project, history comparison id, paired comparison id, doc)."""
    project = fresh_project(site, "paired")
    _, head, _ = paired_sides()
    upload(site, project, head.model_dump(mode="json", by_alias=True), branch="feature", commit="a" * 40, pr=5)
    run_id, history_id = project.runs[-1], project.comparisons[-1]
    doc = paired_comparison()
    paired_id = str(uuid.uuid4())
    engine = make_engine(site.db_url)
    try:
        with engine.begin() as conn:
            row = conn.execute(select(Comparison.__table__).where(Comparison.id == history_id)).one()
            conn.execute(
                insert(Comparison).values(
                    {
                        **row._asdict(),
                        "id": paired_id,
                        "mode": "paired",
                        "verdict": doc.verdict,
                        "baseline_run_ids": [],
                        "document": doc.model_dump(mode="json", by_alias=True),
                        "created_at": row.created_at + timedelta(seconds=1),
                    }
                )
            )
        assert run_id
        yield project, history_id, paired_id, doc
    finally:
        with engine.begin() as conn:
            conn.execute(delete(Comparison).where(Comparison.id == paired_id))
        engine.dispose()


def _get(site: Site, project: Project, path: str) -> httpx.Response:
    with httpx.Client(base_url=site.url) as client:
        login(client, project.tokens.read)
        return client.get(f"/ui/p/{project.name}{path}")


def test_the_paired_comparison_page_says_it_is_a_paired_run_with_its_rounds(site: Site, paired_job: Any) -> None:
    project, history_id, paired_id, doc = paired_job
    html = _get(site, project, f"/comparisons/{paired_id}").text
    assert "<strong>Paired run on one GPU:</strong>" in html
    assert (
        f"{doc.paired.rounds} pairs of rounds over all cases in 84 s, at most 15 per case; minimum effect 0.5%" in html
    )
    assert "error level 0.050 per case, over each case's looks." in html  # one case compared: nothing to split
    assert '<span id="paired-stopped">1 slower, 1 faster, 1 the same, 1 ambiguous</span>' in html
    summary = html.split("Cases by their worst finding:", 1)[1].split("</p>", 1)[0]
    assert "against its merge base, paired on one GPU" in summary and "baseline run" not in summary
    # each finding's rounds, an ambiguous one with what would settle it
    assert '<th scope="col">Rounds</th>' in html
    amb = next(f for f in doc.findings if f.case == AMBIGUOUS.case)
    assert f'<td class="cmp-rounds">ambiguous after 15 pairs; ~{amb.more_rounds:,} more would settle it</td>' in html
    same = next(f for f in doc.findings if f.case == SAME.case)
    assert f'<td class="cmp-rounds">{escape("the same within ±0.5% after")} {same.rounds} pairs</td>' in html
    # the base side is named as text: it is no stored run, so nothing links to it
    assert f'<code id="paired-base">{BASE_RUN}</code>' in html and '<h2 id="h-baseline-runs">Base side</h2>' in html
    assert f"/runs/{BASE_RUN}" not in html and f">{BASE_RUN}</a>" not in html
    # the stored-history comparison of the same run, beside it
    beside = html.split('id="beside"', 1)[1].split("</p>", 1)[0]
    assert "stored-history comparison (against the stored baseline runs)" in beside
    assert f'href="/ui/p/{project.name}/comparisons/{history_id}"' in beside


def test_the_history_comparison_of_a_paired_job_points_to_the_paired_one(site: Site, paired_job: Any) -> None:
    project, history_id, paired_id, _ = paired_job
    html = _get(site, project, f"/comparisons/{history_id}").text
    assert "Paired run on one GPU" not in html and '<th scope="col">Rounds</th>' not in html
    assert '<h2 id="h-baseline-runs">Baseline runs</h2>' in html
    beside = html.split('id="beside"', 1)[1].split("</p>", 1)[0]
    assert "paired comparison (the merge base and the head on one GPU; it gives the verdict)" in beside
    assert f'href="/ui/p/{project.name}/comparisons/{paired_id}"' in beside


def test_the_run_page_and_its_comparison_link_put_the_paired_comparison_first(site: Site, paired_job: Any) -> None:
    project, history_id, paired_id, doc = paired_job
    run_id = project.runs[-1]
    html = _get(site, project, f"/runs/{run_id}").text
    line = html.split('<p class="verdict-line">', 1)[1].split("</p>", 1)[0]
    assert line.startswith("Paired comparison on one GPU (the verdict): ")
    assert f"badge verdict-{doc.verdict}" in line and f"/comparisons/{paired_id}" in line
    assert html.index(f"/comparisons/{paired_id}") < html.index(f"/comparisons/{history_id}")
    r = _get(site, project, f"/runs/{run_id}/comparison")
    assert r.status_code == 303 and r.headers["location"] == f"/ui/p/{project.name}/comparisons/{paired_id}"


def test_a_paired_jobs_row_names_the_paired_comparison(site: Site, paired_job: Any) -> None:
    """The job's page and the jobs' poll take the comparison of the job's run from one subquery: of the run's two,
    the paired one (the verdict's), whichever the table gives first."""
    project, _, paired_id, doc = paired_job
    run_id = project.runs[-1]
    engine = make_engine(site.db_url)
    try:
        with make_sessionmaker(engine)() as session:
            testbed = session.scalar(
                select(StoredTestbed.name).join(Run, Run.testbed_id == StoredTestbed.id).where(Run.id == run_id)
            )
            project_id = session.scalar(select(ProjectRow.id).where(ProjectRow.name == project.name))
        with site.api(project.tokens.submit) as client:
            answer = client.post(
                f"/api/v1/projects/{project.name}/jobs",
                files={"spec": ("cpu.toml", CPU_SUITE.read_bytes(), "application/toml")},
                data={"branch": "feature", "commit": "a" * 40, "pr": "5", "testbed": str(testbed)},
            )
        assert answer.status_code == 202, answer.text
        job_id = answer.json()["id"]
        # as the worker's result and the analysis leave it
        with engine.begin() as conn:
            conn.execute(update(Job).where(Job.id == job_id).values(status="done", run_id=run_id, verdict=doc.verdict))
        assert project_id is not None
        with make_sessionmaker(engine)() as session:
            (state,) = repository.job_states(session, project_id, [job_id])
            row = repository.job_in_project(session, project_id, job_id)
        assert state.comparison_id == paired_id
        assert row is not None and row.comparison_id == paired_id
    finally:
        engine.dispose()
    with httpx.Client(base_url=site.url) as client:
        login(client, project.tokens.read)
        polled = client.get(f"/ui/p/{project.name}/jobs/state", params={"ids": job_id}).json()
        link = polled["links"][f"{job_id}.comparison"]
        assert link == f"/ui/p/{project.name}/runs/{run_id}/comparison"
        assert (
            f'href="{link}" data-link="{job_id}.comparison"' in client.get(f"/ui/p/{project.name}/jobs/{job_id}").text
        )
        followed = client.get(link)
    assert followed.status_code == 303
    assert followed.headers["location"] == f"/ui/p/{project.name}/comparisons/{paired_id}"


def test_a_history_only_run_page_reads_as_before(site: Site) -> None:
    with httpx.Client(base_url=site.url) as client:
        login(client, site.tokens.read)
        html = client.get(f"/ui/p/{site.project}/runs/{site.pr_run}").text
    line = html.split('<p class="verdict-line">', 1)[1].split("</p>", 1)[0]
    assert line.startswith("Latest comparison: ") and f"/comparisons/{site.pr_comparison}" in line
    assert 'id="beside"' not in html and "Paired" not in html
