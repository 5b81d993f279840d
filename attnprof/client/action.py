"""The script of the composite action ``.github/actions/attnprof``: profile, get the verdict, summarise, decide.

Run as ``attnprof action`` (the installed console script, which never puts the user's workspace on the import
path) on a GitHub runner. It reads the action's inputs from ``ATTNPROF_*`` variables and the commit, branch, base
commit and pull request from ``GITHUB_*`` and the event JSON. Two modes (``ATTNPROF_MODE``):

- ``submit`` (the default; the client install, no torch, no server packages): ``attnprof submit --wait --json``
  sends the suite to the service, whose GPU workers profile it; the job's comment is read back from the service.
  With ``paired: true`` (``ATTNPROF_PAIRED``) it adds ``--paired``: the ``source`` folder is sent at the merge base
  too (the pull request's base commit, or the push's previous tip), which needs the checkout's history.
- ``local`` (a self-hosted runner with a GPU and ``attnprof[profile]``): ``attnprof profile`` runs the suite on
  the runner, then ``attnprof upload --json`` stores the result with the same provenance; the service answers
  with the verdict, the comparison and its summary, rendered as the PR comment shows it.

Both write the summary to ``$GITHUB_STEP_SUMMARY``, the outputs (``job-id`` or ``run-id``, ``verdict``,
``report-url``: the dashboard's page of the job, or of the upload's comparison) to ``$GITHUB_OUTPUT``, and exit
per ``fail-on``: ``fail`` (exit as ``attnprof submit`` does: 0 pass or warn, 1 fail, 2 bad input, 3 no verdict),
``warn`` (a failing verdict or no verdict is a warning; bad input still fails), ``never`` (always 0). The token
travels in the environment (``ATTNPROF_TOKEN``), never in a command line. Without a token, a pull request from a
fork or from Dependabot (GitHub gives neither the repository's secrets) is skipped with a notice and exit 0;
anywhere else a missing token is bad input.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer
from pydantic import ValidationError

from attnprof.client.cli import SubmitOutput
from attnprof.contract.links import Links
from attnprof.contract.provenance import Provenance, refusal
from attnprof.contract.public_api import ResultUploadAnswer

EXIT_PASS, EXIT_FAIL, EXIT_BAD_INPUT, EXIT_NO_VERDICT = 0, 1, 2, 3
_ZERO_SHA = "0" * 40


def _event(env: Mapping[str, str]) -> dict[str, Any]:
    """The event's JSON payload (``$GITHUB_EVENT_PATH``); empty outside GitHub."""
    path = env.get("GITHUB_EVENT_PATH")
    if path and os.path.isfile(path):
        with open(path, encoding="utf-8") as f:
            event = json.load(f)
        return event if isinstance(event, dict) else {}
    return {}


def provenance(env: Mapping[str, str]) -> Provenance | None:
    """What GitHub says about the commit under test, for ``push`` and ``pull_request`` events; None when it names
    no commit or no branch (not a GitHub run: ``attnprof submit`` asks git). A value that breaks the contract's
    rules (the service's) is a ``ValidationError`` naming the field."""
    event = _event(env)
    name = env.get("GITHUB_EVENT_NAME", "")
    repo = env.get("GITHUB_REPOSITORY") or None
    pull = event.get("pull_request")
    if name.startswith("pull_request") and isinstance(pull, dict):
        head, base = pull.get("head") or {}, pull.get("base") or {}
        branch = head.get("ref") or env.get("GITHUB_HEAD_REF") or None
        commit = head.get("sha") or env.get("GITHUB_SHA") or None
        base_commit = base.get("sha") or None
        pr = int(pull["number"]) if pull.get("number") else None
    else:
        before = event.get("before")
        branch = env.get("GITHUB_REF_NAME") or None
        commit = event.get("after") or env.get("GITHUB_SHA") or None
        base_commit = before if before and before != _ZERO_SHA else None
        pr = None
    if not branch or not commit:
        return None
    return Provenance(branch=branch, commit=commit, repo=repo, base_commit=base_commit, pr=pr)


