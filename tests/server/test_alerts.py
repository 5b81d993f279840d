"""Alerts worth reading: a seeded default-branch history whose every case wiggles by under 1% (level shifts that
e-divisive finds) and one case that steps up 30%: exactly one alert, at the step, with units, interval and the
commits around it; detection run again as the history grows updates that alert instead of adding one; an admin
acknowledges it with a note (read and submit tokens get 403, bad input a 422 naming the field); the webhook setting
keeps its secret to itself."""

from __future__ import annotations

import re

import numpy as np
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from attnprof.core.analysis import e_divisive
from attnprof.core.documents import ResultDocument
from attnprof.server.audit.models import AuditEvent
from attnprof.server.comparisons import alerts
from attnprof.server.comparisons.models import Alert
from tests.server import documents as docs
from tests.server.tenants import Tenant

CASE = "sdpa[backend=cudnn,pass=fwd]"
# Levels of every case, run by run: three stretches that differ by 0.4-0.9% (under the 2% minimum effect on CUDA),
# then the step: CASE 30% slower from run STEP on, the other cases unchanged.
WIGGLES = [0.0] * 10 + [0.009] * 10 + [-0.004] * 10
STEP = len(WIGGLES)
SECRET = "whsec-8f14e45fceea167a5a36dedd4bea2543"
AFTER = 12  # runs after the step: the step is found from its fifth on, then found again seven times


def _up(client: TestClient, tenant: Tenant, doc: dict, **kw) -> dict:
    r = client.post(
        f"/api/v1/projects/{tenant.name}/results", json=docs.upload_body(doc, **kw), headers=tenant.h("submit")
    )
    assert r.status_code == 201, r.text
    return r.json()


def _commit(i: int) -> str:
    return f"{0xC0FFEE00 + i:040x}"


def _history(client: TestClient, tenant: Tenant, runs: int) -> list[dict]:
    ups = []
    for i in range(runs):
        level = WIGGLES[i] if i < STEP else WIGGLES[-1]
        noise = 0.0005 * ((i * 7) % 3 - 1)
        slower = 1.3 if i >= STEP else 1.0
        doc = docs.h200(slower=slower, cases=[CASE], jitter=level + noise)
        ancestors = [_commit(j) for j in range(i - 1, max(-1, i - 51), -1)]
        ups.append(_up(client, tenant, doc, commit=_commit(i), ancestors=ancestors))
    return ups


def _alerts(client: TestClient, tenant: Tenant, **params) -> list[dict]:
    r = client.get(f"/api/v1/projects/{tenant.name}/alerts", params=params, headers=tenant.h("read"))
    assert r.status_code == 200, r.text
    return r.json()["alerts"]


def test_wiggles_under_the_minimum_effect_are_found_by_e_divisive_but_are_no_steps() -> None:
    rng = np.random.default_rng(3)
    values = [100.0 * (1 + w) + rng.normal(0, 0.05) for w in WIGGLES]
    assert e_divisive(np.array(values), alpha=alerts.ALPHA, min_size=alerts.MIN_SIZE)  # detection sees them
    points = [(f"r{i}", v) for i, v in enumerate(values)]
    assert alerts.steps_of(CASE, points, min_effect=0.02) == []
    # The same series with a 30% step at its end: one step, between the two runs around it.
    stepped = points + [(f"s{i}", 130.0 + rng.normal(0, 0.05)) for i in range(6)]
    found = alerts.steps_of(CASE, stepped, min_effect=0.02)
    assert [(s.before_run_id, s.run_id) for s in found] == [(points[-1][0], "s0")]
    step = found[0]
    assert step.regression and 0.29 < step.change < 0.31
    assert step.ci_low is not None and step.ci_high is not None and step.ci_low < step.change < step.ci_high
    assert step.before_runs == 10 and step.after_runs == 6  # the level before is the last segment e-divisive cut


def test_a_new_level_is_a_step_only_once_it_has_held_for_five_runs() -> None:
    # With four runs of the new level, e-divisive (held to five runs a side) cuts too early, with some runs of the
    # old level in the new one: an 18% "step" at the wrong place. It is not reported; the fifth run places it.
    levels = [0.0] * 10 + [0.009] * 10 + [-0.004] * 10
    values = [88.144 * (1 + w + 0.0005 * ((i * 7) % 3 - 1)) for i, w in enumerate(levels)]
    for after in range(1, 9):
        points = [(f"r{i}", v) for i, v in enumerate(values)] + [(f"s{i}", 114.6) for i in range(after)]
        found = alerts.steps_of(CASE, points, min_effect=0.02)
        if after < alerts.MIN_SIZE:
            assert found == [], (after, found)
        else:
            assert [(s.run_id, s.after_runs, round(s.change, 2)) for s in found] == [("s0", after, 0.31)]


