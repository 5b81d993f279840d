"""Baselines are chosen among runs of the candidate's suite: a project that runs two suites on one testbed compares
each suite with its own history (ancestor runs, the latest default-branch runs, pins, accepted changes, the noise
floor's history and the change points' history), and a suite with no history of its own warns instead of failing
its analysis. Through the upload path (analysis inline) and the job path the analysis worker takes."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from attnprof.contract.provenance import Provenance
from attnprof.core.documents import parse_result
from attnprof.server import migrate
from attnprof.server.app import create_app
from attnprof.server.auth import service as auth
from attnprof.server.baselines import repository as baselines
from attnprof.server.comparisons import service as analysis_service
from attnprof.server.config import Analysis, Settings
from attnprof.server.db import make_engine, make_sessionmaker
from attnprof.server.jobs.models import Job
from attnprof.server.projects import service as projects
from attnprof.server.runs import repository as run_rows
from attnprof.server.runs import service as runs
from attnprof.server.testbeds import service as testbeds
from attnprof.worker.analysis import verdict as analysis
from tests.server import documents as docs
from tests.server.stack import make_settings
from tests.server.tenants import Tenant

SUITE_A = "llama7b"  # the suite of the committed H200 run
SUITE_B = "decode"
CASE = "sdpa[backend=cudnn,pass=fwd]"
# A Redis database of this module's own: the job path's messages never meet another module's.
BROKER = "redis://127.0.0.1:6379/9"


def _suite_b(*, cases: int = 4, slower: float = 1.0, slow_cases: list[str] | None = None) -> dict[str, Any]:
    """A run of a second suite on the same testbed: the H200 run's first ``cases`` cases under ids of their own."""
    doc = docs.h200()
    doc["suite"]["name"] = SUITE_B
    doc["cases"] = doc["cases"][:cases]
    for case in doc["cases"]:
        case["id"], case["name"] = f"decode-{case['id']}", f"decode-{case['name']}"
    return docs.variant(doc, slower=slower, cases=slow_cases)


def _renamed(name: str, **kw: Any) -> dict[str, Any]:
    """The H200 run (its very case ids) under another suite's name."""
    doc = docs.h200(**kw)
    doc["suite"]["name"] = name
    return doc


def _ids(doc: dict[str, Any]) -> list[str]:
    return [c["id"] for c in doc["cases"]]


def _up(client: TestClient, tenant: Tenant, doc: dict[str, Any], **kw: Any) -> dict[str, Any]:
    r = client.post(
        f"/api/v1/projects/{tenant.name}/results", json=docs.upload_body(doc, **kw), headers=tenant.h("submit")
    )
    assert r.status_code == 201, r.text
    return r.json()


def _no_baseline(comparison: dict[str, Any]) -> set[str]:
    """The cases the comparison says have no baseline."""
    return {
        f["case"]
        for f in comparison["findings"]
        if f["metric"] == "status" and f["status"] == "inconclusive" and "no baseline" in (f["detail"] or "")
    }


def test_the_first_run_of_a_second_suite_warns_that_its_cases_have_no_baseline(
    client: TestClient, tenant: Tenant
) -> None:
    first = _up(client, tenant, docs.h200(), commit="m1")
    assert first["verdict"] == "pass" and first["baseline"] is None  # the first run of all
    _up(client, tenant, docs.h200(), commit="m2")
    # a pull request that adds the suite: its merge base has runs of the other suite only
    b = _suite_b()
    pr = _up(client, tenant, b, branch="pr", commit="p1", base_commit="m2", ancestors=["m1"])
    assert pr["verdict"] == "warn", pr["comparison"]
    assert pr["baseline"] is None and pr["comparison"]["baseline"] is None
    assert _no_baseline(pr["comparison"]) == set(_ids(b))
    assert all(f["verdict"] == "warn" for f in pr["comparison"]["findings"])
    assert any(SUITE_B in n for n in pr["comparison"]["notes"]), pr["comparison"]["notes"]
    # merged: the suite's first default-branch run has no baseline either (a pull request's run is not history)
    merged = _up(client, tenant, _suite_b(), commit="m3")
    assert merged["verdict"] == "warn" and merged["baseline"] is None
    assert _no_baseline(merged["comparison"]) == set(_ids(b))