def secrets_withheld(env: Mapping[str, str]) -> str | None:
    """Why GitHub gave this run no secrets, or None when it would have: a ``pull_request`` event from a fork (its
    head repository is not the base's) or opened by Dependabot gets neither the repository's secrets nor its
    token, so an empty ``token`` there is GitHub's rule, not a mistake."""
    name = env.get("GITHUB_EVENT_NAME", "")
    if not name.startswith("pull_request") or name == "pull_request_target":
        return None
    pull = _event(env).get("pull_request")
    if not isinstance(pull, dict):
        return None
    head = pull.get("head") or {}
    # GitHub's own test: the head repository is not this one (``fork`` says only that a repository is a fork of
    # some other, which the base may be too). A fork deleted since has no head repository.
    head_name = (head.get("repo") or {}).get("full_name")
    base_name = ((pull.get("base") or {}).get("repo") or {}).get("full_name") or env.get("GITHUB_REPOSITORY")
    if ("repo" in head and head["repo"] is None) or (head_name and base_name and head_name != base_name):
        return f"a pull request from the fork {head_name or '(since deleted)'} gets no secrets"
    if env.get("GITHUB_ACTOR") == "dependabot[bot]":
        return "a pull request by Dependabot gets only Dependabot's secrets"
    return None


def cli_path(env: Mapping[str, str]) -> str:
    """The ``attnprof`` to run: ``ATTNPROF_CLI``, else the console script beside this interpreter (the action's
    virtual environment, whatever ``PATH`` says), else ``attnprof`` on ``PATH``."""
    if env.get("ATTNPROF_CLI"):
        return env["ATTNPROF_CLI"]
    beside = Path(sys.executable).with_name("attnprof.exe" if os.name == "nt" else "attnprof")
    return str(beside) if beside.is_file() else "attnprof"


def _provenance_options(prov: Provenance | None) -> list[str]:
    """The options of ``attnprof submit`` and ``attnprof upload`` that carry ``prov`` (none without it)."""
    if prov is None:
        return []
    argv = ["--branch", prov.branch, "--commit", prov.commit]
    for flag, value in (("--repo", prov.repo), ("--base-commit", prov.base_commit), ("--pr", prov.pr)):
        if value:
            argv += [flag, str(value)]
    return argv


def submit_argv(env: Mapping[str, str], prov: Provenance | None) -> list[str]:
    """``attnprof submit`` of the suite, with GitHub's provenance when it gave one."""
    argv = [cli_path(env), "submit", env["ATTNPROF_SUITE"], "--wait", "--json"]
    minutes = float(env.get("ATTNPROF_TIMEOUT_MINUTES") or 60)
    argv += ["--timeout", str(max(1.0, minutes * 60))]
    for flag, value in (("--testbed", env.get("ATTNPROF_TESTBED")), ("--source", env.get("ATTNPROF_SOURCE"))):
        if value:
            argv += [flag, value]
    if paired(env):
        argv.append("--paired")
    return argv + _provenance_options(prov)


def paired(env: Mapping[str, str]) -> bool:
    """The ``paired`` input (``ATTNPROF_PAIRED``): ``true`` or ``false`` (empty: false); ``main`` refuses others."""
    return (env.get("ATTNPROF_PAIRED") or "false").strip().lower() == "true"


def upload_argv(env: Mapping[str, str], prov: Provenance, result: Path) -> list[str]:
    """``attnprof upload`` of the local mode's result, with the traces written beside it."""
    argv = [cli_path(env), "upload", str(result), "--json", "--trace-dir", str(result.parent)]
    if testbed := env.get("ATTNPROF_TESTBED"):
        argv += ["--testbed", testbed]
    return argv + _provenance_options(prov)


def profile_argv(env: Mapping[str, str], result: Path) -> list[str]:
    """``attnprof profile`` of the local mode; ``ATTNPROF_PROFILE_ARGS`` adds options (``--device cpu``, ...)."""
    extra = shlex.split(env.get("ATTNPROF_PROFILE_ARGS") or "")
    return [
        cli_path(env),
        "profile",
        env["ATTNPROF_SUITE"],
        "--out",
        str(result),
        "--quiet",
        *extra,
    ]


