"""Who is looking at a page: the session cookie turned into a project and a role, or a sign-in redirect."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Form, Path, Request

from attnprof.contract.links import PATHS
from service.auth import repository as tokens
from service.auth.models import WORKER
from service.db import SessionDep, utcnow
from service.projects import repository as projects
from service.projects.models import Project
from service.web.session import COOKIE, SessionSigner, WebSession

_RANK = {"read": 0, "submit": 1, "admin": 2}


class SignInRequired(Exception):
    """No valid session: the page answers with a redirect to the sign-in form, which comes back here."""

    def __init__(self, next_path: str) -> None:
        super().__init__(next_path)
        self.next_path = next_path


class PageError(Exception):
    """A page that cannot be shown: rendered as an HTML error page with this status."""

    def __init__(self, status: int, title: str, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.title = title
        self.detail = detail


def not_found(what: str) -> PageError:
    # Another project's object answers exactly like one that does not exist.
    return PageError(404, "Not found", what)


def signer(request: Request) -> SessionSigner:
    found: SessionSigner = request.app.state.session_signer
    return found


@dataclass(frozen=True)
class Viewer:
    """A signed-in person: the project their token belongs to and its role, with the form token of the session."""

    project: Project
    role: str
    token_id: int
    session: WebSession
    csrf: str

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"


def _current(request: Request, session: SessionDep) -> tuple[WebSession, int, str, Project]:
    web = signer(request).read(request.cookies.get(COOKIE))
    here = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    if web is None:
        raise SignInRequired(here)
    token = tokens.get(session, web.token_id)
    if token is None or not token.works_at(utcnow()) or token.role == WORKER or token.project_id is None:
        raise SignInRequired(here)
    project = projects.get(session, token.project_id)
    if project is None:
        raise SignInRequired(here)
    return web, token.id, token.role, project


def get_viewer(request: Request, session: SessionDep, project: Annotated[str, Path(max_length=100)]) -> Viewer:
    web, token_id, role, own = _current(request, session)
    if project != own.name:
        raise not_found(f"no project {project!r}")
    return Viewer(project=own, role=role, token_id=token_id, session=web, csrf=signer(request).csrf_token(web))


ViewerDep = Annotated[Viewer, Depends(get_viewer)]


def get_signed_in_project(request: Request, session: SessionDep) -> Project:
    """The project of the current session (for pages outside a project's path, such as ``/ui``)."""
    return _current(request, session)[3]


def require_form(request: Request, viewer: ViewerDep, csrf: Annotated[str, Form(max_length=200)] = "") -> Viewer:
    """A form post by an admin of the project, carrying this session's CSRF token."""
    if not signer(request).check_csrf(viewer.session, csrf):
        raise PageError(403, "Form expired", "the form's security token is missing or stale: reload the page and retry")
    if _RANK.get(viewer.role, -1) < _RANK["admin"]:
        raise PageError(
            403, "Not allowed", f"this token's role ({viewer.role}) cannot change baselines; it needs admin"
        )
    return viewer


AdminFormDep = Annotated[Viewer, Depends(require_form)]


def login_url(next_path: str) -> str:
    return PATHS.ui_login(next_path)
