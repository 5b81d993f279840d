"""An upload is a run like any other: one that names its repository and commit gets the commit status a job gets,
and with a pull request the project's one comment, which a job of the same pull request then edits in place. Sent
to the GitHub stand-in by the real service on Postgres and Redis, after the upload's commit, from the stored rows."""

from __future__ import annotations

from datetime import timedelta

from attnprof.server.db import utcnow
from attnprof.server.github import outbox
from attnprof.server.github.client import GitHubClient
from attnprof.server.github.comment import marker
from attnprof.server.jobs import sweep
from attnprof.server.runs.models import Run
from tests.server import documents as docs
from tests.server.github.feedstack import CASE, REPO, _stack


def _post(s, body: dict, status: int = 201) -> dict:
    r = s.client.post(f"/api/v1/projects/{s.tenant.name}/results", json=body, headers=s.tenant.h("submit"))
    assert r.status_code == status, r.text
    return r.json()


def _body(commit: str, slower: float = 1.10, **provenance) -> dict:
    doc = docs.variant(docs.h200(), slower=slower, cases=[CASE])
    return docs.upload_body(doc, branch="feature", commit=commit, base_commit="a1", **provenance)


def _upload(s, *, commit: str, slower: float = 1.10, **provenance) -> dict:
    return _post(s, _body(commit, slower, **provenance))


def _run(s, run_id: str) -> Run:
    s.db.expire_all()
    run = s.db.get(Run, run_id)
    assert run is not None
    return run


def test_an_upload_naming_repo_commit_and_pr_gets_a_status_and_the_comment_a_later_job_edits(
    db, pg_url, github, tenant, worker_token
) -> None:
    s = _stack(db, pg_url, github, tenant, worker_token)
    s.baseline()  # the default branch's upload names no repository: GitHub hears nothing of it
    assert github.requests() == []

    answer = _upload(s, commit="u1", repo=REPO, pr=7)
    assert answer["verdict"] == "fail"
    (status,) = github.statuses(REPO, "u1")
    assert status["state"] == "failure" and status["context"] == f"attnprof/{tenant.name}"
    assert status["description"] == "verdict fail, uploaded run"
    assert status["target_url"] == f"http://attnprof.test/ui/p/{tenant.name}/runs/{answer['run_id']}"
    (comment,) = github.comments(REPO, 7)
    body = comment["body"]
    assert body.startswith(marker(tenant.name)) and "**fail**" in body and f"`{CASE}`" in body
    assert f"/ui/p/{tenant.name}/comparisons/{answer['comparison_id']}" in body and "[job]" not in body
    run = _run(s, answer["run_id"])
    assert run.feedback_due_at is None and run.feedback_attempts == 0 and run.feedback_note is None

    # A later job of the same pull request edits the same comment, in place.
    job = s.analyse(s.job("b1", pr=7, slower=1.0))
    assert job.verdict == "pass"
    (edited,) = github.comments(REPO, 7)
    assert edited["id"] == comment["id"] and edited["body"].startswith(marker(tenant.name))
    assert "**pass**" in edited["body"] and "**fail**" not in edited["body"]
    patched = github.requests("PATCH")
    assert len(patched) == 1 and patched[0].path.endswith(f"/issues/comments/{comment['id']}")
    assert [st["state"] for st in github.statuses(REPO, "b1")] == ["pending", "success"]


def test_an_upload_without_repository_sends_nothing_and_one_without_pr_only_a_status(
    db, pg_url, github, tenant, worker_token
) -> None:
    s = _stack(db, pg_url, github, tenant, worker_token)
    s.baseline()
    lone = _upload(s, commit="n1", pr=7)  # a pull request but no repository: nowhere to send it
    assert github.requests() == [] and _run(s, lone["run_id"]).feedback_due_at is None

    body = _body("p1", slower=1.0, repo=REPO)  # a push: its commit's status, no comment
    pushed = _post(s, body)
    assert [st["state"] for st in github.statuses(REPO, "p1")] == ["success"]
    assert github.requests("PATCH") == [] and not any("/comments" in r.path for r in github.requests())
    assert _run(s, pushed["run_id"]).feedback_due_at is None

    # The same upload sent again (a client whose answer was lost) stores nothing and sends nothing again.
    before = len(github.requests())
    assert _post(s, body, status=200)["run_id"] == pushed["run_id"]
    assert len(github.requests()) == before and _run(s, pushed["run_id"]).feedback_due_at is None


