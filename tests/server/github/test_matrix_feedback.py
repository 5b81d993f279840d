"""A matrix of testbeds on GitHub: one commit status per testbed, and the project's one pull-request comment, posted
once every testbed has ended and gathering them all, with the change that helps one GPU type and hurts the other
named as not portable. The real service on Postgres/Redis, a GitHub stand-in, two testbeds of two GPU models."""

from __future__ import annotations

import copy
import uuid
from typing import Any

from fastapi.testclient import TestClient

from attnprof.core import testbed as keys
from attnprof.server.app import create_app
from attnprof.server.auth import service as auth
from attnprof.server.github import outbox
from attnprof.server.github.comment import marker
from attnprof.server.jobs import service as jobs
from attnprof.server.testbeds import service as testbeds
from tests.claiming import bearer, claim, claim_secret
from tests.server import documents as docs
from tests.server.documents import SPEC
from tests.server.github.feedstack import CASE, REPO, _drain
from tests.server.stack import REDIS_URL, allow_repo, bind, bound_sessions, make_settings
from tests.server.web.pages import login

H100 = "NVIDIA H100 80GB HBM3"


def _on(device: str | None, doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` as if measured on ``device`` (None: as it is, an H200): its device, testbed meaning and key follow, so
    each testbed has a baseline of its own."""
    if device is None:
        return doc
    out = copy.deepcopy(doc)
    env = out["environment"]
    env["device"]["name"] = device
    env["testbed"] = {**env["testbed"], "device": device}
    env["testbed_key"] = keys.testbed_key(env["testbed"])
    return out


def test_a_change_that_helps_one_gpu_and_hurts_the_other_gets_a_status_each_and_one_comment_saying_so(
    db, pg_url, github, tenant
) -> None:
    settings = make_settings(pg_url, github_api_url=github.url, github_token="test-token-1")
    allow_repo(db, tenant.name, REPO)
    client = TestClient(bind(create_app(settings), db))
    tag = uuid.uuid4().hex[:6]
    beds = {f"h100-{tag}": H100, f"h200-{tag}": None}  # by name
    slower = {f"h100-{tag}": 0.90, f"h200-{tag}": 1.10}  # 10% faster on the H100, 10% slower on the H200
    tokens = {}
    for name, device in beds.items():
        tokens[name] = auth.create_worker_token(db, testbed_id=testbeds.ensure(db, name).id)[1]
        db.commit()
        body = docs.upload_body(_on(device, docs.h200()), commit="a1", testbed=name)
        r = client.post(f"/api/v1/projects/{tenant.name}/results", json=body, headers=tenant.h("submit"))
        assert r.status_code == 201, r.text

    data = {"testbeds": ",".join(beds), "branch": "feature", "commit": "b1", "base_commit": "a1", "repo": REPO}
    r = client.post(
        f"/api/v1/projects/{tenant.name}/jobs",
        files={"spec": ("attnprof.toml", SPEC.encode())},
        data={**data, "pr": "7"},
        headers=tenant.h("submit"),
    )
    assert r.status_code == 202, r.text
    ids = {j["testbed"]: j["id"] for j in r.json()["jobs"]}
    assert list(ids) == list(beds)
    sessions = bound_sessions(db)
    outbox.deliver_owed(sessions, settings, list(ids.values()))
    contexts = {f"attnprof/{tenant.name}/{name}" for name in beds}
    assert {(s["context"], s["state"]) for s in github.statuses(REPO, "b1")} == {(c, "pending") for c in contexts}

    for n, (name, job_id) in enumerate(ids.items()):
        secret = claim_secret(REDIS_URL, name, job_id)
        _drain(f"profile.{name}")
        token = claim(client, tokens[name], job_id, secret)["token"]
        result = _on(beds[name], docs.variant(docs.h200(), slower=slower[name], cases=[CASE]))
        posted = client.post(
            f"/internal/jobs/{job_id}/result", json={"attempt": 1, "result": result}, headers=bearer(token)
        )
        assert posted.status_code == 200, posted.text
        _drain("analysis")
        jobs.analyze_job(db, job_id=job_id, cfg=settings.analysis)
        db.commit()
        outbox.deliver_owed(sessions, settings, [job_id])
        if n == 0:  # one testbed still running: its status only, no comment missing the other
            assert github.comments(REPO, 7) == []
            matrix = client.get(f"/api/v1/jobs/{job_id}/matrix", headers=tenant.h("read")).json()
            assert matrix["complete"] is False and matrix["verdict"] is None and matrix["not_portable"] == []

    finals = {s["context"]: s["state"] for s in github.statuses(REPO, "b1") if s["state"] != "pending"}
    assert finals == {f"attnprof/{tenant.name}/h100-{tag}": "success", f"attnprof/{tenant.name}/h200-{tag}": "failure"}
    comments = github.comments(REPO, 7)
    assert len(comments) == 1
    body = comments[0]["body"]
    assert body.startswith(marker(tenant.name)) and "**fail** on 2 testbeds" in body
    assert f"| `h100-{tag}` | ✅ pass |" in body and f"| `h200-{tag}` | ❌ fail |" in body
    assert "Not portable: 1 case(s)" in body
    line = next(li for li in body.splitlines() if li.startswith(f"- `{CASE}` throughput moved opposite ways"))
    assert f"faster on `h100-{tag}` +" in line and f"slower on `h200-{tag}` -" in line
    assert line.count("(`") == 2  # the kernels that moved, named on each testbed
    # each testbed's own comment, its headline under the matrix's
    assert f"\n### ✅ attnprof `{tenant.name}`: **pass** on `h100-{tag}`" in body
    assert f"\n### ❌ attnprof `{tenant.name}`: **fail** on `h200-{tag}`" in body
    first = next(iter(ids.values()))
    assert client.get(f"/api/v1/jobs/{first}/comment", headers=tenant.h("read")).text == body

    matrix = client.get(f"/api/v1/jobs/{first}/matrix", headers=tenant.h("read")).json()
    assert matrix["complete"] is True and matrix["verdict"] == "fail"
    assert [j["testbed"] for j in matrix["jobs"]] == list(beds)
    (flag,) = matrix["not_portable"]
    assert (flag["case"], flag["metric"], flag["kind"]) == (CASE, "throughput", "direction")
    assert flag["testbeds"] == list(beds)
    sides = {s["testbed"]: s for s in flag["sides"]}
    assert sides[f"h200-{tag}"]["high"] < 0 < sides[f"h100-{tag}"]["low"]  # a rate: higher is faster
    assert [sides[f"h100-{tag}"]["way"], sides[f"h200-{tag}"]["way"]] == ["faster", "slower"]
    assert all(s["kernels"] for s in flag["sides"])

    # The job's page shows its matrix: each testbed's job, and the case that is not portable with its kernels.
    with TestClient(bind(create_app(settings), db), follow_redirects=False) as browser:
        login(browser, tenant.read)  # type: ignore[arg-type]
        page = browser.get(f"/ui/p/{tenant.name}/jobs/{first}").text
    section = page[page.index('<section aria-labelledby="matrix"') :]
    section = section[: section.index("</section>")]
    assert "The same change on 2 testbeds" in section and "the worst verdict: <strong>fail</strong>" in section
    for name, job_id in ids.items():
        assert f'<td>{name}</td><td><a href="/ui/p/{tenant.name}/jobs/{job_id}">' in section
    assert "Not portable: 1 case changed differently across testbeds" in section
    flagged = section[section.index(f"<code>{CASE}</code> (throughput, opposite ways)") :]
    assert f"h100-{tag} faster +" in flagged and f"h200-{tag} slower -" in flagged
