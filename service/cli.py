"""The service's verbs: ``serve``, ``db``, ``admin`` (server side) and ``upload`` (client side).

Only typer and the standard library are imported at module level: ``attnprof upload`` loads httpx and
nothing of FastAPI or SQLAlchemy; the server verbs import them when they run.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

app = typer.Typer(add_completion=False, no_args_is_help=True, help="attnprof service verbs.")
db_app = typer.Typer(no_args_is_help=True, help="The database schema (Alembic migrations shipped in the package).")
admin_app = typer.Typer(no_args_is_help=True, help="Projects and tokens, straight in the database.")
app.add_typer(db_app, name="db")
app.add_typer(admin_app, name="admin")

JsonOpt = Annotated[bool, typer.Option("--json", help="print JSON")]
EXIT_PASS, EXIT_FAIL, EXIT_BAD_INPUT = 0, 1, 2


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
            help="server processes (uvicorn workers on one port); each keeps its own rate-limit buckets and "
            "/metrics counters, so a token's effective limit is the per-process limit times the processes",
        ),
    ] = 1,
) -> None:
    """Run the HTTP API (settings from ATTNPROF_* environment variables).

    One process serves requests on one core at a time (the GIL); ``--workers`` runs several, as many as the
    cores the API may use. What each process keeps in memory (rate limits, metrics) is its own.
    """
    import uvicorn

    if workers > 1:
        uvicorn.run("service.asgi:app", host=host, port=port, workers=workers, log_level="warning")
    else:
        from service.app import create_app

        uvicorn.run(create_app(), host=host, port=port, log_level="warning")


@db_app.command("upgrade")
def db_upgrade(revision: Annotated[str, typer.Option(help="target revision")] = "head") -> None:
    """Migrate the database of ATTNPROF_DATABASE_URL to ``revision``."""
    from service import migrate
    from service.config import get_settings

    migrate.upgrade(get_settings().database_url, revision)
    typer.echo(f"database at {revision}")


@db_app.command("downgrade")
def db_downgrade(revision: Annotated[str, typer.Option(help="target revision")] = "base") -> None:
    """Migrate down to ``revision`` (``base``: drop the whole schema)."""
    from service import migrate
    from service.config import get_settings

    migrate.downgrade(get_settings().database_url, revision)
    typer.echo(f"database at {revision}")


def _session() -> Any:
    from service.config import get_settings
    from service.db import make_engine, make_sessionmaker

    return make_sessionmaker(make_engine(get_settings().database_url))()


@admin_app.command("create-project")
def create_project(
    name: str,
    default_branch: Annotated[str, typer.Option(help="the branch whose runs are the history")] = "main",
    as_json: JsonOpt = False,
) -> None:
    """Create a project and print it with an admin token (shown once)."""
    from service.auth import service as auth
    from service.errors import ServiceError
    from service.projects import service as projects

    with _session() as session:
        try:
            project = projects.create(session, name=name, default_branch=default_branch)
            token, secret = auth.create_project_token(session, project_id=project.id, role="admin", name="created")
            session.commit()
        except ServiceError as exc:
            _die(exc.detail)
        data = {
            "project": {"id": project.id, "name": project.name, "default_branch": project.default_branch},
            "token": secret,
            "role": "admin",
            "token_id": token.id,
        }
    _emit(as_json, data, f"project {name} created\nadmin token (shown once): {secret}")


@admin_app.command("create-token")
def create_token(
    project: str,
    role: Annotated[str, typer.Option(help="admin, submit or read")],
    name: Annotated[str | None, typer.Option(help="a label")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Create a project token of a role and print it (shown once)."""
    from service.auth import service as auth
    from service.errors import ServiceError
    from service.projects import repository as projects

    with _session() as session:
        found = projects.get_by_name(session, project)
        if found is None:
            _die(f"no project {project!r}")
        assert found is not None
        try:
            token, secret = auth.create_project_token(session, project_id=found.id, role=role, name=name)
            session.commit()
        except ServiceError as exc:
            _die(exc.detail)
        data = {"project": project, "role": role, "token": secret, "token_id": token.id}
    _emit(as_json, data, f"{role} token for {project} (shown once): {secret}")


@admin_app.command("create-worker-token")
def create_worker_token(
    testbed: Annotated[str, typer.Option(help="the testbed the worker serves (created if new)")],
    name: Annotated[str | None, typer.Option(help="a label")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Create a global worker token bound to a testbed and print it (shown once)."""
    from service.auth import service as auth
    from service.errors import ServiceError
    from service.testbeds import service as testbeds

    with _session() as session:
        try:
            tb = testbeds.ensure(session, testbed)
            token, secret = auth.create_worker_token(session, testbed_id=tb.id, name=name)
            session.commit()
        except ServiceError as exc:
            _die(exc.detail)
        data = {"testbed": testbed, "role": "worker", "token": secret, "token_id": token.id}
    _emit(as_json, data, f"worker token for testbed {testbed} (shown once): {secret}")


@app.command()
def upload(
    result: Annotated[Path, typer.Argument(help="result document (JSON, optionally gzip)")],
    branch: Annotated[str, typer.Option(help="branch the code is on")],
    commit: Annotated[str, typer.Option(help="commit that was profiled")],
    server: Annotated[str | None, typer.Option(help="service URL [env ATTNPROF_SERVER]")] = None,
    token: Annotated[str | None, typer.Option(help="submit token [env ATTNPROF_TOKEN]")] = None,
    project: Annotated[str | None, typer.Option(help="project [default: the token's]")] = None,
    repo: Annotated[str | None, typer.Option(help="owner/name")] = None,
    base_commit: Annotated[str | None, typer.Option(help="merge base with the default branch")] = None,
    ancestors: Annotated[str | None, typer.Option(help="first-parent ancestors of the base, comma-separated")] = None,
    pr: Annotated[int | None, typer.Option(help="pull request number")] = None,
    testbed: Annotated[str | None, typer.Option(help="testbed name")] = None,
    trace_dir: Annotated[Path | None, typer.Option(help="directory holding the run's trace files")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Upload a result document; exit 0 on pass or warn, 1 on fail, 2 on bad input or a refused upload."""
    from service.client import UploadError, upload_result

    server = server or os.environ.get("ATTNPROF_SERVER")
    token = token or os.environ.get("ATTNPROF_TOKEN")
    project = project or os.environ.get("ATTNPROF_PROJECT")
    if not server or not token:
        _die("--server and --token (or ATTNPROF_SERVER and ATTNPROF_TOKEN) are needed")
    assert server and token
    try:
        answer = upload_result(
            result,
            server=server,
            token=token,
            project=project,
            branch=branch,
            commit=commit,
            repo=repo,
            base_commit=base_commit,
            ancestors=[a for a in (ancestors or "").split(",") if a],
            pr=pr,
            testbed=testbed,
            trace_dir=trace_dir,
        )
    except UploadError as exc:
        _die(str(exc))
    verdict = answer["verdict"]
    if as_json:
        typer.echo(json.dumps(answer, indent=2))
    else:
        lines = [f"verdict: {verdict}  run {answer['run_id']}  {answer.get('url', '')}"]
        for f in answer.get("comparison", {}).get("findings", []):
            if f.get("verdict") in ("fail", "warn"):
                change = f.get("change")
                pct = f" {change:+.1%}" if isinstance(change, float) else ""
                lines.append(f"  {f['verdict']:4} {f['case']} {f['metric']}{pct}: {f.get('detail') or f['status']}")
        typer.echo("\n".join(lines))
    sys.stdout.flush()
    raise typer.Exit(EXIT_FAIL if verdict == "fail" else EXIT_PASS)
