"""Migrations up and down, and the repository/service layer on both backends (Postgres and SQLite)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import inspect, select
from sqlalchemy.orm import Session

from attnprof.contract.provenance import Provenance
from attnprof.core.documents import parse_result
from attnprof.server import migrate
from attnprof.server.baselines import service as baselines
from attnprof.server.comparisons import service as analysis
from attnprof.server.config import Analysis, Limits
from attnprof.server.db import make_engine
from attnprof.server.errors import InvalidPayload
from attnprof.server.jobs import service as jobs
from attnprof.server.jobs.models import Job
from attnprof.server.models import Base
from attnprof.server.projects import service as projects
from attnprof.server.runs import service as runs
from attnprof.server.trends import repository as trends
from tests.pgtest import create_database, drop_database
from tests.server import documents as docs

TABLES = set(Base.metadata.tables)


def _fill(session: Session) -> None:
    project = projects.create(session, name="filled")
    for i, slow in enumerate((1.0, 1.0, 1.3)):
        run = runs.store_run(
            session,
            project_id=project.id,
            document=parse_result(docs.h200(slower=slow)),
            provenance=Provenance(branch="main", commit=f"c{i}", ancestors=(f"c{i - 1}",)),
        )
        analysis.analyze(session, run_id=run.id, cfg=Analysis())
    session.commit()


def _roundtrip(url: str) -> None:
    engine = make_engine(url)
    try:
        migrate.upgrade(url)
        assert set(inspect(engine).get_table_names()) >= TABLES
        migrate.downgrade(url, "base")
        assert not TABLES & set(inspect(engine).get_table_names())
        migrate.upgrade(url)
        with Session(engine) as session:
            _fill(session)
        migrate.downgrade(url, "base")
        assert not TABLES & set(inspect(engine).get_table_names())
    finally:
        engine.dispose()


def test_migrations_up_and_down_on_postgres() -> None:
    name, url = create_database()
    try:
        _roundtrip(url)
    finally:
        drop_database(name)


def test_migrations_up_and_down_on_sqlite(tmp_path: Path) -> None:
    _roundtrip(f"sqlite:///{tmp_path / 'a.db'}")


@pytest.fixture(params=["postgres", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Session]:
    if request.param == "postgres":
        yield request.getfixturevalue("db")
        return
    url = f"sqlite:///{tmp_path / 'r.db'}"
    migrate.upgrade(url)
    engine = make_engine(url)
    with Session(engine, expire_on_commit=False) as session:
        yield session
    engine.dispose()


def test_store_compare_and_query_on_both_backends(store: Session) -> None:
    project = projects.create(store, name="both")
    cfg = Analysis()
    first = runs.store_run(
        store,
        project_id=project.id,
        document=parse_result(docs.h200()),
        provenance=Provenance(branch="main", commit="a1"),
    )
    assert analysis.analyze(store, run_id=first.id, cfg=cfg).verdict == "pass"
    case = "sdpa[backend=cudnn,pass=fwd]"
    cand = runs.store_run(
        store,
        project_id=project.id,
        document=parse_result(docs.h200(slower=1.1, cases=[case])),
        provenance=Provenance(branch="pr", commit="b1", base_commit="a1"),
    )
    found = analysis.analyze(store, run_id=cand.id, cfg=cfg)
    assert found.verdict == "fail" and found.baseline_run_ids == [first.id]
    assert {f["case"] for f in found.document["findings"] if f["verdict"] == "fail"} == {case}
    store.commit()
    choice = baselines.select(store, candidate=cand, default_branch="main", ancestors=[], cfg=cfg)
    assert [r.id for r in choice.runs] == [first.id]
    tq = trends.TrendQuery(
        project_id=project.id,
        testbed_id=None,
        branch="main",
        case_id=case,
        since=None,
        until=None,
        after=None,
        limit=10,
    )
    points = trends.case_points(store, tq, "latency")
    assert [p[0] for p in points] == [first.id] and points[0][2].tzinfo is not None
    kernel = next(c for c in docs.h200()["cases"] if c["id"] == case)["kernels"][0]
    (point,) = trends.kernel_points(store, tq, kernel["key"], "latency")
    assert point.run_id == first.id and point.median == pytest.approx(kernel["duration_us"]["median"])
    spec = '[suite]\nname="s"\n[[cases]]\nname="x"\ntarget="naive"\nq_heads=1\nseq_q=8\nhead_dim=8\n'
    retry = jobs.NewJob(spec=spec, testbed="tb1", provenance=Provenance(branch="pr", commit="b1"), idempotency_key="k")
    job, created = jobs.create(store, project_id=project.id, limits=Limits(), max_attempts=3, new=retry)
    again, created2 = jobs.create(store, project_id=project.id, limits=Limits(), max_attempts=3, new=retry)
    assert created and not created2 and again is job
    assert store.query(Job).filter_by(project_id=project.id, idempotency_key="k").count() == 1
    # The inserted job is the session's object, and holds what its row holds.
    row = store.execute(select(Job.__table__).where(Job.id == job.id)).mappings().one()
    assert {name: getattr(job, name) for name in row} == dict(row)
    job.status = "running"
    store.flush()
    assert store.execute(select(Job.status).where(Job.id == job.id)).scalar_one() == "running"
    with pytest.raises(InvalidPayload):  # a retry is checked like the first request
        jobs.create(
            store,
            project_id=project.id,
            limits=Limits(),
            max_attempts=3,
            new=jobs.NewJob(
                spec="", testbed="tb1", provenance=Provenance(branch="pr", commit="b1"), idempotency_key="k"
            ),
        )
    store.commit()


def test_an_sqlite_too_old_for_the_embedded_mode_is_refused_with_its_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite3, "sqlite_version_info", (3, 34, 1))
    monkeypatch.setattr(sqlite3, "sqlite_version", "3.34.1")
    with pytest.raises(RuntimeError, match=r"SQLite 3\.34\.1 is too old .* 3\.35 or newer"):
        make_engine(f"sqlite:///{tmp_path / 'old.db'}")
