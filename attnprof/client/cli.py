"""``attnprof submit``: queue a profiling job from CI, optionally wait for its verdict.

A client verb: it imports typer, rich, httpx and the torch-free document models, never FastAPI, SQLAlchemy
or torch. Exit codes: 0 pass or warn, 1 fail, 2 bad input (or a submission the service refused with a 4xx), 3 no
verdict (the job failed, timed out or was cancelled, the wait ran out, or the service stayed unreachable), each
with the reason. Without ``--wait`` it exits 0 once the job is queued.

``--timeout`` is the command's time budget: while the service cannot be reached or answers 5xx or 429 (a restart,
a database outage), every request is retried with backoff within it, the submission under one Idempotency-Key.
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from pydantic import BaseModel, ValidationError

from attnprof.contract.ids import JobId
from attnprof.contract.public_api import ComparisonFinding, JobAnswer, JobComparisonAnswer, JobCreatedAnswer

if TYPE_CHECKING:
    from attnprof.contract.provenance import Provenance

app = typer.Typer(add_completion=False, no_args_is_help=True, help="attnprof client verbs.")

EXIT_PASS, EXIT_FAIL, EXIT_BAD_INPUT, EXIT_NO_VERDICT = 0, 1, 2, 3
JOB_REASONS = {"failed": "the job failed", "timed_out": "the job timed out", "cancelled": "the job was cancelled"}


class SubmitOutput(BaseModel):
    """What ``attnprof submit --wait --json`` prints (the GitHub Action's step reads it): the job as the service last
    answered it, its comparison, the exit code and the line that says why, the job's dashboard page."""

    job: JobAnswer | None = None
    comparison: JobComparisonAnswer | None = None
    exit: int = EXIT_BAD_INPUT
    reason: str = ""
    dashboard_url: str = ""
    matrix: list[MatrixOutcome] = []


class MatrixOutcome(BaseModel):
    """One testbed's job of a submission that named several: its exit and why (``SubmitOutput.matrix``)."""

    testbed: str
    job: str
    exit: int
    reason: str


@app.callback()
def _verbs() -> None:
    """attnprof client verbs."""


def _die(message: str, code: int = EXIT_BAD_INPUT) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code)


def checked_provenance(**fields: Any) -> Provenance:
    """Where the code came from, checked by the contract's rules (the service's) before anything is sent: a value
    that breaks one is bad input (exit 2), with the field named."""
    from pydantic import ValidationError

    from attnprof.contract.provenance import Provenance, refusal

    try:
        return Provenance(**fields)
    except ValidationError as exc:
        raise _die(refusal(exc)) from None


def exit_code(job: JobAnswer | None, final: bool) -> tuple[int, str]:
    """The exit code for the last state seen and the line that says why."""
    if job is None:
        return EXIT_NO_VERDICT, "no verdict: the service did not answer"
    if not final:
        return EXIT_NO_VERDICT, f"no verdict: the wait ran out while the job was {job.status}"
    if job.status == "done":
        return (EXIT_FAIL if job.verdict == "fail" else EXIT_PASS), f"verdict: {job.verdict}"
    what = JOB_REASONS.get(job.status, f"the job is {job.status}")
    return EXIT_NO_VERDICT, f"no verdict: {what}: {job.reason or 'no reason recorded'}"


def _finding_change(finding: ComparisonFinding) -> str:
    """`` +6.6% (3,428 µs -> 3,654 µs)`` for a finding of the upload's answer, or nothing where it has no change."""
    from attnprof.core.units import fmt_change, fmt_in_unit

    if finding.change is None:
        return ""
    text = f" {fmt_change(finding.change, ascii=True)}"
    base, cand, unit = finding.baseline, finding.candidate, finding.unit
    if isinstance(base, float) and isinstance(cand, float) and unit != "rel_l2_err":
        text += f" ({fmt_in_unit(base, unit, ascii=True)} -> {fmt_in_unit(cand, unit, ascii=True)})"
    return text


def _render(comparison: JobComparisonAnswer) -> str:
    from attnprof.core.analysis.render import render_table
    from attnprof.core.documents.comparison import ComparisonDocument

    try:
        return render_table(ComparisonDocument.model_validate(comparison.document))
    except Exception as exc:  # an older or newer document: show the verdict rather than nothing
        return f"verdict: {comparison.verdict} (comparison not shown: {exc})"


