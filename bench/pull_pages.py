"""The queries of the runs page, a pull request's page and the overview's latest pull requests, timed on one project
with 20,000 runs (a comparison each, two thirds on 400 pull requests) and 5,000 jobs, in a fresh Postgres database
migrated to head. Each query runs once to warm up, then 20 times; medians and 90th percentiles in ms.

    PYTHONPATH=. .venv/bin/python bench/pull_pages.py
"""

from __future__ import annotations

import random
import statistics
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from attnprof.server import migrate
from attnprof.server.db import make_engine, make_sessionmaker, utcnow
from attnprof.server.web import pull_repository as pulls
from tests.pgtest import create_database, drop_database

RUNS, JOBS, PULLS = 20_000, 5_000, 400

INSERT_RUN = text(
    "INSERT INTO runs (id, project_id, testbed_id, testbed_key, document_run_id, branch, commit, pr, ancestors, "
    "mode, suspect, created_at, document, feedback_attempts) "
    "VALUES (:id, :p, :tb, 'k', :d, :br, :c, :pr, '[]', 'cuda', false, :t, '{}', 0)"
)
INSERT_COMPARISON = text(
    "INSERT INTO comparisons (id, project_id, candidate_run_id, baseline_run_ids, verdict, created_at, document) "
    "VALUES (:id, :p, :r, '[]', :v, :t, '{}')"
)
INSERT_JOB = text(
    "INSERT INTO jobs (id, project_id, testbed_id, spec, suite_name, branch, commit, ancestors, pr, status, "
    "attempts, max_attempts, created_at, updated_at, feedback_attempts) "
    "VALUES (:id, :p, :tb, 's', 's', 'f', :c, '[]', :pr, 'failed', 1, 3, :t, :t, 0)"
)


def seed(url: str) -> tuple[int, int]:
    rng = random.Random(7)
    engine = make_engine(url)
    try:
        with engine.begin() as c:
            c.execute(text("INSERT INTO projects (name, default_branch, created_at) VALUES ('bench', 'main', now())"))
            pid = int(c.execute(text("SELECT id FROM projects WHERE name = 'bench'")).scalar_one())
            c.execute(text("INSERT INTO testbeds (name, key, meaning, created_at) VALUES ('h200', 'k', '{}', now())"))
            tb = int(c.execute(text("SELECT id FROM testbeds WHERE name = 'h200'")).scalar_one())
            now = utcnow()
            runs, comparisons, jobs = [], [], []
            for i in range(RUNS):
                run_id, at = str(uuid.uuid4()), now - timedelta(seconds=RUNS - i)
                pr = rng.randint(1, PULLS) if i % 3 else None
                branch = "main" if pr is None else f"f{pr}"
                runs.append({"id": run_id, "p": pid, "tb": tb, "d": f"doc-{i}", "br": branch, "c": f"{i:040x}"})
                runs[-1] |= {"pr": pr, "t": at}
                verdict = rng.choice(["pass", "warn", "fail"])
                comparisons.append({"id": str(uuid.uuid4()), "p": pid, "r": run_id, "v": verdict, "t": at})
            for i in range(JOBS):
                at = now - timedelta(seconds=JOBS - i)
                jobs.append({"id": str(uuid.uuid4()), "p": pid, "tb": tb, "pr": rng.randint(1, PULLS), "t": at})
                jobs[-1]["c"] = f"{i:040x}"
            c.execute(INSERT_RUN, runs)
            c.execute(INSERT_COMPARISON, comparisons)
            c.execute(INSERT_JOB, jobs)
            c.execute(text("ANALYZE"))
    finally:
        engine.dispose()
    return pid, tb


def timed(session: Session, label: str, query: Callable[[Session], Any], n: int = 20) -> None:
    query(session)
    times_ms = []
    for _ in range(n):
        started = time.perf_counter()
        query(session)
        times_ms.append((time.perf_counter() - started) * 1e3)
    p90 = sorted(times_ms)[int(n * 0.9)]
    print(f"{label:45s} median {statistics.median(times_ms):6.2f} ms  p90 {p90:6.2f} ms")


def main() -> None:
    name, url = create_database()
    try:
        migrate.upgrade(url)
        pid, tb = seed(url)
        engine = make_engine(url)
        page = {"branch": None, "pr": None, "testbed_id": None, "before": None, "limit": 51}
        with make_sessionmaker(engine)() as s:
            timed(s, f"runs page, newest 51 of {RUNS:,}", lambda s: pulls.list_runs(s, pid, **page))
            timed(s, "runs page, branch=main", lambda s: pulls.list_runs(s, pid, **(page | {"branch": "main"})))
            timed(s, "runs page, pr=17", lambda s: pulls.list_runs(s, pid, **(page | {"pr": 17})))
            timed(s, "runs page, testbed=h200", lambda s: pulls.list_runs(s, pid, **(page | {"testbed_id": tb})))
            timed(s, "PR page: runs_of_pr(17)", lambda s: pulls.runs_of_pr(s, pid, 17, 201))
            timed(s, "PR page: jobs_of_pr(17)", lambda s: pulls.jobs_of_pr(s, pid, 17, 201))
            timed(s, "PR page, lists: pr_counts(17)", lambda s: pulls.pr_counts(s, pid, 17))
            timed(s, f"overview: recent_pulls(10) of {PULLS} PRs", lambda s: pulls.recent_pulls(s, pid, 10))
        engine.dispose()
    finally:
        drop_database(name)


if __name__ == "__main__":
    main()
