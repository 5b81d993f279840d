from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Annotated
from urllib.parse import urlsplit

from fastapi import APIRouter, Path, Query, Response
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ConfigDict, Field, field_validator
from sqlalchemy.orm import Session

from attnprof.contract.secrets import is_placeholder
from attnprof.server.auth.dependencies import AdminProject, ReadProject
from attnprof.server.comparisons import alert_webhook, alerts, repository
from attnprof.server.comparisons.models import Alert, AlertWebhook
from attnprof.server.db import INT_MAX, SessionDep, utcnow
from attnprof.server.dependencies import SettingsDep
from attnprof.server.errors import NotFound
from attnprof.server.openapi import errors

router = APIRouter(prefix="/api/v1/projects/{project}", tags=["alerts"])
AlertId = Annotated[int, Path(ge=1, le=INT_MAX)]


class Commit(BaseModel):
    run_id: str
    commit: str = Field(description="empty when the run is gone")
    created_at: datetime | None


class Acknowledgement(BaseModel):
    at: datetime
    by: str = Field(description="the token (name or first characters, role) and the way in: API or dashboard")
    note: str


class AlertOut(BaseModel):
    id: int
    testbed_id: int
    case_id: str
    metric: str
    unit: str = Field(description="unit of before, after and their spreads: us (microseconds) for latency")
    run_id: str = Field(description="first run of the new level (the first bad run of a regression)")
    before_run_id: str = Field(description="last run of the old level (the last good run of a regression)")
    last_good: Commit = Field(description="the run and commit before the step")
    first_bad: Commit = Field(description="the run and commit from which the new level holds")
    before: float = Field(description="mean of the level before the step, in unit")
    after: float = Field(description="mean of the level from the step on, in unit")
    before_sd: float | None = Field(description="standard deviation of the runs before the step, in unit")
    after_sd: float | None = Field(description="standard deviation of the runs from the step on, in unit")
    before_runs: int | None
    after_runs: int | None
    change: float | None = Field(description="after / before - 1")
    ci_low: float | None = Field(description="low end of the 95% interval of change")
    ci_high: float | None = Field(description="high end of the 95% interval of change")
    min_effect: float | None = Field(description="the case's minimum effect for the metric, which the change passed")
    size: str = Field(description="the change for a person, with units: +30.0% (85.6 → 111 µs)")
    interval: str = Field(description="the interval and the levels' spreads for a person, with units")
    p: float
    regression: bool
    created_at: datetime
    updated_at: datetime | None = Field(description="last time detection found the step again")
    acknowledged: Acknowledgement | None
    notified_at: datetime | None = Field(description="when the project's webhook took it")
    bisection_id: int | None = Field(
        None, description="the bisection searching the step's commits (GET /api/v1/projects/{project}/bisections/{id})"
    )
    culprit: str | None = Field(None, description="the commit the bisection confirmed made the step")


class Alerts(BaseModel):
    alerts: list[AlertOut]
    next: int | None = Field(description="pass as `after` for the next page")


class AcknowledgeIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    note: str = Field(
        min_length=1, max_length=2000, description="why the alert needs no more attention, or who owns it"
    )

    @field_validator("note")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must say something (not only spaces)")
        return value.strip()


class WebhookIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: str = Field(min_length=1, max_length=2000, description="http(s) URL new alerts are POSTed to")
    secret: str = Field(
        min_length=16, max_length=200, description="key of the HMAC-SHA256 signature; write-only (never shown again)"
    )

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        parts = urlsplit(value.strip())
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("must be an http:// or https:// URL with a host")
        return value.strip()

    @field_validator("secret")
    @classmethod
    def _real_secret(cls, value: str) -> str:
        if is_placeholder(value) or len(set(value)) < 8:
            raise ValueError("looks like a placeholder: use a random secret (e.g. `openssl rand -hex 32`)")
        return value


class WebhookOut(BaseModel):
    url: str
    secret_set: bool = Field(description="the secret is stored; it is never returned")
    updated_at: datetime
    updated_by: str | None


def alert_out(alert: Alert, commits: dict[str, tuple[str, datetime]]) -> AlertOut:
    good, good_at = commits.get(alert.before_run_id, ("", None))
    bad, bad_at = commits.get(alert.run_id, ("", None))
    ack = None
    if alert.acknowledged_at is not None:
        ack = Acknowledgement(
            at=alert.acknowledged_at, by=alert.acknowledged_by or "", note=alert.acknowledged_note or ""
        )
    return AlertOut(
        id=alert.id,
        testbed_id=alert.testbed_id,
        case_id=alert.case_id,
        metric=alert.metric,
        unit=alert.unit,
        run_id=alert.run_id,
        before_run_id=alert.before_run_id,
        last_good=Commit(run_id=alert.before_run_id, commit=good, created_at=good_at),
        first_bad=Commit(run_id=alert.run_id, commit=bad, created_at=bad_at),
        before=alert.before,
        after=alert.after,
        before_sd=alert.before_sd,
        after_sd=alert.after_sd,
        before_runs=alert.before_runs,
        after_runs=alert.after_runs,
        change=alert.change,
        ci_low=alert.ci_low,
        ci_high=alert.ci_high,
        min_effect=alert.min_effect,
        size=alert_webhook.size(alert),
        interval=alert_webhook.interval(alert),
        p=alert.p,
        regression=alert.regression,
        created_at=alert.created_at,
        updated_at=alert.updated_at,
        acknowledged=ack,
        notified_at=alert.notified_at,
        bisection_id=alert.bisection_id,
        culprit=alert.culprit,
    )


