"""Every URL the service hands out answers, and leads where its reader can open it.

On a real stack (``uvicorn`` serving the app over a Postgres database of the test's own, migrated with Alembic;
Redis as the broker; the GitHub stand-in of ``tests/github`` recording every status and comment): results are
uploaded with ``attnprof upload`` and over the API, the GitHub Action's script runs in local mode (its profiling
step replaced by a prepared result document: what is under test is the upload and what follows) and in submit mode
(the test plays the profile worker and runs the analysis task's plain code), and a job submitted with ``attnprof
submit`` is cancelled. Every URL emitted on the way is collected: the ``url`` and ``*_url`` fields of the JSON
answers, the PR comments' and the commit statuses' links, the action's ``report-url`` and job summaries, the CLI's
printed lines. Each one is requested (the API's with the token, the dashboard's with a signed-in session); so is
every link of the dashboard pages reached that way (their ``href``, ``src``, form actions, polled URLs and the
charts' click targets, resolved as the browser resolves them), and every redirect's ``Location``. None may answer
404 or 5xx. Links meant for people lead to the dashboard, the API answers' ``url`` to the API.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlsplit, urlunsplit

import httpx
import pytest
import redis
import uvicorn
from starlette.routing import Match

from attnprof.contract.links import API_ROUTES, PAGE_ROUTES, PATHS, Links
from attnprof.server import migrate
from attnprof.server.app import create_app
from attnprof.server.auth import service as auth
from attnprof.server.config import Settings
from attnprof.server.db import make_engine, make_sessionmaker
from attnprof.server.projects import service as projects
from attnprof.server.testbeds import service as testbeds
from attnprof.worker.analysis import verdict as analysis
from tests.claiming import bearer, claim, claim_secret
from tests.pgcluster import free_port
from tests.pgtest import create_database, drop_database
from tests.server import documents as docs
from tests.server.github.fakegithub import FakeGitHub
from tests.server.stack import REDIS_URL, make_settings

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
TRACES = ROOT / "tests" / "data" / "h200" / "attnprof"
REPO = "acme/attn"
CASE = "sdpa[backend=cudnn,pass=fwd]"
SPEC = '[suite]\nname = "s"\n\n[[cases]]\nname = "prefill"\ntarget = "sdpa"\nq_heads = 4\nseq_q = 128\nhead_dim = 64\n'
# What stands in for ``attnprof profile`` on the runner: the prepared document and its case's trace are the
# profile's output; every other verb is the real command.
PROFILE_SHIM = """#!{python}
import os, shutil, sys
args = sys.argv[1:]
if args[:1] == ["profile"]:
    out = args[args.index("--out") + 1]
    shutil.copy(os.environ["LINKS_TEST_RESULT"], out)
    shutil.copy(os.environ["LINKS_TEST_TRACE"], os.path.dirname(out))
    sys.exit(0)
