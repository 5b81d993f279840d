"""The client's paired submission against the service's job route (a migrated Postgres): the two bundles that
``attnprof submit --paired`` builds from a real git repository are accepted as a paired job, and the worker's route
serves each tree back byte for byte."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from attnprof.client import base_tree
from attnprof.client import http as client_http
from attnprof.client import source as client_source
from attnprof.contract.provenance import Provenance
from tests.claiming import bearer, claim, claim_secret
from tests.server.documents import SPEC
from tests.server.stack import REDIS_URL
from tests.server.tenants import Tenant


def _git(root: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x"}
    env |= {"GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@x"}
    done = subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True, env=env)
    return done.stdout.strip()


def test_the_services_job_route_takes_the_clients_paired_bundles(
    client, tenant: Tenant, worker_token, tmp_path: Path
) -> None:
    testbed, wtok = worker_token
    root = tmp_path / "repo"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "mod.py").write_text("SLEEP_S = 0.001\n")
    _git(root, "init", "-q", "-b", "main")
    _git(root, "add", ".")
    _git(root, "commit", "-q", "-m", "base")
    _git(root, "checkout", "-q", "-b", "feature")
    (root / "pkg" / "mod.py").write_text("SLEEP_S = 0.003\n")
    _git(root, "commit", "-q", "-am", "head")
    info = client_source.git_info(root)
    assert info.base_commit is not None and info.commit is not None
    base_commit = base_tree.check_base(root, info.base_commit, default_branch="main")
    head, base = client_source.build_bundle(root).data, base_tree.build_base_bundle(root, base_commit).data
    assert head != base
    client.headers.update(tenant.h("submit"))
    job_id = client_http.submit_job(
        client,
        project=tenant.name,
        spec=SPEC,
        testbed=testbed,
        provenance=Provenance(branch="feature", commit=info.commit, base_commit=base_commit),
        bundle=head,
        base_bundle=base,
        idempotency_key="paired-1",
        deadline=client_http.deadline_in(30),
    ).id
    job = client.get(f"/api/v1/jobs/{job_id}").json()
    assert job["paired"] is True and job["base_commit"] == base_commit
    answer = claim(client, wtok, job_id, claim_secret(REDIS_URL, testbed, job_id))
    t = bearer(answer["token"])
    assert client.get(f"/internal/jobs/{job_id}/bundle", headers=t).content == head
    assert client.get(f"/internal/jobs/{job_id}/bundle", params={"tree": "base"}, headers=t).content == base