def _outs(session: Session, rows: Sequence[Alert]) -> list[AlertOut]:
    commits = repository.commits_of(session, [r for a in rows for r in (a.before_run_id, a.run_id)])
    return [alert_out(a, commits) for a in rows]


@router.get("/alerts", response_model=Alerts)
def list_alerts(
    access: ReadProject,
    session: SessionDep,
    regressions_only: bool = True,
    unacknowledged_only: bool = False,
    after: Annotated[int | None, Query(ge=1, le=INT_MAX)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> Alerts:
    """Steps found on the default branch at least the case's minimum effect big, newest first: one per step."""
    rows = repository.list_alerts(
        session,
        project_id=access.project_id,
        regressions_only=regressions_only,
        unacknowledged_only=unacknowledged_only,
        after_id=after,
        limit=limit + 1,
    )
    nxt = rows[limit - 1].id if len(rows) > limit else None
    return Alerts(alerts=_outs(session, rows[:limit]), next=nxt)


@router.get("/alerts/{alert_id}", response_model=AlertOut)
def get_alert(alert_id: AlertId, access: ReadProject, session: SessionDep) -> AlertOut:
    found = repository.get_alert(session, access.project_id, alert_id)
    if found is None:
        raise NotFound(f"no alert {alert_id}")
    return _outs(session, [found])[0]


@router.post("/alerts/{alert_id}/acknowledgement", response_model=AlertOut, responses=errors(409))
def acknowledge_alert(alert_id: AlertId, body: AcknowledgeIn, access: AdminProject, session: SessionDep) -> AlertOut:
    """Mark the alert as read, with a note (an admin). Who and when are recorded; a second acknowledgement is a
    409 that names the first."""
    by = alerts.who(session, access.principal.token_id, via="API")
    found = alerts.acknowledge(
        session,
        project_id=access.project_id,
        alert_id=alert_id,
        note=body.note,
        by=by,
        token_id=access.principal.token_id,
    )
    return _outs(session, [found])[0]


@router.get("/alert-webhook", response_model=WebhookOut)
def get_webhook(access: AdminProject, session: SessionDep) -> WebhookOut:
    """Where new alerts are sent (an admin); the secret is never shown."""
    hook = repository.webhook_of(session, access.project_id)
    if hook is None:
        raise NotFound("this project sends its alerts to no webhook")
    return WebhookOut(
        url=hook.url, secret_set=bool(hook.secret), updated_at=hook.updated_at, updated_by=hook.updated_by
    )


@router.put("/alert-webhook", response_model=WebhookOut)
def put_webhook(body: WebhookIn, access: AdminProject, session: SessionDep, settings: SettingsDep) -> WebhookOut:
    """Send the project's new alerts to ``url``, each body signed with ``secret`` (docs/alerts.md, "The webhook"). A
    URL whose host is, or resolves to, a loopback, link-local, private or other non-public address is refused (422)
    unless the service's operator allows its network."""
    refused = alert_webhook.url_refusal(body.url, settings.alert_webhooks)
    if refused is not None:
        raise RequestValidationError([{"type": "url_refused", "loc": ("body", "url"), "msg": refused}])
    hook = repository.save_webhook(
        session,
        AlertWebhook(
            project_id=access.project_id,
            url=body.url,
            secret=body.secret,
            updated_at=utcnow(),
            updated_by=alerts.who(session, access.principal.token_id, via="API"),
        ),
    )
    alerts.audit(session, access.principal.token_id, kind="alert_webhook.set", detail=f"alerts sent to {hook.url}")
    return WebhookOut(url=hook.url, secret_set=True, updated_at=hook.updated_at, updated_by=hook.updated_by)


@router.delete("/alert-webhook", status_code=204)
def delete_webhook(access: AdminProject, session: SessionDep) -> Response:
    """Stop sending alerts (an admin); alerts still owed are not sent."""
    if not repository.delete_webhook(session, access.project_id):
        raise NotFound("this project sends its alerts to no webhook")
    alerts.audit(session, access.principal.token_id, kind="alert_webhook.deleted", detail="alerts sent to no webhook")
    return Response(status_code=204)


class ComparisonOut(BaseModel):
    id: str
    run_id: str
    verdict: str
    baseline: list[str]
    document: dict[str, object]


@router.get("/comparisons/{comparison_id}", response_model=ComparisonOut)
def get_comparison(comparison_id: str, access: ReadProject, session: SessionDep) -> ComparisonOut:
    found = repository.get_comparison(session, comparison_id)
    if found is None or found.project_id != access.project_id:
        raise NotFound(f"no comparison {comparison_id}")
    return ComparisonOut(
        id=found.id,
        run_id=found.candidate_run_id,
        verdict=found.verdict,
        baseline=[str(b) for b in found.baseline_run_ids],
        document=found.document,
    )
