"""Who is looking at a page: the session cookie turned into a project and a role, or a sign-in redirect."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated
from urllib.parse import quote, urlsplit

from fastapi import Depends, Form, Path, Request

from attnprof.contract.links import PATHS
from attnprof.server.auth import repository as tokens
from attnprof.server.auth.models import WORKER
from attnprof.server.config import Settings
from attnprof.server.db import SessionDep, utcnow
from attnprof.server.projects import repository as projects
from attnprof.server.projects.models import Project
from attnprof.server.runs import repository as run_rows
from attnprof.server.web.session import COOKIE, SessionSigner, WebSession

_RANK = {"read": 0, "submit": 1, "admin": 2}


class SignInRequired(Exception):
    """No valid session: the page answers with a redirect to the sign-in form (``github``: straight to GitHub's
    sign-in, for a GitHub session past its check), which comes back to ``next_path``."""

    def __init__(self, next_path: str | None, *, github: bool = False) -> None:
        super().__init__(next_path)
        self.next_path = next_path
        self.github = github


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
    """A signed-in person on a project's page: the project and their role in it (a GitHub sign-in: ``read``,
    always), with the form token of the session."""

    project: Project
    role: str
    token_id: int | None
    session: WebSession
    csrf: str
    github: str | None = None
    """The GitHub login of a person signed in with GitHub; None for a token session."""

    @property
    def is_admin(self) -> bool:
        return self.github is None and self.role == "admin"

    @property
    def signed_in_as(self) -> str:
        """Who the header says is signed in: the token's role, or the GitHub login and the role it has."""
        return self.role if self.github is None else f"{self.github} (GitHub) · {self.role}"


def request_target(request: Request) -> str:
    """The path and query of ``request`` exactly as the browser sent them (still percent-encoded: a run id or trace
    name holding ``/``, ``?`` or ``%`` comes back to the same page)."""
    raw = request.scope.get("raw_path")
    path = raw.decode("latin-1") if isinstance(raw, bytes) and raw else request.url.path
    return path + (f"?{request.url.query}" if request.url.query else "")


def _come_back_to(request: Request) -> str | None:
    """Where sign-in should come back to: this page, or for a form's post the page that held the form (a post's
    own URL answers only posts)."""
    if request.method in ("GET", "HEAD"):
        return request_target(request)
    referer = urlsplit(request.headers.get("referer", ""))
    if referer.netloc == request.url.netloc and referer.path.startswith("/ui/"):
        return referer.path + (f"?{referer.query}" if referer.query else "")
    return None


def _web_session(request: Request) -> WebSession:
    value = request.cookies.get(COOKIE)
    web = signer(request).read(value)
    if web is None or (web.by_github and not github_sign_in(request)):
        stale = signer(request).read(value, now_s=0)
        # A GitHub session past its check goes back through GitHub, which answers at once for a person still
        # signed in there: their repositories are read again without a click.
        raise SignInRequired(_come_back_to(request), github=stale is not None and stale.by_github)
    return web


def github_sign_in(request: Request) -> bool:
    """Whether this service has a GitHub OAuth app to sign people in with."""
    settings: Settings = request.app.state.settings
    return settings.github_client_id is not None and settings.github_client_secret is not None


def _by_token(request: Request, session: SessionDep, web: WebSession) -> tuple[int, str, Project]:
    assert web.token_id is not None
    token = tokens.get(session, web.token_id)
    if token is None or not token.works_at(utcnow()) or token.role == WORKER or token.project_id is None:
        raise SignInRequired(_come_back_to(request))
    project = projects.get(session, token.project_id)
    if project is None:
        raise SignInRequired(_come_back_to(request))
    return token.id, token.role, project


def github_projects(request: Request, session: SessionDep, web: WebSession) -> list[Project]:
    """The projects a GitHub session may read: those it was granted at sign-in that still name a repository."""
    settings: Settings = request.app.state.settings
    found = [projects.get(session, project_id) for project_id in web.project_ids]
    return [p for p in found if p is not None and p.name in settings.dashboard.github_repositories]


def get_viewer(request: Request, session: SessionDep, project: Annotated[str, Path(max_length=100)]) -> Viewer:
    web = _web_session(request)
    csrf = signer(request).csrf_token(web)
    if web.by_github:
        # Read access, to the projects whose repository the person could read; nothing else, ever.
        for own in github_projects(request, session, web):
            if own.name == project:
                return Viewer(project=own, role="read", token_id=None, session=web, csrf=csrf, github=web.github_login)
        raise not_found(f"no project {project!r}")
    token_id, role, own = _by_token(request, session, web)
    if project != own.name:
        raise not_found(f"no project {project!r}")
    return Viewer(project=own, role=role, token_id=token_id, session=web, csrf=csrf)


ViewerDep = Annotated[Viewer, Depends(get_viewer)]


def signed_in(request: Request, session: SessionDep) -> tuple[WebSession, list[Project]]:
    """The current session and the projects it may read (for pages outside a project's path, such as ``/ui``)."""
    web = _web_session(request)
    if web.by_github:
        return web, github_projects(request, session, web)
    return web, [_by_token(request, session, web)[2]]


class MovedTo(Exception):
    """The page is at another address (a run named by its other id): answered with a redirect there."""

    def __init__(self, location: str) -> None:
        super().__init__(location)
        self.location = location


def canonical_run(request: Request, session: SessionDep) -> None:
    """On a page of a run (``run_id`` in its path), a run named by its result document's id, or by a unique prefix of
    either id, is sent to the same page under the service's id; an ambiguous prefix is a 409 page. A run the
    project does not have is left to the page's own 404."""
    ref, project = request.path_params.get("run_id"), request.path_params.get("project")
    if not isinstance(ref, str) or not isinstance(project, str):
        return
    viewer = get_viewer(request, session, project)
    try:
        run_id = run_rows.resolve_run_id(session, viewer.project.id, ref)
    except run_rows.AmbiguousRunId as exc:
        raise PageError(409, "Ambiguous run id", str(exc)) from None
    if run_id is None or run_id == ref:
        return
    target = request_target(request)
    path, _, query = target.partition("?")
    parts = path.split("/")  # "", "ui", "p", project, "runs", run id, ...
    if len(parts) < 6 or parts[4] != "runs":
        return
    parts[5] = quote(run_id, safe="")
    raise MovedTo("/".join(parts) + (f"?{query}" if query else ""))


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


def login_url(next_path: str | None, *, github: bool = False) -> str:
    return PATHS.ui_login_github(next_path) if github else PATHS.ui_login(next_path)
