"""The whole schema: projects, tokens, testbeds, runs and their cases, kernels and samples, artifacts, jobs,
baselines, comparisons, alerts.

Revision ID: 0001
Revises: (none)
Create Date: 2026-11-29 22:10:17.522946
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

# JSONB on Postgres, JSON text on SQLite (as attnprof.server.db.JSONType).
JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:

    op.create_table(
        "artifacts",
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("size_bytes", sa.BigInteger(), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("sha256", name=op.f("pk_artifacts")),
    )
    op.create_table(
        "projects",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("default_branch", sa.String(length=255), server_default="main", nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_projects")),
        sa.UniqueConstraint("name", name=op.f("uq_projects_name")),
    )
    op.create_table(
        "testbeds",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("key", sa.String(length=64), nullable=True, comment="testbed key last seen in a run"),
        sa.Column(
            "meaning",
            JSON,
            nullable=True,
            comment="what the key hashes, in words",
        ),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_testbeds")),
        sa.UniqueConstraint("name", name=op.f("uq_testbeds_name")),
    )
    op.create_index(op.f("ix_testbeds_key"), "testbeds", ["key"], unique=False)
    op.create_table(
        "jobs",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("project_id", sa.Integer(), nullable=False),
        sa.Column("testbed_id", sa.Integer(), nullable=False),
        sa.Column("idempotency_key", sa.String(length=200), nullable=True),
        sa.Column("spec", sa.Text(), nullable=False, comment="the suite TOML as submitted"),
        sa.Column("suite_name", sa.String(length=200), nullable=False),
        sa.Column("bundle_sha256", sa.String(length=64), nullable=True),
        sa.Column("repo", sa.String(length=200), nullable=True),
        sa.Column("branch", sa.String(length=255), nullable=False),
        sa.Column("commit", sa.String(length=64), nullable=False),
        sa.Column("base_commit", sa.String(length=64), nullable=True),
        sa.Column("ancestors", JSON, nullable=False),
        sa.Column("pr", sa.Integer(), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("verdict", sa.String(length=8), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True, comment="why it failed, in words a person can act on"),
        sa.Column("attempts", sa.Integer(), nullable=False, comment="claims so far"),
        sa.Column("max_attempts", sa.Integer(), nullable=False),
        sa.Column("claimed_by", sa.String(length=200), nullable=True),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("run_id", sa.String(length=36), nullable=True, comment="the run its result became"),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(["bundle_sha256"], ["artifacts.sha256"], name=op.f("fk_jobs_bundle_sha256_artifacts")),
        sa.ForeignKeyConstraint(
            ["project_id"], ["projects.id"], name=op.f("fk_jobs_project_id_projects"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(["testbed_id"], ["testbeds.id"], name=op.f("fk_jobs_testbed_id_testbeds")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_jobs")),
        sa.UniqueConstraint("project_id", "idempotency_key", name=op.f("uq_jobs_project_id_idempotency_key")),
    )
    op.create_index("ix_jobs_listing", "jobs", ["project_id", "created_at"], unique=False)
    op.create_index("ix_jobs_status", "jobs", ["status", "testbed_id"], unique=False)
    op.create_table(
        "tokens",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("secret_sha256", sa.String(length=64), nullable=False),
        sa.Column(
            "prefix",
            sa.String(length=16),
            nullable=False,
            comment="first characters of the secret, to tell tokens apart",
        ),
        sa.Column("name", sa.String(length=200), nullable=True),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("project_id", sa.Integer(), nullable=True),
        sa.Column("testbed_id", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(
            "(role = 'worker' AND testbed_id IS NOT NULL AND project_id IS NULL)"
            " OR (role IN ('admin', 'submit', 'read') AND project_id IS NOT NULL AND testbed_id IS NULL)",
            name=op.f("ck_tokens_scope"),
        ),
        sa.ForeignKeyConstraint(
            ["project_id"], ["projects.id"], name=op.f("fk_tokens_project_id_projects"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["testbed_id"], ["testbeds.id"], name=op.f("fk_tokens_testbed_id_testbeds"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tokens")),
        sa.UniqueConstraint("secret_sha256", name=op.f("uq_tokens_secret_sha256")),
    )
    op.create_index(op.f("ix_tokens_project_id"), "tokens", ["project_id"], unique=False)
    op.create_table(
        "runs",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("project_id", sa.Integer(), nullable=False),
        sa.Column("testbed_id", sa.Integer(), nullable=False),
        sa.Column("testbed_key", sa.String(length=64), nullable=False),
        sa.Column(
            "document_run_id", sa.String(length=100), nullable=False, comment="run.id inside the result document"
        ),
        sa.Column("branch", sa.String(length=255), nullable=False),
        sa.Column("commit", sa.String(length=64), nullable=False),
        sa.Column("repo", sa.String(length=200), nullable=True),
        sa.Column("pr", sa.Integer(), nullable=True),
        sa.Column("base_commit", sa.String(length=64), nullable=True),
        sa.Column("ancestors", JSON, nullable=False, comment="first-parent ancestors of base_commit"),
        sa.Column("mode", sa.String(length=8), nullable=False),
        sa.Column("suspect", sa.Boolean(), nullable=False),
        sa.Column("job_id", sa.String(length=36), nullable=True),
        sa.Column("attempt", sa.Integer(), nullable=True, comment="the job attempt that produced it"),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("document", JSON, nullable=False),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], name=op.f("fk_runs_job_id_jobs"), ondelete="SET NULL"),
        sa.ForeignKeyConstraint(
            ["project_id"], ["projects.id"], name=op.f("fk_runs_project_id_projects"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(["testbed_id"], ["testbeds.id"], name=op.f("fk_runs_testbed_id_testbeds")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_runs")),
        sa.UniqueConstraint("project_id", "document_run_id", name=op.f("uq_runs_project_id_document_run_id")),
    )
    op.create_index("ix_runs_baseline", "runs", ["project_id", "testbed_key", "commit", "created_at"], unique=False)
    op.create_index("ix_runs_history", "runs", ["project_id", "testbed_id", "branch", "created_at"], unique=False)
    op.create_index(op.f("ix_runs_job_id"), "runs", ["job_id"], unique=False)
    op.create_table(
        "alerts",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("project_id", sa.Integer(), nullable=False),
        sa.Column("testbed_id", sa.Integer(), nullable=False),
        sa.Column("case_id", sa.String(length=500), nullable=False),
        sa.Column("metric", sa.String(length=16), nullable=False),
        sa.Column("run_id", sa.String(length=36), nullable=False),
        sa.Column("before", sa.Float(), nullable=False, comment="mean before the change, in the metric's unit"),
        sa.Column("after", sa.Float(), nullable=False),
        sa.Column("change", sa.Float(), nullable=True, comment="after / before - 1"),
        sa.Column("p", sa.Float(), nullable=False),
        sa.Column("regression", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["project_id"], ["projects.id"], name=op.f("fk_alerts_project_id_projects"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name=op.f("fk_alerts_run_id_runs"), ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["testbed_id"], ["testbeds.id"], name=op.f("fk_alerts_testbed_id_testbeds")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_alerts")),
        sa.UniqueConstraint(
            "project_id",
            "testbed_id",
            "case_id",
            "metric",
            "run_id",
            name=op.f("uq_alerts_project_id_testbed_id_case_id_metric_run_id"),
        ),
    )
    op.create_index("ix_alerts_project", "alerts", ["project_id", "created_at"], unique=False)
    op.create_table(
        "baseline_rules",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("project_id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=8), nullable=False),
        sa.Column("run_id", sa.String(length=36), nullable=False),
        sa.Column("testbed_key", sa.String(length=64), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["project_id"], ["projects.id"], name=op.f("fk_baseline_rules_project_id_projects"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name=op.f("fk_baseline_rules_run_id_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_baseline_rules")),
    )
    op.create_index(op.f("ix_baseline_rules_project_id"), "baseline_rules", ["project_id"], unique=False)
    op.create_index(op.f("ix_baseline_rules_run_id"), "baseline_rules", ["run_id"], unique=False)
    op.create_table(
        "comparisons",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("project_id", sa.Integer(), nullable=False),
        sa.Column("candidate_run_id", sa.String(length=36), nullable=False),
        sa.Column(
            "baseline_run_ids",
            JSON,
            nullable=False,
        ),
        sa.Column("verdict", sa.String(length=8), nullable=False),
        sa.Column("noise_floor", sa.Float(), nullable=True),
        sa.Column("document", JSON, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["candidate_run_id"], ["runs.id"], name=op.f("fk_comparisons_candidate_run_id_runs"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["project_id"], ["projects.id"], name=op.f("fk_comparisons_project_id_projects"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_comparisons")),
    )
    op.create_index(op.f("ix_comparisons_candidate_run_id"), "comparisons", ["candidate_run_id"], unique=False)
    op.create_table(
        "run_cases",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("run_id", sa.String(length=36), nullable=False),
        sa.Column("project_id", sa.Integer(), nullable=False),
        sa.Column("testbed_id", sa.Integer(), nullable=False),
        sa.Column("branch", sa.String(length=255), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("case_id", sa.String(length=500), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("backend_used", sa.String(length=32), nullable=True),
        sa.Column("latency_median_us", sa.Float(), nullable=True),
        sa.Column("latency_p25_us", sa.Float(), nullable=True),
        sa.Column("latency_p75_us", sa.Float(), nullable=True),
        sa.Column("latency_min_us", sa.Float(), nullable=True),
        sa.Column("latency_max_us", sa.Float(), nullable=True),
        sa.Column("latency_cv", sa.Float(), nullable=True),
        sa.Column("tflops", sa.Float(), nullable=True),
        sa.Column("gbps", sa.Float(), nullable=True),
        sa.Column("compute_util", sa.Float(), nullable=True),
        sa.Column("bandwidth_util", sa.Float(), nullable=True),
        sa.Column("bound", sa.String(length=16), nullable=True),
        sa.Column("samples_count", sa.Integer(), nullable=False),
        sa.Column("trace", sa.String(length=500), nullable=True, comment="trace file name in the document"),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name=op.f("fk_run_cases_run_id_runs"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_run_cases")),
        sa.UniqueConstraint("run_id", "case_id", name=op.f("uq_run_cases_run_id_case_id")),
    )
    op.create_index(
        "ix_run_cases_trend", "run_cases", ["project_id", "testbed_id", "branch", "case_id", "created_at"], unique=False
    )
    op.create_table(
        "run_traces",
        sa.Column("run_id", sa.String(length=36), nullable=False),
        sa.Column("name", sa.String(length=500), nullable=False),
        sa.Column("artifact_sha256", sa.String(length=64), nullable=False),
        sa.ForeignKeyConstraint(
            ["artifact_sha256"], ["artifacts.sha256"], name=op.f("fk_run_traces_artifact_sha256_artifacts")
        ),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name=op.f("fk_run_traces_run_id_runs"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("run_id", "name", name=op.f("pk_run_traces")),
    )
    op.create_table(
        "run_kernels",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("run_case_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("key", sa.String(length=500), nullable=False),
        sa.Column("phase", sa.String(length=32), nullable=False),
        sa.Column("duration_median_us", sa.Float(), nullable=False),
        sa.Column("duration_p25_us", sa.Float(), nullable=False),
        sa.Column("duration_p75_us", sa.Float(), nullable=False),
        sa.Column("launches_per_iter", sa.Float(), nullable=False),
        sa.Column("tflops", sa.Float(), nullable=True),
        sa.Column("gbps", sa.Float(), nullable=True),
        sa.Column("compute_util", sa.Float(), nullable=True),
        sa.Column("bandwidth_util", sa.Float(), nullable=True),
        sa.Column("theoretical_occupancy", sa.Float(), nullable=True),
        sa.Column("bound", sa.String(length=16), nullable=True),
        sa.ForeignKeyConstraint(
            ["run_case_id"], ["run_cases.id"], name=op.f("fk_run_kernels_run_case_id_run_cases"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_run_kernels")),
    )
    op.create_index("ix_run_kernels_case_key", "run_kernels", ["run_case_id", "key"], unique=False)
    op.create_table(
        "samples",
        sa.Column("run_case_id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("index", sa.Integer(), nullable=False),
        sa.Column("value_us", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_case_id"], ["run_cases.id"], name=op.f("fk_samples_run_case_id_run_cases"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("run_case_id", "index", name=op.f("pk_samples")),
    )


def downgrade() -> None:

    op.drop_table("samples")
    op.drop_index("ix_run_kernels_case_key", table_name="run_kernels")
    op.drop_table("run_kernels")
    op.drop_table("run_traces")
    op.drop_index("ix_run_cases_trend", table_name="run_cases")
    op.drop_table("run_cases")
    op.drop_index(op.f("ix_comparisons_candidate_run_id"), table_name="comparisons")
    op.drop_table("comparisons")
    op.drop_index(op.f("ix_baseline_rules_run_id"), table_name="baseline_rules")
    op.drop_index(op.f("ix_baseline_rules_project_id"), table_name="baseline_rules")
    op.drop_table("baseline_rules")
    op.drop_index("ix_alerts_project", table_name="alerts")
    op.drop_table("alerts")
    op.drop_index(op.f("ix_runs_job_id"), table_name="runs")
    op.drop_index("ix_runs_history", table_name="runs")
    op.drop_index("ix_runs_baseline", table_name="runs")
    op.drop_table("runs")
    op.drop_index(op.f("ix_tokens_project_id"), table_name="tokens")
    op.drop_table("tokens")
    op.drop_index("ix_jobs_status", table_name="jobs")
    op.drop_index("ix_jobs_listing", table_name="jobs")
    op.drop_table("jobs")
    op.drop_index(op.f("ix_testbeds_key"), table_name="testbeds")
    op.drop_table("testbeds")
    op.drop_table("projects")
    op.drop_table("artifacts")