@app.command()
def submit(
    suite: Annotated[Path, typer.Argument(help="suite file (TOML)")],
    server: Annotated[str | None, typer.Option(envvar="ATTNPROF_SERVER", help="service URL")] = None,
    token: Annotated[str | None, typer.Option(envvar="ATTNPROF_TOKEN", help="submit token", show_envvar=True)] = None,
    source: Annotated[Path | None, typer.Option(help="directory to bundle (the code custom targets import)")] = None,
    testbed: Annotated[
        str | None,
        typer.Option(
            envvar="ATTNPROF_TESTBED",
            help="testbed to run on; several, comma-separated (h100,h200), make one job per testbed (default: the "
            "suite's [suite] testbeds)",
        ),
    ] = None,
    project: Annotated[
        str | None, typer.Option(envvar="ATTNPROF_PROJECT", help="project (default: the token's)")
    ] = None,
    repo: Annotated[str | None, typer.Option(help="owner/name (default: GITHUB_REPOSITORY or git's origin)")] = None,
    branch: Annotated[str | None, typer.Option(help="branch (default: GitHub Actions' or git's)")] = None,
    commit: Annotated[str | None, typer.Option(help="commit (default: git HEAD)")] = None,
    base_commit: Annotated[str | None, typer.Option(help="merge base with the default branch (default: git)")] = None,
    default_branch: Annotated[str, typer.Option(help="the branch the base commit is found on")] = "main",
    pr: Annotated[int | None, typer.Option(help="pull request number")] = None,
    suite_path: Annotated[
        str | None,
        typer.Option(
            help="the suite file's path relative to the repository's root, which the job's page prints to reproduce "
            "it (default: from git, GITHUB_WORKSPACE or --source)"
        ),
    ] = None,
    paired: Annotated[
        bool,
        typer.Option(
            "--paired",
            help="also send --source as it was at the merge base (git archive of that commit): the service profiles "
            "both trees interleaved on one GPU and compares them pair by pair; needs the history (not a shallow clone)",
        ),
    ] = False,
    wait: Annotated[bool, typer.Option("--wait", help="wait for the verdict and exit by it")] = False,
    timeout: Annotated[
        float,
        typer.Option(
            min=1,
            help="time budget in seconds: retries while the service is unreachable and, with --wait, the wait",
        ),
    ] = 3600.0,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """Submit SUITE as a job; with --wait, exit 0 pass/warn, 1 fail, 2 bad input, 3 no verdict (or no service)."""
    import time

    import httpx
    from rich.console import Console

    from attnprof.client import base_tree as client_base_tree
    from attnprof.client import http as client
    from attnprof.client import source as client_source
    from attnprof.contract.links import Links

    console = Console(stderr=True, highlight=False)
    deadline = time.monotonic() + timeout  # from the start: the bundle and git count too
    if not server or not token:
        raise _die("--server and --token (or ATTNPROF_SERVER and ATTNPROF_TOKEN) are needed")
    try:
        spec = suite.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise _die(f"{suite}: cannot read the suite file: {exc}") from None
    beds = [t.strip() for t in testbed.split(",") if t.strip()] if testbed else _suite_testbeds(spec)
    if not beds:
        raise _die(
            "--testbed (or ATTNPROF_TESTBED, or the suite's [suite] testbeds) is needed: the GPU pool the job runs on"
        )
    testbed = ", ".join(beds)
    if paired and source is None:
        # Without --source no code is sent for the head either: both sides would run the same code.
        raise _die("--paired needs --source: the folder sent as it is (the head) and as it was at the merge base")
    root = source if source is not None else suite.parent
    git = client_source.git_info(root, default_branch=default_branch, base_commit=base_commit)
    branch = branch or git.branch
    commit = commit or git.commit
    if not branch or not commit:
        raise _die("--branch and --commit are needed (the source is not a git checkout git can read them from)")
    sent_base = git.base_commit
    if paired and source is not None:
        try:  # the full sha: the base tree's commit, which the paired job carries as its base_commit
            sent_base = client_base_tree.check_base(source, git.base_commit, default_branch=default_branch)
        except client_source.SourceError as exc:
            raise _die(str(exc)) from None
    provenance = checked_provenance(
        branch=branch,
        commit=commit,
        repo=repo or git.repo,
        base_commit=sent_base,
        ancestors=tuple(git.ancestors),
        pr=pr,
    )
    sent_path = _suite_path(console, suite, source, suite_path, quiet=as_json)
    bundle = None
    if source is not None:
        try:
            built = client_source.build_bundle(source)
        except client_source.SourceError as exc:
            raise _die(str(exc)) from None
        bundle = built.data
        if not as_json:
            note = f", {len(built.skipped_links)} link(s) left out" if built.skipped_links else ""
            console.print(f"bundle: {built.files} file(s), {len(built.data) / 1024:.0f} KiB{note}")
    base_bundle = None
    if paired and source is not None and sent_base is not None:
        try:
            built_base = client_base_tree.build_base_bundle(source, sent_base)
        except client_source.SourceError as exc:
            raise _die(str(exc)) from None
        base_bundle = built_base.data
        if not as_json:
            note = f", {len(built_base.skipped_links)} link(s) left out" if built_base.skipped_links else ""
            size_kib = len(built_base.data) / 1024
            console.print(f"base bundle ({sent_base[:12]}): {built_base.files} file(s), {size_kib:.0f} KiB{note}")
    try:
        with client.connect(server, token) as http:
            project = project or client.token_project(http, deadline=deadline)
            created = client.submit_job(
                http,
                project=project,
                spec=spec,
                testbed=beds[0] if len(beds) == 1 else None,
                testbeds=beds if len(beds) > 1 else (),
                provenance=provenance,
                bundle=bundle,
                base_bundle=base_bundle,
                idempotency_key=str(uuid.uuid4()),
                deadline=deadline,
                suite_path=sent_path,
            )
            job_id = created.id
            page = Links(server).ui_job(project, job_id)  # for people: the dashboard's page of the job
            if not wait:
                lines = [f"job {j.id} {j.status} on testbed {j.testbed}" for j in created.jobs] or [
                    f"job {job_id} {created.status} on testbed {testbed}"
                ]
                text = "\n".join(lines) + f"\n  dashboard: {page}"
                _done(as_json, {"job": _passed_on(created), "dashboard_url": page}, text)
                raise typer.Exit(EXIT_PASS)
            if len(created.jobs) > 1:  # a matrix: each testbed's job waited for in turn, the exit by the worst
                raise typer.Exit(_wait_matrix(console, http, created, deadline, quiet=as_json, page=page))
            job, final = _wait(console, http, job_id, deadline, quiet=as_json)
            comparison = None
            if job is not None and job.status == "done":
                # The verdict is known and decides the exit: its comparison gets up to 30 s of retries past the
                # budget, and is left out rather than the verdict if the service is gone by then.
                try:
                    comparison = client.get_comparison(http, job_id, deadline=max(deadline, time.monotonic() + 30))
                except client.Unreachable as exc:
                    console.print(f"comparison not shown: {exc}")
    except client.Unreachable as exc:
        raise _die(str(exc), EXIT_NO_VERDICT) from None
    except client.UploadError as exc:
        raise _die(str(exc)) from None
    except httpx.HTTPError as exc:
        raise _die(f"cannot reach {server}: {type(exc).__name__}: {exc}") from None
    code, line = exit_code(job, final)
    if as_json:
        output = SubmitOutput(job=job, comparison=comparison, exit=code, reason=line, dashboard_url=page)
        typer.echo(json.dumps(_passed_on(output), indent=2, default=str))
    else:
        if comparison is not None:
            typer.echo(_render(comparison))
        typer.echo(f"job {job_id}: {line}\n  dashboard: {page}")
    sys.stdout.flush()
    raise typer.Exit(code)


def _suite_testbeds(spec: str) -> list[str]:
    """The suite's ``[suite] testbeds`` (none when it names none or does not parse: the service says what is
    wrong)."""
    import tomllib

    try:
        found = tomllib.loads(spec).get("suite", {}).get("testbeds")
    except (tomllib.TOMLDecodeError, AttributeError):
        return []
    return [str(t) for t in found] if isinstance(found, list) else []


_WORST_EXIT = (EXIT_FAIL, EXIT_NO_VERDICT, EXIT_PASS)


def _wait_matrix(console: Any, http: Any, created: JobCreatedAnswer, deadline: float, *, quiet: bool, page: str) -> int:
    """Wait for each job of a matrix; print each testbed's line; the worst exit (a fail, then no verdict)."""
    outcomes: list[MatrixOutcome] = []
    last: dict[int, JobAnswer | None] = {}
    for member in created.jobs:
        job, final = _wait(console, http, member.id, deadline, quiet=quiet)
        code, line = exit_code(job, final)
        outcomes.append(MatrixOutcome(testbed=member.testbed, job=member.id, exit=code, reason=line))
        last.setdefault(code, job)
    worst = next(c for c in _WORST_EXIT if c in last)
    reason = "; ".join(f"{o.testbed}: {o.reason}" for o in outcomes)
    if quiet:  # the worst testbed's job stands for the matrix (its comment gathers them all)
        output = SubmitOutput(job=last[worst], exit=worst, reason=reason, dashboard_url=page, matrix=outcomes)
        typer.echo(json.dumps(_passed_on(output), indent=2, default=str))
    else:
        for o in outcomes:
            typer.echo(f"job {o.job} on {o.testbed}: {o.reason}")
        typer.echo(f"  dashboard: {page}")
    return worst


def _suite_path(console: Any, suite: Path, source: Path | None, given: str | None, *, quiet: bool) -> str | None:
    """The suite's path in its repository that the job carries: ``given`` (``--suite-path``, exit 2 when it breaks
    the contract's rule), else the one found from git, the runner's workspace or ``source`` (left out, with a
    note, when it breaks the rule; an older service ignores it either way)."""
    from attnprof.client import source as client_source
    from attnprof.contract.suite_path import SuitePathError, check_suite_path

    if given is not None:
        try:
            return check_suite_path(given)
        except SuitePathError as exc:
            raise _die(f"--suite-path: {exc}") from None
    found = client_source.suite_path(suite, source)
    if found is None:
        return None
    try:
        return check_suite_path(found)
    except SuitePathError as exc:
        if not quiet:
            console.print(f"the suite's path is not sent ({exc})")
        return None


def _passed_on(answer: BaseModel) -> dict[str, Any]:
    """An answer as the service sent it (the fields the client does not read too), for ``--json``."""
    return answer.model_dump(mode="json", exclude_unset=True)


def _done(as_json: bool, data: dict[str, Any], text: str) -> None:
    typer.echo(json.dumps(data, indent=2, default=str) if as_json else text)


def _wait(console: Any, http: Any, job_id: JobId, deadline: float, *, quiet: bool) -> tuple[JobAnswer | None, bool]:
    from attnprof.client import http as client

    # Why a queued job does not start (no live worker serves its testbed): said once, not on every poll. With
    # --json, on stderr, beside the JSON on stdout.
    noticed = False

    def notice(job: JobAnswer | None) -> str | None:
        nonlocal noticed
        if noticed or job is None or not job.notice:
            return None
        noticed = True
        return f"job {job_id}: {job.notice}"

    if quiet:

        def say(job: JobAnswer | None, _elapsed_s: float) -> None:
            if (line := notice(job)) is not None:
                typer.echo(line, err=True)

        return client.wait_job(http, job_id, deadline=deadline, on_poll=say)
    with console.status(f"job {job_id}: submitted") as status:

        def show(job: JobAnswer | None, elapsed_s: float) -> None:
            if (line := notice(job)) is not None:
                console.print(line, soft_wrap=True)
            state = "the service does not answer" if job is None else f"{job.status} (attempt {job.attempts})"
            status.update(f"job {job_id}: {state}, {elapsed_s:.0f} s")

        return client.wait_job(http, job_id, deadline=deadline, on_poll=show)


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
    timeout: Annotated[
        float, typer.Option(min=1, help="seconds to keep retrying while the service is unreachable (5xx, 429)")
    ] = 600.0,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """Upload a result document; exit 0 on pass or warn, 1 on fail, 2 on bad input or a refused upload, 3 when the
    service stayed unreachable for the whole --timeout (no verdict). An upload retried after a lost answer counts
    once: the service answers it with the stored run."""
    from attnprof.client.http import Unreachable, UploadError, upload_result

    server = server or os.environ.get("ATTNPROF_SERVER")
    token = token or os.environ.get("ATTNPROF_TOKEN")
    project = project or os.environ.get("ATTNPROF_PROJECT")
    if not server or not token:
        raise _die("--server and --token (or ATTNPROF_SERVER and ATTNPROF_TOKEN) are needed")
    provenance = checked_provenance(
        branch=branch,
        commit=commit,
        repo=repo,
        base_commit=base_commit,
        ancestors=tuple(a.strip() for a in (ancestors or "").split(",") if a.strip()),
        pr=pr,
    )
    try:
        answer = upload_result(
            result,
            server=server,
            token=token,
            project=project,
            provenance=provenance,
            testbed=testbed,
            trace_dir=trace_dir,
            budget_s=timeout,
        )
    except Unreachable as exc:
        raise _die(str(exc), EXIT_NO_VERDICT) from None
    except UploadError as exc:
        raise _die(str(exc)) from None
    verdict = answer.verdict
    if as_json:
        typer.echo(json.dumps(_passed_on(answer), indent=2))
    else:
        lines = [f"verdict: {verdict}  run {answer.run_id}  {answer.dashboard_url}"]
        try:
            findings = answer.findings()
        except ValidationError as exc:  # an older or newer document: the verdict rather than nothing
            findings = []
            lines.append(f"  (findings not shown: {exc.error_count()} field(s) not as this client reads them)")
        for f in findings:
            if f.verdict in ("fail", "warn"):
                lines.append(f"  {f.verdict:4} {f.case} {f.metric}{_finding_change(f)}: {f.detail or f.status}")
        typer.echo("\n".join(lines))
    sys.stdout.flush()
    raise typer.Exit(EXIT_FAIL if verdict == "fail" else EXIT_PASS)