def test_the_minimum_effect_is_the_cases_as_comparisons_resolve_it() -> None:
    doc = docs.h200()
    cuda = ResultDocument.model_validate(doc)
    assert alerts.minimum_effect(cuda, CASE) == 0.02
    doc["cases"][0]["thresholds"]["latency"] = 0.4
    assert alerts.minimum_effect(ResultDocument.model_validate(doc), CASE) == 0.4
    cpu = ResultDocument.model_validate(docs.cpu())
    assert cpu.suite.thresholds.latency == 0.25  # this CPU suite's own table, over the CPU default of 30%
    assert alerts.minimum_effect(cpu, cpu.cases[0].id) == 0.25


def test_a_seeded_history_gives_one_alert_with_units_interval_and_commits(
    client: TestClient, tenant: Tenant, db: Session
) -> None:
    ups = _history(client, tenant, STEP + AFTER)
    found = _alerts(client, tenant, regressions_only="false")
    assert len(found) == 1, [(a["case_id"], a["size"]) for a in found]
    alert = found[0]
    assert alert["case_id"] == CASE and alert["regression"] and alert["metric"] == "latency"
    assert alert["before_run_id"] == ups[STEP - 1]["run_id"] and alert["run_id"] == ups[STEP]["run_id"]
    assert alert["last_good"]["commit"] == _commit(STEP - 1) and alert["first_bad"]["commit"] == _commit(STEP)
    assert alert["unit"] == "us" and alert["min_effect"] == 0.02
    assert 0.29 < alert["change"] < 0.31 and alert["ci_low"] < alert["change"] < alert["ci_high"]
    # 87.8 µs before the step (the last 0.4% lower stretch), 114.1 µs after it, each with its spread.
    assert alert["size"] == "+30.0% (87.8 → 114.1 µs)"
    interval = r"95% CI \+29\.\d% to \+30\.\d%; before 87\.8 µs ± 0\.0\d+ µs \(10 runs\), "
    assert re.fullmatch(interval + r"after 114\.1 µs ± 0\.0\d+ µs \(12 runs\)", alert["interval"]), alert["interval"]
    assert alert["before_runs"] >= 5 and alert["after_runs"] == AFTER
    assert alert["acknowledged"] is None
    # The step was found on each of the last AFTER - 4 uploads: one row, updated each time.
    rows = db.scalar(select(func.count()).select_from(Alert).where(Alert.case_id == CASE))
    assert rows == 1
    one = client.get(f"/api/v1/projects/{tenant.name}/alerts/{alert['id']}", headers=tenant.h("read"))
    assert one.status_code == 200 and one.json()["updated_at"] > one.json()["created_at"]


def test_detection_again_updates_the_same_alert(client: TestClient, tenant: Tenant, db: Session) -> None:
    ups = _history(client, tenant, STEP + 6)
    first = _alerts(client, tenant)
    assert len(first) == 1
    more = _history_more(client, tenant, ups, 8)
    again = _alerts(client, tenant)
    assert [a["id"] for a in again] == [first[0]["id"]]
    assert again[0]["after_runs"] == 6 + len(more)
    # And run explicitly, over the same stored history: nothing is added.
    from attnprof.server.config import Analysis
    from attnprof.server.runs import documents, repository

    run = repository.get(db, more[-1]["run_id"])
    assert run is not None
    added = alerts.detect(db, run=run, document=documents.result_of(db, run), cfg=Analysis())
    assert added == []
    assert db.scalar(select(func.count()).select_from(Alert)) == 1


def _history_more(client: TestClient, tenant: Tenant, ups: list[dict], n: int) -> list[dict]:
    out = []
    start = len(ups)
    for i in range(start, start + n):
        noise = 0.0005 * ((i * 7) % 3 - 1)
        doc = docs.h200(slower=1.3, cases=[CASE], jitter=WIGGLES[-1] + noise)
        out.append(_up(client, tenant, doc, commit=_commit(i), ancestors=[_commit(i - 1)]))
    return out


