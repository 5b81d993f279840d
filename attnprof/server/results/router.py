from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Annotated

from fastapi import APIRouter, BackgroundTasks, Depends, Request, Response
from sqlalchemy.exc import IntegrityError

from attnprof.contract.links import Links
from attnprof.server.auth.dependencies import ProjectName, SubmitProject
from attnprof.server.db import SessionDep
from attnprof.server.dependencies import SettingsDep
from attnprof.server.github import outbox
from attnprof.server.openapi import errors
from attnprof.server.results import service
from attnprof.server.results.schemas import ResultUpload, UploadAnswer
from attnprof.server.testbeds import repository as testbeds

router = APIRouter(prefix="/api/v1/projects/{project}", tags=["results"])


def run_feedback_sender(request: Request) -> Callable[[Sequence[str]], None]:
    """Delivers the GitHub feedback that uploaded runs owe (the app's ``attnprof.server.github.outbox.Sender``, its
    runs)."""
    sender: outbox.Sender = request.app.state.send_feedback
    return sender.runs


RunFeedbackDep = Annotated[Callable[[Sequence[str]], None], Depends(run_feedback_sender)]


@router.post(
    "/results",
    status_code=201,
    response_model=UploadAnswer,
    responses={
        200: {"model": UploadAnswer, "description": "the same upload was stored before: its run and comparison"},
        **errors(409),
    },
)
def upload_result(
    project: ProjectName,
    body: ResultUpload,
    access: SubmitProject,
    session: SessionDep,
    settings: SettingsDep,
    response: Response,
    background: BackgroundTasks,
    send_feedback: RunFeedbackDep,
) -> UploadAnswer:
    """Store a result document profiled elsewhere, compare it with its baseline, answer with the verdict.

    Sending the same upload again (the same document and provenance) stores nothing and answers 200 with what the
    first one got: a client whose answer was lost can retry. The same document with other provenance is a 409.
    An upload that names its repository gets the commit status (and, with a pull request, the project's PR comment)
    that a job gets, sent once this has answered; GitHub's answer never changes this one.
    """

    def store() -> service.Uploaded:
        return service.upload(
            session,
            project_id=access.project_id,
            body=body,
            cfg=settings.analysis,
            ancestors_max=settings.limits.ancestors,
            github_feedback=settings.github_token is not None,
        )

    try:
        done = store()
    except IntegrityError:
        # The same document was committed by another request while this one stored it (a client's retry that
        # overtook its first try): this transaction is void; answered as a retry that came after it.
        session.rollback()
        done = store()
    if not done.created:
        response.status_code = 200
    testbed = testbeds.get(session, done.run.testbed_id)
    testbed_name = testbed.name if testbed else ""
    links = Links(settings.public_url)
    answer = UploadAnswer(
        run_id=done.run.id,
        comparison_id=done.comparison.id,
        verdict=done.comparison.verdict,
        baseline=[str(b) for b in done.comparison.baseline_run_ids] or None,
        testbed=testbed_name,
        url=links.api_run(project, done.run.id),
        dashboard_url=links.ui_comparison(project, done.comparison.id),
        comparison=done.comparison.document,
        summary=service.summary(session, done, project=project, testbed=testbed_name, public_url=settings.public_url),
    )
    if done.created and done.run.feedback_due_at is not None:
        session.commit()  # GitHub hears of the run only once it is stored: the sender reads the committed rows
        background.add_task(send_feedback, [done.run.id])  # its commit status and PR comment, once answered
    return answer