def test_an_uploads_feedback_refused_by_github_is_owed_again_and_the_sweep_delivers_it(
    db, pg_url, github, tenant, worker_token
) -> None:
    s = _stack(db, pg_url, github, tenant, worker_token)
    s.baseline()
    github.fail_next(*["500"] * 8)  # the sender's two tries of the status, and more
    answer = _upload(s, commit="r1", repo=REPO, pr=7)
    assert answer["verdict"] == "fail"  # GitHub's answer never changes the upload's
    run = _run(s, answer["run_id"])
    assert run.feedback_attempts == 1 and run.feedback_due_at is not None and run.feedback_due_at > utcnow()
    assert run.feedback_note is not None and "HTTP 500" in run.feedback_note and "retried in" in run.feedback_note
    assert github.statuses(REPO, "r1") == [] and github.comments(REPO, 7) == []

    # Not due yet: the sweep leaves it; once its backoff is over the sweep lists it and its delivery sends it.
    github.state.failures.clear()
    now = utcnow()
    assert answer["run_id"] not in sweep.sweep(db, cfg=s.settings.sweep, now=now, pending=lambda _: None).run_feedback
    later = run.feedback_due_at + timedelta(seconds=1)
    report = sweep.sweep(db, cfg=s.settings.sweep, now=later, pending=lambda _: None)
    db.commit()
    assert answer["run_id"] in report.run_feedback
    gh = GitHubClient(github.url, "test-token-1", backoff_s=0.0)
    assert outbox.deliver_run(s.sessions, s.settings, answer["run_id"], client=gh, now=now) is None  # not due
    assert outbox.deliver_run(s.sessions, s.settings, answer["run_id"], client=gh, now=later) is True
    assert outbox.deliver_run(s.sessions, s.settings, answer["run_id"], client=gh, now=later) is None  # delivered
    assert [st["state"] for st in github.statuses(REPO, "r1")] == ["failure"]
    assert len(github.comments(REPO, 7)) == 1
    run = _run(s, answer["run_id"])
    assert run.feedback_due_at is None and run.feedback_attempts == 0 and run.feedback_note is None


def test_an_uploads_feedback_refused_for_good_is_not_sent_again(db, pg_url, github, tenant, worker_token) -> None:
    s = _stack(db, pg_url, github, tenant, worker_token)
    s.baseline()
    github.fail_next("422")  # the commit status refused as invalid: the same request would get the same answer
    answer = _upload(s, commit="v1", repo=REPO, pr=7)
    run = _run(s, answer["run_id"])
    assert run.feedback_due_at is None and run.feedback_attempts == 1
    assert run.feedback_note is not None and "refused for good, not sent again" in run.feedback_note
    assert len(github.requests("POST")) == 1  # one try: a 422 is not retried
    report = sweep.sweep(db, cfg=s.settings.sweep, now=utcnow() + timedelta(hours=2), pending=lambda _: None)
    assert answer["run_id"] not in report.run_feedback


def test_an_uploads_comment_too_long_goes_out_compact(db, pg_url, github, tenant, worker_token) -> None:
    s = _stack(db, pg_url, github, tenant, worker_token)
    s.baseline()
    github.fail_next("pass", "pass", "too_long")  # the status, the comments' listing, then the comment refused
    answer = _upload(s, commit="w1", repo=REPO, pr=7)
    (comment,) = github.comments(REPO, 7)
    assert comment["body"].startswith(marker(tenant.name)) and "| Kernel |" not in comment["body"]
    run = _run(s, answer["run_id"])
    assert run.feedback_due_at is None and run.feedback_note is None


def test_a_late_retry_of_an_older_uploads_feedback_sends_its_status_but_leaves_the_newer_comment(
    db, pg_url, github, tenant, worker_token
) -> None:
    s = _stack(db, pg_url, github, tenant, worker_token)
    s.baseline()
    github.fail_next(*["500"] * 2)  # the older push's feedback fails: owed again after the backoff
    older = _upload(s, commit="o1", repo=REPO, pr=7)
    assert _run(s, older["run_id"]).feedback_due_at is not None
    newer = _upload(s, commit="o2", repo=REPO, pr=7, slower=1.0)  # the next push, delivered at once
    (comment,) = github.comments(REPO, 7)
    assert "**pass**" in comment["body"] and newer["comparison_id"] in comment["body"]

    later = _run(s, older["run_id"]).feedback_due_at + timedelta(seconds=1)
    gh = GitHubClient(github.url, "test-token-1", backoff_s=0.0)
    assert outbox.deliver_run(s.sessions, s.settings, older["run_id"], client=gh, now=later) is True
    assert [st["state"] for st in github.statuses(REPO, "o1")] == ["failure"]  # its own commit's status
    (comment,) = github.comments(REPO, 7)  # the comment still shows the newer push's verdict
    assert "**pass**" in comment["body"] and older["comparison_id"] not in comment["body"]
