"""The action's script, with a GitHub-like environment, against ``attnprof serve`` on a migrated Postgres;
the test plays the profile worker, then runs the analysis task's plain code. The workflow files parse."""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from attnprof.client.action import decide, main, provenance, secrets_withheld, submit_argv
from tests.client.actionstack import ACTION_REPO, BIN, CASE, REDIS, ROOT, SPEC, Served, play_worker, serve
from tests.server import documents as docs
from tests.server.stack import make_settings

REPO = ACTION_REPO


def test_workflow_and_action_files_parse() -> None:
    action = yaml.safe_load((ROOT / ".github/actions/attnprof/action.yml").read_text())
    assert set(action["inputs"]) == {
        "server-url",
        "token",
        "suite",
        "mode",
        "testbed",
        "source",
        "paired",
        "profile-args",
        "fail-on",
        "timeout-minutes",
    }
    assert action["inputs"]["mode"]["default"] == "submit"
    assert set(action["outputs"]) == {"job-id", "run-id", "verdict", "report-url"}
    assert action["runs"]["using"] == "composite"
    step = next(s for s in action["runs"]["steps"] if s.get("id") == "run")
    env = step["env"]
    assert env["ATTNPROF_MODE"] == "${{ inputs.mode }}" and env["ATTNPROF_PROFILE_ARGS"] == "${{ inputs.profile-args }}"
    assert env["ATTNPROF_PAIRED"] == "${{ inputs.paired }}" and action["inputs"]["paired"]["default"] == "false"
    assert "fetch-depth: 0" in action["inputs"]["paired"]["description"]
    # The installed console script, never `python -m` (which puts the workspace first on the import path).
    assert (
        step["run"] == '"$ATTNPROF_BIN/attnprof" action' and env["ATTNPROF_BIN"] == "${{ steps.install.outputs.bin }}"
    )
    assert not any(" -m attnprof" in s["run"] or " -m service" in s["run"] for s in action["runs"]["steps"])
    ci = yaml.safe_load((ROOT / ".github/workflows/ci.yml").read_text())
    assert {"postgres", "redis"} <= set(ci["jobs"]["test"]["services"])
    runs = [s.get("run") for job in ci["jobs"].values() for s in job["steps"]]
    assert {"make lint", "make test"} <= set(runs)
    example = yaml.safe_load((ROOT / "examples/github/attention-perf.yml").read_text())
    steps = [s for job in example["jobs"].values() for s in job["steps"] if "attnprof" in str(s.get("uses"))]
    assert {s["with"].get("mode", "submit") for s in steps} == {"submit", "local"}
    assert all(set(s["with"]) <= set(action["inputs"]) for s in steps)


def _workflow_files() -> list[Path]:
    return sorted([*ROOT.glob(".github/workflows/*.yml"), *ROOT.glob("examples/github/*.yml")])


def test_workflows_pin_actions_keep_no_credentials_and_expand_nothing_in_run() -> None:
    """What zizmor checks in CI (``.ci/lint-actions.sh``), here too so that a test names the rule that broke."""
    action = yaml.safe_load((ROOT / ".github/actions/attnprof/action.yml").read_text())
    scripts = [s["run"] for s in action["runs"]["steps"] if "run" in s]
    for path in _workflow_files():
        flow = yaml.safe_load(path.read_text())
        assert flow["permissions"] == {"contents": "read"}, path
        for job in flow["jobs"].values():
            for step in job["steps"]:
                uses = step.get("uses", "")
                if uses.startswith("actions/"):
                    assert re.fullmatch(r"actions/[\w-]+@[0-9a-f]{40}", uses), (path, uses)
                if uses.startswith("actions/checkout@"):
                    assert step["with"]["persist-credentials"] is False, path
                if "run" in step:
                    scripts.append(step["run"])
        text = path.read_text()
        # Each pin says which release it is; the action itself is pinned by the user (OWNER/COMMIT placeholders).
        assert all("# v" in line for line in text.splitlines() if re.search(r"uses: actions/\S+@", line)), path
    assert scripts and not [s for s in scripts if "${{" in s]


