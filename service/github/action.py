"""The script of the composite action ``.github/actions/attnprof``: submit, wait, summarise, decide.

Run as ``python -m service.github.action`` on a GitHub runner (the client install, no server packages). It
reads the action's inputs from ``ATTNPROF_*`` variables and the commit, branch, base commit and pull request
from ``GITHUB_*`` and the event JSON, runs ``attnprof submit --wait --json``, writes the job's comment to
``$GITHUB_STEP_SUMMARY`` and the outputs to ``$GITHUB_OUTPUT``, and exits per ``fail-on``:
``fail`` (exit as ``attnprof submit`` does), ``warn`` (a failing verdict or no verdict is a warning; bad input
still fails), ``never`` (always 0).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

EXIT_PASS, EXIT_FAIL, EXIT_BAD_INPUT, EXIT_NO_VERDICT = 0, 1, 2, 3
_ZERO_SHA = "0" * 40


@dataclass(frozen=True)
class Provenance:
    repo: str | None
    branch: str | None
    commit: str | None
    base_commit: str | None
    pr: int | None


def provenance(env: Mapping[str, str]) -> Provenance:
    """What GitHub says about the commit under test, for ``push`` and ``pull_request`` events."""
    event: dict[str, Any] = {}
    path = env.get("GITHUB_EVENT_PATH")
    if path and os.path.isfile(path):
        with open(path, encoding="utf-8") as f:
            event = json.load(f)
    name = env.get("GITHUB_EVENT_NAME", "")
    repo = env.get("GITHUB_REPOSITORY") or None
    pull = event.get("pull_request")
    if name.startswith("pull_request") and isinstance(pull, dict):
        head, base = pull.get("head") or {}, pull.get("base") or {}
        return Provenance(
            repo=repo,
            branch=head.get("ref") or env.get("GITHUB_HEAD_REF") or None,
            commit=head.get("sha") or env.get("GITHUB_SHA") or None,
            base_commit=base.get("sha") or None,
            pr=int(pull["number"]) if pull.get("number") else None,
        )
    before = event.get("before")
    return Provenance(
        repo=repo,
        branch=env.get("GITHUB_REF_NAME") or None,
        commit=event.get("after") or env.get("GITHUB_SHA") or None,
        base_commit=before if before and before != _ZERO_SHA else None,
        pr=None,
    )


def submit_argv(env: Mapping[str, str], prov: Provenance) -> list[str]:
    argv = [env.get("ATTNPROF_CLI", "attnprof"), "submit", env["ATTNPROF_SUITE"], "--wait", "--json"]
    minutes = float(env.get("ATTNPROF_TIMEOUT_MINUTES") or 60)
    argv += ["--timeout", str(max(1.0, minutes * 60))]
    for flag, value in (
        ("--testbed", env.get("ATTNPROF_TESTBED")),
        ("--source", env.get("ATTNPROF_SOURCE")),
        ("--repo", prov.repo),
        ("--branch", prov.branch),
        ("--commit", prov.commit),
        ("--base-commit", prov.base_commit),
        ("--pr", str(prov.pr) if prov.pr else None),
    ):
        if value:
            argv += [flag, value]
    return argv


def decide(fail_on: str, code: int) -> tuple[int, str | None]:
    """The step's exit code for ``attnprof submit``'s ``code``, and a warning annotation if one is due."""
    if code == EXIT_PASS:
        return 0, None
    why = {EXIT_FAIL: "the verdict is fail", EXIT_NO_VERDICT: "no verdict"}.get(code, "bad input")
    if fail_on == "never" or (fail_on == "warn" and code in (EXIT_FAIL, EXIT_NO_VERDICT)):
        return 0, f"attnprof: {why} (fail-on: {fail_on})"
    return code, None


def _comment(server: str, token: str, job_id: str) -> str | None:
    request = urllib.request.Request(
        f"{server.rstrip('/')}/api/v1/jobs/{job_id}/comment", headers={"Authorization": f"Bearer {token}"}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return str(response.read().decode())
    except OSError:
        return None


def _append(path: str | None, text: str) -> None:
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(text)


def main(env: Mapping[str, str] | None = None) -> int:
    env = os.environ if env is None else env
    fail_on = env.get("ATTNPROF_FAIL_ON", "fail")
    if fail_on not in ("fail", "warn", "never"):
        print(f"::error::fail-on must be fail, warn or never, not {fail_on!r}")
        return EXIT_BAD_INPUT
    argv = submit_argv(env, provenance(env))
    done = subprocess.run(argv, capture_output=True, text=True, env=dict(env), check=False)
    sys.stderr.write(done.stderr)
    try:
        answer: dict[str, Any] = json.loads(done.stdout)
    except ValueError:
        print(done.stdout)
        answer = {"exit": done.returncode or EXIT_BAD_INPUT, "reason": "attnprof submit printed no JSON"}
    job = answer.get("job") or {}
    job_id = str(job.get("id") or "")
    server = env.get("ATTNPROF_SERVER", "")
    report_url = f"{server.rstrip('/')}/api/v1/jobs/{job_id}/comment" if job_id else ""
    verdict = str(job.get("verdict") or "")
    _append(env.get("GITHUB_OUTPUT"), f"job-id={job_id}\nverdict={verdict}\nreport-url={report_url}\n")
    reason = str(answer.get("reason") or "")
    markdown = _comment(server, env.get("ATTNPROF_TOKEN", ""), job_id) if job_id else None
    lines = (markdown or "").splitlines()
    summary = "\n".join(lines[1:]) if lines and lines[0].startswith("<!--") else f"## attnprof\n\n{reason}\n"
    _append(env.get("GITHUB_STEP_SUMMARY"), summary + "\n")
    print(f"attnprof: job {job_id or '(none)'}: {reason}")
    code, warning = decide(fail_on, int(answer.get("exit", EXIT_BAD_INPUT)))
    if warning:
        print(f"::warning::{warning}")
    return code


if __name__ == "__main__":
    sys.exit(main())
