"""Every dashboard page a person can reach, and every link the service hands out, opened in Chromium on a 390-px
phone and a 1440-px desktop.

One stack for the module, as deployed: ``uvicorn`` serving the app over a Postgres database of its own, migrated with
Alembic; Redis as the broker; the GitHub stand-in (``tests.server.github.fakegithub``) receiving the commit statuses and
pull-request comments; a real HTTP receiver as the project's alert webhook. Its history is what a project holds after
a few weeks: default-branch runs with a step (which raises an alert, sent to the webhook), a pull request uploaded
with ``attnprof upload`` and its traces (a 61% slower softmax kernel), one profiled on a runner by the GitHub
Action's script in local mode (a failed case and a backend switch), a job profiled and analysed (the test plays the
GPU worker and runs the analysis task's plain code), a paired job (its merge base and head profiled interleaved:
its run's paired comparison gives the verdict, its history one beside it), a job that failed with its worker's log,
one still queued.

Every URL emitted on the way is collected, as ``tests/server/test_links.py`` does: the upload answers' ``url``
fields and summaries, the CLI's printed lines, the action's outputs and job summary, the statuses' target URLs and
the comments' links sent to GitHub, the webhook bodies. Then, signed in, the crawl opens ``/ui`` and follows the
dashboard's own links breadth-first (same origin, ``/ui`` only, at most ``PER_ROUTE`` pages of one route and
``PAGES_MAX`` in all), plus every emitted link meant for a person. On every page, at both widths: the page and what
it loads answer under 400, the console has no error, and the page does not scroll sideways (a wide table scrolls in
its own box). The API's URLs are requested with a token; the traces a page links are downloaded. The paired
comparison's page shows its paired box, names the base side as text no link leads to, and its link to the history
comparison opens.
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
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest
import redis
import uvicorn
from sqlalchemy import select

from attnprof.contract.links import PATHS
from attnprof.server import migrate
from attnprof.server.app import create_app
from attnprof.server.auth import service as auth
from attnprof.server.comparisons.models import Comparison
from attnprof.server.config import Settings
from attnprof.server.db import make_engine, make_sessionmaker
from attnprof.server.jobs.models import Job
from attnprof.server.projects import service as projects
from attnprof.server.testbeds import service as testbeds
from attnprof.worker.analysis import verdict as analysis
from tests import paired_jobs
from tests.claiming import bearer, claim, claim_secret
from tests.pgcluster import free_port
from tests.pgtest import create_database, drop_database
from tests.server.github.fakegithub import FakeGitHub
from tests.server.stack import REDIS_URL, make_settings
from tests.server.web.comparison_documents import SOFTMAX_CASE, SOFTMAX_KERNEL, SOFTMAX_SLOWER, broken, slower_kernel
from tests.server.web.stack import docs

ROOT = Path(__file__).resolve().parents[3]
BIN = Path(sys.executable).parent
TRACES = ROOT / "tests" / "data" / "h200" / "attnprof"
REPO = "acme/attn"
STEP_CASE = "sdpa[backend=cudnn,pass=fwd]"
STEP, LAST = 6, 11
"""The default branch's runs 0 to ``LAST``: from ``STEP`` on, ``STEP_CASE`` is 20% slower (an alert once it held)."""
WIDTHS = (390, 1440)
PAGES_MAX = 80
"""Dashboard pages the crawl finds from ``/ui`` and opens at most, besides the emitted links."""
PER_ROUTE = 2
"""Pages of one route (ids and query values set aside) the crawl opens at most beyond the emitted links, and that
the phone opens: the third run page lays out as the first two did, and the bound keeps the crawl under a minute."""
DELIBERATE: dict[str, int] = {}
"""Paths meant to answer 400 or more, and their status: none."""
NOT_FOLLOWED = (PATHS.ui_logout(),)
"""Links the crawl does not follow: signing out would end the crawl's session (its own tests cover it)."""
SPEC = '[suite]\nname = "s"\n\n[[cases]]\nname = "prefill"\ntarget = "sdpa"\nq_heads = 4\nseq_q = 128\nhead_dim = 64\n'
# What stands in for ``attnprof profile`` on the runner: the prepared document is the profile's output; every other
# verb is the real command.
PROFILE_SHIM = """#!{python}
import os, shutil, sys
args = sys.argv[1:]
if args[:1] == ["profile"]:
    out = args[args.index("--out") + 1]
    shutil.copy(os.environ["CRAWL_TEST_RESULT"], out)
    for trace in os.environ["CRAWL_TEST_TRACES"].split(os.pathsep):
        shutil.copy(trace, os.path.dirname(out))
    sys.exit(0)
os.execv({attnprof!r}, [{attnprof!r}, *args])
"""
_URL = re.compile(r"https?://[^\s<>()\[\]\"'`|]+")
# A path segment that is an id (a UUID, a commit, a number) or a trace's file name: one route, whatever its value.
_ID = re.compile(r"^([0-9a-f]{8}-[0-9a-f-]{27}|[0-9a-f]{40}|\d+|.+\.json\.gz)$")
# Every chart the page shows open is drawn (those in a closed <details> are drawn when it opens).
DRAWN_JS = """() => [...document.querySelectorAll(".chart[data-spec]")]
  .every(el => el.dataset.drawn === "true" || el.closest("details:not([open])"))"""
