"""One run, two ids: the service's (``runs.id``) and its result document's (``run.id``, which comparisons, their
notes and ``attnprof compare`` print). Every page and API route of a run answers to either, whole or by a unique
prefix; a page named by the document's id is sent on to the same page under the service's id."""

from __future__ import annotations

import re
import uuid
from typing import Any
from urllib.parse import urlsplit

import httpx

from attnprof.contract.links import PATHS, Links
from attnprof.core.analysis.render import render_table
from attnprof.core.documents.comparison import ComparisonDocument
from attnprof.server.runs.repository import RUN_ID_PREFIX_MIN
from tests.server.web.pages import Project, fresh_project, http, upload
from tests.server.web.stack import Site, docs


def _doc(run_id: str | None = None, **kw: Any) -> dict[str, Any]:
    doc = docs.h200(**kw)
    if run_id is not None:
        doc["run"]["id"] = run_id
    return doc


def _project_with_a_run(site: Site) -> tuple[Project, str, str]:
    project = fresh_project(site, "ids")
    body = upload(site, project, _doc(), commit="a" * 40)
    with site.api(project.tokens.read) as api:
        run = api.get(PATHS.api_run(project.name, body["run_id"])).json()
    assert run["id"] != run["document_run_id"]
    return project, run["id"], run["document_run_id"]


def test_the_run_page_answers_to_both_ids_and_to_a_unique_prefix(site: Site) -> None:
    project, service_id, document_id = _project_with_a_run(site)
    with http(site, project.tokens.read) as client:
        assert client.get(PATHS.ui_run(project.name, service_id)).status_code == 200
        for ref in (document_id, document_id[:8], service_id[:RUN_ID_PREFIX_MIN]):
            moved = client.get(PATHS.ui_run(project.name, ref) + "?done=pin")
            assert moved.status_code == 307, (ref, moved.text[:300])
            assert moved.headers["location"] == PATHS.ui_run(project.name, service_id) + "?done=pin"
            landed = client.get(moved.headers["location"])
            assert landed.status_code == 200 and service_id in landed.text
        # The run's other pages too: its newest comparison, a trace.
        newest = client.get(PATHS.ui_run_comparison(project.name, document_id))
        assert newest.status_code == 307
        assert newest.headers["location"] == PATHS.ui_run_comparison(project.name, service_id)
        trace = client.get(PATHS.ui_trace(project.name, document_id, "x.json.gz"))
        assert trace.status_code == 307
        assert trace.headers["location"] == PATHS.ui_trace(project.name, service_id, "x.json.gz")
        # Too short a prefix, or an id of nothing, is the page's plain 404.
        assert client.get(PATHS.ui_run(project.name, document_id[: RUN_ID_PREFIX_MIN - 1])).status_code == 404
        assert client.get(PATHS.ui_run(project.name, "0" * 36)).status_code == 404


def test_the_api_answers_to_both_ids_and_to_a_unique_prefix(site: Site) -> None:
    project, service_id, document_id = _project_with_a_run(site)
    with site.api(project.tokens.read) as api:
        for ref in (service_id, document_id, document_id[:8], service_id[:8]):
            answer = api.get(PATHS.api_run(project.name, ref))
            assert answer.status_code == 200, (ref, answer.text[:300])
            assert answer.json()["id"] == service_id and answer.json()["document_run_id"] == document_id
        missing = api.get(PATHS.api_run(project.name, document_id[:4]))
        assert missing.status_code == 404 and missing.json()["error"] == "not_found"
    # Another project's run is not found by either of its ids.
    with site.api(site.tokens.read) as api:
        for ref in (service_id, document_id, document_id[:8]):
            assert api.get(PATHS.api_run(site.project, ref)).status_code == 404


def test_an_ambiguous_prefix_is_a_clear_409_and_changes_nothing(site: Site) -> None:
    project = fresh_project(site, "ambiguous")
    stem = uuid.uuid4().hex[:8]
    first = upload(site, project, _doc(f"{stem}-0000-4000-8000-000000000001"), commit="b" * 40)
    second = upload(site, project, _doc(f"{stem}-0000-4000-8000-000000000002"), commit="c" * 40)
    with site.api(project.tokens.read) as api:
        answer = api.get(PATHS.api_run(project.name, stem))
        assert answer.status_code == 409
        assert "ambiguous" in answer.json()["detail"] and "more characters" in answer.json()["detail"]
        whole = api.get(PATHS.api_run(project.name, f"{stem}-0000-4000-8000-000000000002"))
        assert whole.status_code == 200 and whole.json()["id"] == second["run_id"]
    with http(site, project.tokens.read) as client:
        page = client.get(PATHS.ui_run(project.name, stem))
        assert page.status_code == 409 and "Ambiguous run id" in page.text and stem in page.text
        assert client.get(PATHS.ui_run(project.name, first["run_id"])).status_code == 200


