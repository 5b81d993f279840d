"""End to end, a paired job (DESIGN 1, 5): real Postgres, Redis, ``attnprof serve``, the analysis worker and the
profile workers (real Celery processes, CPU, in their jail), with two source trees whose one case differs 3x.

The profile worker downloads both bundles, runs ``python -m profiler_core ab`` on them, and uploads the head's
result with the base's and paired documents; the analysis stores the history comparison and the paired one, whose
verdict the job takes."""

from __future__ import annotations

import uuid

import pytest

from tests.profiling_support import tar_gz
from tests.worker.wkstack import Stack, custom_case, sql, suite

pytestmark = pytest.mark.slow
BASE_COMMIT = "0123456789abcdef0123456789abcdef01234567"


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


def test_a_paired_job_profiles_both_trees_and_the_paired_comparison_gives_the_verdict(stack: Stack) -> None:
    spec = suite("paired", custom_case("sleepy", "ab.work:make_case"))
    data = {"testbed": "tb-main", "branch": "feature", "commit": uuid.uuid4().hex[:12], "base_commit": BASE_COMMIT}
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
