"""Every screenshot of the dashboard that the docs show (``docs/dashboard.md``), taken by Playwright with Debian's
Chromium: one command remakes them all.

    .venv/bin/python -m bench.dashboard_screenshots            # writes every docs/img/*.png the docs link
    .venv/bin/python -m bench.dashboard_screenshots --tests tests/server/web/test_comparison_answer.py   # some of them

Run on purpose (not in CI). Two sources, each showing what the service really made:

- this script's own site, for ``dashboard-{overview,trends-kernel,run,job,jobs}.png`` (``SITE_SHOTS``), built all
  through the service's API and the worker's plain analysis code:

  1. a fresh database ``attnprof_screens`` (dropped first), migrated; project ``attention`` with an admin token;
  2. ``attnprof serve`` on a free port (filesystem broker in a temporary folder);
  3. 16 default-branch uploads of the real H200 run (run-to-run noise of about 0.4 %), its first case 25 % slower
     from the 10th: the upload's change-point detection records the step; one run pinned, one excluded;
  4. a pull-request upload with one case 25 % slower (a failing comparison);
  5. three jobs: one done (claimed, its result posted through the worker endpoints, analysed by
     ``attnprof.worker.analysis.verdict.run``), one failed (its worker reported why), one still queued;
  6. the screenshots, 1400 px wide, each page after its charts are drawn.

  The database is dropped at the end unless ``--keep``.
- the browser tests that set up a page's own story (``TEST_SHOTS``: the comparison of a broken candidate, the runs
  and pull-request pages, a failed job's log, the trends page's baseline and alerts), run with
  ``ATTNPROF_SCREENSHOTS`` set to the output folder (``pytest <file> -k screenshot``).
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import os
import random
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

from attnprof.server import migrate
from attnprof.server.auth import service as auth
from attnprof.server.config import Settings
from attnprof.server.db import make_engine, make_sessionmaker
from attnprof.server.jobs import attempts
from attnprof.server.jobs import repository as job_rows
from attnprof.server.projects import service as projects
from attnprof.server.testbeds import repository as testbeds
from bench import service_seed as seeding

ROOT = Path(__file__).resolve().parents[1]

OUT = ROOT / "docs" / "img"
CHROMIUM = "/usr/bin/chromium"
PROJECT = "attention"
SPEC = (ROOT / "examples" / "cpu.toml").read_bytes()
MAX_HEIGHT_PX = 2200
SITE_SHOTS = ("overview", "trends-kernel", "run", "job", "jobs")
"""The pages this script's site photographs, each as ``dashboard-<name>.png``."""
TEST_SHOTS = {
    "tests/server/web/test_comparison_answer.py": ("comparison.png",),
    "tests/server/web/test_runs_and_pulls.py": ("dashboard-runs.png", "dashboard-pull.png", "dashboard-job-failed.png"),
    "tests/server/web/test_trends_baseline.py": ("trends.png",),
}
"""The browser tests whose ``screenshot`` tests write the other pictures, and which."""


def shots() -> list[str]:
    """The file names of every picture this script makes."""
    return [f"dashboard-{n}.png" for n in SITE_SHOTS] + [n for names in TEST_SHOTS.values() for n in names]


def shoot_tests(files: list[str], out: Path) -> None:
    """Run the ``screenshot`` tests of ``files``, writing their pictures into ``out``."""
    env = {**os.environ, "ATTNPROF_SCREENSHOTS": str(out.resolve())}
    argv = [str(ROOT / ".venv" / "bin" / "pytest"), "-q", "-p", "no:cacheprovider", *files, "-k", "screenshot"]
    done = subprocess.run(argv, env=env, cwd=ROOT)
    if done.returncode != 0:
        raise SystemExit(f"the screenshot tests failed (exit {done.returncode}): {' '.join(argv)}")
    for f in files:
        for name in TEST_SHOTS[f]:
            print(f"  {out / name}", flush=True)


def variant(
    template: dict[str, Any],
    *,
    slower: float = 1.0,
    cases: set[str] | None = None,
    noise: float = 0.0,
    rng: random.Random | None = None,
) -> dict[str, Any]:
    """A copy of the H200 run with a new run id: latencies of ``cases`` (all when None) times ``slower``, every
    case times a run-wide lognormal offset of ``noise``; rates scaled to match."""
    doc = copy.deepcopy(template)
    doc["run"]["id"] = str(uuid.uuid4())
    offset = (rng or random.Random()).lognormvariate(0.0, noise) if noise else 1.0
    for case in doc["cases"]:
        s = offset * (slower if cases is None or case["id"] in cases else 1.0)
        lat = case.get("latency_us")
        if lat:
            lat["samples"] = [v * s for v in lat["samples"]]
            for k in ("median", "p25", "p75", "min", "max"):
                lat[k] *= s
        for k in ("tflops", "gbps", "compute_util", "bandwidth_util"):
            if (case.get("achieved") or {}).get(k) is not None:
                case["achieved"][k] /= s
        for kernel in case.get("kernels", []):
            for q in ("median", "p25", "p75"):
                kernel["duration_us"][q] *= s
            for q in ("tflops", "gbps", "compute_util", "bandwidth_util"):
                if kernel.get(q) is not None:
                    kernel[q] /= s
    return doc