def test_the_readmes_snippet_checks_out_then_uses_the_action() -> None:
    blocks = re.findall(r"```yaml\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    (snippet,) = [yaml.safe_load(b) for b in blocks if "/.github/actions/attnprof@" in b]
    checkout, step = snippet
    assert re.fullmatch(r"actions/checkout@[0-9a-f]{40}", checkout["uses"])
    assert checkout["with"]["persist-credentials"] is False
    path = step["uses"].split("@")[0].split("/", 2)[2]
    assert path == ".github/actions/attnprof" and (ROOT / path / "action.yml").is_file()
    action = yaml.safe_load((ROOT / path / "action.yml").read_text())
    assert set(step["with"]) <= set(action["inputs"])
    assert {name for name, spec in action["inputs"].items() if spec.get("required")} <= set(step["with"])


def test_a_fork_pull_request_without_a_token_is_skipped_with_a_notice(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    head = {"ref": "feat", "sha": "h1", "repo": {"full_name": "someone/attn", "fork": True}}
    pull = {"number": 7, "head": head, "base": {"sha": "b1", "repo": {"full_name": REPO}}}
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"pull_request": pull}))
    env = {
        "GITHUB_EVENT_NAME": "pull_request",
        "GITHUB_EVENT_PATH": str(event),
        "GITHUB_REPOSITORY": REPO,
        "GITHUB_OUTPUT": str(tmp_path / "output"),
        "GITHUB_STEP_SUMMARY": str(tmp_path / "summary"),
        "ATTNPROF_SUITE": "attnprof.toml",
        "ATTNPROF_TESTBED": "tb",
        "ATTNPROF_TOKEN": "",
        "ATTNPROF_CLI": "/nonexistent/attnprof",  # nothing may be run
    }
    assert secrets_withheld(env) == "a pull request from the fork someone/attn gets no secrets"
    assert main(env) == 0
    printed = capsys.readouterr().out
    assert "::notice title=attnprof::skipped: a pull request from the fork someone/attn gets no secrets" in printed
    assert "verdict=\n" in (tmp_path / "output").read_text() and "skipped" in (tmp_path / "summary").read_text()
    head["repo"] = None  # the fork was deleted since
    event.write_text(json.dumps({"pull_request": pull}))
    assert secrets_withheld(env) == "a pull request from the fork (since deleted) gets no secrets"
    # A branch of the repository, which is itself a fork of another: its secrets are there.
    head["repo"] = {"full_name": REPO, "fork": True}
    event.write_text(json.dumps({"pull_request": pull}))
    assert secrets_withheld(env) is None
    # Dependabot's pull requests get only Dependabot's secrets.
    assert secrets_withheld({**env, "GITHUB_ACTOR": "dependabot[bot]"}) is not None
    # A pull request within the repository, or a push, that has no token is a mistake of the workflow: it fails.
    assert main(env) == 2 and "::error::attnprof: token: empty" in capsys.readouterr().out
    event.write_text(json.dumps({"before": "0" * 40, "after": "a2"}))
    push = {**env, "GITHUB_EVENT_NAME": "push", "GITHUB_REF_NAME": "main"}
    assert secrets_withheld(push) is None and main(push) == 2
    # pull_request_target runs with the base repository's secrets: an empty token there is a mistake too.
    assert secrets_withheld({**env, "GITHUB_EVENT_NAME": "pull_request_target"}) is None


def test_provenance_of_pull_request_and_push_events(tmp_path: Path) -> None:
    event = tmp_path / "event.json"
    event.write_text(
        json.dumps({"pull_request": {"number": 7, "head": {"ref": "feat", "sha": "h1"}, "base": {"sha": "b1"}}})
    )
    env = {"GITHUB_EVENT_NAME": "pull_request", "GITHUB_EVENT_PATH": str(event), "GITHUB_REPOSITORY": REPO}
    prov = provenance(env)
    assert (prov.repo, prov.branch, prov.commit, prov.base_commit, prov.pr) == (REPO, "feat", "h1", "b1", 7)
    event.write_text(json.dumps({"before": "0" * 40, "after": "a2"}))
    prov = provenance({**env, "GITHUB_EVENT_NAME": "push", "GITHUB_REF_NAME": "main"})
    assert (prov.branch, prov.commit, prov.base_commit, prov.pr) == ("main", "a2", None, None)
    argv = submit_argv({"ATTNPROF_SUITE": "s.toml", "ATTNPROF_TIMEOUT_MINUTES": "2", "ATTNPROF_TESTBED": "t"}, prov)
    assert argv[1:5] == ["submit", "s.toml", "--wait", "--json"] and "--pr" not in argv
    assert argv[argv.index("--timeout") + 1] == "120.0" and argv[argv.index("--commit") + 1] == "a2"
    # Outside GitHub no commit is named: `attnprof submit` asks git, and the local mode cannot run.
    assert provenance({}) is None
    assert "--commit" not in submit_argv({"ATTNPROF_SUITE": "s.toml"}, None)