# The page's own width against the window's, and what sticks out of it, for the failure message.
OVERFLOW_JS = """() => {
  const root = document.scrollingElement;
  const clipped = e => {  // inside a box that scrolls or clips it: it does not widen the page
    for (let p = e.parentElement; p && p !== document.body; p = p.parentElement) {
      if (getComputedStyle(p).overflowX !== "visible") return true;
    }
    return false;
  };
  const wide = [...document.querySelectorAll("body *")]
    .filter(e => e.getBoundingClientRect().right > root.clientWidth + 1 && !clipped(e)).slice(0, 5)
    .map(e => e.tagName.toLowerCase() + (e.id ? "#" + e.id : "") + [...e.classList].map(c => "." + c).join(""));
  return {scrollWidth: root.scrollWidth, clientWidth: root.clientWidth, wide};
}"""


@dataclass
class Emitted:
    """Every URL the service handed out, with where it came from (the first place)."""

    where: dict[str, str] = field(default_factory=dict)
    sources: set[str] = field(default_factory=set)
    """Every place that emitted a URL (one already seen elsewhere too)."""

    def add(self, url: str, source: str) -> None:
        self.where.setdefault(urlunsplit(urlsplit(url)._replace(fragment="")), source)
        self.sources.add(source)

    def text(self, text: str, source: str) -> list[str]:
        found = [u.rstrip(".,;:") for u in _URL.findall(text)]
        for u in found:
            self.add(u, source)
        return found

    def json(self, value: Any, source: str, key: str = "") -> None:
        """The ``url`` and ``*_url`` fields of a JSON answer, and every URL in its text (a summary, a webhook body)."""
        if isinstance(value, dict):
            for k, v in value.items():
                self.json(v, source, k)
        elif isinstance(value, list):
            for v in value:
                self.json(v, source, key)
        elif isinstance(value, str):
            if key == "url" or key.endswith("_url"):
                self.add(value, f"{source}: {key}")
            else:
                self.text(value, f"{source}: {key}")


@dataclass
class Crawl:
    url: str
    settings: Settings
    project: str
    admin: str
    submit: str
    testbed: str
    worker: str
    github: FakeGitHub
    hooks: list[bytes]
    tmp: Path
    emitted: Emitted = field(default_factory=Emitted)
    queued_job: str = ""
    paired: tuple[str, str, str] = ("", "", "")
    """The paired job's comparisons, paired then history, and its base side's result document id."""
    seed_s: float = 0.0

    def api(self, token: str | None = None) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers=bearer(token or self.submit), timeout=60)


