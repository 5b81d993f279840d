"""What reading a stored 100-case result document costs, and what the pages and queries that read one take.

    .venv/bin/python bench/document_read.py --json /tmp/after.json
    PYTHONPATH=/tmp/before .venv/bin/python bench/document_read.py --json /tmp/before.json   # another checkout
    .venv/bin/python bench/document_read.py --report bench/reports/document-read.md /tmp/before.json /tmp/after.json

Measured in this process, on a Postgres database of its own migrated to the checkout's head, with the checkout's
service code (so the same script measures the layout before migration 0008, samples inside ``runs.document``, and
after it, samples in ``case_samples`` only, from two checkouts): three default-branch uploads and one pull-request
upload of a 100-case document (bench/service_load.py's: the H200 run's 15 cases replicated, 21,000 samples), then,
``--repeats`` times each,

* the stored document read back in a session: the column alone (and, after 0008, the samples put back), then read
  and validated into ``ResultDocument``, nothing kept in between;
* the pages and API routes that read documents, through the app (ASGI, no HTTP server), server time from
  ``Server-Timing``: the run page first drawn (its rendered HTML and any kept document dropped before each request)
  and kept, the comparison page, ``GET /runs/{id}`` (the whole document), a case's and a kernel's trend (API and
  page: they read no document, only the normalised rows);
* the upload of a 100-case document with its comparison (``POST /results``), timed as it happened.

Targets (bench/reports/service-load.md, dashboard-load.md): a page 300 ms of server time, a trend query p95 50 ms,
a 100-case upload with its comparison 500 ms.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import psycopg  # noqa: E402
import service_load  # noqa: E402
import service_seed as seeding  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402
from sqlalchemy import select, text  # noqa: E402
from sqlalchemy.orm import Session  # noqa: E402

import attnprof.server.models  # noqa: E402, F401  (every table, for the ORM)
from attnprof.core.documents import parse_result  # noqa: E402
from attnprof.server import migrate  # noqa: E402
from attnprof.server.app import create_app  # noqa: E402
from attnprof.server.auth import service as auth  # noqa: E402
from attnprof.server.config import Settings  # noqa: E402
from attnprof.server.db import make_engine  # noqa: E402
from attnprof.server.projects import service as projects  # noqa: E402
from attnprof.server.runs.models import Run  # noqa: E402

PG_ADMIN = seeding.PG_ADMIN


def _forget() -> None:
    """Drop whatever this checkout keeps of stored documents and rendered pages (as a process that has not read
    them yet)."""
    from attnprof.server.web.pages import runs as run_pages

    run_pages.rendered_runs.clear()
    try:
        from attnprof.server.comparisons import documents as comparison_documents
        from attnprof.server.runs import documents

        documents.results.clear()
        comparison_documents.comparisons.clear()
    except ImportError:  # before the one way in: the analysis kept its own
        from attnprof.server.comparisons import service as analysis

        analysis._documents._docs.clear()  # type: ignore[attr-defined]


def _reads(session: Session, run_id: str) -> tuple[Any, Any]:
    """(read the stored document, read and validate it) for this checkout's layout."""
    try:
        from attnprof.server.runs import documents, repository
    except ImportError:
        documents = None  # type: ignore[assignment]

    def column() -> Any:
        return session.execute(select(Run.document).where(Run.id == run_id)).scalar_one()

    if documents is None or not hasattr(documents, "result_of"):
        return column, lambda: parse_result(column())

    def read() -> Any:
        return documents._with_samples(column(), repository.samples_of_run(session, run_id))

    def validated() -> Any:
        documents.results.clear()
        return documents.result_of(session, run_id)

    return read, validated


def _timed(fn: Any, repeats: int) -> dict[str, float]:
    wall, cpu = [], []
    for _ in range(repeats):
        w, c = time.perf_counter(), time.process_time()
        fn()
        wall.append((time.perf_counter() - w) * 1000)
        cpu.append((time.process_time() - c) * 1000)
    return _summary(wall) | {"cpu_p50": statistics.median(cpu)}


def _summary(ms: list[float]) -> dict[str, float]:
    ordered = sorted(ms)
    return {"p50": statistics.median(ms), "p95": ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]}


def _server_ms(answer: Any) -> float:
    assert answer.status_code in (200, 201), (answer.status_code, answer.text[:500])
    return float(answer.headers["server-timing"].removeprefix("app;dur="))


def _requests(send: Any, times: int, before: Any = None) -> dict[str, float]:
    """Server time (``Server-Timing``) of ``times`` requests, and the CPU time of this process per request (the
    app runs in it: the server's share and the test client's)."""
    server, cpu = [], []
    for i in range(times):
        if before is not None:
            before()
        started = time.process_time()
        server.append(_server_ms(send(i)))
        cpu.append((time.process_time() - started) * 1000)
    return _summary(server) | {"cpu_p50": statistics.median(cpu)}


