"""Paired jobs through the service (docs/architecture.md, "The paired job"): the submission's base bundle, the claim
and the base bundle's route, the result with its base and paired documents (stored beside the run, never as one, once
per attempt), and the two comparisons of the run, the paired one giving the verdict."""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from attnprof.server.artifacts.models import Artifact
from attnprof.server.comparisons.models import Comparison
from attnprof.server.jobs import service as jobs
from attnprof.server.jobs.models import Job, PairedResult
from attnprof.server.projects.models import Project
from attnprof.server.runs.models import Run
from tests import paired_jobs
from tests.claiming import bearer, claim, claim_secret
from tests.profiling_support import tar_gz
from tests.server import documents as docs
from tests.server.documents import SPEC
from tests.server.stack import REDIS_URL
from tests.server.tenants import Tenant

BASE_COMMIT = "0123456789abcdef0123456789abcdef01234567"


# The two trees differ: the head's module sleeps longer than its merge base's.
TREES = paired_jobs.trees(head=b"SLEEP_S = 0.003\n", base=b"SLEEP_S = 0.001\n")
HEAD, BASE = TREES["bundle"], TREES["base_bundle"]


def _post(client, tenant: Tenant, testbed: str, *, files: dict[str, bytes], **fields: str):
    upload: dict[str, Any] = {"spec": ("attnprof.toml", SPEC.encode())}
    upload |= {name: (f"{name}.tar.gz", data) for name, data in files.items()}
    data = {"testbed": testbed, "branch": "feature", "commit": "abc123", **fields}
    return client.post(f"/api/v1/projects/{tenant.name}/jobs", files=upload, data=data, headers=tenant.h("submit"))


def _paired_documents(ratio: float) -> paired_jobs.PairedResult:
    """(head, base, paired): 12 pairs of rounds a case, under a rule of at most 16."""
    return paired_jobs.paired_result(ratio, pairs=12, max_pairs=16, seed=3)


def _project_id(db: Session, tenant: Tenant) -> int:
    return int(db.scalars(select(Project.id).where(Project.name == tenant.name)).one())


def _stored(db: Session, project_id: int) -> tuple[int, int]:
    """(the project's jobs, every artifact): what a refused submission must leave as it was."""
    n_jobs = db.scalar(select(func.count()).select_from(Job).where(Job.project_id == project_id))
    return int(n_jobs or 0), int(db.scalar(select(func.count()).select_from(Artifact)) or 0)


def test_a_paired_job_stores_its_base_beside_the_run_and_takes_the_paired_verdict(
    client, tenant, worker_token, settings, db: Session
) -> None:
    testbed, wtok = worker_token
    r = _post(client, tenant, testbed, files={"bundle": HEAD, "base_bundle": BASE}, base_commit=BASE_COMMIT)
    assert r.status_code == 202, r.text
    job_id = r.json()["id"]
    assert client.get(f"/api/v1/jobs/{job_id}", headers=tenant.h("read")).json()["paired"] is True
    answer = claim(client, wtok, job_id, claim_secret(REDIS_URL, testbed, job_id))
    assert answer["paired"] is True and answer["base_bundle_sha256"] != answer["bundle_sha256"]
    t = bearer(answer["token"])
    assert client.get(f"/internal/jobs/{job_id}/bundle", headers=t).content == HEAD
    assert client.get(f"/internal/jobs/{job_id}/bundle", params={"tree": "base"}, headers=t).content == BASE
    bad_tree = client.get(f"/internal/jobs/{job_id}/bundle", params={"tree": "merge"}, headers=t)
    assert bad_tree.status_code == 422 and "tree" in bad_tree.text

    head, base, paired = _paired_documents(1.2)
    url = f"/internal/jobs/{job_id}/result"
    # Half a paired result, or documents that do not belong together: refused, naming the field; nothing stored.
    alone = client.post(url, json={"attempt": 1, "result": head}, headers=t)
    assert alone.status_code == 422 and alone.json()["detail"].startswith("base and paired:"), alone.text
    other_head = docs.h200()
    wrong = client.post(url, json={"attempt": 1, "result": other_head, "base": base, "paired": paired}, headers=t)
    assert wrong.status_code == 422 and wrong.json()["detail"].startswith("paired: it joins"), wrong.text
    broken = {**paired, "cases": [{"case": "x"}]}
    invalid = client.post(url, json={"attempt": 1, "result": head, "base": base, "paired": broken}, headers=t)
    assert invalid.status_code == 422 and "paired" in invalid.json()["detail"], invalid.text
    assert db.get(Job, job_id).run_id is None and db.get(PairedResult, job_id) is None

    body = {"attempt": 1, "result": head, "base": base, "paired": paired}
    first = client.post(url, json=body, headers=t)
    again = client.post(url, json=body, headers=t)
    assert first.status_code == 200 and again.status_code == 200, again.text
    assert again.json() == {**first.json(), "duplicate": True}
    run_id = first.json()["run_id"]
    stored = db.get(PairedResult, job_id)
    assert stored is not None and (stored.attempt, stored.run_id) == (1, run_id)
    assert stored.base_document["run"]["id"] == base["run"]["id"]
    # The base is no run: not among the runs, so no list, trend or baseline can ever show or pick it.
    runs = db.scalars(select(Run.document_run_id).where(Run.project_id == _project_id(db, tenant))).all()
    assert runs == [head["run"]["id"]]

    jobs.analyze_job(db, job_id=job_id, cfg=settings.analysis)
    db.commit()
    got = client.get(f"/api/v1/jobs/{job_id}", headers=tenant.h("read")).json()
    assert (got["status"], got["verdict"]) == ("done", "fail")  # 20% slower than the base, pair by pair
    verdict = client.get(f"/api/v1/jobs/{job_id}/comparison", headers=tenant.h("read")).json()
    assert verdict["mode"] == "paired" and verdict["document"]["mode"] == "paired" and verdict["baseline"] == []
    assert verdict["verdict"] == "fail" and verdict["document"]["paired"] is not None
    # The stored-history comparison is made too: the first run of all passes, with no baseline.
    history = client.get(f"/api/v1/jobs/{job_id}/comparison?mode=history", headers=tenant.h("read")).json()
    assert history["mode"] == "history" and history["verdict"] == "pass" and history["document"]["baseline"] is None
    modes = db.scalars(select(Comparison.mode).where(Comparison.candidate_run_id == run_id)).all()
    assert sorted(modes) == ["history", "paired"]
    bad = client.get(f"/api/v1/jobs/{job_id}/comparison?mode=both", headers=tenant.h("read"))
    assert bad.status_code == 422 and "mode" in bad.text