def decide(fail_on: str, code: int) -> tuple[int, str | None]:
    """The step's exit code for ``attnprof submit``'s ``code``, and a warning annotation if one is due."""
    if code == EXIT_PASS:
        return 0, None
    why = {EXIT_FAIL: "the verdict is fail", EXIT_NO_VERDICT: "no verdict"}.get(code, "bad input")
    if fail_on == "never" or (fail_on == "warn" and code in (EXIT_FAIL, EXIT_NO_VERDICT)):
        return 0, f"attnprof: {why} (fail-on: {fail_on})"
    return code, None


@dataclass(frozen=True)
class Outcome:
    """What one mode found: the exit code by ``attnprof submit``'s rules, the line that says why, the outputs,
    and the summary's markdown (None: the reason alone)."""

    code: int
    reason: str
    job_id: str = ""
    run_id: str = ""
    verdict: str = ""
    report_url: str = ""
    summary: str | None = None


def _get(url: str, token: str) -> str | None:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return str(response.read().decode())
    except OSError:
        return None


def _without_marker(markdown: str | None) -> str | None:
    lines = (markdown or "").splitlines()
    return "\n".join(lines[1:]) if lines and lines[0].startswith("<!--") else None


def _timeout_s(env: Mapping[str, str]) -> float:
    return max(1.0, float(env.get("ATTNPROF_TIMEOUT_MINUTES") or 60) * 60)


def _run(argv: list[str], env: Mapping[str, str], timeout_s: float | None = None) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, capture_output=True, text=True, env=dict(env), check=False, timeout=timeout_s)
    sys.stderr.write(done.stderr)
    return done


def submit_mode(env: Mapping[str, str], prov: Provenance | None) -> Outcome:
    if not env.get("ATTNPROF_TESTBED"):
        return Outcome(EXIT_BAD_INPUT, "testbed: required in submit mode (the testbed the service profiles on)")
    if paired(env) and not env.get("ATTNPROF_SOURCE"):
        return Outcome(
            EXIT_BAD_INPUT, "paired: needs source, the folder profiled as it is and as it was at the merge base"
        )
    done = _run(submit_argv(env, prov), env)
    try:
        answer = SubmitOutput.model_validate_json(done.stdout)
    except ValidationError:  # no JSON, or not what attnprof submit prints
        print(done.stdout)
        answer = SubmitOutput(exit=done.returncode or EXIT_BAD_INPUT, reason="attnprof submit printed no JSON")
    job = answer.job
    job_id = job.id if job is not None else ""
    server, token = env.get("ATTNPROF_SERVER", ""), env.get("ATTNPROF_TOKEN", "")
    markdown = _get(Links(server).api_job_comment(job_id), token) if job_id else None
    return Outcome(
        code=answer.exit,
        reason=answer.reason,
        job_id=job_id,
        run_id=(job.run_id or "") if job is not None else "",
        verdict=(job.verdict or "") if job is not None else "",
        report_url=answer.dashboard_url,
        summary=_without_marker(markdown),
    )


def local_mode(env: Mapping[str, str], prov: Provenance | None) -> Outcome:
    if prov is None:
        return Outcome(EXIT_BAD_INPUT, "the branch and commit are unknown: GITHUB_REF_NAME and GITHUB_SHA are unset")
    out = Path(env.get("ATTNPROF_OUT_DIR") or Path(env.get("RUNNER_TEMP") or ".") / "attnprof")
    out.mkdir(parents=True, exist_ok=True)
    result = out / "attnprof-result.json"
    result.unlink(missing_ok=True)
    try:
        profiled = _run(profile_argv(env, result), env, _timeout_s(env))
    except subprocess.TimeoutExpired:
        return Outcome(
            EXIT_NO_VERDICT, f"no verdict: attnprof profile ran past timeout-minutes ({_timeout_s(env):.0f} s)"
        )
    if profiled.returncode == EXIT_BAD_INPUT:
        return Outcome(EXIT_BAD_INPUT, f"attnprof profile refused the suite: {profiled.stderr.strip()[-500:]}")
    if not result.is_file():
        return Outcome(EXIT_NO_VERDICT, f"no verdict: attnprof profile wrote no result (exit {profiled.returncode})")
    # A case that failed (exit 1) is in the document: the comparison decides what it means.
    uploaded = _run(upload_argv(env, prov, result), env)
    try:
        answer = ResultUploadAnswer.model_validate_json(uploaded.stdout)
    except ValidationError:  # no JSON (the upload failed), or not the service's answer
        print(uploaded.stdout)
        return Outcome(
            EXIT_BAD_INPUT, f"attnprof upload failed (exit {uploaded.returncode}): {uploaded.stderr.strip()[-500:]}"
        )
    return Outcome(
        code=EXIT_FAIL if answer.verdict == "fail" else EXIT_PASS,
        reason=f"verdict: {answer.verdict}",
        run_id=answer.run_id,
        verdict=answer.verdict,
        report_url=answer.dashboard_url,
        summary=answer.summary or None,
    )