@pytest.fixture(scope="module")
def crawl(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Crawl]:
    name, db_url = create_database()
    server: uvicorn.Server | None = None
    hooks: list[bytes] = []

    class Receiver(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            hooks.append(self.rfile.read(int(self.headers["Content-Length"])))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *_: Any) -> None:
            pass

    receiver = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    testbed = f"tb-crawl-{uuid.uuid4().hex[:8]}"
    try:
        migrate.upgrade(db_url)
        engine = make_engine(db_url)
        with make_sessionmaker(engine)() as session:
            project = projects.create(session, name=f"crawl-{uuid.uuid4().hex[:8]}")
            admin = auth.create_project_token(session, project_id=project.id, role="admin")[1]
            submit = auth.create_project_token(session, project_id=project.id, role="submit")[1]
            worker = auth.create_worker_token(session, testbed_id=testbeds.ensure(session, testbed).id)[1]
            projects.allow_repository(session, project_id=project.id, repo=REPO, added_by="the crawl")
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
            state = Crawl(
                url, settings, project_name, admin, submit, testbed, worker, github, hooks, tmp_path_factory.mktemp("c")
            )
            seeding = time.monotonic()
            _seed(state, f"http://127.0.0.1:{receiver.server_address[1]}/hooks/attnprof")
            state.seed_s = time.monotonic() - seeding
            yield state
    finally:
        if server is not None:
            server.should_exit = True
            time.sleep(0.3)
        receiver.shutdown()
        receiver.server_close()
        drop_database(name)
        queue = redis.Redis.from_url(REDIS_URL)
        queue.delete(f"profile.{testbed}", "analysis")  # the queued job's message
        queue.close()


def _commit(i: int) -> str:
    return f"{i + 0xC00:x}" + "c" * 37


