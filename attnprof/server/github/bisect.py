"""The sweep's part for bisections (docs/bisection.md): start one for each new regression step, advance every open
one through GitHub (``GitHubSource``), each in a transaction of its own with its row locked, dispatch the probe jobs
made once committed, and post the comment owed on a confirmed culprit's pull request.

The comment is one per bisection, posted once: the row says it is owed (``comment_due_at``), a delivery claims it
by clearing that in a short transaction, posts with no transaction open, and on failure owes it again (after a
backoff, at most ``COMMENT_ATTEMPTS`` times). The repository is checked against the project's allowed ones right
before it posts, as every delivery is.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from attnprof.core import units
from attnprof.core.documents.comparison import ComparisonDocument
from attnprof.server.bisections import service as bisections
from attnprof.server.bisections.models import Bisection, BisectionProbe
from attnprof.server.config import Settings
from attnprof.server.db import utcnow
from attnprof.server.github.client import GitHubClient, GitHubError
from attnprof.server.github.markdown import code
from attnprof.server.github.service import delivery_client
from attnprof.server.github.source import GitHubSource
from attnprof.server.jobs import dispatch
from attnprof.server.jobs import service as jobs
from attnprof.server.jobs.models import Job
from attnprof.server.projects import service as project_service

log = logging.getLogger(__name__)

Sessions = Callable[[], Session]
COMMENT_ATTEMPTS = 5
KERNEL_LINES = 8
"""Kernel lines a culprit's comment shows, the largest moves first."""


def sweep(sessions: Sessions, settings: Settings) -> dict[str, int]:
    """Start, advance and notify (see the module's docstring); never raises. Returns what it did, in counts."""
    counts = {"bisections_started": 0, "bisections_advanced": 0, "bisection_probes": 0, "bisection_comments": 0}
    cfg = settings.bisect
    with delivery_client(settings) as client:
        source = GitHubSource(client, Path(cfg.workdir), max_bytes=settings.limits.bundle_bytes)
        with sessions() as session:
            try:
                if cfg.alerts and settings.github_token is not None:
                    started = bisections.start_for_alerts(
                        session, max_age=timedelta(days=cfg.alert_max_age_days), limit=cfg.per_sweep
                    )
                    counts["bisections_started"] = len(started)
                ids = bisections.open_bisections(session, limit=cfg.per_sweep)
                session.commit()
            except Exception:
                session.rollback()
                log.exception("bisections: starting them failed; the next sweep tries again")
                return counts
        for bisection_id in ids:
            with sessions() as session:
                try:
                    b = bisections.lock(session, bisection_id)
                    if b is None:  # another sweep holds it
                        continue
                    job = bisections.advance(session, b, source=source, settings=settings)
                    session.commit()
                except Exception:
                    session.rollback()
                    log.exception("bisection %s: advancing it failed; the next sweep tries again", bisection_id)
                    continue
                counts["bisections_advanced"] += 1
                if job is not None:
                    counts["bisection_probes"] += 1
                    dispatch.after_commit(session, settings, [job.testbed_id])
        counts["bisection_comments"] = deliver_comments(sessions, settings, client)
    return counts


def comment_body(session: Session, b: Bisection) -> str:
    """The culprit's comment: what it slowed, by how much, against its parent, and the kernel lines that moved."""
    probe = session.scalars(
        select(BisectionProbe)
        .where(BisectionProbe.bisection_id == b.id, BisectionProbe.candidate == b.culprit)
        .order_by(BisectionProbe.id.desc())
    ).first()
    culprit = b.culprit or ""
    lines = [f"### attnprof: `{culprit[:12]}` made a step on the default branch", ""]
    if probe is not None and probe.effect is not None:
        interval = (
            f" (95% interval {units.fmt_change(probe.low)} to {units.fmt_change(probe.high)})"
            if probe.low is not None and probe.high is not None
            else ""
        )
        lines.append(
            f"A bisection found this commit, from this pull request, made {', '.join(code(c, 120) for c in b.cases)} "
            f"**{units.fmt_change(probe.effect)}** slower{interval}, measured paired against its parent "
            f"`{probe.good[:12]}` on one GPU of the same testbed."
        )
    job = session.get(Job, probe.job_id) if probe is not None and probe.job_id else None
    moves: list[tuple[float, str]] = []
    if job is not None:
        try:
            doc = ComparisonDocument.model_validate(jobs.comparison(session, job, mode="paired").document)
        except Exception:  # the comparison is gone with its run: the comment goes without the kernel lines
            doc = None
        for f in doc.findings if doc else []:
            if f.case not in b.cases or f.metric != "latency":
                continue
            for k in f.kernels:
                if k.delta_us is None:
                    continue
                change = units.fmt_change(k.change) if k.change is not None else "new" if k.appeared else ""
                before, after = units.fmt_duration_us(k.baseline_us), units.fmt_duration_us(k.candidate_us)
                cells = f"| {code(f.case, 80, table=True)} | {code(k.name or k.key, 90, table=True)}"
                moves.append((abs(k.delta_us), f"{cells} | {before} | {after} | {change} |"))
    if moves:
        lines += ["", "| case | kernel | parent | this commit | change |", "|---|---|---:|---:|---:|"]
        lines += [row for _, row in sorted(moves, key=lambda m: -m[0])[:KERNEL_LINES]]
    lines += ["", f"Bisection {b.id}: {b.summary or ''}"]
    return "\n".join(lines)


def deliver_comments(sessions: Sessions, settings: Settings, client: GitHubClient) -> int:
    """Post each culprit comment owed now (see the module's docstring); returns how many were posted."""
    posted = 0
    with sessions() as session:
        owed = list(
            session.scalars(
                select(Bisection.id)
                .where(Bisection.comment_due_at.is_not(None), Bisection.comment_due_at <= utcnow())
                .limit(20)
            )
        )
        session.commit()
    for bisection_id in owed:
        with sessions() as session:
            b = session.scalars(
                select(Bisection).where(Bisection.id == bisection_id).with_for_update(skip_locked=True)
            ).first()
            if b is None or b.comment_due_at is None or b.culprit_pr is None:
                session.rollback()
                continue
            b.comment_due_at = None  # claimed: a second sweep finds nothing owed
            b.comment_attempts += 1
            allowed = project_service.may_report(session, project_id=b.project_id, repo=b.repo)
            body = comment_body(session, b) if allowed else ""
            repo, pr, attempts = b.repo, b.culprit_pr, b.comment_attempts
            if not allowed:
                b.comment_note = f"{repo} is not among the project's repositories: not posted"
            session.commit()
        if not allowed:
            continue
        try:
            client.request("POST", f"/repos/{repo}/issues/{pr}/comments", json={"body": body})
        except GitHubError as exc:
            with sessions() as session:
                b = session.get(Bisection, bisection_id)
                if b is not None:
                    b.comment_note = f"GitHub answered {exc.status}: {exc}"[:500]
                    if attempts < COMMENT_ATTEMPTS:
                        b.comment_due_at = utcnow() + timedelta(seconds=30 * 2**attempts)
                session.commit()
            continue
        posted += 1
    return posted