def _append(path: str | None, text: str) -> None:
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(text)


def _outputs(env: Mapping[str, str], outcome: Outcome) -> None:
    _append(
        env.get("GITHUB_OUTPUT"),
        f"job-id={outcome.job_id}\nrun-id={outcome.run_id}\nverdict={outcome.verdict}\n"
        f"report-url={outcome.report_url}\n",
    )


def _skip(env: Mapping[str, str], reason: str) -> int:
    """A run GitHub gave no secrets: empty outputs, the reason in the summary and as a notice, exit 0."""
    _outputs(env, Outcome(EXIT_PASS, reason))
    _append(env.get("GITHUB_STEP_SUMMARY"), f"## attnprof\n\n{reason}\n\n")
    print(f"::notice title=attnprof::{reason}")
    return 0


def main(env: Mapping[str, str] | None = None) -> int:
    env = os.environ if env is None else env
    fail_on = env.get("ATTNPROF_FAIL_ON", "fail")
    if fail_on not in ("fail", "warn", "never"):
        print(f"::error::fail-on must be fail, warn or never, not {fail_on!r}")
        return EXIT_BAD_INPUT
    mode = env.get("ATTNPROF_MODE") or "submit"
    if mode not in ("submit", "local"):
        print(f"::error::mode must be submit or local, not {mode!r}")
        return EXIT_BAD_INPUT
    given = (env.get("ATTNPROF_PAIRED") or "false").strip().lower()
    if given not in ("true", "false"):
        print(f"::error::paired must be true or false, not {env.get('ATTNPROF_PAIRED')!r}")
        return EXIT_BAD_INPUT
    if given == "true" and mode == "local":
        # The service's GPU workers interleave the two trees; attnprof profile on a runner profiles one.
        print("::error::paired: only in submit mode (the service's GPU workers profile both trees)")
        return EXIT_BAD_INPUT
    try:
        prov = provenance(env)
    except ValidationError as exc:
        outcome = Outcome(EXIT_BAD_INPUT, f"GitHub's provenance of the commit is refused: {refusal(exc)}")
    else:
        if not env.get("ATTNPROF_TOKEN"):
            if withheld := secrets_withheld(env):
                return _skip(env, f"skipped: {withheld} (token is empty); nothing was profiled")
            outcome = Outcome(EXIT_BAD_INPUT, "token: empty; pass a submit token of the project from a secret")
        else:
            outcome = submit_mode(env, prov) if mode == "submit" else local_mode(env, prov)
    _outputs(env, outcome)
    summary = outcome.summary if outcome.summary is not None else f"## attnprof\n\n{outcome.reason}\n"
    _append(env.get("GITHUB_STEP_SUMMARY"), summary + "\n")
    label = f"job {outcome.job_id or '(none)'}" if mode == "submit" else f"run {outcome.run_id or '(none)'}"
    print(f"attnprof: {label}: {outcome.reason}")
    code, warning = decide(fail_on, outcome.code)
    if warning:
        print(f"::warning::{warning}")
    elif code != 0:
        print(f"::error::attnprof: {outcome.reason}")
    return code


app = typer.Typer(add_completion=False, help="The GitHub Action's step.")


@app.callback()
def _verbs() -> None:
    """The GitHub Action's step."""


@app.command("action")
def action() -> None:
    """Run the step of the action .github/actions/attnprof: its inputs come from ATTNPROF_* variables (MODE, SERVER,
    TOKEN, SUITE, TESTBED, SOURCE, PAIRED, PROFILE_ARGS, FAIL_ON, TIMEOUT_MINUTES), the commit from GITHUB_* and the
    event; it writes the outputs and the job summary and exits per fail-on."""
    raise typer.Exit(main())


if __name__ == "__main__":
    sys.exit(main())