def test_the_paired_input_passes_paired_and_bad_values_stop_the_step(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = {"ATTNPROF_SUITE": "s.toml", "ATTNPROF_TESTBED": "t", "ATTNPROF_SOURCE": "."}
    assert "--paired" not in submit_argv(base, None)
    assert "--paired" not in submit_argv({**base, "ATTNPROF_PAIRED": "false"}, None)
    argv = submit_argv({**base, "ATTNPROF_PAIRED": "true"}, None)
    assert argv.count("--paired") == 1 and argv[argv.index("--source") + 1] == "."
    # Refused before anything is run or sent: the summary and the error annotation say which input and why.
    summary = tmp_path / "summary.md"
    env = {**base, "ATTNPROF_TOKEN": "t", "ATTNPROF_SERVER": "http://127.0.0.1:9", "GITHUB_STEP_SUMMARY": str(summary)}
    assert main({**env, "ATTNPROF_PAIRED": "yes"}) == 2
    assert "::error::paired must be true or false, not 'yes'" in capsys.readouterr().out
    assert main({**env, "ATTNPROF_PAIRED": "true", "ATTNPROF_MODE": "local"}) == 2
    assert "::error::paired: only in submit mode" in capsys.readouterr().out
    assert main({**env, "ATTNPROF_PAIRED": "true", "ATTNPROF_SOURCE": ""}) == 2
    assert "paired: needs source" in summary.read_text()


def test_fail_on() -> None:
    assert decide("fail", 1) == (1, None) and decide("fail", 0) == (0, None)
    assert decide("warn", 1)[0] == 0 and "fail" in str(decide("warn", 1)[1])
    assert decide("warn", 2) == (2, None) and decide("warn", 3)[0] == 0
    assert decide("never", 2)[0] == 0


@pytest.fixture
def served(tmp_path: Path, pg_url: str) -> Iterator[Served]:
    with serve(tmp_path, pg_url) as stack:
        yield stack


def test_action_script_in_a_pull_request(tmp_path: Path, served, pg_url: str) -> None:
    url, project, testbed, submit, github = served.url, served.project, served.testbed, served.submit, served.github
    settings = make_settings(
        pg_url, broker_url=REDIS, public_url=url, github_api_url=github.url, github_token="test-token-1"
    )
    base = httpx.post(
        f"{url}/api/v1/projects/{project}/results",
        json=docs.upload_body(docs.h200(), commit="a1"),
        headers={"Authorization": f"Bearer {submit}"},
    )
    assert base.status_code == 201, base.text
    (tmp_path / "suite.toml").write_text(SPEC)
    event = tmp_path / "event.json"
    event.write_text(
        json.dumps({"pull_request": {"number": 7, "head": {"ref": "feat", "sha": "h1"}, "base": {"sha": "a1"}}})
    )
    summary, output = tmp_path / "summary.md", tmp_path / "output.txt"
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")}
    env.update(
        ATTNPROF_SERVER=url,
        ATTNPROF_TOKEN=submit,
        ATTNPROF_SUITE=str(tmp_path / "suite.toml"),
        ATTNPROF_TESTBED=testbed,
        ATTNPROF_FAIL_ON="fail",
        ATTNPROF_TIMEOUT_MINUTES="1",
        GITHUB_EVENT_NAME="pull_request",
        GITHUB_EVENT_PATH=str(event),
        GITHUB_REPOSITORY=REPO,
        GITHUB_STEP_SUMMARY=str(summary),
        GITHUB_OUTPUT=str(output),
        GITHUB_WORKSPACE=str(tmp_path),
    )
    errors: list[BaseException] = []
    worker = threading.Thread(target=play_worker, args=(served, settings, errors))
    worker.start()
    done = subprocess.run([BIN / "attnprof", "action"], env=env, cwd=tmp_path, capture_output=True, text=True)
    worker.join(timeout=60)
    assert not errors, errors
    assert done.returncode == 1, done.stdout + done.stderr
    outputs = dict(line.split("=", 1) for line in output.read_text().splitlines())
    assert outputs["verdict"] == "fail" and outputs["report-url"] == f"{url}/ui/p/{project}/jobs/{outputs['job-id']}"
    text = summary.read_text()
    assert "**fail**" in text and f"`{CASE}`" in text and not text.startswith("<!--")
    assert [s["state"] for s in github.statuses(REPO, "h1")] == ["pending", "failure"]
    assert len(github.comments(REPO, 7)) == 1
    # The submit mode sent the suite's path in the checkout, which the job's page prints to reproduce it.
    job = httpx.get(f"{url}/api/v1/jobs/{outputs['job-id']}", headers={"Authorization": f"Bearer {submit}"})
    assert job.json()["suite_path"] == "suite.toml"
    # and the pull request's comment reproduces it by that path
    assert "attnprof profile suite.toml --case " in github.comments(REPO, 7)[0]["body"]


def _local_suite(backend: str) -> str:
    """One tiny CPU case whose id does not name its backend: a change of backend is the same case, regressed (a
    finding that does not depend on timing noise)."""
    return (
        '[suite]\nname = "local"\n\n[suite.timing]\nwarmup = 1\nmin_samples = 5\nmax_samples = 20\nbudget_s = 0.1\n'
        'trace_iters = 1\n\n[[cases]]\nname = "sdpa"\ntarget = "sdpa"\nbatch = 1\nq_heads = 2\nseq_q = 64\n'
        f'head_dim = 32\ndtype = "fp32"\nbackend = "{backend}"\n'
    )


def _action_env(tmp_path: Path, url: str, token: str, event: dict, **extra: str) -> dict[str, str]:
    (tmp_path / "event.json").write_text(json.dumps(event))
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR", "OMP_NUM_THREADS")}
    env.update(
        ATTNPROF_SERVER=url,
        ATTNPROF_TOKEN=token,
        ATTNPROF_SUITE=str(tmp_path / "suite.toml"),
        ATTNPROF_TIMEOUT_MINUTES="5",
        GITHUB_EVENT_PATH=str(tmp_path / "event.json"),
        GITHUB_REPOSITORY=REPO,
        GITHUB_STEP_SUMMARY=str(tmp_path / "summary.md"),
        GITHUB_OUTPUT=str(tmp_path / "output.txt"),
        RUNNER_TEMP=str(tmp_path / "runner-temp"),
    )
    env.update(extra)
    return env


def _action(env: dict[str, str], cwd: Path) -> tuple[subprocess.CompletedProcess[str], dict[str, str], str]:
    for name in ("GITHUB_OUTPUT", "GITHUB_STEP_SUMMARY"):
        Path(env[name]).unlink(missing_ok=True)
    done = subprocess.run([BIN / "attnprof", "action"], env=env, cwd=cwd, capture_output=True, text=True, timeout=300)
    output = Path(env["GITHUB_OUTPUT"])
    outputs = dict(line.split("=", 1) for line in output.read_text().splitlines()) if output.exists() else {}
    summary = Path(env["GITHUB_STEP_SUMMARY"])
    return done, outputs, summary.read_text() if summary.exists() else ""


def test_local_mode_profiles_on_the_runner_and_uploads(tmp_path: Path, served) -> None:
    """A self-hosted runner's two pushes: main (the first run: pass), then a pull request whose case runs SDPA's
    math backend instead of the CPU flash kernel (fail; ``fail-on: warn`` makes it a warning). On a host busier
    than its cores the profiler marks the run suspect, and a suspect run never fails: then the verdict is warn."""
    url, project, submit, github = served.url, served.project, served.submit, served.github
    profile_args = f"--device cpu --cache-dir {tmp_path / 'peaks'}"
    suite = tmp_path / "suite.toml"
    suite.write_text(_local_suite("flash"))
    push = {"before": "0" * 40, "after": "l1"}
    env = _action_env(
        tmp_path,
        url,
        submit,
        push,
        ATTNPROF_MODE="local",
        ATTNPROF_PROFILE_ARGS=profile_args,
        ATTNPROF_TESTBED="gpu-runner",
    )
    env.update(GITHUB_EVENT_NAME="push", GITHUB_REF_NAME="main")
    done, outputs, summary = _action(env, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert outputs["job-id"] == "" and outputs["verdict"] == "pass" and outputs["run-id"]
    assert outputs["report-url"].startswith(f"{url}/ui/p/{project}/comparisons/"), outputs  # for people
    assert "**pass** on `gpu-runner`" in summary and not summary.startswith("<!--") and "[job]" not in summary
    first_run = outputs["run-id"]
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {submit}"}) as http:
        run = http.get(f"/api/v1/projects/{project}/runs/{first_run}").json()
    assert (run["branch"], run["commit"], run["repo"]) == ("main", "l1", REPO)
    assert run["document"]["run"]["mode"] == "cpu"

    suite.write_text(_local_suite("math"))
    pull = {"pull_request": {"number": 9, "head": {"ref": "slow", "sha": "l2"}, "base": {"sha": "l1"}}}
    env = _action_env(
        tmp_path,
        url,
        submit,
        pull,
        ATTNPROF_MODE="local",
        ATTNPROF_PROFILE_ARGS=profile_args,
        ATTNPROF_TESTBED="gpu-runner",
        ATTNPROF_FAIL_ON="warn",
    )
    env["GITHUB_EVENT_NAME"] = "pull_request"
    done, outputs, summary = _action(env, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    suspect = json.loads((tmp_path / "runner-temp/attnprof/attnprof-result.json").read_text())["run"]["suspect"]
    verdict = "warn" if suspect else "fail"
    assert outputs["verdict"] == verdict and outputs["run-id"] not in ("", first_run), summary
    assert f"**{verdict}** on `gpu-runner`" in summary
    assert ("::warning::attnprof: the verdict is fail (fail-on: warn)" in done.stdout) == (verdict == "fail")
    assert "#### ⚠️ `sdpa`: backend switch `cpu_flash` → " in summary and "| Kernel | Phase |" in summary
    assert f"[run]({url}/ui/p/{project}/runs/{outputs['run-id']})" in summary
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {submit}"}) as http:
        second = http.get(f"/api/v1/projects/{project}/runs/{outputs['run-id']}").json()
    assert (second["branch"], second["commit"], second["pr"], second["base_commit"]) == ("slow", "l2", 9, "l1")
    # An upload that names its repository gets a job's feedback, sent once it has answered: the push's commit
    # status, then the pull request's status and the project's comment.
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not (github.statuses(REPO, "l2") and github.comments(REPO, 9)):
        time.sleep(0.1)
    assert [s["state"] for s in github.statuses(REPO, "l1")] == ["success"]
    assert [s["state"] for s in github.statuses(REPO, "l2")] == ["failure" if verdict == "fail" else "success"]
    (comment,) = github.comments(REPO, 9)
    assert f"**{verdict}** on `gpu-runner`" in comment["body"]

    env["ATTNPROF_FAIL_ON"] = "fail"
    suite.write_text(_local_suite("math").replace("head_dim", "hed_dim"))
    done, outputs, summary = _action(env, tmp_path)
    assert done.returncode == 2 and "attnprof profile refused the suite" in summary and "hed_dim" in summary
    assert outputs["verdict"] == "" and outputs["run-id"] == ""
    assert _action({**env, "ATTNPROF_MODE": "remote"}, tmp_path)[0].returncode == 2
    assert _action({**env, "ATTNPROF_MODE": "submit", "ATTNPROF_TESTBED": ""}, tmp_path)[0].returncode == 2