os.execv({attnprof!r}, [{attnprof!r}, *args])
"""
_URL = re.compile(r"https?://[^\s<>()\[\]\"'`]+")


def test_every_link_template_is_a_route_of_the_service() -> None:
    """``attnprof.contract.links`` builds its paths from the routes the app declares (a PARTIAL match: the path is
    a route's, answered for another method, as a form's POST action is)."""
    app = create_app(make_settings("sqlite:///:memory:"))

    def matched(path: str) -> Match:
        scope = {"type": "http", "path": path, "root_path": "", "method": "GET"}
        return max((r.matches(scope)[0] for r in app.routes), key=lambda m: m.value)

    for templates in (API_ROUTES, PAGE_ROUTES):
        for name, template in templates.items():
            path = re.sub(r"\{[a-z_]+\}", "x-1", template)
            assert matched(path) in (Match.FULL, Match.PARTIAL), (name, template)
    assert matched("/api/v1/runs/x-1") == Match.NONE  # the run URL uploads used to answer with
    assert matched("/ui/p/runs/x-1") == Match.NONE  # where the overview's chart used to lead


def test_links_quote_every_part_and_keep_the_base() -> None:
    links = Links("https://perf.example/")
    assert links.api_run("p", "r 1/2") == "https://perf.example/api/v1/projects/p/runs/r%201%2F2"
    assert (
        links.ui_trace("p", "r", "a[b=c].json.gz") == "https://perf.example/ui/p/p/runs/r/traces/a%5Bb%3Dc%5D.json.gz"
    )
    assert links.ui_trends("p", case="x,y", metric="latency", branch=None) == (
        "https://perf.example/ui/p/p/trends?case=x%2Cy&metric=latency"
    )
    assert PATHS.ui_login("/ui/p/x?y=1") == "/ui/login?next=/ui/p/x%3Fy%3D1"
    assert PATHS.ui_run_rule("p", "r", "pin", remove=True) == "/ui/p/p/runs/r/baselines/pin/remove"


@dataclass
class Stack:
    url: str
    settings: Settings
    project: str
    admin: str
    submit: str
    testbed: str
    worker: str
    github: FakeGitHub
    tmp: Path

    @property
    def links(self) -> Links:
        return Links(self.url)

    def api(self, token: str | None = None) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers=bearer(token or self.submit), timeout=60)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    name, db_url = create_database()
    server: uvicorn.Server | None = None
    testbed = f"tb-links-{uuid.uuid4().hex[:8]}"
    try:
        migrate.upgrade(db_url)
        engine = make_engine(db_url)
        with make_sessionmaker(engine)() as session:
            project = projects.create(session, name=f"links-{uuid.uuid4().hex[:8]}")
            projects.allow_repository(session, project_id=project.id, repo=REPO, added_by="the tests")
            admin = auth.create_project_token(session, project_id=project.id, role="admin")[1]
            submit = auth.create_project_token(session, project_id=project.id, role="submit")[1]
            worker = auth.create_worker_token(session, testbed_id=testbeds.ensure(session, testbed).id)[1]
            session.commit()
            project_name = project.name
        engine.dispose()
        with FakeGitHub() as github:
            port = free_port()
            url = f"http://127.0.0.1:{port}"
            settings = make_settings(db_url, public_url=url, github_api_url=github.url, github_token="test-token-1")
            server = uvicorn.Server(
                uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_level="warning")
            )
            threading.Thread(target=server.run, daemon=True).start()
            deadline = time.monotonic() + 30
            while not server.started:
                assert time.monotonic() < deadline, "the test server did not start in 30 s"
                time.sleep(0.05)
            yield Stack(
                url, settings, project_name, admin, submit, testbed, worker, github, tmp_path_factory.mktemp("links")
            )
    finally:
        if server is not None:
            server.should_exit = True
            time.sleep(0.3)
        drop_database(name)
        queue = redis.Redis.from_url(REDIS_URL)
        queue.delete(f"profile.{testbed}")  # the cancelled job's message
        queue.close()


@dataclass
class Emitted:
    """Every URL seen, with where it came from (the first place)."""

    where: dict[str, str] = field(default_factory=dict)

    def add(self, url: str, source: str) -> None:
        self.where.setdefault(url, source)

    def text(self, text: str, source: str) -> list[str]:
        found = [u.rstrip(".,;:") for u in _URL.findall(text)]
        for u in found:
            self.add(u, source)
        return found

    def json(self, value: Any, source: str, key: str = "") -> None:
        """The ``url`` and ``*_url`` fields of a JSON answer, and the values of its ``links`` objects."""
        if isinstance(value, dict):
            for k, v in value.items():
                if k == "links" and isinstance(v, dict):
                    for link in v.values():
                        if isinstance(link, str) and link:
                            self.add(link, f"{source}: links")
                self.json(v, source, k)
        elif isinstance(value, list):
            for v in value:
                self.json(v, source, key)
        elif isinstance(value, str) and (key == "url" or key.endswith("_url")):
            self.add(value, f"{source}: {key}")


def _env(stack: Stack, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")}
    env.update(PYTHONPATH=str(ROOT), ATTNPROF_SERVER=stack.url, ATTNPROF_TOKEN=stack.submit, **extra)
    return env


def _run(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=180)


def _action(stack: Stack, name: str, event: dict[str, Any], **extra: str) -> tuple[dict[str, str], str, str]:
    """The action's script in a runner-like environment: (its outputs, its job summary, what it printed)."""
    folder = stack.tmp / name
    folder.mkdir()
    (folder / "event.json").write_text(json.dumps(event))
    (folder / "suite.toml").write_text(SPEC)
    env = _env(
        stack,
        ATTNPROF_SUITE=str(folder / "suite.toml"),
        ATTNPROF_TIMEOUT_MINUTES="2",
        GITHUB_EVENT_NAME="pull_request",
        GITHUB_EVENT_PATH=str(folder / "event.json"),
        GITHUB_REPOSITORY=REPO,
        GITHUB_STEP_SUMMARY=str(folder / "summary.md"),
        GITHUB_OUTPUT=str(folder / "output.txt"),
        RUNNER_TEMP=str(folder / "runner"),
        **extra,
    )
    done = _run([sys.executable, "-m", "attnprof.client.action"], env, folder)
    assert (folder / "output.txt").exists(), done.stdout + done.stderr
    outputs = dict(line.split("=", 1) for line in (folder / "output.txt").read_text().splitlines())
    return outputs, (folder / "summary.md").read_text(), done.stdout + done.stderr


