"""A project's retention of traces and bundles and its quota: read by any project token, changed by an admin."""

from __future__ import annotations

from fastapi import APIRouter
from sqlalchemy.orm import Session

from attnprof.server.auth.dependencies import AdminProject, ReadProject
from attnprof.server.config import Retention
from attnprof.server.db import SessionDep
from attnprof.server.dependencies import SettingsDep
from attnprof.server.errors import InvalidPayload
from attnprof.server.projects.retention import Policy, policy, used_bytes
from attnprof.server.retention import service
from attnprof.server.retention.schemas import RetentionIn, RetentionOut, RetentionValues

router = APIRouter(prefix="/api/v1/projects/{project}/retention", tags=["retention"])


def _out(session: Session, project_id: int, p: Policy, defaults: Retention) -> RetentionOut:
    return RetentionOut(
        trace_days=p.trace_days,
        bundle_days=p.bundle_days,
        quota_bytes=p.quota_bytes,
        source="project" if p.own else "defaults",
        used_bytes=used_bytes(session, project_id),
        defaults=RetentionValues(
            trace_days=defaults.trace_days, bundle_days=defaults.bundle_days, quota_bytes=defaults.quota_bytes
        ),
    )


@router.get("", response_model=RetentionOut)
def get_retention(access: ReadProject, session: SessionDep, settings: SettingsDep) -> RetentionOut:
    """How long the project's traces and bundles are kept, its quota, and the bytes it stores now."""
    return _out(session, access.project_id, policy(session, access.project_id, settings.retention), settings.retention)


@router.patch("", response_model=RetentionOut)
def change_retention(
    body: RetentionIn, access: AdminProject, session: SessionDep, settings: SettingsDep
) -> RetentionOut:
    """Change the fields sent (null: keep forever, or no quota); the others keep their values. Recorded in the
    audit log. A lower quota refuses later uploads; it deletes nothing."""
    values = {name: getattr(body, name) for name in body.model_fields_set}
    if not values:
        raise InvalidPayload("send at least one of trace_days, bundle_days, quota_bytes")
    p = service.change(
        session, project_id=access.project_id, values=values, defaults=settings.retention, principal=access.principal
    )
    return _out(session, access.project_id, p, settings.retention)


@router.delete("", response_model=RetentionOut)
def reset_retention(access: AdminProject, session: SessionDep, settings: SettingsDep) -> RetentionOut:
    """Back to the service's defaults (``ATTNPROF_RETENTION__*``). Recorded in the audit log."""
    p = service.reset(session, project_id=access.project_id, defaults=settings.retention, principal=access.principal)
    return _out(session, access.project_id, p, settings.retention)