def measure(repeats: int) -> dict[str, Any]:
    name = f"attnprof_docread_{os.getpid()}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    url = PG_ADMIN.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://", 1) + f"/{name}"
    engine = make_engine(url)
    try:
        migrate.upgrade(url)
        with Session(engine) as session:
            project = projects.create(session, name="docread")
            token = {
                r: auth.create_project_token(session, project_id=project.id, role=r)[1] for r in ("submit", "read")
            }
            session.commit()
        settings = Settings(database_url=url, broker_url="redis://127.0.0.1:6379/12", public_url="http://bench")
        out: dict[str, Any] = {"head": migrate_head(url), "repeats": repeats}
        with TestClient(create_app(settings)) as client:
            out |= _through_the_app(client, engine, token, repeats)
        return out
    finally:
        engine.dispose()
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def migrate_head(url: str) -> str:
    with psycopg.connect(url.replace("+psycopg", "")) as conn:
        row = conn.execute("SELECT version_num FROM alembic_version").fetchone()
    return str(row[0]) if row else ""


def _through_the_app(client: TestClient, engine: Any, token: dict[str, str], repeats: int) -> dict[str, Any]:
    template = json.loads(seeding.H200.read_text())
    submit = {"Authorization": f"Bearer {token['submit']}"}
    commits = [f"{i:040x}" for i in range(1, 4)]

    def main_upload(i: int) -> Any:
        doc = service_load.hundred_cases(template, commit_tag=f"main-{i}")
        body = {"result": doc, "branch": "main", "commit": commits[i], "ancestors": commits[:i][::-1]}
        return client.post("/api/v1/projects/docread/results", json=body, headers=submit)

    answers: list[Any] = []
    bodies = [service_load.hundred_cases(template, commit_tag=f"pr-{i}", slower=1.05) for i in range(repeats)]

    def feature_upload(i: int) -> Any:
        body = {"result": bodies[i], "branch": "feature", "commit": uuid.uuid4().hex, "base_commit": commits[-1]}
        answers.append(client.post("/api/v1/projects/docread/results", json=body, headers=submit))
        return answers[-1]

    out: dict[str, Any] = {"upload_main": _requests(main_upload, len(commits))}
    out["upload_feature"] = _requests(feature_upload, repeats)
    doc = bodies[-1]
    run_id, comparison_id = answers[-1].json()["run_id"], answers[-1].json()["comparison_id"]
    out["cases"] = len(doc["cases"])
    out["samples"] = sum(len(c["latency_us"]["samples"]) for c in doc["cases"] if c.get("latency_us"))
    with Session(engine) as session:
        sizes = session.execute(
            text(
                "SELECT avg(pg_column_size(document)), avg(length(document::text)) FROM runs"
                " WHERE project_id = (SELECT id FROM projects WHERE name = 'docread')"
            )
        ).one()
        arrays = session.execute(
            text(
                "SELECT sum(pg_column_size(s.values_us)) FROM case_samples s JOIN run_cases c ON c.id = s.run_case_id"
                " WHERE c.run_id = :r"
            ),
            {"r": run_id},
        ).scalar_one()
        out["stored"] = {"column_bytes": float(sizes[0]), "json_chars": float(sizes[1]), "samples_bytes": int(arrays)}
        read, validated = _reads(session, run_id)
        _forget()
        out["read"] = _timed(read, repeats)
        out["read_validated"] = _timed(validated, repeats)
    _forget()
    form = client.get("/ui/login")
    csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
    assert csrf is not None
    client.post("/ui/login", data={"token": token["read"], "csrf": csrf.group(1), "next": ""}, follow_redirects=False)
    read_h = {"Authorization": f"Bearer {token['read']}"}
    case_id = doc["cases"][0]["id"]
    kernel = doc["cases"][0]["kernels"][0]["key"]
    paths = {
        "run page, first drawn": (f"/ui/p/docread/runs/{run_id}", True, {}),
        "run page, kept": (f"/ui/p/docread/runs/{run_id}", False, {}),
        "comparison page": (f"/ui/p/docread/comparisons/{comparison_id}", True, {}),
        "GET /runs/{id} (the document)": (f"/api/v1/projects/docread/runs/{run_id}", True, read_h),
        "trend API, a case": (f"/api/v1/projects/docread/trends?case={quote(case_id)}&branch=main", True, read_h),
        "trend API, a kernel": (
            f"/api/v1/projects/docread/trends/kernels?case={quote(case_id)}&kernel={quote(kernel)}&branch=main",
            True,
            read_h,
        ),
        "trends page, a case": (f"/ui/p/docread/trends?branch=main&case={quote(case_id)}", True, {}),
    }
    pages: dict[str, Any] = {}
    for label, (path, cold, headers) in paths.items():
        client.get(path, headers=headers)  # one unmeasured request
        pages[label] = _requests(
            lambda _i, path=path, headers=headers: client.get(path, headers=headers),
            repeats,
            _forget if cold else None,
        )
    out["pages"] = pages
    return out


