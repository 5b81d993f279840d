"""The repositories a project may report to: kept in ``project_repositories`` (migration 0013, which starts every
existing project with none), set by the admin command only, checked ignoring case."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from sqlalchemy import inspect, text
from sqlalchemy.orm import Session

from attnprof.contract.provenance import Provenance
from attnprof.server import migrate
from attnprof.server.config import Limits
from attnprof.server.db import make_engine, make_sessionmaker
from attnprof.server.errors import InvalidPayload
from attnprof.server.jobs import service as jobs
from attnprof.server.projects import service as projects
from attnprof.server.projects.service import RepoNotAllowed
from tests.pgtest import create_database, drop_database
from tests.server.documents import SPEC
from tests.server.stack import REDIS_URL

ATTNPROF = [str(Path(sys.executable).parent / "attnprof")]


def test_allowed_repositories_ignore_case_and_a_refusal_names_the_field_and_the_way_in(db: Session) -> None:
    project = projects.create(db, name=f"rp-{uuid.uuid4().hex[:8]}")
    other = projects.create(db, name=f"rp-{uuid.uuid4().hex[:8]}")
    assert projects.allow_repository(db, project_id=project.id, repo="Acme/Kernels", added_by="t")
    assert not projects.allow_repository(db, project_id=project.id, repo="acme/KERNELS", added_by="t"), "once"
    assert projects.may_report(db, project_id=project.id, repo="ACME/kernels")
    assert not projects.may_report(db, project_id=other.id, repo="acme/kernels")
    assert not projects.may_report(db, project_id=project.id, repo="acme/kernels/../x"), "no repository's name"
    assert projects.projects_of_repository(db, "ACME/Kernels") == {project.id}
    projects.check_may_report(db, project_id=project.id, repo=None)  # a job naming no repository: always
    with pytest.raises(RepoNotAllowed) as refused:
        projects.check_may_report(db, project_id=other.id, repo="acme/kernels")
    assert refused.value.status == 403 and refused.value.error == "repo_not_allowed"
    detail = refused.value.detail
    assert detail.startswith("repo: ") and "it may report to no repository yet" in detail
    assert f"attnprof admin allow-repo {other.name} acme/kernels" in detail
    with pytest.raises(InvalidPayload, match="owner/name"):
        projects.allow_repository(db, project_id=project.id, repo="not a repo", added_by="t")
    assert projects.disallow_repository(db, project_id=project.id, repo="ACME/kernels")
    assert not projects.may_report(db, project_id=project.id, repo="acme/kernels")


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_migration_0013_starts_existing_projects_with_no_repository_and_its_downgrade_drops_the_table(
    tmp_path, backend
) -> None:
    name, url = create_database() if backend == "postgresql" else ("", f"sqlite:///{tmp_path / 'repos.db'}")
    engine = make_engine(url)
    try:
        migrate.upgrade(url, "0012")
        with engine.begin() as conn:
            conn.execute(
                text("INSERT INTO projects (name, default_branch, created_at) VALUES ('old', 'main', :t)"),
                {"t": "2026-12-01 00:00:00"},
            )
        migrate.upgrade(url, "0013")
        inspected = inspect(engine)
        assert {c["name"] for c in inspected.get_columns("project_repositories")} == {
            "project_id",
            "repo",
            "added_by",
            "created_at",
        }
        assert "ix_project_repositories_repo" in {i["name"] for i in inspected.get_indexes("project_repositories")}
        with engine.connect() as conn:
            assert conn.execute(text("SELECT COUNT(*) FROM project_repositories")).scalar_one() == 0
        migrate.downgrade(url, "0012")
        assert "project_repositories" not in inspect(engine).get_table_names()
    finally:
        engine.dispose()
        if name:
            drop_database(name)


def _run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*ATTNPROF, *args], env=env, capture_output=True, text=True, timeout=120)


def test_the_admin_commands_allow_list_and_take_away_a_projects_repositories() -> None:
    name, url = create_database()
    env = {**os.environ, "ATTNPROF_DATABASE_URL": url, "ATTNPROF_BROKER_URL": REDIS_URL}
    engine = make_engine(url)
    try:
        assert _run(env, "db", "upgrade").returncode == 0
        made = _run(env, "admin", "create-project", "kernels", "--repo", "Acme/Kernels", "--json")
        assert made.returncode == 0, made.stderr
        assert json.loads(made.stdout)["project"]["repositories"] == ["acme/kernels"]
        added = _run(env, "admin", "allow-repo", "kernels", "acme/decode")
        assert added.returncode == 0 and added.stdout.strip() == "kernels may now report to acme/decode"
        again = _run(env, "admin", "allow-repo", "kernels", "ACME/decode", "--json")
        assert json.loads(again.stdout)["added"] is False
        # a job stored without the check (a service with no GitHub token) named a repository never allowed
        with make_sessionmaker(engine)() as session:
            project = json.loads(made.stdout)["project"]["id"]
            jobs.create(
                session,
                project_id=project,
                new=jobs.NewJob(
                    spec=SPEC, testbed="tb", provenance=Provenance(branch="b", commit="c1", repo="Old/Place")
                ),
                limits=Limits(),
                max_attempts=1,
                github_feedback=False,
            )
            session.commit()
        listed = json.loads(_run(env, "admin", "list-repos", "kernels", "--json").stdout)
        assert listed["repositories"] == ["acme/decode", "acme/kernels"]
        assert listed["named_not_allowed"] == [{"repo": "old/place", "named": 1}]
        shown = _run(env, "admin", "list-repos", "kernels").stdout
        assert "attnprof admin allow-repo kernels old/place" in shown
        removed = _run(env, "admin", "disallow-repo", "kernels", "acme/decode")
        assert removed.returncode == 0 and "may no longer report to acme/decode" in removed.stdout
        listed = json.loads(_run(env, "admin", "list-repos", "kernels", "--json").stdout)
        assert listed["repositories"] == ["acme/kernels"]
        bad = _run(env, "admin", "allow-repo", "kernels", "acme/kernels; rm -rf /")
        assert bad.returncode == 2 and "owner/name" in bad.stderr
        nobody = _run(env, "admin", "allow-repo", "nobody", "acme/kernels")
        assert nobody.returncode == 2 and "no project 'nobody'" in nobody.stderr
    finally:
        engine.dispose()
        drop_database(name)
