"""The zoo's changes as paired jobs through the embedded stack (SQLite, the folder broker, ``attnprof serve``, the
analysis worker and one profile worker in its jail), started as ``bench/pipeline_load.py`` starts it."""

from __future__ import annotations

import argparse
import gzip
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from attnprof.core.analysis import render_table
from bench import pipeline_load as pipeline
from bench.zoo import outcomes, trees
from bench.zoo.changes import Change
from bench.zoo.records import JobRun


@contextmanager
def running(device: str, testbed: str, workdir: Path) -> Iterator[pipeline.Stack]:
    """The stack with one profile worker serving ``testbed`` on ``device``, stopped on the way out."""
    args = argparse.Namespace(
        embedded=True,
        device=device,
        testbed=testbed,
        cache_dir=workdir / "worker-peaks",
        threads=0,
        pass_env=[],
        profile_workers=1,
    )
    with pipeline.running_stack(args, workdir) as stack:
        yield stack


def _seconds(a: str | None, b: str | None) -> float | None:
    start, end = pipeline.utc(a), pipeline.utc(b)
    return round((end - start).total_seconds(), 3) if start and end else None


def submit(stack: pipeline.Stack, change: Change, found: trees.Trees, rep: int, *, paired: bool = True) -> str:
    """The change as ``attnprof submit --paired`` sends it: the suite, the head's bundle and the merge base's; or,
    not ``paired``, as ``attnprof submit`` does: the head alone (one unpaired profile, the cost's yardstick)."""
    head_commit, base_commit = trees.commit_of(found.head_files), trees.commit_of(found.base_files)
    data = {
        "testbed": stack.testbed,
        "branch": f"zoo/{change.name}",
        "commit": head_commit,
        "suite_path": change.suite,
    }
    files = {
        "spec": ("attnprof.toml", found.suite.read_bytes()),
        "bundle": ("head.tar.gz", trees.bundle(found.head_files)),
    }
    if paired:
        data["base_commit"] = base_commit
        files["base_bundle"] = ("base.tar.gz", trees.bundle(found.base_files))
    with stack.http() as http:
        r = http.post(f"/api/v1/projects/{pipeline.PROJECT}/jobs", data=data, files=files)
    if r.status_code != 202:
        raise RuntimeError(f"the {'paired' if paired else 'unpaired'} job was refused: {r.status_code} {r.text[:2000]}")
    return str(r.json()["id"])


def run(
    stack: pipeline.Stack,
    change: Change,
    found: trees.Trees,
    *,
    rep: int,
    dest: Path,
    timeout_s: float,
    paired: bool = True,
) -> JobRun:
    """Submit the change as a paired job (or the head alone, not ``paired``), wait for its verdict (cancelled at
    ``timeout_s``), and read what it said."""
    job_id = submit(stack, change, found, rep, paired=paired)
    deadline = time.monotonic() + timeout_s
    with stack.http() as http:
        while True:
            stack.check_alive()
            job: dict[str, Any] = http.get(f"/api/v1/jobs/{job_id}").json()
            if job["status"] in pipeline.FINAL:
                break
            if time.monotonic() > deadline:
                http.post(f"/api/v1/jobs/{job_id}/cancel")
                job = http.get(f"/api/v1/jobs/{job_id}").json()
                job["reason"] = f"the zoo's budget ran out after {timeout_s:.0f} s: cancelled ({job.get('reason')})"
                break
            time.sleep(0.5)
        found_run = JobRun(
            rep=rep,
            job_id=job_id,
            status=job["status"],
            verdict=job.get("verdict"),
            reason=str(job["reason"])[:2000] if job.get("reason") else None,
            attempts=job.get("attempts"),
            total_s=_seconds(job.get("created_at"), job.get("finished_at")),
            queue_s=_seconds(job.get("created_at"), job.get("started_at")),
        )
        if job.get("run_id"):
            stored = http.get(f"/api/v1/projects/{pipeline.PROJECT}/runs/{job['run_id']}").json()
            found_run.held_s = _seconds(job.get("started_at"), stored.get("created_at"))
        r = http.get(f"/api/v1/jobs/{job_id}/comparison", params={"mode": "paired"})
        if paired and r.status_code == 200:
            body = r.json()["document"]
            out = dest / f"job-{rep}"
            out.mkdir(parents=True, exist_ok=True)
            (out / "comparison.json.gz").write_bytes(gzip.compress(json.dumps(body).encode(), mtime=0))
            doc = outcomes.parse(body, f"job {job_id}")
            found_run.outcome = outcomes.outcome(doc)
            (out / "comparison.txt").write_text(render_table(doc) + "\n")
    return found_run
