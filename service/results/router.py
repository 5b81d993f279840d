from __future__ import annotations

from fastapi import APIRouter

from service.auth.dependencies import SubmitProject
from service.db import SessionDep
from service.dependencies import SettingsDep
from service.openapi import errors
from service.results import service
from service.results.schemas import ResultUpload, UploadAnswer
from service.testbeds import repository as testbeds

router = APIRouter(prefix="/api/v1/projects/{project}", tags=["results"])


@router.post("/results", status_code=201, response_model=UploadAnswer, responses=errors(409))
def upload_result(
    body: ResultUpload, access: SubmitProject, session: SessionDep, settings: SettingsDep
) -> UploadAnswer:
    """Store a result document profiled elsewhere, compare it with its baseline, answer with the verdict."""
    done = service.upload(
        session,
        project_id=access.project_id,
        body=body,
        cfg=settings.analysis,
        ancestors_max=settings.limits.ancestors,
    )
    testbed = testbeds.get(session, done.run.testbed_id)
    return UploadAnswer(
        run_id=done.run.id,
        comparison_id=done.comparison.id,
        verdict=done.comparison.verdict,
        baseline=[str(b) for b in done.comparison.baseline_run_ids] or None,
        testbed=testbed.name if testbed else "",
        url=f"{settings.public_url.rstrip('/')}/api/v1/runs/{done.run.id}",
        comparison=done.comparison.document,
    )