def test_a_job_that_is_not_paired_has_no_paired_comparison_and_takes_no_base(
    client, tenant, worker_token, settings, db: Session
) -> None:
    testbed, wtok = worker_token
    job_id = _post(client, tenant, testbed, files={"bundle": HEAD}).json()["id"]
    answer = claim(client, wtok, job_id, claim_secret(REDIS_URL, testbed, job_id))
    assert answer["paired"] is False and answer["base_bundle_sha256"] is None
    t = bearer(answer["token"])
    assert client.get(f"/internal/jobs/{job_id}/bundle", params={"tree": "base"}, headers=t).status_code == 404
    head, base, paired = _paired_documents(1.0)
    url = f"/internal/jobs/{job_id}/result"
    r = client.post(url, json={"attempt": 1, "result": head, "base": base, "paired": paired}, headers=t)
    assert r.status_code == 422 and r.json()["detail"].startswith("base and paired: this job is not paired"), r.text
    assert client.post(url, json={"attempt": 1, "result": head}, headers=t).status_code == 200
    jobs.analyze_job(db, job_id=job_id, cfg=settings.analysis)
    db.commit()
    assert client.get(f"/api/v1/jobs/{job_id}", headers=tenant.h("read")).json()["paired"] is False
    default = client.get(f"/api/v1/jobs/{job_id}/comparison", headers=tenant.h("read")).json()
    assert default["mode"] == "history"
    none = client.get(f"/api/v1/jobs/{job_id}/comparison?mode=paired", headers=tenant.h("read"))
    assert none.status_code == 404 and "not paired" in none.json()["detail"]


def test_bad_paired_submissions_answer_naming_the_field_and_store_nothing(
    client, tenant, worker_token, settings, db: Session
) -> None:
    testbed, _ = worker_token
    before = _stored(db, _project_id(db, tenant))
    no_commit = _post(client, tenant, testbed, files={"bundle": HEAD, "base_bundle": BASE})
    assert no_commit.status_code == 422, no_commit.text
    assert no_commit.json()["detail"] == (
        "body.base_commit: Field required: a job with base_bundle (a paired job) needs base_commit too"
    )
    no_head = _post(client, tenant, testbed, files={"base_bundle": BASE}, base_commit=BASE_COMMIT)
    assert no_head.status_code == 422 and no_head.json()["detail"].startswith("body.bundle: Field required")
    as_text = client.post(
        f"/api/v1/projects/{tenant.name}/jobs",
        files={"spec": ("attnprof.toml", SPEC.encode()), "bundle": ("b.tar.gz", HEAD)},
        data={"testbed": testbed, "branch": "f", "commit": "abc123", "base_commit": BASE_COMMIT, "base_bundle": "x"},
        headers=tenant.h("submit"),
    )
    assert as_text.status_code == 422
    assert as_text.json()["detail"] == "body.base_bundle: a file (tar.gz), not a text field"
    escape = tar_gz({"../outside.py": b"1\n"})
    traversal = _post(client, tenant, testbed, files={"bundle": HEAD, "base_bundle": escape}, base_commit=BASE_COMMIT)
    assert traversal.status_code == 422 and traversal.json()["detail"].startswith("base_bundle: member"), traversal.text
    assert ".." in traversal.json()["detail"]
    # Each tree has the bundle's limits of its own: a base bundle over them is refused as a bundle would be.
    settings.limits.bundle_bytes = 50_000
    big = tar_gz({"rand.bin": __import__("os").urandom(60_000)})
    over = _post(client, tenant, testbed, files={"bundle": HEAD, "base_bundle": big}, base_commit=BASE_COMMIT)
    assert over.status_code == 413 and "base_bundle" in over.json()["detail"], over.text
    settings.limits.bundle_unpacked_bytes = 100_000
    bomb = tar_gz({"zeros.bin": b"\0" * 1_000_000})
    unpacked = _post(client, tenant, testbed, files={"bundle": HEAD, "base_bundle": bomb}, base_commit=BASE_COMMIT)
    assert unpacked.status_code == 413 and unpacked.json()["detail"].startswith("base_bundle:"), unpacked.text
    # The quota counts the two trees together: one fits, both do not.
    settings.retention.quota_bytes = len(HEAD) + len(BASE) - 1
    quota = _post(client, tenant, testbed, files={"bundle": HEAD, "base_bundle": BASE}, base_commit=BASE_COMMIT)
    assert quota.status_code == 413 and quota.json()["error"] == "quota_exceeded", quota.text
    assert "bundle and base bundle" in quota.json()["detail"]
    assert _stored(db, _project_id(db, tenant)) == before
