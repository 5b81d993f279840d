"""What the GitHub feedback tests share: the repository and suite they submit, and ``Stack``, the service bound to
the test's session with a GitHub stand-in behind it, that submits, claims and finishes jobs the way a worker and the
analysis task do."""

from __future__ import annotations

import redis
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from attnprof.server.app import create_app
from attnprof.server.config import Settings
from attnprof.server.github import outbox
from attnprof.server.jobs import service as jobs
from attnprof.server.jobs.models import Job
from tests.claiming import bearer, claim, claim_secret
from tests.server import documents as docs
from tests.server.documents import SPEC
from tests.server.github.fakegithub import FakeGitHub
from tests.server.stack import REDIS_URL, allow_repo, bind, bound_sessions, make_settings
from tests.server.tenants import Tenant

REPO = "acme/attn"
CASE = "sdpa[backend=cudnn,pass=fwd]"


def _drain(*queues: str) -> None:
    r = redis.Redis.from_url(REDIS_URL)
    try:
        r.delete(*queues)
    finally:
        r.close()


class Stack:
    def __init__(self, client: TestClient, db: Session, settings: Settings, tenant: Tenant, testbed: str, wtok: str):
        self.client, self.db, self.settings, self.tenant, self.testbed, self.wtok = (
            client,
            db,
            settings,
            tenant,
            testbed,
            wtok,
        )
        self.sessions = bound_sessions(db)
        # The claim secret of each job's latest message, and each claimed attempt's job token, by job id.
        self.secrets: dict[str, str] = {}
        self.tokens: dict[str, str] = {}

    def offered(self, job_id: str) -> None:
        """Keep the claim secret of the job's latest message, as its worker would get it; then empty the queue."""
        self.secrets[job_id] = claim_secret(REDIS_URL, self.testbed, job_id)
        _drain(f"profile.{self.testbed}")

    def claim(self, job_id: str, attempt: int = 1) -> str:
        """Claim ``attempt`` as a worker would; returns its job token."""
        token = str(claim(self.client, self.wtok, job_id, self.secrets[job_id], attempt=attempt)["token"])
        self.tokens[job_id] = token
        return token

    def baseline(self, commit: str = "a1", doc: dict | None = None) -> dict:
        """Upload ``doc`` (the committed H200 run when None) as the default branch's run of ``commit``."""
        doc = doc or docs.h200()
        url = f"/api/v1/projects/{self.tenant.name}/results"
        r = self.client.post(url, json=docs.upload_body(doc, commit=commit), headers=self.tenant.h("submit"))
        assert r.status_code == 201, r.text
        return doc

    def job(self, commit: str, *, pr: int | None = 7, slower: float = 1.10, result: dict | None = None) -> str:
        """A job for ``commit`` whose worker posts ``result`` (None: the committed H200 run, ``CASE`` ``slower``)."""
        files = {"spec": ("attnprof.toml", SPEC.encode())}
        data = {"testbed": self.testbed, "branch": "feature", "commit": commit, "base_commit": "a1", "repo": REPO}
        if pr is not None:
            data["pr"] = str(pr)
        r = self.client.post(
            f"/api/v1/projects/{self.tenant.name}/jobs", files=files, data=data, headers=self.tenant.h("submit")
        )
        assert r.status_code == 202, r.text
        job_id = r.json()["id"]
        self.offered(job_id)
        w = bearer(self.claim(job_id))
        doc = result or docs.variant(docs.h200(), slower=slower, cases=[CASE])
        r = self.client.post(f"/internal/jobs/{job_id}/result", json={"attempt": 1, "result": doc}, headers=w)
        assert r.status_code == 200, r.text
        _drain("analysis")
        return job_id

    def analyse(self, job_id: str) -> Job:
        """What the analysis task does: the verdict committed, then its feedback sent from the stored rows."""
        jobs.analyze_job(self.db, job_id=job_id, cfg=self.settings.analysis)
        self.db.commit()
        outbox.deliver_owed(self.sessions, self.settings, [job_id])
        self.db.expire_all()
        job = self.db.get(Job, job_id)
        assert job is not None
        return job

    def owe(self, job_id: str) -> None:
        """Owe the job's feedback again, whatever it owed, as an admin's resend does."""
        job = self.db.get(Job, job_id)
        assert job is not None
        jobs.owe_feedback(job, at_once=True)
        self.db.commit()


def _stack(db: Session, pg_url: str, github: FakeGitHub, tenant: Tenant, worker_token: tuple[str, str]) -> Stack:
    settings = make_settings(pg_url, github_api_url=github.url, github_token="test-token-1")
    allow_repo(db, tenant.name, REPO)
    client = TestClient(bind(create_app(settings), db))
    return Stack(client, db, settings, tenant, *worker_token)
