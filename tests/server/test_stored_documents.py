"""The one way in to stored documents (``attnprof.server.runs.documents``, ``attnprof.server.comparisons.documents``):
a stored run reads back as the document that was stored, its samples kept once (in ``case_samples``); each document is
validated once per process; a stored document that its model refuses is a clear error; and migration 0008 moves the
samples out of the column and back, on both backends."""

from __future__ import annotations

import copy
import json
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select, text, update
from sqlalchemy.orm import Session

from attnprof.contract.provenance import Provenance
from attnprof.core.documents import Case, ResultDocument, parse_result
from attnprof.core.documents.comparison import ComparisonDocument
from attnprof.server import migrate
from attnprof.server.comparisons import documents as comparison_documents
from attnprof.server.comparisons import service as analysis
from attnprof.server.comparisons.models import Comparison
from attnprof.server.config import Analysis, Settings
from attnprof.server.db import make_engine
from attnprof.server.errors import NotFound, StoredDocumentInvalid
from attnprof.server.jobs import service as jobs
from attnprof.server.projects import service as projects
from attnprof.server.runs import documents
from attnprof.server.runs import repository as run_rows
from attnprof.server.runs import service as runs
from attnprof.server.runs.models import Run
from attnprof.server.web.pages import runs as run_pages
from attnprof.worker.profile import handback, outcome
from tests.claiming import bearer, claim, claim_secret
from tests.server import documents as docs
from tests.server.stack import REDIS_URL
from tests.server.tenants import Tenant

SPEC = '[suite]\nname = "s"\n[[cases]]\nname = "prefill"\ntarget = "sdpa"\nq_heads = 4\nseq_q = 128\nhead_dim = 64\n'
MODELS = {"result": ResultDocument, "comparison": ComparisonDocument, "case": Case}