def _play_worker(stack: Stack, errors: list[BaseException]) -> None:
    """The profile worker for the next queued job: claim, result (a regression of CASE), its trace; then the
    analysis task, which sends the status and the comment."""
    try:
        job_id = None
        deadline = time.monotonic() + 60
        with stack.api() as api:
            while job_id is None and time.monotonic() < deadline:
                jobs = api.get(PATHS.api_jobs(stack.project), params={"status": "queued"}).json()["jobs"]
                job_id = jobs[0]["id"] if jobs else None
                time.sleep(0.2)
        assert job_id is not None, "the action submitted no job"
        with httpx.Client(base_url=stack.url, timeout=60) as http:
            token = claim(http, stack.worker, job_id, claim_secret(REDIS_URL, stack.testbed, job_id))["token"]
            doc = docs.h200(slower=1.10, cases=[CASE])
            r = http.post(f"/internal/jobs/{job_id}/result", json={"attempt": 1, "result": doc}, headers=bearer(token))
            assert r.status_code == 200, r.text
            trace = next(c["trace"] for c in doc["cases"] if c["id"] == CASE)
            put = http.put(
                f"/internal/jobs/{job_id}/traces/{trace}?attempt=1",
                content=(TRACES / trace).read_bytes(),
                headers={**bearer(token), "Content-Type": "application/gzip"},
            )
            assert put.status_code == 204, put.text
        assert analysis.run(job_id, stack.settings) in ("fail", "warn")
    except BaseException as exc:
        errors.append(exc)


class _Links(HTMLParser):
    """The URLs a dashboard page leads to: attributes that hold one, and the click targets of its charts."""

    ATTRIBUTES = ("href", "src", "action", "data-poll", "data-perfetto")

    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []
        self._spec: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.found += [v for k, v in attrs if k in self.ATTRIBUTES and v]
        if tag == "script" and ("type", "application/json") in attrs:
            self._spec = []

    def handle_data(self, data: str) -> None:
        if self._spec is not None:
            self._spec.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "script" and self._spec is not None:
            spec = json.loads("".join(self._spec))
            self._spec = None
            if isinstance(spec, dict) and spec.get("links"):
                for trace in spec.get("data", []):
                    self.found += [c for c in trace.get("customdata", []) if isinstance(c, str)]


def _sign_in(stack: Stack, web: httpx.Client) -> None:
    """Sign ``web`` in to the dashboard, through its form (the session is a cookie of the client)."""
    form = web.get(PATHS.ui_login())
    csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
    assert csrf is not None, form.text
    signed = web.post(PATHS.ui_login(), data={"token": stack.admin, "csrf": csrf[1]})
    assert signed.status_code == 303 and signed.headers["location"] == PATHS.ui_project(stack.project)


def _crawl(stack: Stack, emitted: Emitted, limit: int = 400) -> dict[str, int]:
    """Request every emitted URL of the service, and what their answers lead to; returns URL → status."""
    host = urlsplit(stack.url).netloc
    queue = list(emitted.where)
    seen: dict[str, int] = {}
    with stack.api(stack.admin) as api, httpx.Client(base_url=stack.url, timeout=60) as web:
        _sign_in(stack, web)
        while queue:
            url = urlunsplit(urlsplit(queue.pop(0))._replace(fragment=""))
            parts = urlsplit(url)
            if parts.netloc != host or url in seen:
                continue
            assert len(seen) < limit, f"more than {limit} URLs: {sorted(seen)[-20:]}"
            path = parts.path
            client = web if path == "/ui" or path.startswith("/ui/") else api
            answer = client.get(url)
            seen[url] = answer.status_code
            source = emitted.where.get(url, "?")
            assert answer.status_code != 404 and answer.status_code < 500, (url, answer.status_code, source)
            if answer.is_redirect:
                location = urljoin(url, answer.headers["location"])
                if client is web:  # the session holds: a page never sends its reader to sign in
                    assert not urlsplit(location).path.startswith(PATHS.ui_login()), (url, location, source)
                emitted.add(location, f"Location of {url}")
                queue.append(location)
                continue
            kind = answer.headers.get("content-type", "")
            if "text/html" in kind and answer.status_code == 200:
                page = _Links()
                page.feed(answer.text)
                for link in page.found:
                    if link.startswith(("#", "data:")):
                        continue
                    resolved = urljoin(url, link)  # as the browser resolves it, from this page
                    emitted.add(resolved, f"a link of {url}")
                    queue.append(resolved)
            elif "json" in kind:
                before = set(emitted.where)
                emitted.json(answer.json(), f"the answer of {url}")
                queue += [u for u in emitted.where if u not in before]
            elif "markdown" in kind:
                queue += emitted.text(answer.text, f"the answer of {url}")
    return seen


