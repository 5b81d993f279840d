"""The server's verbs: ``serve``, ``db``, ``admin``. (The client verbs, ``submit`` and ``upload``, are in
``attnprof.client.cli``.)

Only typer and the standard library are imported at module level; the verbs import FastAPI and SQLAlchemy when
they run.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

app = typer.Typer(add_completion=False, no_args_is_help=True, help="attnprof service verbs.")
db_app = typer.Typer(no_args_is_help=True, help="The database schema (Alembic migrations shipped in the package).")
admin_app = typer.Typer(
    no_args_is_help=True,
    help="Projects, the GitHub repositories they may report to, and tokens, straight in the database.",
)
app.add_typer(db_app, name="db")
app.add_typer(admin_app, name="admin")

JsonOpt = Annotated[bool, typer.Option("--json", help="print JSON")]
ExpiresOpt = Annotated[
    str | None,
    typer.Option("--expires-in", help="the token stops working after this long: 90d, 12h, 30m, 45s, 2w [never]"),
]
EXIT_PASS, EXIT_FAIL, EXIT_BAD_INPUT, EXIT_NO_VERDICT = 0, 1, 2, 3


def _emit(as_json: bool, data: dict[str, Any], text: str) -> None:
    typer.echo(json.dumps(data, indent=2, default=str) if as_json else text)


def _die(message: str, code: int = EXIT_BAD_INPUT) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="address to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port")] = 8000,
    workers: Annotated[
        int,
        typer.Option(
            min=1,
            help="server processes (uvicorn workers on one port); /metrics sums their counts, and with a Redis "
            "broker they share the rate-limit buckets (per process otherwise: the limit printed at start says which)",
        ),
    ] = 1,
) -> None:
    """Run the HTTP API (settings from ATTNPROF_* environment variables).

    One process serves requests on one core at a time (the GIL); ``--workers`` runs several, as many as the
    cores the API may use. Their metrics are counted in files of a folder they share (``PROMETHEUS_MULTIPROC_DIR``:
    a fresh temporary one unless set; a folder that is set is emptied of a previous run's counts at start).
    """
    import uvicorn
    from pydantic import ValidationError

    from attnprof.server.config import SHARED_SECRETS, get_settings, missing_shared_secrets

    # Settings read before any process starts: a bad value is one clear error here, not one per worker process.
    try:
        settings = get_settings()
    except ValidationError as exc:
        _die(f"the settings are invalid:\n{exc}")
    missing = missing_shared_secrets(settings, workers)
    if missing:
        _die(
            f"--workers {workers} runs {workers} processes that must share "
            + "; ".join(f"{name} (it {SHARED_SECRETS[name]})" for name in missing)
            + ": unset, each process would make up its own key and a sign-in made by one process would be refused "
            "by the others. Set it to a random string of at least 32 characters (openssl rand -hex 32), the same "
            "for every process, or run --workers 1"
        )

    import os
    import signal
    import tempfile
    from pathlib import Path

    def stop(signum: int, _frame: Any) -> None:
        raise SystemExit(128 + signum)

    # uvicorn stops on SIGTERM, then raises the signal again once its own handler is gone: as SystemExit here, so
    # that the metrics folder below is removed on the way out (the signal's default action would leave it behind).
    signal.signal(signal.SIGTERM, stop)
    # prometheus_client reads the variable when it is first imported: set before anything imports it.
    with tempfile.TemporaryDirectory(prefix="attnprof-metrics-") as scratch:
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = folder = os.environ.get("PROMETHEUS_MULTIPROC_DIR") or scratch
        from attnprof.server.metrics import prepare_multiprocess_folder
        from attnprof.server.ratelimit import describe as describe_rate_limit

        prepare_multiprocess_folder(Path(folder))
        typer.echo(describe_rate_limit(settings, workers))
        typer.echo(f"metrics: /metrics sums the counts of the {workers} server process(es), kept in {folder}")
        # uvicorn would take X-Forwarded-For from a peer on 127.0.0.1 by default; the client address the audit log
        # records is the service's to decide (ATTNPROF_TRUSTED_PROXIES).
        if workers > 1:
            uvicorn.run(
                "attnprof.server.asgi:app",
                host=host,
                port=port,
                workers=workers,
                log_level="warning",
                proxy_headers=False,
            )
        else:
            from attnprof.server.app import create_app

            uvicorn.run(create_app(), host=host, port=port, log_level="warning", proxy_headers=False)


@db_app.command("upgrade")
def db_upgrade(revision: Annotated[str, typer.Option(help="target revision")] = "head") -> None:
    """Migrate the database of ATTNPROF_DATABASE_URL to ``revision``."""
    from attnprof.server import migrate
    from attnprof.server.config import get_settings

    migrate.upgrade(get_settings().database_url, revision)
    typer.echo(f"database at {revision}")


@db_app.command("downgrade")
def db_downgrade(revision: Annotated[str, typer.Option(help="target revision")] = "base") -> None:
    """Migrate down to ``revision`` (``base``: drop the whole schema)."""
    from attnprof.server import migrate
    from attnprof.server.config import get_settings

    migrate.downgrade(get_settings().database_url, revision)
    typer.echo(f"database at {revision}")


def _session() -> Any:
    from attnprof.server.config import get_settings
    from attnprof.server.db import make_engine, make_sessionmaker

    return make_sessionmaker(make_engine(get_settings().database_url))()


def _actor() -> str:
    """Who acts, for the audit log: the command line and the system user running it."""
    import getpass

    try:
        return f"the command line (user {getpass.getuser()})"
    except (KeyError, OSError):  # no name for the uid (a container's arbitrary user)
        return "the command line"


def _duration(option: str, value: str | None, *, zero: bool = False) -> Any:
    """``value`` (``90d``) as a timedelta, None when not given; exits 2 naming ``option`` when it is no duration."""
    from attnprof.server.auth.schemas import parse_duration

    if value is None:
        return None
    try:
        return parse_duration(value, zero=zero)
    except ValueError as exc:
        _die(f"{option}: {exc}")


def _token_data(token: Any) -> dict[str, Any]:
    from attnprof.server.auth.schemas import TokenOut

    return TokenOut.model_validate(token).model_dump(mode="json")


def _ends(token: Any) -> str:
    from attnprof.server.auth.service import when

    return f"expires {when(token.expires_at)}" if token.expires_at else "never expires"


RepoOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--repo",
        help="a GitHub repository (owner/name) the project may report to: its commit statuses and pull-request "
        "comment, sent with the service's GitHub token; repeat for several",
    ),
]


@admin_app.command("create-project")
def create_project(
    name: str,
    default_branch: Annotated[str, typer.Option(help="the branch whose runs are the history")] = "main",
    repo: RepoOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Create a project and print it with an admin token (shown once)."""
    from attnprof.server.auth import service as auth
    from attnprof.server.errors import ServiceError
    from attnprof.server.projects import service as projects

    with _session() as session:
        try:
            project = projects.create(session, name=name, default_branch=default_branch)
            for each in repo or []:
                projects.allow_repository(session, project_id=project.id, repo=each, added_by=_actor())
            token, secret = auth.create_project_token(
                session, project_id=project.id, role="admin", name="created", actor=_actor()
            )
            session.commit()
        except ServiceError as exc:
            _die(exc.detail)
        allowed = sorted({r.lower() for r in repo or []})
        data = {
            "project": {
                "id": project.id,
                "name": project.name,
                "default_branch": project.default_branch,
                "repositories": allowed,
            },
            "token": secret,
            "role": "admin",
            "token_id": token.id,
        }
    reports = f"\nreports to: {', '.join(allowed)}" if allowed else ""
    _emit(as_json, data, f"project {name} created{reports}\nadmin token (shown once): {secret}")


def _project_id(session: Any, project: str) -> int:
    """The id of ``project``; exits 2 when there is none."""
    from attnprof.server.projects import repository as projects

    found = projects.get_by_name(session, project)
    if found is None:
        _die(f"no project {project!r}")
    assert found is not None
    return found.id


@admin_app.command("reset-testbed-key")
def reset_testbed_key(testbed: str, as_json: JsonOpt = False) -> None:
    """Forget a testbed's key (its device, driver and mode): after a driver upgrade on every host of it, or for a
    key that predates registration. Its next worker to start keys it with its own device; until then runs are stored
    as what they claim. Only this command and the testbed's workers set a key: never a result document."""
    from attnprof.server.testbeds import repository as testbeds

    with _session() as session:
        found = testbeds.get_by_name(session, testbed)
        if found is None:
            _die(f"testbed: no testbed named {testbed!r}")
            return
        before = found.key
        cleared = testbeds.clear_key(session, found.id)
        session.commit()
    said = f"{testbed}: key {before} cleared; its next worker keys it" if cleared else f"{testbed} has no key"
    _emit(as_json, {"testbed": testbed, "cleared": cleared, "key_was": before}, said)


RepoArg = Annotated[str, typer.Argument(help="the GitHub repository, owner/name")]


def _change_repos(project: str, repo: str, *, allow: bool, as_json: bool) -> None:
    """Allow or disallow one repository for a project, and say what the project may report to now."""
    from attnprof.server.errors import ServiceError
    from attnprof.server.projects import repository as project_rows
    from attnprof.server.projects import service as projects

    with _session() as session:
        project_id = _project_id(session, project)
        try:
            if allow:
                changed = projects.allow_repository(session, project_id=project_id, repo=repo, added_by=_actor())
            else:
                changed = projects.disallow_repository(session, project_id=project_id, repo=repo)
            session.commit()
        except ServiceError as exc:
            _die(exc.detail)
        allowed = project_rows.repositories(session, project_id)
    if allow:
        said = "may now report to" if changed else "could already report to"
    else:
        said = "may no longer report to" if changed else "could not report to"
    _emit(
        as_json,
        {"project": project, "repo": repo.lower(), "added" if allow else "removed": changed, "repositories": allowed},
        f"{project} {said} {repo.lower()}",
    )


@admin_app.command("allow-repo")
def allow_repo(project: str, repo: RepoArg, as_json: JsonOpt = False) -> None:
    """Let a project report to a GitHub repository: its jobs and uploads that name it get commit statuses and the
    pull-request comment there, sent with the service's token. Only this command allows one: a project's tokens
    cannot, since the token that posts is the service's."""
    _change_repos(project, repo, allow=True, as_json=as_json)


@admin_app.command("disallow-repo")
def disallow_repo(project: str, repo: RepoArg, as_json: JsonOpt = False) -> None:
    """Stop a project reporting to a GitHub repository: its jobs and uploads naming it are refused from now on, and
    feedback still owed there is not sent."""
    _change_repos(project, repo, allow=False, as_json=as_json)


@admin_app.command("list-repos")
def list_repos(project: str, as_json: JsonOpt = False) -> None:
    """The GitHub repositories a project may report to, and those its jobs and uploads named that it may not (what
    to allow, after an upgrade that started every project with none)."""
    from attnprof.server.projects import repository as project_rows

    with _session() as session:
        project_id = _project_id(session, project)
        allowed = project_rows.repositories(session, project_id)
        named = project_rows.named_repositories(session, project_id)
    not_allowed = [{"repo": repo, "named": times} for repo, times in named if repo not in allowed]
    lines = [f"reports to {repo}" for repo in allowed] or ["reports to no repository"]
    lines += [
        f"named by {n['named']} job(s) or upload(s), not allowed: {n['repo']} (attnprof admin allow-repo {project} "
        f"{n['repo']})"
        for n in not_allowed
    ]
    _emit(as_json, {"project": project, "repositories": allowed, "named_not_allowed": not_allowed}, "\n".join(lines))


@admin_app.command("gpu-quota")
def gpu_quota(
    project: str,
    seconds: Annotated[
        str, typer.Argument(help="device seconds its jobs may hold per UTC day (a number over 0), or 'none'")
    ],
    as_json: JsonOpt = False,
) -> None:
    """Set a project's daily GPU quota: past it, its jobs wait (never dropped) until the next UTC day, and a waiting
    job's notice says why. Only the service's admin sets it: the pool is shared, so a project's own tokens cannot."""
    from attnprof.server.projects import repository as projects

    if seconds.strip().lower() == "none":
        value = None
    else:
        try:
            value = float(seconds)
        except ValueError:
            value = -1.0
        if not value > 0 or value != value or value == float("inf"):
            _die(f"seconds: a number of seconds over 0, or 'none' (no quota); got {seconds!r}")
    with _session() as session:
        project_id = _project_id(session, project)
        found = projects.get(session, project_id)
        assert found is not None
        found.gpu_seconds_per_day = value
        session.commit()
    shown = "no GPU quota" if value is None else f"a GPU quota of {value:g} s per UTC day"
    _emit(as_json, {"project": project, "gpu_seconds_per_day": value}, f"project {project}: {shown}")


@admin_app.command("create-token")
def create_token(
    project: str,
    role: Annotated[str, typer.Option(help="admin, submit or read")],
    name: Annotated[str | None, typer.Option(help="a label")] = None,
    expires_in: ExpiresOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Create a project token of a role and print it (shown once)."""
    from attnprof.server.auth import service as auth
    from attnprof.server.errors import ServiceError
    from attnprof.server.projects import repository as projects

    lifetime = _duration("--expires-in", expires_in)
    with _session() as session:
        found = projects.get_by_name(session, project)
        if found is None:
            _die(f"no project {project!r}")
        assert found is not None
        try:
            token, secret = auth.create_project_token(
                session, project_id=found.id, role=role, name=name, expires_in=lifetime, actor=_actor()
            )
            session.commit()
        except ServiceError as exc:
            _die(exc.detail)
        data = {"project": project, "role": role, "token": secret, "token_id": token.id, **_token_data(token)}
        ends = _ends(token)
    _emit(as_json, data, f"{role} token {token.id} for {project}, {ends} (shown once): {secret}")


@admin_app.command("create-worker-token")
def create_worker_token(
    testbed: Annotated[str, typer.Option(help="the testbed the worker serves (created if new)")],
    name: Annotated[str | None, typer.Option(help="a label")] = None,
    expires_in: ExpiresOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Create a global worker token bound to a testbed and print it (shown once)."""
    from attnprof.server.auth import service as auth
    from attnprof.server.errors import ServiceError
    from attnprof.server.testbeds import service as testbeds

    lifetime = _duration("--expires-in", expires_in)
    with _session() as session:
        try:
            tb = testbeds.ensure(session, testbed)
            token, secret = auth.create_worker_token(
                session, testbed_id=tb.id, name=name, expires_in=lifetime, actor=_actor()
            )
            session.commit()
        except ServiceError as exc:
            _die(exc.detail)
        data = {"testbed": testbed, "token": secret, "token_id": token.id, **_token_data(token)}
        ends = _ends(token)
    _emit(as_json, data, f"worker token {token.id} for testbed {testbed}, {ends} (shown once): {secret}")


@admin_app.command("rotate-token")
def rotate_token(
    token_id: Annotated[int, typer.Argument(min=1, help="the token's id (create-token and list-tokens show it)")],
    grace: Annotated[
        str | None,
        typer.Option(help="the old token keeps working this long: 1h, 30m, 2d, 0s [it stops at once]"),
    ] = None,
    expires_in: Annotated[
        str | None,
        typer.Option("--expires-in", help="the new token's lifetime: 90d, 12h [the old one's; none if it had none]"),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Give a token (of a project, or a worker's) a new secret, printed once; the old one is revoked, at once or
    after --grace."""
    from attnprof.server.auth import service as auth
    from attnprof.server.errors import ServiceError

    wait = _duration("--grace", grace, zero=True)
    lifetime = _duration("--expires-in", expires_in)
    with _session() as session:
        try:
            new, secret, old = auth.rotate(
                session,
                project_id=None,
                token_id=token_id,
                grace=wait if wait is not None else auth.NO_GRACE,
                expires_in=lifetime,
                actor=_actor(),
            )
            session.commit()
        except ServiceError as exc:
            _die(exc.detail)
        data = {"token": secret, "token_id": new.id, **_token_data(new), "replaced": _token_data(old)}
        assert old.revoked_at is not None
        stops = f"works until {auth.when(old.revoked_at)}" if wait else "no longer works"
        text = f"token {new.id} replaces token {old.id}, {_ends(new)} (shown once): {secret}\ntoken {old.id} {stops}"
    _emit(as_json, data, text)


@admin_app.command("revoke-token")
def revoke_token(
    token_id: Annotated[int, typer.Argument(min=1, help="the token's id")],
    as_json: JsonOpt = False,
) -> None:
    """Revoke a token (of a project, or a worker's) now."""
    from attnprof.server.auth import service as auth
    from attnprof.server.errors import ServiceError

    with _session() as session:
        try:
            token = auth.revoke(session, project_id=None, token_id=token_id, actor=_actor())
            session.commit()
        except ServiceError as exc:
            _die(exc.detail)
        data = _token_data(token)
    _emit(as_json, data, f"token {token_id} revoked")


def _scope(session: Any, project: str | None, testbed: str | None) -> tuple[int | None, int | None]:
    """The ids of PROJECT or --testbed, exactly one of them given; exits 2 otherwise."""
    from attnprof.server.projects import repository as projects
    from attnprof.server.testbeds import repository as testbeds

    if (project is None) == (testbed is None):
        _die("name a PROJECT or a --testbed (a worker token's), one of the two")
    if project is not None:
        found = projects.get_by_name(session, project)
        if found is None:
            _die(f"no project {project!r}")
        return found.id if found else None, None
    assert testbed is not None
    bed = testbeds.id_by_name(session, testbed)
    if bed is None:
        _die(f"no testbed {testbed!r}")
    return None, bed


TestbedOpt = Annotated[str | None, typer.Option(help="a testbed, for its worker tokens (instead of PROJECT)")]


@admin_app.command("list-tokens")
def list_tokens(
    project: Annotated[str | None, typer.Argument(help="the project")] = None,
    testbed: TestbedOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List a project's tokens, or a testbed's worker tokens (never their secrets)."""
    from attnprof.server.auth import service as auth
    from attnprof.server.auth.service import when

    with _session() as session:
        project_id, testbed_id = _scope(session, project, testbed)
        found = auth.list_tokens(session, project_id=project_id, testbed_id=testbed_id)
        data = {"tokens": [_token_data(t) for t in found]}
        lines = [
            f"{t.id:>6}  {t.prefix}  {t.role:6}  {t.name or '-'}  "
            + (f"revoked {when(t.revoked_at)}" if t.revoked_at else _ends(t))
            for t in found
        ]
    _emit(as_json, data, "\n".join(lines) or "no tokens")


@admin_app.command("audit")
def audit_log(
    project: Annotated[str | None, typer.Argument(help="the project")] = None,
    testbed: TestbedOpt = None,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="events on the page")] = 50,
    cursor: Annotated[str | None, typer.Option(help="the page after this one (the `next` of a page)")] = None,
    as_json: JsonOpt = False,
) -> None:
    """The audit log of a project's tokens (or of a testbed's worker tokens), newest first: made, rotated, revoked,
    used from a new address."""
    from attnprof.server.audit import service as audit
    from attnprof.server.audit.schemas import AuditEventOut, AuditPage
    from attnprof.server.auth.service import when
    from attnprof.server.errors import ServiceError

    with _session() as session:
        project_id, testbed_id = _scope(session, project, testbed)
        try:
            rows, nxt = audit.page(session, project_id=project_id, testbed_id=testbed_id, cursor=cursor, limit=limit)
        except ServiceError as exc:
            _die(exc.detail)
        page = AuditPage(events=[AuditEventOut.of(r) for r in rows], next=nxt)
    lines = [
        f"{when(e.created_at)}  {e.kind:17}  {f'token {e.token_id} ({e.token_prefix})' if e.token_id else 'no token'}  "
        f"{e.address or '-'}  {e.detail}"
        for e in page.events
    ]
    if nxt:
        lines.append(f"more: --cursor {nxt}")
    _emit(as_json, page.model_dump(mode="json"), "\n".join(lines) or "no events")


@admin_app.command("sweep-artifacts")
def sweep_artifacts(as_json: JsonOpt = False) -> None:
    """Delete now the traces and bundles past their project's retention (the sweeper does it on every sweep), and
    print what was removed."""
    from attnprof.server.config import get_settings
    from attnprof.server.projects.retention import human_bytes
    from attnprof.server.retention import service as retention

    with _session() as session:
        report = retention.sweep(session, defaults=get_settings().retention)
        session.commit()
    data = {
        "projects": [
            {"project": p.name, "traces": p.traces, "bundles": p.bundles, "released_bytes": p.released_bytes}
            for p in report.projects
        ],
        "artifacts_deleted": report.artifacts_deleted,
        "bytes_freed": report.bytes_freed,
    }
    lines = [f"{p.name}: {p.traces} traces, {p.bundles} bundles removed" for p in report.projects]
    lines.append(f"{report.artifacts_deleted} artifacts deleted, {human_bytes(report.bytes_freed)} freed")
    _emit(as_json, data, "\n".join(lines))
