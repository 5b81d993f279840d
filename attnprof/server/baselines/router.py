from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Path, Response

from attnprof.server.auth.dependencies import AdminProject, ReadProject
from attnprof.server.baselines import service
from attnprof.server.baselines.schemas import RuleIn, RuleOut, Rules
from attnprof.server.db import SessionDep
from attnprof.server.errors import Conflict
from attnprof.server.runs import repository as run_rows

router = APIRouter(prefix="/api/v1/projects/{project}/baselines", tags=["baselines"])
Kind = Literal["pin", "exclude", "accept"]


@router.get("", response_model=Rules)
def list_rules(access: ReadProject, session: SessionDep) -> Rules:
    """Pins, exclusions (with their reasons) and accepted changes."""
    rules = service.list_rules(session, project_id=access.project_id)
    return Rules(rules=[RuleOut.model_validate(r) for r in rules])


def _run_id(session: SessionDep, project_id: int, ref: str) -> str:
    """The service's id of the run ``ref`` names: either of its ids, or a unique prefix of one."""
    try:
        return run_rows.resolve_run_id(session, project_id, ref) or ref
    except run_rows.AmbiguousRunId as exc:
        raise Conflict(str(exc)) from None


def _add(kind: str, body: RuleIn, access: AdminProject, session: SessionDep) -> RuleOut:
    run_id = _run_id(session, access.project_id, body.run_id)
    rule = service.add_rule(session, project_id=access.project_id, kind=kind, run_id=run_id, reason=body.reason)
    return RuleOut.model_validate(rule)


@router.post("/pins", status_code=201, response_model=RuleOut)
def pin(body: RuleIn, access: AdminProject, session: SessionDep) -> RuleOut:
    """Pin a run: pinned runs on its testbed key are the baseline, whatever else is true."""
    return _add("pin", body, access, session)


@router.post("/exclusions", status_code=201, response_model=RuleOut)
def exclude(body: RuleIn, access: AdminProject, session: SessionDep) -> RuleOut:
    """Exclude a run (a reason is required): it never serves as a baseline, nor in the noise history."""
    return _add("exclude", body, access, session)


@router.post("/accepted", status_code=201, response_model=RuleOut)
def accept(body: RuleIn, access: AdminProject, session: SessionDep) -> RuleOut:
    """Accept an intended change: this run becomes the baseline; older runs on its testbed stop serving."""
    return _add("accept", body, access, session)


@router.delete("/{kind}/{run_id}", status_code=204, response_class=Response)
def remove(
    kind: Annotated[Kind, Path()],
    run_id: Annotated[str, Path(max_length=100)],
    access: AdminProject,
    session: SessionDep,
) -> Response:
    """Unpin, un-exclude or un-accept a run (named by either of its ids)."""
    resolved = _run_id(session, access.project_id, run_id)
    service.remove_rule(session, project_id=access.project_id, kind=kind, run_id=resolved)
    return Response(status_code=204)