def build(url: str, admin: str, template: dict[str, Any], settings: Settings) -> dict[str, Any]:
    """Fill the site through the API; returns the ids the screenshots need."""
    rng = random.Random(7)
    slow_case = template["cases"][0]["id"]
    out: dict[str, Any] = {"case": slow_case, "kernel": template["cases"][0]["kernels"][0]["key"]}
    api = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {admin}"}, timeout=120)
    p = f"/api/v1/projects/{PROJECT}"
    commits = [hashlib.sha1(f"main {i}".encode()).hexdigest() for i in range(16)]
    runs = []
    with api:
        for i, commit in enumerate(commits):
            doc = variant(template, slower=1.25 if i >= 9 else 1.0, cases={slow_case}, noise=0.004, rng=rng)
            body = {"result": doc, "branch": "main", "commit": commit, "ancestors": commits[:i][::-1]}
            answer = api.post(f"{p}/results", json=body)
            answer.raise_for_status()
            runs.append(answer.json()["run_id"])
            out["testbed"] = answer.json()["testbed"]
        api.post(f"{p}/baselines/pins", json={"run_id": runs[3]}).raise_for_status()
        api.post(
            f"{p}/baselines/exclusions", json={"run_id": runs[5], "reason": "GPU clocks throttled during the run"}
        ).raise_for_status()
        pr = api.post(
            f"{p}/results",
            json={
                "result": variant(template, slower=1.25, cases={template["cases"][1]["id"]}),
                "branch": "faster-rope",
                "commit": hashlib.sha1(b"faster-rope").hexdigest(),
                "base_commit": commits[-1],
                "ancestors": commits[:-1][::-1],
                "pr": 42,
            },
        )
        pr.raise_for_status()
        out["pr_run"] = pr.json()["run_id"]
        jobs = []
        for i in range(3):
            made = api.post(
                f"{p}/jobs",
                files={"spec": ("cpu.toml", SPEC, "application/toml")},
                data={
                    "branch": "faster-rope",
                    "commit": hashlib.sha1(f"faster-rope {i}".encode()).hexdigest(),
                    "testbed": out["testbed"],
                    "pr": "42",
                    "base_commit": commits[-1],
                },
            )
            made.raise_for_status()
            jobs.append(made.json()["id"])
    engine = make_engine(settings.database_url)
    with make_sessionmaker(engine)() as session:
        tb = testbeds.get_by_name(session, out["testbed"])
        assert tb is not None
        worker = auth.create_worker_token(session, testbed_id=tb.id, name="screens")[1]
        # The claim secrets travel in the folder broker's messages: offer the two jobs again, as the sweep would,
        # and keep the new messages' secrets (the old messages then claim nothing).
        secrets = {}
        for job_id in jobs[:2]:
            row = job_rows.get(session, job_id)
            assert row is not None
            secrets[job_id] = attempts.offer_next_attempt(row, out["testbed"]).claim_secret
        session.commit()
    engine.dispose()

    def claim(job_id: str, host: str) -> httpx.Client:
        """Claim attempt 1 as the worker ``host``; a client holding the attempt's job token."""
        body = {"attempt": 1, "worker": host, "secret": secrets[job_id]}
        answer = httpx.post(
            f"{url}/internal/jobs/{job_id}/claim", json=body, headers={"Authorization": f"Bearer {worker}"}
        )
        answer.raise_for_status()
        return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {answer.json()['token']}"}, timeout=120)

    done, failed = jobs[0], jobs[1]
    with claim(done, "h200-host-3/gpu0") as w:
        result = variant(template, slower=1.04, cases={template["cases"][2]["id"]})
        w.post(f"/internal/jobs/{done}/result", json={"attempt": 1, "result": result}).raise_for_status()
    with claim(failed, "h200-host-1/gpu2") as w:
        w.post(
            f"/internal/jobs/{failed}/failure",
            json={
                "attempt": 1,
                "reason": "case prefill-long: CUDA error: out of memory (tried to allocate 9.00 GiB; 3.1 GiB free of"
                " 139.8 GiB): lower seq_q or batch in the suite",
            },
        ).raise_for_status()
    from attnprof.worker.analysis import verdict as analysis

    analysis.run(done, settings)
    out.update(runs=runs, job_done=done, job_failed=failed, job_queued=jobs[2])
    return out