def test_an_admin_acknowledges_an_alert_with_a_note(client: TestClient, tenant: Tenant, db: Session) -> None:
    _history(client, tenant, STEP + 6)
    alert = _alerts(client, tenant)[0]
    url = f"/api/v1/projects/{tenant.name}/alerts/{alert['id']}/acknowledgement"
    for role in ("read", "submit"):
        r = client.post(url, json={"note": "seen"}, headers=tenant.h(role))
        assert r.status_code == 403, r.text
    for body, field in (({}, "note"), ({"note": "   "}, "note"), ({"note": "x" * 2001}, "note"), ({"n": 1}, "n")):
        r = client.post(url, json=body, headers=tenant.h("admin"))
        assert r.status_code == 422 and field in r.json()["detail"], r.text
    assert _alerts(client, tenant)[0]["acknowledged"] is None  # nothing changed
    r = client.post(url, json={"note": "flash-attn 2.6 bump, intended (#481)"}, headers=tenant.h("admin"))
    assert r.status_code == 200, r.text
    ack = r.json()["acknowledged"]
    assert ack["note"] == "flash-attn 2.6 bump, intended (#481)" and "admin" in ack["by"] and "API" in ack["by"]
    assert ack["at"]
    logged = db.scalars(select(AuditEvent.detail).where(AuditEvent.kind == "alert.acknowledged")).all()
    assert logged == [f"alert {alert['id']} ({CASE}): flash-attn 2.6 bump, intended (#481)"]
    again = client.post(url, json={"note": "again"}, headers=tenant.h("admin"))
    assert again.status_code == 409 and "acknowledged by" in again.json()["detail"]
    assert _alerts(client, tenant, unacknowledged_only="true") == []
    missing = client.post(url.replace(str(alert["id"]), "999999"), json={"note": "x"}, headers=tenant.h("admin"))
    assert missing.status_code == 404


def test_another_projects_alert_is_404(client: TestClient, tenant: Tenant, other: Tenant) -> None:
    _history(client, tenant, STEP + 6)
    alert = _alerts(client, tenant)[0]
    url = f"/api/v1/projects/{other.name}/alerts/{alert['id']}"
    assert client.get(url, headers=other.h("read")).status_code == 404
    assert client.post(f"{url}/acknowledgement", json={"note": "x"}, headers=other.h("admin")).status_code == 404


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"url": "ftp://hooks.example/x", "secret": "s" * 32}, "url"),
        ({"url": "not a url", "secret": "s" * 32}, "url"),
        ({"url": "https://hooks.example/x", "secret": "short"}, "secret"),
        ({"url": "https://hooks.example/x", "secret": "a" * 40}, "secret"),
        ({"url": "https://hooks.example/x"}, "secret"),
    ],
)
def test_a_bad_webhook_setting_is_a_422_naming_the_field(
    client: TestClient, tenant: Tenant, body: dict, field: str
) -> None:
    url = f"/api/v1/projects/{tenant.name}/alert-webhook"
    r = client.put(url, json=body, headers=tenant.h("admin"))
    assert r.status_code == 422 and field in r.json()["detail"], r.text
    assert client.get(url, headers=tenant.h("admin")).status_code == 404  # nothing stored


def test_the_webhook_is_set_by_an_admin_and_its_secret_is_never_shown(
    client: TestClient, tenant: Tenant, db: Session
) -> None:
    url = f"/api/v1/projects/{tenant.name}/alert-webhook"
    secret = SECRET
    body = {"url": "https://hooks.example/services/T0/B0/x", "secret": secret}
    for role in ("read", "submit"):
        assert client.put(url, json=body, headers=tenant.h(role)).status_code == 403
        assert client.get(url, headers=tenant.h(role)).status_code == 403
    r = client.put(url, json=body, headers=tenant.h("admin"))
    assert r.status_code == 200 and secret not in r.text and r.json()["secret_set"] is True
    shown = client.get(url, headers=tenant.h("admin"))
    assert shown.json()["url"] == body["url"] and secret not in shown.text and "admin" in shown.json()["updated_by"]
    assert client.delete(url, headers=tenant.h("admin")).status_code == 204
    assert client.delete(url, headers=tenant.h("admin")).status_code == 404
    kinds = db.scalars(select(AuditEvent.kind).where(AuditEvent.kind.like("alert_webhook.%"))).all()
    assert kinds == ["alert_webhook.set", "alert_webhook.deleted"]
    assert secret not in " ".join(db.scalars(select(AuditEvent.detail)).all())