def test_the_second_run_of_a_suite_is_compared_with_the_first_of_that_suite(client: TestClient, tenant: Tenant) -> None:
    # CI profiles both suites on every default-branch commit.
    a1 = _up(client, tenant, docs.h200(), commit="m1")
    b1 = _up(client, tenant, _suite_b(), commit="m1")
    a2 = _up(client, tenant, docs.h200(), commit="m2")
    assert a2["baseline"] == [a1["run_id"]]
    b2 = _up(client, tenant, _suite_b(), commit="m2")
    assert b2["verdict"] == "pass", b2["comparison"]
    assert b2["baseline"] == [b1["run_id"]]
    # the nearest ancestor holds runs of both suites: only this suite's serve, topped up from the next ancestor
    pr = _up(client, tenant, _suite_b(), branch="pr", commit="p1", base_commit="m2", ancestors=["m1"])
    assert pr["verdict"] == "pass", pr["comparison"]
    assert pr["baseline"] == [b2["run_id"], b1["run_id"]]
    pr_a = _up(client, tenant, docs.h200(), branch="pr", commit="p1", base_commit="m2", ancestors=["m1"])
    assert pr_a["baseline"] == [a2["run_id"], a1["run_id"]]
    # no base commit: the latest default-branch runs of this suite serve
    latest = _up(client, tenant, _suite_b(), branch="pr", commit="p2")
    assert set(latest["baseline"]) == {b1["run_id"], b2["run_id"]}
    assert any("latest 2 default-branch run(s)" in n for n in latest["comparison"]["notes"])
    # and a regression of this suite is still found against them
    slow = _up(client, tenant, _suite_b(slower=1.10), branch="pr", commit="p3", base_commit="m2")
    assert slow["verdict"] == "fail" and slow["baseline"] == [b2["run_id"]]


def test_a_suite_that_grew_a_case_compares_the_common_ones_and_warns_on_the_new_one(
    client: TestClient, tenant: Tenant
) -> None:
    _up(client, tenant, docs.h200(), commit="m1")
    b1 = _up(client, tenant, _suite_b(cases=4), commit="m1")
    grown = _suite_b(cases=5)
    new_case = _ids(grown)[-1]
    got = _up(client, tenant, grown, branch="pr", commit="p1", base_commit="m1")
    assert got["baseline"] == [b1["run_id"]]
    assert got["verdict"] == "warn", got["comparison"]
    assert _no_baseline(got["comparison"]) == {new_case}
    timing = {"latency", "bandwidth", "throughput"}
    compared = {f["case"] for f in got["comparison"]["findings"] if f["metric"] in timing}
    assert compared == set(_ids(grown)[:4])
    assert got["comparison"]["summary"]["compared"] == 4
    # the common cases are compared normally: a regression among them fails
    slow_case = _ids(grown)[0]
    slow = _up(
        client,
        tenant,
        _suite_b(cases=5, slower=1.10, slow_cases=[slow_case]),
        branch="pr",
        commit="p2",
        base_commit="m1",
    )
    assert slow["verdict"] == "fail" and slow["baseline"] == [b1["run_id"]]
    assert {f["case"] for f in slow["comparison"]["findings"] if f["verdict"] == "fail"} == {slow_case}
    assert _no_baseline(slow["comparison"]) == {new_case}


def test_a_suite_with_the_same_case_ids_under_another_name_is_not_a_baseline(
    client: TestClient, tenant: Tenant
) -> None:
    a1 = _up(client, tenant, docs.h200(), commit="m1")
    # a bigger model's suite that happens to name its cases alike: three times the latency is not a regression
    big = _renamed("llama70b", slower=3.0)
    c1 = _up(client, tenant, big, commit="m1")
    assert c1["verdict"] == "warn" and c1["baseline"] is None, c1["comparison"]
    assert _no_baseline(c1["comparison"]) == set(_ids(big))
    c2 = _up(client, tenant, _renamed("llama70b", slower=3.0), branch="pr", commit="p1", base_commit="m1")
    assert c2["verdict"] == "pass" and c2["baseline"] == [c1["run_id"]], c2["comparison"]
    a2 = _up(client, tenant, docs.h200(), branch="pr", commit="p1", base_commit="m1")
    assert a2["verdict"] == "pass" and a2["baseline"] == [a1["run_id"]]