def shoot(url: str, admin: str, ids: dict[str, Any], out: Path) -> list[Path]:
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    from playwright.sync_api import sync_playwright

    p = f"{url}/ui/p/{PROJECT}"
    pages = {
        "overview": p,
        "trends-kernel": f"{p}/trends?" + str(httpx.QueryParams(case=ids["case"], kernel=ids["kernel"])),
        "run": f"{p}/runs/{ids['pr_run']}",
        "job": f"{p}/jobs/{ids['job_done']}",
        "jobs": f"{p}/jobs",
    }
    assert tuple(pages) == SITE_SHOTS
    made = []
    out.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--headless", "--no-sandbox"])
        tab = browser.new_context(viewport={"width": 1400, "height": 900}).new_page()
        tab.goto(f"{url}/ui/login")
        tab.fill("#token", admin)
        with tab.expect_navigation():
            tab.keyboard.press("Enter")
        for name, address in pages.items():
            answer = tab.goto(address)
            status = answer.status if answer is not None else 0
            if status != 200:
                print(f"  {name}: {address} answered {status}; no screenshot", flush=True)
                continue
            tab.wait_for_load_state("networkidle")
            try:
                tab.wait_for_function(
                    # a chart in a closed <details> is drawn when it opens (attnprof/server/web/static/app.js)
                    "Array.from(document.querySelectorAll('.chart[data-spec]'))"
                    ".every((c) => c.dataset.drawn === 'true' || c.closest('details:not([open])'))",
                    timeout=15_000,
                )
            except PlaywrightTimeout:
                print(f"  {name}: a chart was not drawn in 15 s; the screenshot shows the page as it is", flush=True)
            path = out / f"dashboard-{name}.png"
            # Long pages (a run's every case and kernel) are cut to their first screens: the doc shows the top.
            height = min(int(tab.evaluate("document.documentElement.scrollHeight")), MAX_HEIGHT_PX)
            tab.screenshot(path=str(path), full_page=True, clip={"x": 0, "y": 0, "width": 1400, "height": height})
            made.append(path)
            print(f"  {path}", flush=True)
        browser.close()
    return made


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pg", default=seeding.PG_ADMIN)
    ap.add_argument("--database", default="attnprof_screens")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--keep", action="store_true", help="leave the database")
    ap.add_argument(
        "--tests",
        nargs="*",
        choices=list(TEST_SHOTS),
        default=list(TEST_SHOTS),
        help="the browser tests whose screenshots to take (default: all; none: only this script's site)",
    )
    ap.add_argument("--no-site", action="store_true", help="skip this script's own site and its pictures")
    args = ap.parse_args()
    if args.tests:
        shoot_tests(args.tests, args.out)
    if not args.no_site:
        site(args)


def site(args: argparse.Namespace) -> None:
    """This script's site and its pictures (``SITE_SHOTS``)."""
    db_url = seeding.create_database(args.pg, args.database)
    migrate.upgrade(db_url)
    engine = make_engine(db_url)
    with make_sessionmaker(engine)() as session:
        project = projects.create(session, name=PROJECT)
        admin = auth.create_project_token(session, project_id=project.id, role="admin", name="screens")[1]
        session.commit()
    engine.dispose()
    folder = tempfile.TemporaryDirectory(prefix="attnprof-screens-queue-")
    port = 8700 + os.getpid() % 200
    env = {
        **os.environ,
        "ATTNPROF_DATABASE_URL": db_url,
        "ATTNPROF_BROKER_URL": "filesystem://",
        "ATTNPROF_BROKER_FOLDER": folder.name,
        "ATTNPROF_PUBLIC_URL": f"http://127.0.0.1:{port}",
    }
    server = subprocess.Popen(
        [str(ROOT / ".venv" / "bin" / "attnprof"), "serve", "--port", str(port)], env=env, cwd=ROOT
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        settings = Settings(database_url=db_url, broker_url="filesystem://", broker_folder=folder.name)
        ids = build(url, admin, json.loads(seeding.H200.read_text()), settings)
        shoot(url, admin, ids, args.out)
    finally:
        server.terminate()
        server.wait(10)
        folder.cleanup()
        if not args.keep:
            seeding.drop_database(args.pg, args.database)


if __name__ == "__main__":
    main()
