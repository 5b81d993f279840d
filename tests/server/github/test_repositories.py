"""A project reaches only the GitHub repositories the service's admin allowed it: a job naming another is refused at
submission with nothing stored; a job or upload stored while it was allowed (or before the rule) gets nothing posted
once it is not, checked right before posting; a webhook's ``/attnprof rerun`` copies only the jobs of the projects
allowed for its repository; and the comment the service edits is the one its own GitHub identity wrote."""

from __future__ import annotations

import hashlib
import hmac
import io
import json
import tarfile
import uuid

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from attnprof.server.app import create_app
from attnprof.server.artifacts.models import Artifact
from attnprof.server.github.client import GitHubClient, GitHubError
from attnprof.server.github.comment import marker
from attnprof.server.jobs.models import Job
from attnprof.server.projects import repository as project_rows
from attnprof.server.projects import service as projects
from attnprof.server.runs.models import Run
from tests.server import documents as docs
from tests.server.github.fakegithub import SERVICE_LOGIN, SERVICE_TOKEN, FakeGitHub
from tests.server.github.feedstack import CASE, REPO, SPEC, _drain, _stack
from tests.server.stack import allow_repo, bind, make_settings

OTHER_REPO = "victim/private"
SECRET = "webhook-secret-for-tests"


def _bundle() -> bytes:
    """A source bundle no other test stores."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        data = f"x = {uuid.uuid4().hex!r}\n".encode()
        info = tarfile.TarInfo("pkg/mod.py")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _submit(client: TestClient, tenant, testbed: str, repo: str, commit: str = "c1", pr: str = "7"):
    return client.post(
        f"/api/v1/projects/{tenant.name}/jobs",
        files={"spec": ("attnprof.toml", SPEC.encode()), "bundle": ("src.tar.gz", _bundle(), "application/gzip")},
        data={"testbed": testbed, "branch": "feature", "commit": commit, "repo": repo, "pr": pr},
        headers=tenant.h("submit"),
    )


def _count(db, model) -> int:
    return int(db.scalar(select(func.count()).select_from(model)))


def _disallow(db, project: str, repo: str) -> None:
    found = project_rows.get_by_name(db, project)
    assert found is not None
    assert projects.disallow_repository(db, project_id=found.id, repo=repo)
    db.commit()


def test_a_job_naming_a_repository_its_project_may_not_report_to_is_refused_with_nothing_stored(
    db, pg_url, github, tenant, other, worker_token
) -> None:
    settings = make_settings(pg_url, github_api_url=github.url, github_token=SERVICE_TOKEN)
    client = TestClient(bind(create_app(settings), db))
    testbed = worker_token[0]
    allow_repo(db, tenant.name, REPO)
    allow_repo(db, other.name, OTHER_REPO)
    jobs, artifacts = _count(db, Job), _count(db, Artifact)

    r = _submit(client, tenant, testbed, OTHER_REPO)
    assert r.status_code == 403, r.text
    refusal = r.json()
    assert refusal["error"] == "repo_not_allowed"
    detail = refusal["detail"]
    assert detail.startswith("repo: ") and f"may not report to '{OTHER_REPO}'" in detail
    assert f"it may report to {REPO}" in detail, "it says which repositories the project may report to"
    assert f"attnprof admin allow-repo {tenant.name} {OTHER_REPO}" in detail, "and how the admin adds one"
    assert detail.endswith("nothing was stored.")
    assert (_count(db, Job), _count(db, Artifact)) == (jobs, artifacts), "neither the job nor its bundle"
    assert github.requests() == [], "nothing was sent to GitHub"
    # the same for a project allowed no repository at all
    r = _submit(client, other, testbed, REPO)
    assert r.status_code == 403 and "it may report to" in r.json()["detail"] and OTHER_REPO in r.json()["detail"]

    # GitHub's names ignore case: the project's own repository however it is spelled
    r = _submit(client, tenant, testbed, "ACME/Attn")
    assert r.status_code == 202, r.text
    _drain(f"profile.{testbed}")
    # A service with no GitHub token posts nowhere: a repository only labels the job (every delivery checks again).
    off = TestClient(bind(create_app(make_settings(pg_url)), db))
    r = _submit(off, tenant, testbed, OTHER_REPO, commit="c2")
    assert r.status_code == 202, r.text
    _drain(f"profile.{testbed}")


def test_a_stored_job_whose_repository_was_taken_away_gets_nothing_posted_until_allowed_again(
    db, pg_url, github, tenant, worker_token
) -> None:
    s = _stack(db, pg_url, github, tenant, worker_token)
    s.baseline()
    job_id = s.job("b1")  # submitted while allowed: its pending status was sent
    assert [st["state"] for st in github.statuses(REPO, "b1")] == ["pending"]
    sent = len(github.requests())

    _disallow(db, tenant.name, REPO)
    job = s.analyse(job_id)  # the verdict is committed, its feedback refused right before posting
    assert job.verdict == "fail", "feedback never touches the verdict"
    assert len(github.requests()) == sent, "no status, no comment, not even a look at the comments"
    assert github.comments(REPO, 7) == []
    assert job.feedback_due_at is None, "a refusal for good: the sweep does not try it again"
    assert job.reason is not None and job.reason.startswith("GitHub feedback failed: repo: ")
    assert (
        f"may not report to '{REPO}'" in job.reason and f"attnprof admin allow-repo {tenant.name} {REPO}" in job.reason
    )
    # an admin's resend is refused the same way while the repository is not allowed
    url = f"/api/v1/github/jobs/{job_id}/resend"
    r = s.client.post(url, headers=tenant.h("admin"))
    assert r.status_code == 200 and r.json()["delivered"] is False and "may not report to" in r.json()["reason"]
    assert len(github.requests()) == sent

    allow_repo(db, tenant.name, REPO)  # the admin allows it again: the resend delivers
    r = s.client.post(url, headers=tenant.h("admin"))
    assert r.status_code == 200 and r.json()["delivered"] is True, r.text
    assert r.json()["reason"] is None, "the note goes once delivered"
    assert [st["state"] for st in github.statuses(REPO, "b1")] == ["pending", "failure"]
    (comment,) = github.comments(REPO, 7)
    assert comment["body"].startswith(marker(tenant.name)) and f"`{CASE}`" in comment["body"]


def test_an_upload_naming_a_repository_its_project_may_not_report_to_is_refused_with_nothing_stored(
    db, pg_url, github, tenant, worker_token
) -> None:
    s = _stack(db, pg_url, github, tenant, worker_token)
    s.baseline()
    runs_before = db.query(Run).count()
    body = docs.upload_body(
        docs.variant(docs.h200(), slower=1.10, cases=[CASE]),
        branch="feature",
        commit="u1",
        base_commit="a1",
        repo=OTHER_REPO,
        pr=7,
    )
    r = s.client.post(f"/api/v1/projects/{tenant.name}/results", json=body, headers=tenant.h("submit"))
    assert r.status_code == 403, r.text
    assert r.json()["error"] == "repo_not_allowed" and r.json()["detail"].startswith("repo: ")
    assert "nothing was stored" in r.json()["detail"]
    db.expire_all()
    assert db.query(Run).count() == runs_before
    assert github.requests() == [], "nothing posted to a repository the project may not report to"


def _sign(body: bytes) -> str:
    return "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()


def _rerun(client: TestClient, repo: str, pr: int = 7):
    body = json.dumps(
        {
            "action": "created",
            "issue": {"number": pr, "pull_request": {"url": f"https://api.github.com/repos/{repo}/pulls/{pr}"}},
            "comment": {"body": "/attnprof rerun", "user": {"login": "maintainer"}},
            "repository": {"full_name": repo},
        }
    ).encode()
    headers = {
        "X-GitHub-Event": "issue_comment",
        "Content-Type": "application/json",
        "X-Hub-Signature-256": _sign(body),
    }
    return client.post("/api/v1/github/webhook", content=body, headers=headers)


def test_a_rerun_copies_only_the_jobs_of_projects_allowed_for_the_repository(
    db, pg_url, github, tenant, other, worker_token
) -> None:
    settings = make_settings(
        pg_url, github_api_url=github.url, github_token=SERVICE_TOKEN, github_webhook_secret=SECRET
    )
    client = TestClient(bind(create_app(settings), db))
    testbed = worker_token[0]
    allow_repo(db, tenant.name, REPO)
    allow_repo(db, other.name, REPO)
    ours = _submit(client, tenant, testbed, "Acme/Attn", commit="c1")  # GitHub's names ignore case
    theirs = _submit(client, other, testbed, REPO, commit="c1")
    assert ours.status_code == theirs.status_code == 202
    _drain(f"profile.{testbed}")
    # the other project's job stays on the pull request, named by a row stored while it was allowed
    _disallow(db, other.name, REPO)
    github.state.permissions[f"{REPO}:maintainer"] = "write"

    r = _rerun(client, REPO)
    assert r.status_code == 200, r.text
    (copy_id,) = r.json()["jobs"]
    copy = db.get(Job, copy_id)
    assert copy is not None and copy.project_id != db.get(Job, theirs.json()["id"]).project_id
    assert copy.project_id == db.get(Job, ours.json()["id"]).project_id
    _drain(f"profile.{testbed}")
    # a repository no project may report to queues nothing
    github.state.permissions[f"{OTHER_REPO}:maintainer"] = "write"
    r = _rerun(client, OTHER_REPO)
    assert r.status_code == 200 and r.json()["jobs"] == []


def test_the_comment_edited_is_the_one_the_service_wrote_never_a_copy_of_its_marker(github: FakeGitHub) -> None:
    mark = marker("flash")
    # Another user's comment that starts with the marker, older than the service's: left as it is.
    forged = github.add_comment(REPO, 7, f"{mark}\n## ✅ pass, says mallory", user="mallory")
    with GitHubClient(github.url, SERVICE_TOKEN, backoff_s=0.0) as gh:
        created_id, created = gh.upsert_comment(REPO, 7, marker=mark, body=f"{mark}\nfirst")
        assert created and created_id != forged
        assert [r.path for r in github.requests("GET")].count("/user") == 1, "the login asked once there is a copy"
        edited_id, created = gh.upsert_comment(REPO, 7, marker=mark, body=f"{mark}\nsecond")
    assert (edited_id, created) == (created_id, False)
    bodies = {c["id"]: (c["user"]["login"], c["body"]) for c in github.comments(REPO, 7)}
    assert bodies == {
        forged: ("mallory", f"{mark}\n## ✅ pass, says mallory"),
        created_id: (SERVICE_LOGIN, f"{mark}\nsecond"),
    }
    assert [r.path for r in github.requests("PATCH")] == [f"/repos/{REPO}/issues/comments/{created_id}"]
    # the login is kept for the process: a new client of the same token asks GitHub no more
    with GitHubClient(github.url, SERVICE_TOKEN, backoff_s=0.0) as gh:
        gh.upsert_comment(REPO, 7, marker=mark, body=f"{mark}\nthird")
    assert [r.path for r in github.requests("GET")].count("/user") == 1


def test_a_pull_request_without_the_marker_costs_no_request_for_the_login(github: FakeGitHub) -> None:
    github.add_comment(REPO, 8, "looks good", user="reviewer")
    with GitHubClient(github.url, SERVICE_TOKEN, backoff_s=0.0) as gh:
        _, created = gh.upsert_comment(REPO, 8, marker=marker("flash"), body=f"{marker('flash')}\nbody")
    assert created and "/user" not in [r.path for r in github.requests("GET")]


def test_a_token_that_names_no_user_edits_nothing_and_says_which_token_is_needed(github: FakeGitHub) -> None:
    mark = marker("flash")
    github.add_comment(REPO, 9, f"{mark}\nan earlier comment", user=SERVICE_LOGIN)
    gh = GitHubClient(github.url, "ghs_an-installation-token", backoff_s=0.0)
    with gh, pytest.raises(GitHubError) as refused:
        gh.upsert_comment(REPO, 9, marker=mark, body=f"{mark}\nnew")
    assert refused.value.status == 401 and not refused.value.retryable
    assert "must be a user's or a bot account's token" in str(refused.value)
    assert github.requests("PATCH") == [] and github.requests("POST") == []
    assert [c["body"] for c in github.comments(REPO, 9)] == [f"{mark}\nan earlier comment"]