def test_pins_serve_only_the_suite_they_ran(client: TestClient, tenant: Tenant) -> None:
    a1 = _up(client, tenant, docs.h200(), commit="m1")
    b1 = _up(client, tenant, _suite_b(), commit="m1")
    _up(client, tenant, docs.h200(), commit="m2")
    b2 = _up(client, tenant, _suite_b(), commit="m2")
    pins = f"/api/v1/projects/{tenant.name}/baselines/pins"
    assert client.post(pins, json={"run_id": a1["run_id"]}, headers=tenant.h()).status_code == 201
    # the other suite's pin does not serve: this suite's own history does, and the notes say why
    b3 = _up(client, tenant, _suite_b(), branch="pr", commit="p1", base_commit="m2")
    assert b3["verdict"] == "pass" and b3["baseline"] == [b2["run_id"]], b3["comparison"]
    assert any("pinned" in n and a1["run_id"] in n for n in b3["comparison"]["notes"]), b3["comparison"]["notes"]
    # the pin still serves its own suite
    a3 = _up(client, tenant, docs.h200(), branch="pr", commit="p1", base_commit="m2")
    assert a3["baseline"] == [a1["run_id"]]
    assert any("baseline pinned: 1 run(s)" in n for n in a3["comparison"]["notes"])
    # a pin of this suite serves it, beside the other suite's
    assert client.post(pins, json={"run_id": b1["run_id"]}, headers=tenant.h()).status_code == 201
    b4 = _up(client, tenant, _suite_b(), branch="pr", commit="p2", base_commit="m2")
    assert b4["baseline"] == [b1["run_id"]]
    assert any("baseline pinned: 1 run(s)" in n for n in b4["comparison"]["notes"])
    assert _up(client, tenant, docs.h200(), branch="pr", commit="p2", base_commit="m2")["baseline"] == [a1["run_id"]]


def test_an_accepted_change_of_one_suite_leaves_the_other_suites_history_alone(
    client: TestClient, tenant: Tenant
) -> None:
    _up(client, tenant, docs.h200(), commit="m1")
    b1 = _up(client, tenant, _suite_b(), commit="m1")
    slow = _up(client, tenant, docs.h200(slower=1.2), branch="pr", commit="p1", base_commit="m1")
    assert slow["verdict"] == "fail"
    accepted = f"/api/v1/projects/{tenant.name}/baselines/accepted"
    assert client.post(accepted, json={"run_id": slow["run_id"]}, headers=tenant.h()).status_code == 201
    b2 = _up(client, tenant, _suite_b(), branch="pr", commit="p2")
    assert b2["verdict"] == "pass" and b2["baseline"] == [b1["run_id"]], b2["comparison"]
    assert not any("accepted" in n for n in b2["comparison"]["notes"])
    a2 = _up(client, tenant, docs.h200(slower=1.2), branch="pr", commit="p2")
    assert a2["verdict"] != "fail" and a2["baseline"] == [slow["run_id"]]


def test_the_noise_floor_is_learnt_from_the_suites_own_history(client: TestClient, tenant: Tenant) -> None:
    for i in range(4):
        jitter = ((i * 7) % 5 - 2) * 0.002
        _up(client, tenant, docs.h200(jitter=jitter), commit=f"m{i}")
        if i < 2:
            _up(client, tenant, _suite_b(), commit=f"m{i}")
    # this suite has two earlier default-branch runs: too few to learn its floor from; the other suite's four
    # runs are not its history
    b = _up(client, tenant, _suite_b(), commit="m9")
    assert b["comparison"]["settings"]["noise_floor_source"] == "default", b["comparison"]["notes"]
    a = _up(client, tenant, docs.h200(), commit="m9")
    assert a["comparison"]["settings"]["noise_floor_source"] == "argument"
    assert any("noise floor" in n for n in a["comparison"]["notes"])


