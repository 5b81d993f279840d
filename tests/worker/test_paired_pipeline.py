"""End to end, a paired job (docs/architecture.md, "The paired job"): real Postgres, Redis, ``attnprof serve``, the
analysis worker and the profile workers (real Celery processes, CPU, in their jail), with two source trees whose one
case differs 3x.

The profile worker downloads both bundles, runs ``python -m attnprof.core ab`` on them, and uploads the head's
result with the base's and paired documents; the analysis stores the history comparison and the paired one, whose
verdict the job takes."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from attnprof.server.github.comment import marker
from tests.profiling_support import tar_gz
from tests.server.github.fakegithub import FakeGitHub
from tests.worker.stack import Stack, allow_repo, custom_case, sql, suite, wait_for

pytestmark = pytest.mark.slow
BASE_COMMIT = "0123456789abcdef0123456789abcdef01234567"
REPO = "acme/paired"
PR = 11


@pytest.fixture(scope="module")
def github() -> Iterator[FakeGitHub]:
    with FakeGitHub() as fake:
        yield fake


@pytest.fixture(scope="module")
def service_env(github: FakeGitHub) -> dict[str, str]:
    """The stack's service and analysis worker tell the GitHub stand-in of the job."""
    return {"ATTNPROF_GITHUB_API_URL": github.url, "ATTNPROF_GITHUB_TOKEN": "test-token-1"}


def _tree(sleep_ms: float) -> bytes:
    """A source tree whose factory's workload sleeps ``sleep_ms`` per call: a planted change between the trees far
    above the paired minimum effect on CPU, and far above this host's noise, so the verdict does not depend on it."""
    return tar_gz(
        {
            "ab/__init__.py": b"",
            "ab/work.py": (
                "import time\n\nimport torch\n\n\n"
                "def make_case(params, device):\n"
                "    def step(x):\n"
                f"        time.sleep({sleep_ms / 1000!r})\n"
                "        return x * 2\n\n"
                "    return step, (torch.ones(4, device=device),)\n"
            ).encode(),
        }
    )


def test_a_paired_job_profiles_both_trees_and_the_paired_comparison_gives_the_verdict(
    stack: Stack, github: FakeGitHub
) -> None:
    allow_repo(stack.database_url, stack.project, REPO)
    spec = suite("paired", custom_case("sleepy", "ab.work:make_case"))
    commit = uuid.uuid4().hex[:12]
    data = {
        "testbed": "tb-main",
        "branch": "feature",
        "commit": commit,
        "base_commit": BASE_COMMIT,
        "repo": REPO,
        "pr": str(PR),
        "suite_path": "attnprof.toml",
    }
    files = {
        "spec": ("attnprof.toml", spec.encode()),
        "bundle": ("head.tar.gz", _tree(6.0)),
        "base_bundle": ("base.tar.gz", _tree(2.0)),
    }
    with stack.http() as http:
        r = http.post(f"/api/v1/projects/{stack.project}/jobs", data=data, files=files)
        assert r.status_code == 202, r.text
        job_id = r.json()["id"]
        job = stack.wait_status(job_id, ("done", "failed", "timed_out"), timeout_s=240)
        assert job["status"] == "done", job
        assert job["paired"] is True and job["attempts"] == 1
        verdict = http.get(f"/api/v1/jobs/{job_id}/comparison").json()
        history = http.get(f"/api/v1/jobs/{job_id}/comparison", params={"mode": "history"}).json()
        listed = http.get(f"/api/v1/projects/{stack.project}/runs", params={"limit": 1000}).json()
    document = verdict["document"]
    assert verdict["mode"] == "paired" and document["mode"] == "paired" and verdict["baseline"] == []
    assert document["paired"] is not None
    ((finding,),) = [[f for f in document["findings"] if f["case"].startswith("sleepy") and f["stopped_by"]]]
    assert finding["stopped_by"] == "slower" and finding["rounds"] >= 2, finding
    assert finding["change"] > 1.0, finding  # three times the base's time: +200%
    # A suspect head (this host loaded) can never fail: it warns, with the same finding.
    suspect = bool(document["suspect"])
    assert job["verdict"] == verdict["verdict"] == ("warn" if suspect else "fail"), document["notes"]
    assert history["mode"] == "history" and history["run_id"] == verdict["run_id"] == job["run_id"]
    # The head is the job's run; the base is no run: not stored as one, not listed.
    query = "SELECT run_id, attempt, base_document FROM paired_results WHERE job_id = %s"
    (paired_row,) = sql(stack.database_url, query, job_id)
    assert paired_row[:2] == (job["run_id"], 1)
    base_run_id = paired_row[2]["run"]["id"]
    assert sql(stack.database_url, "SELECT id FROM runs WHERE document_run_id = %s", base_run_id) == []
    assert [r["id"] for r in listed["runs"] if r["id"] == job["run_id"]] == [job["run_id"]]
    assert base_run_id not in {r["document_run_id"] for r in listed["runs"]}
    _told_github(stack, github, job, commit)


def _told_github(stack: Stack, github: FakeGitHub, job: dict[str, Any], commit: str) -> None:
    """The commit status names the paired verdict, and the pull request's comment says where it came from and how
    to run it again: the merge base (the job's) in a worktree beside the head, both profiled by ``attnprof paired``."""
    final = "failure" if job["verdict"] == "fail" else "success"
    # The verdict is committed first and its feedback sent after: the job reads done a moment before GitHub has it.
    wait_for("the final status", lambda: [s["state"] for s in github.statuses(REPO, commit)][-1:] == [final], 30)
    status = github.statuses(REPO, commit)[-1]
    warned = " (warnings)" if job["verdict"] == "warn" else ""
    assert status["description"] == f"verdict {job['verdict']}{warned}, paired run on one GPU", status
    assert status["context"] == f"attnprof/{stack.project}"
    ours = wait_for(
        "the comment",
        lambda: [c for c in github.comments(REPO, PR) if c["body"].startswith(marker(stack.project))],
        30,
    )
    assert len(ours) == 1
    body = ours[0]["body"]
    assert f"**{job['verdict']}**" in body
    assert "**Paired run on one GPU:** this verdict comes from the merge base and the head profiled interleaved" in body
    assert "### Paired rounds per case (1)" in body and "| `sleepy" in body
    assert f"git worktree add --detach ../attnprof-base {BASE_COMMIT}" in body
    assert "attnprof paired attnprof.toml --base ../attnprof-base --head ." in body