def _env(crawl: Crawl, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")}
    env.update(PYTHONPATH=str(ROOT), ATTNPROF_SERVER=crawl.url, ATTNPROF_TOKEN=crawl.submit, **extra)
    return env


def _run(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=120)
    return done


def _upload(crawl: Crawl, doc: dict[str, Any], source: str, **provenance: Any) -> dict[str, Any]:
    """Upload ``doc`` over the API, as a client that profiled without a trace pass (a trace it names but never
    sends would be a link to nothing in the answer's summary: the CLI sends them after the answer)."""
    doc = {**doc, "cases": [{**c, "trace": None} for c in doc["cases"]]}
    with crawl.api() as api:
        answer = api.post(PATHS.api_results(crawl.project), json=docs.upload_body(doc, **provenance))
    assert answer.status_code == 201, answer.text
    body: dict[str, Any] = answer.json()
    crawl.emitted.json(body, source)
    return body


def _job(crawl: Crawl, commit: str, pr: int, trees: dict[str, bytes] | None = None) -> str:
    """Submit a job; ``trees``: its bundles by field (``bundle`` and ``base_bundle``: a paired job)."""
    files: dict[str, Any] = {name: (f"{name}.tar.gz", data) for name, data in (trees or {}).items()}
    with crawl.api() as api:
        answer = api.post(
            PATHS.api_jobs(crawl.project),
            files={"spec": ("attnprof.toml", SPEC.encode(), "application/toml"), **files},
            data={
                "testbed": crawl.testbed,
                "branch": f"feat-{pr}",
                "commit": commit,
                "base_commit": _commit(LAST),
                "repo": REPO,
                "pr": str(pr),
                "suite_path": "perf/attnprof.toml",
            },
        )
    assert answer.status_code == 202, answer.text
    crawl.emitted.json(answer.json(), "POST jobs")
    job_id: str = answer.json()["id"]
    return job_id


def _claimed(crawl: Crawl, http: httpx.Client, job_id: str) -> dict[str, str]:
    secret = claim_secret(REDIS_URL, crawl.testbed, job_id)
    redis.Redis.from_url(REDIS_URL).delete(f"profile.{crawl.testbed}")
    return bearer(claim(http, crawl.worker, job_id, secret, worker="gpu-host-3")["token"])


def _seed(crawl: Crawl, hook_url: str) -> None:
    """The history (the module's docstring says what it holds), collecting every URL emitted on the way."""
    cli, env, emitted = str(BIN / "attnprof"), _env(crawl), crawl.emitted
    with crawl.api(crawl.admin) as api:
        secret = uuid.uuid4().hex * 2
        hook = api.put(f"/api/v1/projects/{crawl.project}/alert-webhook", json={"url": hook_url, "secret": secret})
        assert hook.status_code == 200, hook.text
    # The default branch: STEP runs at one level, then STEP_CASE 20% slower (an alert once it held five runs).
    first = crawl.tmp / "first.json"
    first.write_text(json.dumps(docs.h200()))
    argv = [cli, "upload", str(first), "--branch", "main", "--commit", _commit(0), "--repo", REPO]
    done = _run(argv, env, crawl.tmp)
    assert done.returncode == 0, done.stdout + done.stderr
    emitted.text(done.stdout, "attnprof upload")
    for i in range(1, LAST + 1):
        doc = docs.h200(slower=1.2 if i >= STEP else 1.0, cases=[STEP_CASE], jitter=0.002 * ((i * 7) % 3 - 1))
        repo = {"repo": REPO} if i == LAST else {}  # a commit status for the newest only: one run page is as another
        _upload(crawl, doc, f"upload {i}", commit=_commit(i), ancestors=[_commit(i - 1)], **repo)
    ancestors = ",".join(_commit(i) for i in range(LAST, LAST - 8, -1))
    # Pull request 7: a softmax kernel 61% slower, uploaded with its traces by the CLI.
    slow = crawl.tmp / "slow.json"
    slow.write_text(json.dumps(slower_kernel(docs.h200(), SOFTMAX_CASE, SOFTMAX_KERNEL, SOFTMAX_SLOWER)))
    argv = [cli, "upload", str(slow), "--branch", "feat-7", "--commit", "7" * 40, "--repo", REPO, "--pr", "7"]
    argv += ["--base-commit", _commit(LAST), "--ancestors", ancestors, "--trace-dir", str(TRACES)]
    done = _run(argv, env, crawl.tmp)
    assert done.returncode == 1, done.stdout + done.stderr  # a failing verdict
    emitted.text(done.stdout, "attnprof upload (pull request 7)")
    # Pull request 9, profiled on a runner by the action in local mode: a failed case and a backend switch.
    _action(crawl, broken(slower_kernel(docs.h200(), SOFTMAX_CASE, SOFTMAX_KERNEL, SOFTMAX_SLOWER)))
    # Pull request 8: a job, profiled (STEP_CASE slower still), analysed, fed back; a second job that failed.
    job = _job(crawl, "8" * 40, 8)
    with httpx.Client(base_url=crawl.url, timeout=60) as http:
        worker = _claimed(crawl, http, job)
        result = {"attempt": 1, "result": docs.h200(slower=1.3, cases=[STEP_CASE])}
        assert http.post(f"/internal/jobs/{job}/result", json=result, headers=worker).status_code == 200
        redis.Redis.from_url(REDIS_URL).delete("analysis")
        assert analysis.run(job, crawl.settings) == "fail"
        failed = _job(crawl, "8" * 39 + "9", 8)
        worker = _claimed(crawl, http, failed)
        log = "Traceback (most recent call last):\n" + '  File "bench.py", line 9, in <module>\n' * 30
        body = {"attempt": 1, "reason": f"every case failed (1): {log}RuntimeError: CUDA error: misaligned address"}
        assert http.post(f"/internal/jobs/{failed}/failure", json=body, headers=worker).status_code == 200
        # Pull request 11: a paired job (its merge base and head profiled interleaved), the head 20% slower.
        trees = paired_jobs.trees(head=b"SLOW = 1.2\n", base=b"SLOW = 1.0\n")
        paired_job = _job(crawl, "b" * 40, 11, trees)
        worker = _claimed(crawl, http, paired_job)
        body = paired_jobs.paired_result(1.2, pairs=8, seed=5, wall_s=42.0).body()
        answer = http.post(f"/internal/jobs/{paired_job}/result", json=body, headers=worker)
        assert answer.status_code == 200, answer.text
        redis.Redis.from_url(REDIS_URL).delete("analysis")
        assert analysis.run(paired_job, crawl.settings) == "fail"
    crawl.paired = (*_paired_comparisons(crawl, paired_job), body["base"]["run"]["id"])
    crawl.queued_job = _job(crawl, "a" * 40, 10)
    with crawl.api() as api:
        for job_id in (job, failed, paired_job, crawl.queued_job):
            for path in (PATHS.api_job(job_id), PATHS.api_job_comment(job_id)):
                answer = api.get(path)
                assert answer.status_code == 200, answer.text
                emitted.add(crawl.url + path, "the job's API")
                if "json" in answer.headers["content-type"]:
                    emitted.json(answer.json(), f"GET {path}")
                else:
                    emitted.text(answer.text, f"GET {path}")
    # What GitHub and the webhook were sent, once it has arrived.
    deadline = time.monotonic() + 30
    while not (_sent(crawl) and crawl.hooks):
        assert time.monotonic() < deadline, ([r.path for r in crawl.github.requests()], len(crawl.hooks))
        time.sleep(0.1)
    for r in crawl.github.requests():
        if r.method in ("POST", "PATCH") and isinstance(r.body, dict):
            if "target_url" in r.body:
                emitted.add(r.body["target_url"], f"a commit status ({r.path})")
            if "body" in r.body:
                emitted.text(r.body["body"], f"a PR comment ({r.path})")
    for hook in crawl.hooks:
        emitted.json(json.loads(hook), "the alert webhook's body")


def _sent(crawl: Crawl) -> bool:
    """Each pull request's comment and the failed job's error status have reached GitHub."""
    commented = {pr for pr in (7, 8, 9, 11) if crawl.github.comments(REPO, pr)}
    failed = any(s["state"] == "error" for s in crawl.github.statuses(REPO, "8" * 39 + "9"))
    return commented == {7, 8, 9, 11} and failed


def _paired_comparisons(crawl: Crawl, job_id: str) -> tuple[str, str]:
    """The paired job's run's comparisons: (the paired one, the history one), as the database holds them."""
    engine = make_engine(crawl.settings.database_url)
    try:
        with engine.connect() as conn:
            run_id = conn.execute(select(Job.run_id).where(Job.id == job_id)).scalar_one()
            rows = conn.execute(select(Comparison.mode, Comparison.id).where(Comparison.candidate_run_id == run_id))
            by_mode = {mode: str(id_) for mode, id_ in rows}
    finally:
        engine.dispose()
    assert set(by_mode) == {"paired", "history"}, by_mode
    return by_mode["paired"], by_mode["history"]


def _action(crawl: Crawl, doc: dict[str, Any]) -> None:
    """The action's script in local mode on pull request 9, in a runner-like environment."""
    folder = crawl.tmp / "runner"
    folder.mkdir()
    (folder / "result.json").write_text(json.dumps(doc))
    (folder / "suite.toml").write_text(SPEC)
    event = {"pull_request": {"number": 9, "head": {"ref": "feat-9", "sha": "9" * 40}, "base": {"sha": _commit(LAST)}}}
    (folder / "event.json").write_text(json.dumps(event))
    shim = folder / "attnprof-shim"
    shim.write_text(PROFILE_SHIM.format(python=sys.executable, attnprof=str(BIN / "attnprof")))
    shim.chmod(0o755)
    env = _env(
        crawl,
        ATTNPROF_MODE="local",
        ATTNPROF_CLI=str(shim),
        ATTNPROF_SUITE=str(folder / "suite.toml"),
        ATTNPROF_TESTBED="gpu-runner",
        ATTNPROF_FAIL_ON="never",
        ATTNPROF_TIMEOUT_MINUTES="2",
        CRAWL_TEST_RESULT=str(folder / "result.json"),
        CRAWL_TEST_TRACES=os.pathsep.join(str(TRACES / c["trace"]) for c in doc["cases"] if c.get("trace")),
        GITHUB_EVENT_NAME="pull_request",
        GITHUB_EVENT_PATH=str(folder / "event.json"),
        GITHUB_REPOSITORY=REPO,
        GITHUB_STEP_SUMMARY=str(folder / "summary.md"),
        GITHUB_OUTPUT=str(folder / "output.txt"),
        RUNNER_TEMP=str(folder / "tmp"),
    )
    done = _run([sys.executable, "-m", "attnprof.client.action"], env, folder)
    assert (folder / "output.txt").exists(), done.stdout + done.stderr
    outputs = dict(line.split("=", 1) for line in (folder / "output.txt").read_text().splitlines())
    assert outputs["verdict"] == "fail", done.stdout + done.stderr
    crawl.emitted.add(outputs["report-url"], "the action's report-url")
    crawl.emitted.text((folder / "summary.md").read_text(), "the action's job summary")


def _route(url: str) -> str:
    """The route a dashboard URL opens: its path with ids and file names set aside, and its query's keys."""
    parts = urlsplit(url)
    path = "/".join("{}" if _ID.match(seg) else seg for seg in parts.path.split("/"))
    keys = sorted({kv.split("=", 1)[0] for kv in parts.query.split("&") if kv})
    return path + ("?" + "&".join(keys) if keys else "")


@dataclass
class Visit:
    """What one page showed at one width."""

    status: int
    errors: list[str]
    scroll_width: int
    client_width: int
    wide: list[str]
    links: list[str]


def _sign_in(tab: Any, crawl: Crawl) -> None:
    tab.goto(crawl.url + PATHS.ui_login())
    tab.fill("#token", crawl.admin)
    with tab.expect_navigation():
        tab.keyboard.press("Enter")
    assert urlsplit(tab.url).path == PATHS.ui_project(crawl.project), tab.url


def _visit(tab: Any, url: str, errors: list[str]) -> Visit:
    errors.clear()
    answer = tab.goto(url, wait_until="load")
    tab.wait_for_function(DRAWN_JS, timeout=10_000)  # the charts draw after the load, and take their width then
    size = tab.evaluate(OVERFLOW_JS)
    links = tab.eval_on_selector_all("a[href]", "els => els.map(e => e.href)")
    return Visit(
        status=answer.status if answer is not None else 0,
        errors=list(errors),
        scroll_width=size["scrollWidth"],
        client_width=size["clientWidth"],
        wide=size["wide"],
        links=links,
    )


def _watch(tab: Any) -> list[str]:
    """Console errors, uncaught exceptions, failed requests and answers of 400 or more of a tab, as they happen."""
    errors: list[str] = []
    tab.on("console", lambda m: errors.append(f"console: {m.text}") if m.type == "error" else None)
    tab.on("pageerror", lambda e: errors.append(f"page error: {e}"))
    tab.on("requestfailed", lambda r: errors.append(f"request failed: {r.url} ({r.failure})"))

    def answered(r: Any) -> None:
        if r.status >= 400 and DELIBERATE.get(urlsplit(r.url).path) != r.status:
            errors.append(f"HTTP {r.status}: {r.url}")

    tab.on("response", answered)
    return errors


def _check(tab: Any, url: str, width: int, errors: list[str], where: str) -> tuple[list[str], list[str]]:
    """Open ``url``; (what is wrong with it at ``width``, the links it has)."""
    seen = _visit(tab, url, errors)
    problems = [f"{width}px {url}: {e} ({where})" for e in seen.errors]
    if seen.status >= 400 and DELIBERATE.get(urlsplit(url).path) != seen.status:
        problems.append(f"{width}px {url}: HTTP {seen.status} ({where})")
    if urlsplit(tab.url).path == PATHS.ui_login():
        problems.append(f"{width}px {url}: sent to sign in ({where})")
    if seen.scroll_width > seen.client_width + 1:
        problems.append(
            f"{width}px {url}: scrolls sideways ({seen.scroll_width} > {seen.client_width} px; sticking out: "
            f"{', '.join(seen.wide) or '?'})"
        )
    return problems, seen.links


def _followed(url: str, origin: str) -> str | None:
    """The dashboard URL a link leads to (its fragment dropped), or None: not the dashboard's, or not followed."""
    parts = urlsplit(url)
    if parts.netloc != origin or not (parts.path == "/ui" or parts.path.startswith("/ui/")):
        return None
    if parts.path in NOT_FOLLOWED or parts.path.startswith("/ui/static/"):
        return None
    return urlunsplit(parts._replace(fragment=""))


def _paired_page(tab: Any, crawl: Crawl, errors: list[str]) -> None:
    """The paired job's comparison, in the browser: the paired box shows, the base side's id is text that no link
    leads to (it is no stored run), and the history comparison beside it opens."""
    paired_id, history_id, base_run = crawl.paired
    problems, _ = _check(tab, crawl.url + PATHS.ui_comparison(crawl.project, paired_id), max(WIDTHS), errors, "test")
    assert problems == []
    box = tab.locator("#paired")
    assert box.is_visible() and "Paired run on one GPU" in box.inner_text()
    assert tab.locator("#paired-base").inner_text() == base_run and base_run in tab.locator("main").inner_text()
    assert tab.locator(f'a[href*="{base_run}"]').count() == 0
    history = tab.locator("#beside a")
    assert history.get_attribute("href") == PATHS.ui_comparison(crawl.project, history_id)
    with tab.expect_navigation() as opened:
        history.click()
    assert opened.value is not None and opened.value.status == 200, tab.url
    assert urlsplit(tab.url).path == PATHS.ui_comparison(crawl.project, history_id)
    assert tab.locator("#paired").count() == 0 and errors == []
    assert tab.locator(f'#beside a[href="{PATHS.ui_comparison(crawl.project, paired_id)}"]').count() == 1


def test_every_page_and_every_emitted_link_opens_and_fits_a_phone_and_a_desktop(crawl: Crawl, browser: Any) -> None:
    started = time.monotonic()
    origin = urlsplit(crawl.url).netloc
    emitted = crawl.emitted.where
    people = [u for u in emitted if _followed(u, origin)]
    api = [u for u in emitted if urlsplit(u).netloc == origin and urlsplit(u).path.startswith("/api/")]
    assert set(emitted) == set(people) | set(api), [(u, w) for u, w in emitted.items() if u not in people + api]
    sources = " ".join(crawl.emitted.sources)
    for kind in ("attnprof upload", "upload 1", "the action's", "commit status", "PR comment", "alert webhook"):
        assert kind in sources, (kind, sorted(crawl.emitted.sources))

    # The API's URLs answer to a token.
    with crawl.api(crawl.admin) as client:
        for u in api:
            assert client.get(u).status_code < 400, (u, emitted[u])

    problems: list[str] = []
    pages: list[str] = []
    downloads: list[str] = []
    # The desktop first: it finds the pages, breadth-first from /ui and every emitted link.
    context = browser.new_context(viewport={"width": max(WIDTHS), "height": 900})
    tab = context.new_page()
    errors = _watch(tab)
    _sign_in(tab, crawl)
    queue = [crawl.url + PATHS.ui_home(), *people]
    routes: Counter[str] = Counter()
    seen: set[str] = set()
    while queue:
        url = _followed(queue.pop(0), origin)
        if url is None or url in seen:
            continue
        seen.add(url)
        if "/traces/" in url:  # a file the browser downloads: fetched with the session instead
            downloads.append(url)
            continue
        if url not in emitted:
            route = _route(url)
            if routes[route] >= PER_ROUTE or len(pages) >= PAGES_MAX:
                continue
            routes[route] += 1
        pages.append(url)
        found, links = _check(tab, url, max(WIDTHS), errors, emitted.get(url, "a dashboard link"))
        problems += found
        queue += links
    for u in downloads:
        answer = context.request.get(u)
        if answer.status >= 400:
            problems.append(f"{u}: HTTP {answer.status} ({emitted.get(u, 'a dashboard link')})")
    _paired_page(tab, crawl, errors)
    context.close()
    # Then every other width opens the same routes: PER_ROUTE pages of each (the emitted links of one route, such as
    # every upload's comparison, lay out as the crawled ones do; each answered on the desktop).
    narrow: list[str] = []
    per_route: Counter[str] = Counter()
    for url in pages:
        per_route[_route(url)] += 1
        if per_route[_route(url)] <= PER_ROUTE:
            narrow.append(url)
    for width in [w for w in WIDTHS if w != max(WIDTHS)]:
        context = browser.new_context(viewport={"width": width, "height": 900})
        tab = context.new_page()
        errors = _watch(tab)
        _sign_in(tab, crawl)
        for url in narrow:
            problems += _check(tab, url, width, errors, emitted.get(url, "a dashboard link"))[0]
        context.close()
    assert not problems, f"{len(problems)} problems:\n" + "\n".join(problems)
    # What the crawl must have reached: every kind of page, and every emitted link meant for a person.
    reached = {_route(u).split("?")[0] for u in pages}
    project = f"/ui/p/{crawl.project}"
    for must in ("", "/jobs", "/jobs/{}", "/runs", "/runs/{}", "/pulls/{}", "/comparisons/{}", "/trends"):
        assert project + must in reached, (must, sorted(reached))
    assert {_followed(u, origin) for u in people} <= set(pages) | set(downloads)
    assert crawl.url + PATHS.ui_comparison(crawl.project, crawl.paired[0]) in pages, "the paired comparison"
    assert downloads, "no trace was linked"
    print(
        f"{len(pages)} pages at {max(WIDTHS)} px, {len(narrow)} at {min(WIDTHS)} px, {len(downloads)} traces, "
        f"{len(api)} API URLs, {len(people)} emitted dashboard links; seeded in {crawl.seed_s:.1f} s, crawled in "
        f"{time.monotonic() - started:.1f} s"
    )


def test_the_crawls_checks_see_a_page_that_scrolls_sideways_and_a_console_error(crawl: Crawl, browser: Any) -> None:
    """The checks themselves: a block wider than a phone widens the page and is named; one inside a box that scrolls
    does not; an error in the console is seen."""
    context = browser.new_context(viewport={"width": min(WIDTHS), "height": 900})
    tab = context.new_page()
    errors = _watch(tab)
    _sign_in(tab, crawl)
    url = crawl.url + PATHS.ui_runs(crawl.project)
    assert _check(tab, url, min(WIDTHS), errors, "test")[0] == []
    tab.evaluate(
        """() => { const box = document.createElement("div"); box.style.overflowX = "auto";
        box.innerHTML = '<table><tr><td style="min-width: 1500px">wide</td></tr></table>';
        document.querySelector("main").append(box); console.error("planted"); }"""
    )
    seen = tab.evaluate(OVERFLOW_JS)
    assert seen["scrollWidth"] <= seen["clientWidth"] + 1 and seen["wide"] == []
    assert any("planted" in e for e in errors)
    tab.evaluate("""() => { const wide = document.createElement("p"); wide.id = "too-wide";
        wide.style.width = "1000px"; wide.textContent = "wide"; document.querySelector("main").append(wide); }""")
    seen = tab.evaluate(OVERFLOW_JS)
    assert seen["scrollWidth"] > seen["clientWidth"] + 1 and "p#too-wide" in seen["wide"], seen
    context.close()


def test_the_alert_webhook_links_to_the_service(crawl: Crawl) -> None:
    assert crawl.hooks
    for hook in crawl.hooks:
        link = json.loads(hook)["alert"]["url"]
        assert link.startswith(crawl.url + "/ui/"), link


def test_one_command_makes_every_picture_the_docs_show_and_no_other_lies_in_docs_img() -> None:
    """``bench/dashboard_screenshots.py`` makes every image that README.md and docs/*.md link, and docs/img holds
    nothing else (a picture no page shows goes stale unseen)."""
    from bench import dashboard_screenshots as script

    linked = set()
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        linked |= set(re.findall(r"img/([\w.-]+\.png)", doc.read_text()))
    assert linked and linked <= set(script.shots()), sorted(linked - set(script.shots()))
    assert {p.name for p in (ROOT / "docs" / "img").iterdir()} == linked
    for test_file, names in script.TEST_SHOTS.items():  # each named test writes its pictures
        text = (ROOT / test_file).read_text()
        assert "ATTNPROF_SCREENSHOTS" in text and all(n in text for n in names), test_file