def test_change_points_are_sought_in_the_suites_own_history(client: TestClient, tenant: Tenant) -> None:
    ups = []
    for i in range(6):
        jitter = ((i * 7) % 5 - 2) * 0.002
        ups.append(_up(client, tenant, docs.h200(jitter=jitter), commit=f"m{i}"))
    # six runs of a suite with the same case ids, three times slower: not a step in the first suite's history
    for i in range(6, 12):
        jitter = ((i * 7) % 5 - 2) * 0.002
        _up(client, tenant, _renamed("llama70b", slower=3.0, jitter=jitter), commit=f"m{i}")
    alerts = f"/api/v1/projects/{tenant.name}/alerts"
    assert client.get(alerts, headers=tenant.h("read")).json()["alerts"] == []
    # a real step in the first suite, six runs on: one alert, at its first slow run
    for i in range(12, 18):
        jitter = ((i * 7) % 5 - 2) * 0.002
        ups.append(_up(client, tenant, docs.h200(slower=1.3, cases=[CASE], jitter=jitter), commit=f"m{i}"))
    found = client.get(alerts, headers=tenant.h("read")).json()["alerts"]
    assert {(a["case_id"], a["run_id"]) for a in found} == {(CASE, ups[6]["run_id"])}, found
    assert found[0]["change"] > 0.2