def _row(label: str, before: dict[str, float] | None, after: dict[str, float], target: str) -> str:
    def cell(f: dict[str, float] | None) -> str:
        if f is None:
            return "–"
        extra = f" (CPU {f['cpu_p50']:.1f})" if "cpu_p50" in f else ""
        return f"{f['p50']:.1f} / {f['p95']:.1f}{extra}"

    return f"| {label} | {cell(before)} | {cell(after)} | {target} |"


def write_report(before: dict[str, Any], after: dict[str, Any], path: Path, command: str) -> None:
    lines = [
        "# Reading a stored result document: samples inside the JSON column, or in `case_samples` only",
        "",
        f"Date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC. Command: `{command}`.",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores shared with Postgres and other work; Python"
        f" {platform.python_version()}. Load average (1 min) before and after each run: before"
        f" {before['load'][0]:.2f} → {before['load'][1]:.2f}, after {after['load'][0]:.2f} → {after['load'][1]:.2f}.",
        "",
        f"Before: migration {before['head']} (samples inside `runs.document` and in `case_samples`), the documents read"
        f" as dicts by the pages. After: migration {after['head']} (samples in `case_samples` only, put back by"
        " `attnprof.server.runs.documents.result_of`, every reader on the typed model, kept per process). A"
        f" {after['cases']}-case document with {after['samples']:,} samples; {after['repeats']} requests or reads"
        " each, one at a time, medians and p95 in milliseconds (wall; CPU of this process where shown).",
        "",
        "## What is stored of one run",
        "",
        "| | before | after |",
        "|---|---:|---:|",
        f"| `runs.document`, as stored (TOAST-compressed) | {before['stored']['column_bytes'] / 1e3:,.0f} kB |"
        f" {after['stored']['column_bytes'] / 1e3:,.0f} kB |",
        f"| `runs.document` as JSON text | {before['stored']['json_chars'] / 1e6:.2f} MB |"
        f" {after['stored']['json_chars'] / 1e6:.2f} MB |",
        f"| `case_samples` arrays of the run | {before['stored']['samples_bytes'] / 1e3:,.0f} kB |"
        f" {after['stored']['samples_bytes'] / 1e3:,.0f} kB |",
        "",
        "## Times, p50 / p95 ms",
        "",
        "| what | before | after | target |",
        "|---|---:|---:|---|",
        _row(
            "read the stored document (after: the column, then its samples put back)", before["read"], after["read"], ""
        ),
        _row(
            "read it and validate it into `ResultDocument` (nothing kept)",
            before["read_validated"],
            after["read_validated"],
            "",
        ),
    ]
    for label, figures in after["pages"].items():
        target = "p95 ≤ 50 ms" if label.startswith("trend API") else "≤ 300 ms"
        lines.append(_row(label, before["pages"].get(label), figures, target))
    lines += [
        _row(
            "upload of a 100-case document with its comparison, pull request",
            before["upload_feature"],
            after["upload_feature"],
            "≤ 500 ms",
        ),
        _row("upload, default branch (3: change points too)", before["upload_main"], after["upload_main"], ""),
        "",
    ]
    path.write_text("\n".join(lines) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--quiet-below", type=float, default=1.5, help="wait for a 1-minute load average under this")
    ap.add_argument("--quiet-wait-s", type=float, default=300, help="but measure anyway after this long")
    ap.add_argument("--json", type=Path, help="write the figures here")
    ap.add_argument("--report", type=Path, nargs=3, metavar=("REPORT", "BEFORE_JSON", "AFTER_JSON"))
    args = ap.parse_args()
    if args.report:
        report, before, after = args.report
        command = "python bench/document_read.py " + " ".join(sys.argv[1:])
        write_report(json.loads(before.read_text()), json.loads(after.read_text()), report, command)
        return
    waited = time.monotonic()
    while os.getloadavg()[0] >= args.quiet_below and time.monotonic() - waited < args.quiet_wait_s:
        time.sleep(10)
    load = [os.getloadavg()[0]]
    figures = measure(args.repeats)
    load.append(os.getloadavg()[0])
    figures["load"] = load
    print(json.dumps(figures, indent=1))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