class _Counting:
    """A model's validator that counts the documents it validates (Python objects or JSON text)."""

    def __init__(self, inner: Any, name: str, counts: Counter[str]) -> None:
        self._inner, self._name, self._counts = inner, name, counts

    def validate_python(self, *args: Any, **kw: Any) -> Any:
        self._counts[self._name] += 1
        return self._inner.validate_python(*args, **kw)

    def validate_json(self, *args: Any, **kw: Any) -> Any:
        self._counts[self._name] += 1
        return self._inner.validate_json(*args, **kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


@pytest.fixture
def validations(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """How many result documents, comparison documents and lone cases were validated since the test began."""
    counts: Counter[str] = Counter()
    for name, model in MODELS.items():
        monkeypatch.setattr(model, "__pydantic_validator__", _Counting(model.__pydantic_validator__, name, counts))
    return counts


@pytest.fixture(autouse=True)
def _forget_kept() -> Iterator[None]:
    documents.results.clear()
    comparison_documents.comparisons.clear()
    run_pages.rendered_runs.clear()
    yield
    documents.results.clear()
    comparison_documents.comparisons.clear()
    run_pages.rendered_runs.clear()


def _store(session: Session, project_id: int, doc: dict[str, Any], commit: str = "c1") -> tuple[Run, ResultDocument]:
    document = parse_result(doc)
    run = runs.store_run(
        session, project_id=project_id, document=document, provenance=Provenance(branch="main", commit=commit)
    )
    return run, document


def _full(document: ResultDocument) -> dict[str, Any]:
    return document.model_dump(mode="json", by_alias=True)


def test_a_stored_run_reads_back_as_its_document_with_its_samples_stored_once(db: Session) -> None:
    project = projects.create(db, name="stored-once")
    run, document = _store(db, project.id, docs.h200())
    db.commit()
    # The column holds everything but the samples; case_samples holds them, in the order they ran.
    column = db.execute(select(Run.document).where(Run.id == run.id)).scalar_one()
    assert all("samples" not in (c["latency_us"] or {}) for c in column["cases"])
    assert column == {**_full(document), "cases": [_without_samples(c) for c in _full(document)["cases"]]}
    timed = {c.id: c.latency_us.samples for c in document.cases if c.latency_us and c.latency_us.samples}
    assert run_rows.samples_of_run(db, run.id) == timed
    # Read back in a process that has not seen it: the same document, samples included.
    documents.results.clear()
    assert documents.result_of(db, run.id) == document
    assert documents.result_of(db, run) is documents.result_of(db, run.id)
    # The API answers the whole document, as it was uploaded.
    with pytest.raises(NotFound):
        documents.result_of(db, "no-such-run")


def _without_samples(case: dict[str, Any]) -> dict[str, Any]:
    latency = case["latency_us"]
    return case if latency is None else {**case, "latency_us": {k: v for k, v in latency.items() if k != "samples"}}


def test_the_way_in_validates_each_document_once_per_process(db: Session, validations: Counter[str]) -> None:
    project = projects.create(db, name="validated-once")
    base, _ = _store(db, project.id, docs.h200(), "c1")
    cand, _ = _store(db, project.id, docs.h200(slower=1.2), "c2")
    assert validations == Counter(result=2)  # the two parse_result calls above: storing validates nothing more
    documents.results.clear()  # as in another process: nothing kept
    for _ in range(3):
        documents.result_of(db, cand)
        documents.result_of(db, cand.id)
    assert validations["result"] == 3
    found = analysis.analyze(db, run_id=cand.id, cfg=Analysis())
    # The baseline's document; the comparison validated as it was made, then kept: reading it back validates nothing.
    assert validations["result"] == 4 and validations["comparison"] == 1
    made = comparison_documents.comparison_of(found)
    assert comparison_documents.comparison_of(found) is made and validations["comparison"] == 1
    comparison_documents.comparisons.clear()
    first = comparison_documents.comparison_of(found)
    assert comparison_documents.comparison_of(found) is first and validations["comparison"] == 2
    # What was kept as it was made is what reading the stored one gives.
    assert first == made and first is not made
    # A few cases of a document not kept are read and validated alone; of a kept one, taken from it.
    documents.results.clear()
    some = documents.cases_of(db, base.id, ["block", "sdpa[backend=cudnn,pass=fwd]", "no-such-case"])
    assert sorted(some) == ["block", "sdpa[backend=cudnn,pass=fwd]"] and validations["case"] == 2
    assert some["block"] == parse_result(docs.h200()).case("block")
    kept = documents.result_of(db, base.id)
    assert documents.cases_of(db, base.id, ["block"])["block"] is kept.case("block") and validations["case"] == 2
    # The cache is bounded: the least recently used document goes first.
    for i in range(documents.KEPT_RESULTS + 2):
        documents.remember(f"filler-{i}", kept)
    assert len(documents.results) == documents.KEPT_RESULTS and documents.results.get(base.id) is None


def test_a_stored_document_its_model_refuses_is_a_clear_error_not_a_crash(
    client: TestClient, tenant: Tenant, db: Session
) -> None:
    upload = client.post(
        f"/api/v1/projects/{tenant.name}/results",
        json={"result": docs.h200(), "branch": "main", "commit": "c1"},
        headers=tenant.h("submit"),
    )
    assert upload.status_code == 201, upload.text
    run_id, comparison_id = upload.json()["run_id"], upload.json()["comparison_id"]
    stored = db.execute(select(Run.document).where(Run.id == run_id)).scalar_one()
    broken = copy.deepcopy(stored)
    broken["cases"][2]["latency_us"]["median"] = -5.0
    broken["environment"].pop("host")
    db.execute(update(Run).where(Run.id == run_id).values(document=broken))
    db.execute(update(Comparison).where(Comparison.id == comparison_id).values(document={"schema": "something/v0"}))
    db.commit()
    db.expire_all()
    documents.results.clear()  # a process that has not read it yet
    comparison_documents.comparisons.clear()
    with pytest.raises(StoredDocumentInvalid) as caught:
        documents.result_of(db, run_id)
    detail = caught.value.detail
    assert detail.startswith(f"the stored result document of run {run_id}: invalid result document:")
    assert "cases.2.latency_us.median: Input should be greater than or equal to 0" in detail
    assert "environment.host: Field required" in detail
    case_id = stored["cases"][2]["id"]
    with pytest.raises(StoredDocumentInvalid, match=rf"case {re.escape(case_id)} is invalid: latency_us.median"):
        documents.cases_of(db, run_id, [case_id])
    # The API answers 500 with the error body that says so; the dashboard a page that says so.
    answer = client.get(f"/api/v1/projects/{tenant.name}/runs/{run_id}", headers=tenant.h("read"))
    assert answer.status_code == 500
    assert answer.json() == {"error": "invalid_stored_document", "detail": detail}
    _sign_in(client, tenant.read)
    page = client.get(f"/ui/p/{tenant.name}/runs/{run_id}")
    assert page.status_code == 500 and "cases.2.latency_us.median" in page.text
    page = client.get(f"/ui/p/{tenant.name}/comparisons/{comparison_id}")
    assert page.status_code == 500
    assert f"the stored comparison document {comparison_id}: schema is &#39;something/v0&#39;" in page.text
    # An analysis that reads it fails with that reason (the analysis task fails the job with it).
    with pytest.raises(StoredDocumentInvalid):
        analysis.analyze(db, run_id=run_id, cfg=Analysis())


def _sign_in(client: TestClient, token: str) -> None:
    form = client.get("/ui/login")
    csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
    assert csrf is not None
    answer = client.post("/ui/login", data={"token": token, "csrf": csrf.group(1), "next": ""}, follow_redirects=False)
    assert answer.status_code == 303, answer.text


def test_the_path_from_the_worker_to_the_dashboard_validates_a_result_once_per_process(
    client: TestClient,
    tenant: Tenant,
    worker_token: tuple[str, str],
    db: Session,
    settings: Settings,
    tmp_path: Path,
    validations: Counter[str],
) -> None:
    """A baseline uploaded on main, then a job on a pull request: the GPU worker reads the profiler's file, the
    service stores the result, the analysis compares it, the PR comment and the dashboard's pages show it. Counted
    in one process (the embedded mode), then with each stage in a process of its own (nothing kept between). A
    comparison's count includes its making: pydantic validates a model as it is built."""
    testbed, wtok = worker_token
    base = client.post(
        f"/api/v1/projects/{tenant.name}/results",
        json={"result": docs.h200(), "branch": "main", "commit": "b" * 40, "testbed": testbed},
        headers=tenant.h("submit"),
    )
    assert base.status_code == 201, base.text
    _sign_in(client, tenant.read)
    walk = _Walk(client, tenant, db, settings, validations)
    one = walk.through(testbed, wtok, tmp_path, shared=True)
    apart = walk.through(testbed, wtok, tmp_path, shared=False)
    print("\nvalidations [result documents, comparison documents, lone cases] on the way from the worker:")
    for how, stages in (("one process", one), ("a process per stage", apart)):
        print(f"  {how}: " + "; ".join(f"{name} {counts}" for name, counts in stages.items()))
    assert sum(c[0] for c in one.values()) == 2  # the worker's read and the upload's check: nothing after
    assert one["CPU worker: analysis.run"] == [0, 1, 0]  # the comparison made; never read back here
    assert sum(c[1] + c[2] for c in one.values()) == 1
    assert apart["GPU worker: read the profiler's file"] == [1, 0, 0]
    assert apart["service: POST the result, store the run"] == [1, 0, 0]
    assert apart["CPU worker: analysis.run"] == [2, 1, 0]  # the candidate and its one baseline run; the comparison
    assert apart["PR comment"] == [2, 1, 0]  # the candidate, the baseline beside it, the comparison
    assert apart["dashboard: run page"] == [1, 0, 0]
    # The comparison, and both runs' documents: the page's answer lines are the PR comment's (kernels by name in
    # candidate and baseline), read once each.
    assert apart["dashboard: comparison page"] == [2, 1, 0]


class _Walk:
    def __init__(
        self, client: TestClient, tenant: Tenant, db: Session, settings: Settings, validations: Counter[str]
    ) -> None:
        self.client, self.tenant, self.db, self.settings, self.validations = client, tenant, db, settings, validations

    def through(self, testbed: str, worker_token: str, folder: Path, *, shared: bool) -> dict[str, list[int]]:
        """One job from the profiler's file to the dashboard: the validations of each stage."""
        client, tenant = self.client, self.tenant
        job_id, token = _claimed_job(client, tenant, testbed, worker_token)
        result_file = folder / f"{job_id}.json"
        result_file.write_text(json.dumps(docs.h200(slower=1.3, cases=["block"])))
        stages: dict[str, list[int]] = {}

        def stage(name: str, act: Any) -> Any:
            if not shared:
                documents.results.clear()
                comparison_documents.comparisons.clear()
                run_pages.rendered_runs.clear()
            self.validations.clear()
            value = act()
            stages[name] = [self.validations[m] for m in MODELS]
            return value

        def read_back() -> Any:
            with handback.Folder(folder) as job:
                return outcome.read_document(job, result_file.name)

        read = stage("GPU worker: read the profiler's file", read_back)
        assert isinstance(read, ResultDocument)
        body = {"attempt": 1, "result": read.model_dump(mode="json", by_alias=True)}
        stored = stage(
            "service: POST the result, store the run",
            lambda: client.post(f"/internal/jobs/{job_id}/result", json=body, headers=bearer(token)),
        )
        assert stored.status_code == 200, stored.text
        found = stage(
            "CPU worker: analysis.run", lambda: jobs.analyze_job(self.db, job_id=job_id, cfg=self.settings.analysis)
        )
        assert found is not None and found.verdict == "fail"
        self.db.commit()
        comment = stage("PR comment", lambda: client.get(f"/api/v1/jobs/{job_id}/comment", headers=tenant.h("read")))
        assert comment.status_code == 200 and "block" in comment.text
        pages = {
            "dashboard: run page": f"runs/{stored.json()['run_id']}",
            "dashboard: comparison page": f"comparisons/{found.id}",
        }
        for name, path in pages.items():
            page = stage(name, lambda path=path: client.get(f"/ui/p/{tenant.name}/{path}"))
            assert page.status_code == 200
        return stages


def _claimed_job(client: TestClient, tenant: Tenant, testbed: str, worker_token: str) -> tuple[str, str]:
    """A pull-request job on ``testbed`` whose merge base ran on main, claimed: (job id, its job token)."""
    answer = client.post(
        f"/api/v1/projects/{tenant.name}/jobs",
        files={"spec": ("attnprof.toml", SPEC.encode())},
        data={"testbed": testbed, "branch": "feature", "commit": "f" * 40, "base_commit": "b" * 40, "pr": "7"},
        headers=tenant.h("submit"),
    )
    assert answer.status_code == 202, answer.text
    job_id = answer.json()["id"]
    return job_id, claim(client, worker_token, job_id, claim_secret(REDIS_URL, testbed, job_id))["token"]


def test_migration_0008_moves_the_samples_out_of_the_column_and_its_downgrade_puts_them_back(
    database_url: str,
) -> None:
    migrate.upgrade(database_url)
    engine = make_engine(database_url)
    try:
        with Session(engine) as session:
            project = projects.create(session, name="migrated")
            doc = docs.h200()
            doc["cases"][1]["latency_us"]["samples"] = []  # a case timed without samples: no case_samples row
            run, document = _store(session, project.id, doc)
            run_id = run.id
            session.commit()
        migrate.downgrade(database_url, "0007")
        with engine.connect() as conn:
            column = conn.execute(text("SELECT document FROM runs WHERE id = :id"), {"id": run_id}).scalar_one()
        # What the service stored before 0008: the whole document, samples and all.
        assert (json.loads(column) if isinstance(column, str) else column) == _full(document)
        migrate.upgrade(database_url)
        documents.results.clear()
        with Session(engine) as session:
            column = session.execute(select(Run.document).where(Run.id == run_id)).scalar_one()
            assert all("samples" not in (c["latency_us"] or {}) for c in column["cases"])
            assert documents.result_of(session, run_id) == document
    finally:
        engine.dispose()