@pytest.fixture(params=["postgres", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Session]:
    if request.param == "postgres":
        yield request.getfixturevalue("db")
        return
    url = f"sqlite:///{tmp_path / 'suites.db'}"
    migrate.upgrade(url)
    engine = make_engine(url)
    with Session(engine, expire_on_commit=False) as session:
        yield session
    engine.dispose()


def test_suite_names_and_shared_cases_are_read_on_both_backends(store: Session) -> None:
    project = projects.create(store, name=f"both-{uuid.uuid4().hex[:8]}")
    stored = {}
    for key, doc in (("a", docs.h200()), ("b", _suite_b()), ("big", _renamed("llama70b"))):
        stored[key] = runs.store_run(
            store,
            project_id=project.id,
            document=parse_result(doc),
            provenance=Provenance(branch="main", commit="m1"),
        )
    ids = [r.id for r in stored.values()]
    assert dict(run_rows.suite_names(store, ids)) == {
        stored["a"].id: SUITE_A,
        stored["b"].id: SUITE_B,
        stored["big"].id: "llama70b",
    }
    sharing = baselines.runs_by_id(store, ids, cases_of=stored["a"].id)
    assert {r.id for r in sharing} == {stored["a"].id, stored["big"].id}
    # the embedded mode's analysis of a second suite warns too
    found = analysis_service.analyze(store, run_id=stored["b"].id, cfg=Analysis())
    assert found.verdict == "warn" and found.baseline_run_ids == []


# The job path: committed rows, as the analysis worker's own session reads them. The run is stored as the GPU
# worker's result upload stores it (``jobs.accept_result``): the run of the job's attempt, the job ``analyzing``.

SPEC = """
[suite]
name = "{name}"

[[cases]]
name = "prefill"
target = "sdpa"
q_heads = 4
seq_q = 128
head_dim = 64
"""


@pytest.fixture
def job_path(pg_url: str) -> Iterator[tuple[TestClient, Settings, dict[str, Any]]]:
    """A committed project with its tokens and a testbed, the app on the tests' database (its own sessions,
    committed), the settings the analysis worker reads, and sessions of its own."""
    engine = make_engine(pg_url)
    factory = make_sessionmaker(engine)
    with factory() as session:
        project = projects.create(session, name=f"suites-{uuid.uuid4().hex[:8]}")
        submit = auth.create_project_token(session, project_id=project.id, role="submit")[1]
        read = auth.create_project_token(session, project_id=project.id, role="read")[1]
        testbed = testbeds.ensure(session, f"tb-{uuid.uuid4().hex[:8]}")
        session.commit()
        names: dict[str, Any] = {
            "project": project.name,
            "project_id": project.id,
            "testbed": testbed.name,
            "submit": submit,
            "read": read,
            "sessions": factory,
        }
    settings = make_settings(pg_url, broker_url=BROKER)
    try:
        with TestClient(create_app(settings)) as client:
            yield client, settings, names
    finally:
        engine.dispose()
        r = redis.Redis.from_url(BROKER)
        r.delete("analysis", f"profile.{names['testbed']}")
        r.close()


def _job(
    client: TestClient, names: dict[str, Any], settings: Settings, doc: dict[str, Any], **fields: str
) -> tuple[str, str | None]:
    """Submit a job of ``doc``'s suite, store ``doc`` as its first attempt's run, run the analysis task's code:
    (job id, the task's answer)."""
    spec = SPEC.format(name=doc["suite"]["name"])
    r = client.post(
        f"/api/v1/projects/{names['project']}/jobs",
        files={"spec": ("attnprof.toml", spec.encode())},
        data={"testbed": names["testbed"], **fields},
        headers={"Authorization": f"Bearer {names['submit']}"},
    )
    assert r.status_code == 202, r.text
    job_id = r.json()["id"]
    with names["sessions"]() as session:
        job = session.get(Job, job_id)
        run = runs.store_run(
            session,
            project_id=names["project_id"],
            document=parse_result(doc),
            provenance=Provenance(
                branch=job.branch,
                commit=job.commit,
                base_commit=job.base_commit,
                ancestors=tuple(str(a) for a in job.ancestors),
            ),
            testbed=names["testbed"],
            job_id=job.id,
            attempt=1,
        )
        job.attempts, job.run_id, job.status = 1, run.id, "analyzing"
        session.commit()
    return job_id, analysis.run(job_id, settings)


def test_jobs_of_a_second_suite_get_verdicts_against_their_own_suite(job_path) -> None:
    client, settings, names = job_path
    read = {"Authorization": f"Bearer {names['read']}"}

    def job(job_id: str) -> dict[str, Any]:
        return client.get(f"/api/v1/jobs/{job_id}", headers=read).json()

    def comparison(job_id: str) -> dict[str, Any]:
        return client.get(f"/api/v1/jobs/{job_id}/comparison", headers=read).json()

    a1, verdict = _job(client, names, settings, docs.h200(), branch="main", commit="m1")
    assert verdict == "pass" and comparison(a1)["baseline"] == []
    a2, verdict = _job(client, names, settings, docs.h200(), branch="main", commit="m2", base_commit="m1")
    assert verdict == "pass"
    # the first job of the second suite: its cases have no baseline, and its analysis does not fail
    b1, verdict = _job(client, names, settings, _suite_b(), branch="main", commit="m2", base_commit="m1")
    assert verdict == "warn", job(b1)["reason"]
    assert job(b1)["status"] == "done" and job(b1)["verdict"] == "warn"
    first = comparison(b1)["document"]
    assert first["baseline"] is None and _no_baseline(first) == set(_ids(_suite_b()))
    # the second job of the second suite is compared with the first, not with the other suite's runs of m2
    b2, verdict = _job(client, names, settings, _suite_b(), branch="pr", commit="p1", base_commit="m2", ancestors="m1")
    assert verdict == "pass", comparison(b2)["document"]["notes"]
    second = comparison(b2)
    assert second["baseline"] == [job(b1)["run_id"]], second["document"]["notes"]
    assert second["document"]["summary"]["compared"] == len(_suite_b()["cases"])
    # the first suite's jobs still compare with their own runs, and find their regressions
    slow = docs.h200(slower=1.10, cases=[CASE])
    a3, verdict = _job(client, names, settings, slow, branch="pr", commit="p1", base_commit="m2", ancestors="m1")
    assert verdict == "fail"
    assert comparison(a3)["baseline"] == [job(a2)["run_id"], job(a1)["run_id"]]