def _people(stack: Stack, urls: list[str], what: str) -> None:
    """Links meant for a person open the dashboard."""
    assert urls, f"{what}: no link"
    for u in urls:
        assert u.startswith(f"{stack.url}/ui/"), (what, u)


def test_every_url_the_service_emits_answers(stack: Stack) -> None:
    emitted = Emitted()
    links = stack.links
    cli = str(BIN / "attnprof")
    env = _env(stack)

    # A baseline on main, with ``attnprof upload`` and its human output.
    baseline = stack.tmp / "baseline.json"
    baseline.write_text(json.dumps(docs.h200()))
    upload = _run([cli, "upload", str(baseline), "--branch", "main", "--commit", "m1", "--repo", REPO], env, stack.tmp)
    assert upload.returncode == 0, upload.stdout + upload.stderr
    _people(stack, emitted.text(upload.stdout, "attnprof upload"), "attnprof upload")

    # A second run on main, over the API: the answer's URLs are the API's run and the comparison's page.
    body = docs.upload_body(docs.h200(jitter=0.001), commit="m2", repo=REPO, ancestors=["m1"])
    with stack.api() as api:
        answer = api.post(PATHS.api_results(stack.project), json=body)
    assert answer.status_code == 201, answer.text
    up = answer.json()
    assert up["url"] == links.api_run(stack.project, up["run_id"])
    assert up["dashboard_url"] == links.ui_comparison(stack.project, up["comparison_id"])
    assert "/api/v1/runs/" not in answer.text  # the form that led nowhere
    emitted.json(up, "POST results")
    _people(stack, emitted.text(up["summary"], "the upload's summary"), "the upload's summary")

    # The action in local mode on a pull request: the runner's result (a regression) uploaded with its trace.
    candidate = docs.h200(slower=1.25, cases=[CASE])
    (stack.tmp / "candidate.json").write_text(json.dumps(candidate))
    shim = stack.tmp / "attnprof-shim"
    shim.write_text(PROFILE_SHIM.format(python=sys.executable, attnprof=cli))
    shim.chmod(0o755)
    trace = next(c["trace"] for c in candidate["cases"] if c["id"] == CASE)
    pull = {"pull_request": {"number": 7, "head": {"ref": "feat", "sha": "p7"}, "base": {"sha": "m2"}}}
    outputs, summary, printed = _action(
        stack,
        "local",
        pull,
        ATTNPROF_MODE="local",
        ATTNPROF_CLI=str(shim),
        ATTNPROF_TESTBED="gpu-runner",
        ATTNPROF_FAIL_ON="never",
        LINKS_TEST_RESULT=str(stack.tmp / "candidate.json"),
        LINKS_TEST_TRACE=str(TRACES / trace),
    )
    assert outputs["verdict"] in ("fail", "warn") and outputs["run-id"], printed
    assert outputs["report-url"].startswith(f"{stack.url}/ui/p/{stack.project}/comparisons/"), outputs
    emitted.add(outputs["report-url"], "the local action's report-url")
    in_summary = emitted.text(summary, "the local action's summary")
    _people(stack, in_summary, "the local action's summary")
    assert links.ui_trace(stack.project, outputs["run-id"], trace) in in_summary  # stored by the upload

    # The action in submit mode on another pull request: a job, profiled by the test, analysed, fed back.
    errors: list[BaseException] = []
    worker = threading.Thread(target=_play_worker, args=(stack, errors))
    worker.start()
    pull = {"pull_request": {"number": 8, "head": {"ref": "feat2", "sha": "j8"}, "base": {"sha": "m2"}}}
    outputs, summary, printed = _action(
        stack, "submit", pull, ATTNPROF_CLI=cli, ATTNPROF_TESTBED=stack.testbed, ATTNPROF_FAIL_ON="never"
    )
    worker.join(timeout=90)
    assert not errors, errors
    assert outputs["verdict"] in ("fail", "warn") and outputs["job-id"], printed
    job_id = outputs["job-id"]
    assert outputs["report-url"] == links.ui_job(stack.project, job_id)
    emitted.add(outputs["report-url"], "the submit action's report-url")
    _people(stack, emitted.text(summary, "the submit action's summary"), "the submit action's summary")

    # A job submitted with ``attnprof submit`` (its human output), then cancelled: an error status, and the pull
    # request's comment turned into a no-verdict one.
    (stack.tmp / "suite.toml").write_text(SPEC)
    argv = [cli, "submit", "suite.toml", "--testbed", stack.testbed, "--repo", REPO, "--pr", "8"]
    submitted = _run([*argv, "--branch", "feat2", "--commit", "j9"], env, stack.tmp)  # a second push to PR 8
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    printed_urls = emitted.text(submitted.stdout, "attnprof submit")
    _people(stack, printed_urls, "attnprof submit")
    cancelled_id = printed_urls[0].rsplit("/", 1)[1]
    with stack.api() as api:
        cancelled = api.post(PATHS.api_job_cancel(cancelled_id))
        assert cancelled.status_code == 200, cancelled.text
        emitted.json(cancelled.json(), "POST cancel")
        for jid in (job_id, cancelled_id):
            emitted.add(links.api_job(jid), "the job")
            emitted.add(links.api_job_comment(jid), "the job's comment (what the action reads)")
        emitted.add(links.api_job_comparison(job_id), "the job's comparison")
    # What a page with jobs in progress polls (none is in progress now: the answer still names their pages).
    emitted.add(links.ui_job_states(stack.project, [job_id, cancelled_id]), "a page's poll")

    # What GitHub was sent: every status's target and every comment's links, for people. The cancel's feedback
    # goes out once the cancel has answered.
    def sent() -> bool:
        errors = [s for s in stack.github.statuses(REPO, "j9") if s["state"] == "error"]
        return bool(errors) and any("**no verdict**" in c["body"] for c in stack.github.comments(REPO, 8))

    deadline = time.monotonic() + 30
    while not sent():
        assert time.monotonic() < deadline, (stack.github.statuses(REPO, "j9"), stack.github.comments(REPO, 8))
        time.sleep(0.1)
    statuses = [r.body for r in stack.github.requests("POST") if "/statuses/" in r.path]
    bodies = [r.body["body"] for r in stack.github.requests() if r.method in ("POST", "PATCH") and "body" in r.body]
    assert {s["state"] for s in statuses} >= {"pending", "error"} and len(bodies) >= 2, statuses
    targets = [s["target_url"] for s in statuses]
    for t in targets:
        emitted.add(t, "a commit status's target_url")
    _people(stack, targets, "the commit statuses")
    for text in bodies:
        _people(stack, emitted.text(text, "a PR comment"), "a PR comment")
    # The job's verdict comment on pull request 8 (the upload's on 7 was sent before its trace was stored).
    commented = next(
        r.body["body"]
        for r in stack.github.requests("POST")
        if r.path.endswith("/issues/8/comments") and ("**fail**" in r.body["body"] or "**warn**" in r.body["body"])
    )
    with stack.api() as api:
        job = api.get(PATHS.api_job(job_id)).json()
    assert links.ui_trace(stack.project, job["run_id"], trace) in commented  # the worker stored it

    seen = _crawl(stack, emitted)
    assert not [u for u in seen if "/api/v1/runs/" in u]
    pages = {urlsplit(u).path for u in seen}
    for must in (
        PATHS.ui_project(stack.project),
        PATHS.ui_jobs(stack.project),
        PATHS.ui_trends(stack.project),
        PATHS.ui_job(stack.project, job_id),
        PATHS.ui_run(stack.project, up["run_id"]),
        PATHS.ui_comparison(stack.project, up["comparison_id"]),
        PATHS.api_run(stack.project, up["run_id"]),
    ):
        assert must in pages, must
    print(f"{len(seen)} URLs answered: " + ", ".join(f"{n} × {s}" for s, n in _count(seen.values())))


def _count(statuses: Any) -> list[tuple[int, int]]:
    counts: dict[int, int] = {}
    for s in statuses:
        counts[s] = counts.get(s, 0) + 1
    return sorted(counts.items())