def test_new_alerts_are_owed_to_the_webhook_only_when_one_is_set(
    client: TestClient, tenant: Tenant, other: Tenant, db: Session
) -> None:
    url = f"/api/v1/projects/{tenant.name}/alert-webhook"
    r = client.put(url, json={"url": "http://127.0.0.1:9/x", "secret": SECRET}, headers=tenant.h("admin"))
    assert r.status_code == 200
    _history(client, tenant, STEP + 6)
    _history(client, other, STEP + 6)  # a project without a webhook
    owed = db.scalars(select(Alert).where(Alert.notify_due_at.is_not(None))).all()
    assert len(owed) == 1 and owed[0].case_id == CASE and owed[0].notify_attempts == 0
    assert db.scalar(select(func.count()).select_from(Alert)) == 2


def test_migration_0009_keys_alerts_on_the_step_and_its_downgrade_restores_the_run_key(database_url: str) -> None:
    from sqlalchemy import inspect, text

    from attnprof.contract.provenance import Provenance
    from attnprof.core.documents import parse_result
    from attnprof.server import migrate
    from attnprof.server.comparisons import service as analysis
    from attnprof.server.config import Analysis
    from attnprof.server.db import make_engine
    from attnprof.server.projects import service as projects
    from attnprof.server.runs import service as runs

    migrate.upgrade(database_url)
    engine = make_engine(database_url)
    try:
        ids = []
        with Session(engine) as session:
            project = projects.create(session, name="steps")
            for i in range(16):
                doc = docs.h200(slower=1.3 if i >= 10 else 1.0, cases=[CASE], jitter=0.0005 * ((i * 7) % 3 - 1))
                run = runs.store_run(
                    session,
                    project_id=project.id,
                    document=parse_result(doc),
                    provenance=Provenance(branch="main", commit=_commit(i), ancestors=(_commit(i - 1),)),
                )
                analysis.analyze(session, run_id=run.id, cfg=Analysis())
                ids.append(run.id)
            session.commit()
            alert = session.scalars(select(Alert)).one()
            assert (alert.before_run_id, alert.run_id) == (ids[9], ids[10])
            # A second step ending at the same run (another before it): allowed by the step's key, not the old one.
            twin = Alert(
                project_id=alert.project_id,
                testbed_id=alert.testbed_id,
                case_id=alert.case_id,
                metric=alert.metric,
                before_run_id=ids[8],
                run_id=alert.run_id,
                before=1.0,
                after=2.0,
                change=1.0,
                p=0.01,
                regression=True,
            )
            session.add(twin)
            session.commit()
        migrate.downgrade(database_url, "0008")
        inspected = inspect(engine)
        assert "alert_webhooks" not in inspected.get_table_names()
        assert "before_run_id" not in {c["name"] for c in inspected.get_columns("alerts")}
        keys = {tuple(u["column_names"]) for u in inspected.get_unique_constraints("alerts")}
        assert ("project_id", "testbed_id", "case_id", "metric", "run_id") in keys
        with engine.connect() as conn:
            assert conn.execute(text("SELECT run_id FROM alerts")).scalars().all() == [ids[10]]
        migrate.upgrade(database_url)
        with engine.connect() as conn:
            row = conn.execute(text("SELECT before_run_id, run_id, unit, notify_attempts FROM alerts")).one()
        assert tuple(row) == (ids[9], ids[10], "us", 0)  # the run before it on its branch and testbed key
    finally:
        engine.dispose()


def test_the_same_step_twice_is_one_row_and_the_transaction_goes_on(
    client: TestClient, tenant: Tenant, db: Session
) -> None:
    """A step recorded by a concurrent analysis first: the unique key refuses the second insert, inside a savepoint,
    and the caller's transaction carries on (its comparison is still stored)."""
    from attnprof.server.comparisons import repository

    _history(client, tenant, STEP + 6)
    first = db.scalars(select(Alert)).one()
    copy = Alert(
        project_id=first.project_id,
        testbed_id=first.testbed_id,
        case_id=first.case_id,
        metric=first.metric,
        before_run_id=first.before_run_id,
        run_id=first.run_id,
        before=first.before,
        after=first.after,
        change=first.change,
        p=first.p,
        regression=first.regression,
    )
    assert repository.add_alert_once(db, copy) is False
    assert db.scalar(select(func.count()).select_from(Alert)) == 1
    _history_more(client, tenant, [{}] * (STEP + 6), 1)  # the session still works: another upload is analysed
    assert db.scalar(select(func.count()).select_from(Alert)) == 1
