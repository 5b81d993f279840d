"""Postgres at a multiple of the service-load seed: how big the tables get, what one run's insert costs and what a
trend query costs, for sizing a deployment (docs/deploy.md).

    .venv/bin/python -m bench.pg_scale --runs 100000 --out bench/reports/data/pg-scale/100k.json   # 10x the seed
    .venv/bin/python -m bench.pg_scale --quick     # 500 runs, 5 inserts, 20 trends, in a temporary folder: a smoke run

The database is seeded by ``bench/service_seed.py`` (the service's migrations, then COPY into the service's own
tables: a year of runs, 10 cases a run from the real H200 run, ``--samples-per-case`` samples a case as one array,
every run's result document). Then, on that database:

* table sizes (``pg_total_relation_size``: heap, TOAST and indexes) and bytes per run, case row, kernel row and
  sample, the figures docs/deploy.md extrapolates from;
* insert: ``runs.service.store_run`` of a 10-case run like the seeded ones (document, cases, kernels, samples), as
  an upload stores it, committed; wall time of each, ``--inserts`` of them;
* trend: ``trends.repository.case_points`` and ``kernel_points`` (what ``GET .../trends`` runs), random case and
  testbed on the default branch, without and with a 30-day range, 201 points; wall time of each, ``--trends`` of
  them, on a warm cache (the database fits in memory here; the report says how big it is next to the memory).

Wall times on a shared 2-core machine include whatever else ran: the 1-minute load average is recorded beside each.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import random
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import psycopg

from bench import quick
from bench import service_seed as seeding

TABLES = ("runs", "run_cases", "run_kernels", "case_samples")


def loadavg() -> float:
    return os.getloadavg()[0]


def summary_ms(values_s: list[float]) -> dict[str, float]:
    ms = np.array(values_s) * 1000
    return {
        "n": int(ms.size),
        "p50_ms": round(float(np.percentile(ms, 50)), 2),
        "p95_ms": round(float(np.percentile(ms, 95)), 2),
        "max_ms": round(float(ms.max()), 2),
    }


def _one(conn: psycopg.Connection[tuple[Any, ...]], sql: str) -> tuple[Any, ...]:
    row = conn.execute(sql).fetchone()
    assert row is not None, sql
    return row


def sizes(url: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with psycopg.connect(seeding.libpq_url(url)) as conn:
        for table in TABLES:
            sizes_sql = f"pg_total_relation_size('{table}'), pg_relation_size('{table}')"
            sql = f"SELECT {sizes_sql}, (SELECT count(*) FROM {table})"
            total, heap, rows = _one(conn, sql)
            out[table] = {"rows": rows, "total_bytes": total, "heap_bytes": heap}
        out["database_bytes"] = _one(conn, "SELECT pg_database_size(current_database())")[0]
    return out


def _document(template: dict[str, Any], rng: np.random.Generator, samples: int) -> dict[str, Any]:
    doc = copy.deepcopy(template)
    doc["run"]["id"] = str(uuid.uuid4())
    doc["run"]["created_at"] = datetime.now(UTC).isoformat()
    cases = []
    for case in template["cases"][: seeding.CASES_PER_RUN]:
        median = float(case["latency_us"]["median"])
        values = median * rng.lognormal(0.0, 0.01, samples)
        cases.append(seeding._scaled_case(case, values, float(np.median(values)) / median))
    doc["cases"] = cases
    return doc


def inserts(seeded: seeding.Seeded, n: int, samples: int) -> dict[str, Any]:
    import attnprof.server.models  # noqa: F401  (every table, for the ORM's flush)
    from attnprof.contract.provenance import Provenance
    from attnprof.core.documents import parse_result
    from attnprof.server.db import make_engine, make_sessionmaker
    from attnprof.server.projects import repository as projects
    from attnprof.server.runs import service as runs

    template = json.loads(seeding.H200.read_text())
    rng = np.random.default_rng(1)
    docs = [parse_result(_document(template, rng, samples)) for _ in range(n)]
    engine = make_engine(seeded.url)
    factory = make_sessionmaker(engine)
    times: list[float] = []
    load = loadavg()
    main = seeded.main_commits
    for i, doc in enumerate(docs):
        provenance = Provenance(
            branch="feature-scale", commit=f"{i:040x}", base_commit=main[-1], ancestors=tuple(main[-2:-52:-1])
        )
        with factory() as session:
            project = projects.get_by_name(session, seeded.project)
            assert project is not None
            start = time.perf_counter()
            runs.store_run(session, project_id=project.id, document=doc, provenance=provenance)
            session.commit()
            times.append(time.perf_counter() - start)
    engine.dispose()
    return {**summary_ms(times), "load_1min": round((load + loadavg()) / 2, 2)}


def trends(seeded: seeding.Seeded, n: int) -> dict[str, Any]:
    from sqlalchemy.orm import Session

    from attnprof.server.db import make_engine
    from attnprof.server.projects import repository as projects
    from attnprof.server.testbeds import repository as testbeds
    from attnprof.server.trends import repository as trends_repo

    engine = make_engine(seeded.url)
    rnd = random.Random(2)
    last = datetime.fromisoformat(seeded.last_at)
    groups: dict[str, list[float]] = {"case": [], "case, 30-day range": [], "case, no testbed": [], "kernel": []}
    points: list[int] = []
    load = loadavg()
    with Session(engine) as session:
        project = projects.get_by_name(session, seeded.project)
        assert project is not None
        tb_ids = [found.id for name in seeded.testbeds if (found := testbeds.get_by_name(session, name)) is not None]
        for i in range(n):
            case = rnd.choice(seeded.case_ids)
            tb = rnd.choice(tb_ids)
            kind = list(groups)[i % len(groups)]
            since = last - timedelta(days=rnd.uniform(30, 365))
            tq = trends_repo.TrendQuery(
                project.id,
                None if kind == "case, no testbed" else tb,
                "main",
                case,
                since if kind == "case, 30-day range" else None,
                since + timedelta(days=30) if kind == "case, 30-day range" else None,
                None,
                201,
            )
            start = time.perf_counter()
            if kind == "kernel":
                rows = trends_repo.kernel_points(session, tq, rnd.choice(seeded.kernel_keys[case]), "latency")
            else:
                rows = trends_repo.case_points(session, tq, "latency")
            groups[kind].append(time.perf_counter() - start)
            points.append(len(rows))
            session.rollback()
    engine.dispose()
    out: dict[str, Any] = {kind: summary_ms(values) for kind, values in groups.items()}
    out["all"] = summary_ms([v for values in groups.values() for v in values])
    out["points_p50"] = int(np.median(points))
    out["load_1min"] = round((load + loadavg()) / 2, 2)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pg", default=seeding.PG_ADMIN, help="an admin connection to the Postgres server")
    ap.add_argument("--database", default="attnprof_scale")
    ap.add_argument("--runs", type=int, default=100_000, help="runs seeded (the service-load seed has 10,000)")
    ap.add_argument("--samples-per-case", type=int, default=100)
    ap.add_argument("--inserts", type=int, default=50)
    ap.add_argument("--trends", type=int, default=400)
    ap.add_argument("--keep", action="store_true", help="leave the database there")
    ap.add_argument("--out", type=Path, help="the figures (JSON); printed as they come in any case")
    ap.add_argument(
        "--quick",
        action="store_true",
        help="500 runs of 10 samples a case, 5 inserts, 20 trend queries; --out defaults to a temporary folder",
    )
    args = ap.parse_args()
    if args.quick:
        args.runs, args.samples_per_case, args.inserts, args.trends = 500, 10, 5, 20
        (args.out,) = quick.place(ap, "pg-scale", (args.out, "pg-scale.json"))
    started = time.perf_counter()
    seeded = seeding.seed(admin=args.pg, database=args.database, runs=args.runs, samples_per_case=args.samples_per_case)
    report: dict[str, Any] = {
        "command": " ".join(["python -m bench.pg_scale", *sys.argv[1:]]),
        "runs": seeded.runs,
        "run_cases": seeded.run_cases,
        "run_kernels": seeded.run_kernels,
        "samples": seeded.samples,
        "document_json_bytes": seeded.document_bytes,
        "seed_seconds": {k: round(v, 1) for k, v in seeded.seconds.items()},
    }
    print(json.dumps(report), flush=True)
    try:
        report["sizes"] = sizes(seeded.url)
        print(json.dumps(report["sizes"]), flush=True)
        report["insert"] = inserts(seeded, args.inserts, args.samples_per_case)
        print("insert", json.dumps(report["insert"]), flush=True)
        report["trend"] = trends(seeded, args.trends)
        print("trend", json.dumps(report["trend"]), flush=True)
        with psycopg.connect(seeding.libpq_url(seeded.url)) as conn:
            report["postgres"] = _one(conn, "SELECT version()")[0]
            report["shared_buffers"] = _one(conn, "SHOW shared_buffers")[0]
        report["memory_bytes"] = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        report["cpus"] = os.cpu_count()
        report["total_seconds"] = round(time.perf_counter() - started, 1)
    finally:
        if not args.keep:
            seeding.drop_database(args.pg, args.database)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2) + "\n")
        print(f"wrote {args.out}", flush=True)


if __name__ == "__main__":
    main()
