"""The GitHub repositories each project may report to.

- ``project_repositories``: one row per project and repository (``owner/name``, lower case) that the project's jobs
  and uploads may name. The service posts commit statuses and the pull-request comment with its own GitHub token,
  so which repository a project reaches is the service admin's to say (``attnprof admin allow-repo``), never the
  submitter's: a job or upload naming another repository is refused at submission, and a delivery is refused right
  before it posts. Indexed by repository for the webhook, which maps a repository to the projects allowed for it.
  Deleted with its project.

Existing projects start with none. The repositories past jobs and uploads named are not carried over: a project
that named a repository which is not its own would keep reaching it. ``attnprof admin list-repos PROJECT`` shows
what each project named before, for the admin to allow. Until then, feedback a job still owes to such a repository
is refused and noted on the job (an admin token's resend sends it once allowed).

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-05 10:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "project_repositories",
        sa.Column("project_id", sa.Integer(), nullable=False),
        sa.Column(
            "repo",
            sa.String(length=200),
            nullable=False,
            comment="owner/name in lower case (GitHub's names ignore case)",
        ),
        sa.Column(
            "added_by", sa.String(length=200), nullable=False, comment="who allowed it (the admin command's user)"
        ),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["project_id"],
            ["projects.id"],
            name=op.f("fk_project_repositories_project_id_projects"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("project_id", "repo", name=op.f("pk_project_repositories")),
    )
    op.create_index(op.f("ix_project_repositories_repo"), "project_repositories", ["repo"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_project_repositories_repo"), table_name="project_repositories")
    op.drop_table("project_repositories")