def test_the_ids_a_comparison_prints_lead_to_their_runs(site: Site, page: Any) -> None:
    """The comparison's notes and ``attnprof compare``'s table cite the documents' ids; each, followed as a
    dashboard link, opens its run's page."""
    project = fresh_project(site, "notes")
    baseline = upload(site, project, _doc(suspect=True), commit="d" * 40)
    candidate = upload(
        site,
        project,
        _doc(slower=1.2),
        branch="feature",
        commit="e" * 40,
        base_commit="d" * 40,
        ancestors=["d" * 40],
        pr=5,
    )
    with site.api(project.tokens.read) as api:
        found = api.get(PATHS.api_comparison(project.name, candidate["comparison_id"]))
        assert found.status_code == 200, found.text[:300]
        comparison = ComparisonDocument.model_validate(found.json()["document"])
    table = render_table(comparison)
    cited = re.search(r"candidate (\S+) vs baseline 1 run\(s\): (\S+)", table)
    assert cited is not None, table[:500]
    assert cited.group(1) == comparison.candidate
    suspect_note = next(n for n in comparison.notes if n.startswith("baseline run "))
    noted = suspect_note.split()[2]
    assert noted == cited.group(2)
    for ref, service_id in ((cited.group(1), candidate["run_id"]), (noted, baseline["run_id"])):
        assert ref != service_id  # the document's id, not the service's
        with http(site, project.tokens.read) as client:
            hop = client.get(PATHS.ui_run(project.name, ref))
            assert hop.headers.get("location") == PATHS.ui_run(project.name, service_id)
    # In the browser, from the comparison page: the note's id, typed into the address bar as a link.
    from tests.server.web.stack import sign_in

    sign_in(page, site, project.tokens.read)
    comparison_page = page.goto(Links(site.url).ui_comparison(project.name, candidate["comparison_id"]))
    assert comparison_page.status == 200
    assert noted in page.inner_text("main")
    landed = page.goto(Links(site.url).ui_run(project.name, noted[:8]))
    assert landed.status == 200
    assert urlsplit(page.url).path == PATHS.ui_run(project.name, baseline["run_id"])


def test_a_signed_out_visit_by_the_documents_id_signs_in_and_lands_on_the_run(site: Site) -> None:
    project, service_id, document_id = _project_with_a_run(site)
    with httpx.Client(base_url=site.url) as client:
        first = client.get(PATHS.ui_run(project.name, document_id))
        assert first.status_code == 303 and first.headers["location"].startswith("/ui/login?next=")
        form = client.get(first.headers["location"])
        csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
        nxt = re.search(r'name="next" value="([^"]*)"', form.text)
        assert csrf is not None and nxt is not None
        signed = client.post(
            "/ui/login", data={"token": project.tokens.read, "csrf": csrf.group(1), "next": nxt.group(1)}
        )
        assert signed.headers["location"] == PATHS.ui_run(project.name, document_id)
        moved = client.get(signed.headers["location"])
        assert moved.status_code == 307 and moved.headers["location"] == PATHS.ui_run(project.name, service_id)


def test_a_baseline_rule_takes_either_id_and_is_kept_on_the_service_id(site: Site) -> None:
    project, service_id, document_id = _project_with_a_run(site)
    with site.api(project.tokens.admin) as api:
        pinned = api.post(f"/api/v1/projects/{project.name}/baselines/pins", json={"run_id": document_id})
        assert pinned.status_code == 201, pinned.text
        assert pinned.json()["run_id"] == service_id
        assert api.delete(f"/api/v1/projects/{project.name}/baselines/pin/{document_id[:8]}").status_code == 204
        rules = api.get(f"/api/v1/projects/{project.name}/baselines").json()["rules"]
        assert rules == []
