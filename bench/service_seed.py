"""A Postgres database for the service load benchmark, seeded in bulk through the service's own tables.

    .venv/bin/python -m bench.service_seed --keep        # seed attnprof_bench (10,000 runs) and leave it there

The database is created fresh and migrated to head with the service's Alembic migrations; the project, its admin
token and the testbeds are made by the service's own code. The history is then written with COPY, the way
``runs.service.store_run`` lays it out (a run with its document, all but the samples as
``runs.documents.stored_form`` keeps it, a row per case and per kernel, and each case's samples as one array: their
one copy), so that the queries under test see the tables and indexes the service really has:

* runs spread evenly over the past year, on a handful of testbeds (distinct testbed keys) and branches: most on
  the default branch ``main``, the rest on feature branches, each feature run naming its merge base on main and
  that commit's first-parent ancestors (newest first, up to 50), as the CI client sends them;
* each run holds 10 cases taken from the real H200 run in ``tests/data/h200/attnprof/result.json`` (their kernels
  included), each case timed ``--samples-per-case`` times around a median that drifts slowly over the year
  (lognormal, 1% within a run, 1% between runs), rates and kernel durations scaled to match;
* the document of every run is a complete result document (the H200 run's environment under the testbed's key),
  so a baseline or noise-history read costs what it costs in a real deployment.

Foreign-key triggers are off while the rows are copied (``session_replication_role = replica``): the rows are
consistent by construction and checking some 700,000 rows one by one would measure the checks, not the seed.
``VACUUM ANALYZE`` follows, as autovacuum would in a running deployment.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import psycopg

from attnprof.core.documents import parse_result
from attnprof.server import migrate
from attnprof.server.auth import service as auth
from attnprof.server.db import make_engine, make_sessionmaker
from attnprof.server.projects import service as projects
from attnprof.server.testbeds import service as testbeds

ROOT = Path(__file__).resolve().parents[1]

H200 = ROOT / "tests" / "data" / "h200" / "attnprof" / "result.json"
PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
PROJECT = "bench"
CASES_PER_RUN = 10
# name -> share of the runs. The first one carries the H200 run's own testbed key: uploads land on it.
TESTBEDS = {"h200-a": 0.4, "h200-b": 0.3, "a100-a": 0.2, "l40s-a": 0.1}
BRANCHES = {"main": 0.7, "feature-attn": 0.1, "feature-kv": 0.08, "feature-rope": 0.07, "feature-fp8": 0.05}
ANCESTORS_MAX = 50
CHUNK_RUNS = 250


@dataclass
class Seeded:
    """What the benchmark needs to know about the seeded database."""

    database: str
    url: str
    project: str
    admin_token: str
    runs: int
    run_cases: int
    run_kernels: int
    samples: int
    document_bytes: int
    seconds: dict[str, float]
    testbeds: dict[str, str]  # name -> testbed key
    branches: list[str]
    case_ids: list[str]
    kernel_keys: dict[str, list[str]]  # case id -> kernel keys
    main_commits: list[str] = field(default_factory=list)  # oldest first
    first_at: str = ""
    last_at: str = ""

    def to_json(self) -> str:
        return json.dumps(self.__dict__, indent=2)


def pg_url(admin: str, name: str) -> str:
    base = admin.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://", 1)
    return f"{base}/{name}"


def libpq_url(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


def create_database(admin: str, name: str) -> str:
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    return pg_url(admin, name)


def drop_database(admin: str, name: str) -> None:
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _sha(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()


def _testbed_key(name: str, template: dict[str, Any]) -> str:
    if name == next(iter(TESTBEDS)):
        return str(template["environment"]["testbed_key"])
    return _sha(f"testbed {name}")[:16]


def _pick(rng: np.random.Generator, shares: dict[str, float], n: int) -> list[str]:
    names = list(shares)
    p = np.array([shares[k] for k in names])
    return [names[i] for i in rng.choice(len(names), size=n, p=p / p.sum())]


def _without_samples(case: dict[str, Any]) -> dict[str, Any]:
    latency = case.get("latency_us")
    return case if not latency else {**case, "latency_us": {k: v for k, v in latency.items() if k != "samples"}}


def _scaled_case(case: dict[str, Any], samples: np.ndarray, scale: float) -> dict[str, Any]:
    """A copy of ``case`` timed by ``samples`` (microseconds), its rates and kernel durations scaled to match."""
    q25, q50, q75 = (float(v) for v in np.percentile(samples, [25, 50, 75]))
    mean = float(samples.mean())
    latency = {
        **case["latency_us"],
        "samples": [round(float(v), 3) for v in samples],
        "median": q50,
        "p25": q25,
        "p75": q75,
        "min": float(samples.min()),
        "max": float(samples.max()),
        "mean": mean,
        "cv": float(samples.std() / mean),
        "iterations": int(samples.size),
    }
    out = {**case, "latency_us": {k: v for k, v in latency.items() if k in case["latency_us"]}}
    if case.get("achieved"):
        out["achieved"] = {
            **case["achieved"],
            **{
                k: case["achieved"][k] / scale
                for k in ("tflops", "gbps", "compute_util", "bandwidth_util")
                if case["achieved"].get(k) is not None
            },
        }
    out["kernels"] = [
        {
            **k,
            "duration_us": {q: v * scale for q, v in k["duration_us"].items()},
            **{q: k[q] / scale for q in ("tflops", "gbps", "compute_util", "bandwidth_util") if k.get(q) is not None},
        }
        for k in case["kernels"]
    ]
    return out


def _runs_plan(rng: np.random.Generator, n: int, now: datetime) -> Iterator[dict[str, Any]]:
    """Where each run comes from, oldest first: time, testbed, branch, commit, merge base and its ancestors."""
    start = now - timedelta(days=365)
    step_s = 365 * 86400 / n
    names = _pick(rng, TESTBEDS, n)
    branches = _pick(rng, BRANCHES, n)
    main_commits: list[str] = []
    feature_heads: dict[str, int] = {}
    for i in range(n):
        at = start + timedelta(seconds=i * step_s + float(rng.uniform(0, step_s * 0.9)))
        branch = branches[i]
        if branch == "main":
            # A new main commit every ~2 runs: each commit is profiled on one or two testbeds.
            if not main_commits or rng.random() < 0.5:
                main_commits.append(_sha(f"main {len(main_commits)}"))
            yield {
                "at": at,
                "testbed": names[i],
                "branch": branch,
                "commit": main_commits[-1],
                "base": None,
                "ancestors": [],
                "pr": None,
                "main_commits": main_commits,
            }
            continue
        feature_heads[branch] = feature_heads.get(branch, 0) + 1
        base = main_commits[-1] if main_commits else None
        ancestors = main_commits[-2 : -2 - ANCESTORS_MAX : -1] if len(main_commits) > 1 else []
        yield {
            "at": at,
            "testbed": names[i],
            "branch": branch,
            "commit": _sha(f"{branch} {feature_heads[branch]}"),
            "base": base,
            "ancestors": ancestors,
            "pr": 100 + list(BRANCHES).index(branch),
            "main_commits": main_commits,
        }


def seed(
    *,
    admin: str = PG_ADMIN,
    database: str = "attnprof_bench",
    runs: int = 10_000,
    samples_per_case: int = 100,
    rng_seed: int = 0,
    log: Any = print,
) -> Seeded:
    seconds: dict[str, float] = {}
    t0 = time.perf_counter()
    url = create_database(admin, database)
    migrate.upgrade(url)
    seconds["create and migrate"] = time.perf_counter() - t0

    template = json.loads(H200.read_text())
    cases = template["cases"][:CASES_PER_RUN]
    engine = make_engine(url)
    with make_sessionmaker(engine)() as session:
        project = projects.create(session, name=PROJECT)
        admin_token = auth.create_project_token(session, project_id=project.id, role="admin", name="bench")[1]
        keys = {name: _testbed_key(name, template) for name in TESTBEDS}
        testbed_ids = {}
        for name, key in keys.items():
            tb = testbeds.ensure(session, name)
            tb.key, tb.meaning = key, template["environment"]["testbed"]
            testbed_ids[name] = tb.id
        session.commit()
        project_id = project.id
    engine.dispose()

    rng = np.random.default_rng(rng_seed)
    now = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1)
    base_median = {c["id"]: float(c["latency_us"]["median"]) for c in cases}
    n_cases = n_kernels = n_samples = doc_bytes = 0
    run_case_id = kernel_id = 0
    plan = list(_runs_plan(rng, runs, now))
    main_commits = plan[-1]["main_commits"] if plan else []
    t_copy = time.perf_counter()
    checked = 0
    with psycopg.connect(libpq_url(url)) as conn:
        conn.execute("SET session_replication_role = replica")
        for lo in range(0, runs, CHUNK_RUNS):
            chunk = plan[lo : lo + CHUNK_RUNS]
            run_rows, case_rows, kernel_rows = [], [], []
            sample_rows: list[tuple[int, list[float]]] = []
            for j, p in enumerate(chunk):
                i = lo + j
                run_id = str(uuid.UUID(int=int(rng.integers(0, 2**63)) << 64 | i))
                # A slow drift over the year and a run-to-run offset, both around 1%.
                drift = 1.0 + 0.02 * math.sin(2 * math.pi * i / runs * 3)
                run_offset = float(rng.lognormal(0.0, 0.01))
                doc_cases = []
                for case in cases:
                    scale = drift * run_offset * (1.0 + 0.15 * list(TESTBEDS).index(p["testbed"]))
                    values = base_median[case["id"]] * scale * rng.lognormal(0.0, 0.01, samples_per_case)
                    doc_case = _scaled_case(case, values, scale)
                    doc_cases.append(doc_case)
                    run_case_id += 1
                    lat, ach = doc_case["latency_us"], doc_case.get("achieved") or {}
                    case_rows.append(
                        (
                            run_case_id,
                            run_id,
                            project_id,
                            testbed_ids[p["testbed"]],
                            p["branch"],
                            p["at"],
                            case["id"],
                            case["status"],
                            case.get("backend_used"),
                            lat["median"],
                            lat["p25"],
                            lat["p75"],
                            lat["min"],
                            lat["max"],
                            lat.get("cv"),
                            ach.get("tflops"),
                            ach.get("gbps"),
                            ach.get("compute_util"),
                            ach.get("bandwidth_util"),
                            ach.get("bound"),
                            samples_per_case,
                            case.get("trace"),
                        )
                    )
                    for k in doc_case["kernels"]:
                        kernel_id += 1
                        d = k["duration_us"]
                        kernel_rows.append(
                            (
                                kernel_id,
                                run_case_id,
                                k["key"],
                                k["phase"],
                                d["median"],
                                d["p25"],
                                d["p75"],
                                k["launches_per_iter"],
                                k.get("tflops"),
                                k.get("gbps"),
                                k.get("compute_util"),
                                k.get("bandwidth_util"),
                                k.get("theoretical_occupancy"),
                                k.get("bound"),
                            )
                        )
                    sample_rows.append((run_case_id, lat["samples"]))
                    n_samples += samples_per_case
                env = {**template["environment"], "testbed_key": keys[p["testbed"]]}
                run_info = {**template["run"], "id": str(uuid.uuid4()), "created_at": p["at"].isoformat()}
                document = {**template, "run": run_info, "environment": env, "cases": doc_cases}
                if checked < 3:  # the seeded documents are valid result documents
                    parse_result(document, source="seeded document")
                    checked += 1
                # What the service stores of it: the samples are in case_samples only (migration 0008).
                text = json.dumps({**document, "cases": [_without_samples(c) for c in doc_cases]})
                doc_bytes += len(text)
                run_rows.append(
                    (
                        run_id,
                        project_id,
                        testbed_ids[p["testbed"]],
                        keys[p["testbed"]],
                        run_info["id"],
                        p["branch"],
                        p["commit"],
                        "example/attention",
                        p["pr"],
                        p["base"],
                        json.dumps(p["ancestors"]),
                        "cuda",
                        False,
                        None,
                        None,
                        p["at"],
                        text,
                    )
                )
            with conn.cursor() as cur:
                with cur.copy(
                    "COPY runs (id, project_id, testbed_id, testbed_key, document_run_id, branch, commit, repo, pr,"
                    " base_commit, ancestors, mode, suspect, job_id, attempt, created_at, document) FROM STDIN"
                ) as copy:
                    for row in run_rows:
                        copy.write_row(row)
                with cur.copy(
                    "COPY run_cases (id, run_id, project_id, testbed_id, branch, created_at, case_id, status,"
                    " backend_used, latency_median_us, latency_p25_us, latency_p75_us, latency_min_us,"
                    " latency_max_us, latency_cv, tflops, gbps, compute_util, bandwidth_util, bound, samples_count,"
                    " trace) FROM STDIN"
                ) as copy:
                    for case_row in case_rows:
                        copy.write_row(case_row)
                with cur.copy(
                    "COPY run_kernels (id, run_case_id, key, phase, duration_median_us, duration_p25_us,"
                    " duration_p75_us, launches_per_iter, tflops, gbps, compute_util, bandwidth_util,"
                    " theoretical_occupancy, bound) FROM STDIN"
                ) as copy:
                    for kernel_row in kernel_rows:
                        copy.write_row(kernel_row)
                with cur.copy("COPY case_samples (run_case_id, values_us) FROM STDIN") as copy:
                    copy.set_types(["bigint", "float8[]"])
                    for sample_row in sample_rows:
                        copy.write_row(sample_row)
            n_cases += len(case_rows)
            n_kernels += len(kernel_rows)
            if (lo // CHUNK_RUNS) % 8 == 0:
                log(f"  seeded {lo + len(chunk)} runs ({time.perf_counter() - t_copy:.0f} s)")
        conn.execute("SELECT setval(pg_get_serial_sequence('run_cases', 'id'), %s)", (run_case_id,))
        conn.execute("SELECT setval(pg_get_serial_sequence('run_kernels', 'id'), %s)", (kernel_id,))
        conn.commit()
    seconds["copy"] = time.perf_counter() - t_copy
    t_vac = time.perf_counter()
    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
    seconds["vacuum analyze"] = time.perf_counter() - t_vac
    seconds["total"] = time.perf_counter() - t0
    return Seeded(
        database=database,
        url=url,
        project=PROJECT,
        admin_token=admin_token,
        runs=runs,
        run_cases=n_cases,
        run_kernels=n_kernels,
        samples=n_samples,
        document_bytes=doc_bytes,
        seconds=seconds,
        testbeds=keys,
        branches=list(BRANCHES),
        case_ids=[c["id"] for c in cases],
        kernel_keys={c["id"]: sorted({k["key"] for k in c["kernels"]}) for c in cases},
        main_commits=main_commits,
        first_at=plan[0]["at"].isoformat() if plan else "",
        last_at=plan[-1]["at"].isoformat() if plan else "",
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pg", default=PG_ADMIN, help="an admin connection to the Postgres server")
    ap.add_argument("--database", default="attnprof_bench")
    ap.add_argument("--runs", type=int, default=10_000)
    ap.add_argument("--samples-per-case", type=int, default=100)
    ap.add_argument("--out", type=Path, help="write what was seeded (JSON, with the admin token) here")
    args = ap.parse_args()
    seeded = seed(admin=args.pg, database=args.database, runs=args.runs, samples_per_case=args.samples_per_case)
    print(
        f"seeded {seeded.runs} runs, {seeded.run_cases} cases, {seeded.run_kernels} kernels, "
        f"{seeded.samples} samples in {seeded.seconds['total']:.1f} s: {seeded.seconds}"
    )
    if args.out:
        args.out.write_text(seeded.to_json())


if __name__ == "__main__":
    main()
