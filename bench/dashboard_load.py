"""Server time of every dashboard page on the benchmark database, against the 300 ms target.

    .venv/bin/python -m bench.dashboard_load                 # seed 10,000 runs (1,000,000 samples), measure, report
    .venv/bin/python -m bench.dashboard_load --reuse         # measure on the database a previous run left
    .venv/bin/python -m bench.dashboard_load --runs 1000 --report /tmp/dash.md   # a smaller seed, for development
    .venv/bin/python -m bench.dashboard_load --quick         # a smoke run: 500 runs, 3 requests a page, then dropped

Steps:
1. seed ``attnprof_dashboard`` with ``bench/service_seed.py`` (10,000 runs of 10 cases with their kernels over a
   year, 10 samples a case: 1,000,000 samples), or reuse it (``--reuse``: what was seeded is read back from
   ``/tmp/<database>.json``);
2. start ``attnprof serve`` (one process, the filesystem broker in a temporary folder: no worker takes the jobs);
3. add what the seed has none of, through the API: a feature-branch upload with its comparison, a baseline pin and
   an exclusion on the default branch, and ``--jobs`` queued jobs;
4. sign in through the form (CSRF cookie and field, as a browser does) and request every page kind ``--repeat``
   times, one request at a time, after one unmeasured request each: the overview, the trends of a case and of one
   of its kernels over the full history of the default branch on the busiest testbed (every case and kernel in
   turn), the jobs list, a job, a run and its comparison, and the jobs' live-state endpoint;
5. write the report (``bench/reports/dashboard-load.md``) and its bar chart (``dashboard-load.png``).

The server time is the ``Server-Timing: app;dur=`` header (from the request's arrival to the response headers);
the wall time is the client's, on loopback. The CPU seconds of the server process per request are measured too:
the two cores are shared with Postgres and with whatever else runs, so the 1-minute load average is recorded
before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import httpx
import numpy as np

from bench import quick, service_load
from bench import service_seed as seeding

ROOT = Path(__file__).resolve().parents[1]

REPORT = ROOT / "bench" / "reports" / "dashboard-load.md"
TARGET_MS = 300.0
BUSIEST_TESTBED = "h200-a"
SPEC = (ROOT / "examples" / "cpu.toml").read_text()


# --- the machine and the server -----------------------------------------------------------------------------


def loadavg() -> tuple[float, float, float]:
    one, five, fifteen = Path("/proc/loadavg").read_text().split()[:3]
    return float(one), float(five), float(fifteen)


def wait_quiet(below: float, max_s: float, poll_s: float = 20.0) -> float:
    """Wait up to ``max_s`` for the 1-minute load average to fall under ``below``; returns the seconds waited."""
    start = time.monotonic()
    while loadavg()[0] >= below and time.monotonic() - start < max_s:
        print(f"load {loadavg()[0]:.2f} >= {below}: waiting {poll_s:.0f} s", flush=True)
        time.sleep(poll_s)
    return time.monotonic() - start


@dataclass
class Server:
    """The service benchmark's ``attnprof serve`` (one process), with a folder broker of its own: the pages
    send no message, and the jobs they show are queued rows."""

    served: service_load.Server
    folder: tempfile.TemporaryDirectory[str]

    @property
    def url(self) -> str:
        return self.served.url

    @classmethod
    def start(cls, database_url: str) -> Server:
        folder = tempfile.TemporaryDirectory(prefix="attnprof-dash-queue-")
        broker = {"ATTNPROF_BROKER_URL": "filesystem://", "ATTNPROF_BROKER_FOLDER": folder.name}
        try:
            return cls(served=service_load.Server.start(database_url, env=broker), folder=folder)
        except BaseException:
            folder.cleanup()
            raise

    def stop(self) -> None:
        self.served.stop()
        self.folder.cleanup()


# --- what the seed lacks ------------------------------------------------------------------------------------


@dataclass
class Objects:
    """Ids of what the benchmark added to the seeded project."""

    run_id: str = ""
    comparison_id: str = ""
    verdict: str = ""
    pinned: str = ""
    excluded: str = ""
    jobs: list[str] = field(default_factory=list)


def add_objects(server: Server, seeded: seeding.Seeded, jobs: int) -> Objects:
    api = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {seeded.admin_token}"}, timeout=120)
    out = Objects()
    p = seeded.project
    with api:
        main = api.get(f"/api/v1/projects/{p}/runs", params={"branch": "main", "testbed": BUSIEST_TESTBED, "limit": 40})
        main.raise_for_status()
        recent = [r["id"] for r in main.json()["runs"]]
        out.pinned, out.excluded = recent[30], recent[20]
        assert api.post(f"/api/v1/projects/{p}/baselines/pins", json={"run_id": out.pinned}).status_code == 201
        answer = api.post(
            f"/api/v1/projects/{p}/baselines/exclusions",
            json={"run_id": out.excluded, "reason": "benchmark: a run excluded to be marked on the trend"},
        )
        assert answer.status_code == 201, answer.text
        doc = json.loads(seeding.H200.read_text())
        doc["run"]["id"] = str(uuid.uuid4())
        upload = api.post(
            f"/api/v1/projects/{p}/results",
            json={
                "result": doc,
                "branch": "feature-dashboard",
                "commit": "d" * 40,
                "base_commit": seeded.main_commits[-1],
                "ancestors": seeded.main_commits[-2:-52:-1],
                "pr": 321,
            },
        )
        if upload.status_code != 201:
            raise RuntimeError(f"upload answered {upload.status_code}: {upload.text[:500]}")
        body = upload.json()
        out.run_id, out.comparison_id, out.verdict = body["run_id"], body.get("comparison_id") or "", body["verdict"]
        # A reused database keeps the jobs of the runs before: top them up to ``jobs``.
        listed = api.get(f"/api/v1/projects/{p}/jobs", params={"limit": 1000})
        listed.raise_for_status()
        out.jobs = [j["id"] for j in listed.json()["jobs"]][:jobs]
        for i in range(len(out.jobs), jobs):
            made = api.post(
                f"/api/v1/projects/{p}/jobs",
                files={"spec": ("cpu.toml", SPEC.encode(), "application/toml")},
                data={
                    "branch": "main" if i % 3 else "feature-dashboard",
                    "commit": f"{i:040x}",
                    "testbed": BUSIEST_TESTBED,
                },
            )
            if made.status_code != 202:
                raise RuntimeError(f"job creation answered {made.status_code}: {made.text[:300]}")
            out.jobs.append(made.json()["id"])
    return out


# --- the pages ----------------------------------------------------------------------------------------------


def sign_in(server: Server, token: str) -> httpx.Client:
    client = httpx.Client(base_url=server.url, timeout=120)
    form = client.get("/ui/login")
    match = re.search(r'name="csrf" value="([^"]+)"', form.text)
    if match is None:
        raise RuntimeError("no sign-in form")
    answer = client.post("/ui/login", data={"token": token, "csrf": match.group(1), "next": ""})
    if answer.status_code != 303:
        raise RuntimeError(f"sign-in answered {answer.status_code}")
    return client


def page_kinds(seeded: seeding.Seeded, objects: Objects, repeat: int) -> dict[str, list[str]]:
    """Each page kind and the paths to request, ``repeat`` of them (trends go through every case and kernel)."""
    p = f"/ui/p/{seeded.project}"
    cases = seeded.case_ids
    kernels = [(c, k) for c in cases for k in seeded.kernel_keys[c]]
    full = {"testbed": BUSIEST_TESTBED, "branch": "main"}
    jobs = objects.jobs
    return {
        "overview": [p] * repeat,
        "trends, case": [
            f"{p}/trends?" + httpx.QueryParams({**full, "case": cases[i % len(cases)]}).__str__() for i in range(repeat)
        ],
        "trends, kernel": [
            f"{p}/trends?"
            + str(
                httpx.QueryParams(
                    {**full, "case": kernels[i % len(kernels)][0], "kernel": kernels[i % len(kernels)][1]}
                )
            )
            for i in range(repeat)
        ],
        "jobs list": [f"{p}/jobs"] * repeat,
        "job": [f"{p}/jobs/{jobs[i % len(jobs)]}" for i in range(repeat)],
        "jobs state (poll)": [f"{p}/jobs/state?ids=" + ",".join(jobs[:20])] * repeat,
        "run": [f"{p}/runs/{objects.run_id}"] * repeat,
        "comparison": [f"{p}/runs/{objects.run_id}/comparison"] * repeat,
    }


@dataclass
class Timed:
    server_ms: list[float] = field(default_factory=list)
    wall_ms: list[float] = field(default_factory=list)
    statuses: dict[int, int] = field(default_factory=dict)
    bytes: int = 0
    cpu_s: float = 0.0
    points: str = ""
    example: str = ""


def _server_ms(response: httpx.Response) -> float:
    match = re.search(r"app;dur=([\d.]+)", response.headers.get("server-timing", ""))
    return float(match.group(1)) if match else float("nan")


def measure(client: httpx.Client, server: Server, kinds: dict[str, list[str]]) -> dict[str, Timed]:
    results: dict[str, Timed] = {}
    live = sys.stdout.isatty()
    for name, paths in kinds.items():
        first = client.get(paths[0])  # not measured: the first request of a kind compiles its template
        if first.is_redirect:
            # A page that answers with a redirect (a comparison's own address) is measured where it leads.
            target = first.headers["location"]
            paths = [target] * len(paths)
            client.get(target)
        timed = Timed(example=paths[0])
        cpu0 = service_load.cpu_seconds(server.served.pids())
        for i, path in enumerate(paths):
            t = time.perf_counter()
            response = client.get(path)
            timed.wall_ms.append((time.perf_counter() - t) * 1000)
            timed.server_ms.append(_server_ms(response))
            timed.statuses[response.status_code] = timed.statuses.get(response.status_code, 0) + 1
            timed.bytes = len(response.content)
            drawn = re.search(r"Drawn: (\d+) of (\d+) points", response.text)
            if drawn:
                timed.points = f"{drawn.group(1)} of {drawn.group(2)}"
            if live or i + 1 == len(paths) or (i + 1) % 10 == 0:
                print(
                    ("\r" if live else "") + f"  {name:<20} {i + 1:>4}/{len(paths)}"
                    f"  server p50 {np.median(timed.server_ms):7.1f} ms  last {timed.server_ms[-1]:7.1f} ms"
                    f"  status {response.status_code}",
                    end="" if live else "\n",
                    flush=True,
                )
        timed.cpu_s = service_load.cpu_seconds(server.served.pids()) - cpu0
        if live:
            print(flush=True)
        results[name] = timed
    return results


# --- the report ---------------------------------------------------------------------------------------------


def pct(values: list[float], q: float) -> float:
    finite = [v for v in values if np.isfinite(v)]
    return float(np.percentile(finite, q)) if finite else float("nan")


def plot(results: dict[str, Timed], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(results)
    x = np.arange(len(names))
    fig, ax = plt.subplots(figsize=(10, 4.2))
    width = 0.27
    # Okabe-Ito colours, and a hatch per statistic so the bars differ without colour.
    for j, (label, q, colour, hatch) in enumerate(
        (("p50", 50, "#0072B2", ""), ("p95", 95, "#E69F00", "//"), ("max", 100, "#D55E00", ".."))
    ):
        values = [pct(results[n].server_ms, q) for n in names]
        ax.bar(x + (j - 1) * width, values, width, label=f"server time {label}", color=colour, hatch=hatch)
    ax.axhline(TARGET_MS, color="#000000", ls="--", lw=1, label=f"target {TARGET_MS:.0f} ms")
    ax.set_xticks(x, names, rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("server time, ms (Server-Timing app;dur)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_report(
    path: Path,
    *,
    command: str,
    seeded: seeding.Seeded,
    objects: Objects,
    results: dict[str, Timed],
    load_before: tuple[float, float, float],
    load_after: tuple[float, float, float],
    repeat: int,
    waited: tuple[float, float],
    started: datetime,
    elapsed_s: float,
) -> None:
    lines = [
        "# Dashboard pages: server time on the benchmark database",
        "",
        f"Date: {started:%Y-%m-%d %H:%M} UTC. Command: `{command}` ({elapsed_s / 60:.1f} min in all).",
        f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores shared with Postgres and"
        " other work; Python " + platform.python_version() + ".",
        f"Load average (1, 5, 15 min): before {load_before[0]:.2f}, {load_before[1]:.2f}, {load_before[2]:.2f};"
        f" after {load_after[0]:.2f}, {load_after[1]:.2f}, {load_after[2]:.2f}"
        f" (waited {waited[0]:.0f} s for a 1-minute load under {waited[1]}"
        f"{'' if load_before[0] < waited[1] or waited[0] < 1 else ', in vain: the machine stayed busy'}).",
        "",
        "## The database",
        "",
        f"`bench/service_seed.py` into `{seeded.database}`: {seeded.runs:,} runs, {seeded.run_cases:,} case rows,"
        f" {seeded.run_kernels:,} kernel rows, {seeded.samples:,} samples, {seeded.document_bytes / 1e6:,.0f} MB of"
        f" result documents, over a year, on {len(seeded.testbeds)} testbeds and {len(seeded.branches)} branches"
        f" (seeding took {seeded.seconds.get('total', float('nan')):.0f} s; `--reuse` measures on a database an"
        " earlier run of this script seeded)."
        f" Added through the API for the pages: one feature-branch upload (run `{objects.run_id[:8]}`, its"
        f" comparison: verdict {objects.verdict}), a baseline pin and an exclusion on `main`,"
        f" {len(objects.jobs)} queued jobs.",
        "",
        "## Server time per page",
        "",
        f"One `attnprof serve` process; one request at a time over loopback, {repeat} per page kind after one"
        " unmeasured request. Server time: the `Server-Timing: app;dur` header. Trends: the full history of"
        f" `main` on `{BUSIEST_TESTBED}` (every case, or every kernel of every case, in turn).",
        "",
        "| page | status | server p50 ms | server p95 ms | server max ms | wall p50 ms | wall p95 ms"
        " | server CPU ms/request | size KB | points drawn | under 300 ms |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    worst = 0.0
    for name, t in results.items():
        statuses = ", ".join(f"{s}×{n}" for s, n in sorted(t.statuses.items()))
        p95, top = pct(t.server_ms, 95), pct(t.server_ms, 100)
        worst = max(worst, top) if np.isfinite(top) else worst
        ok = all(s == 200 for s in t.statuses)
        verdict = ("yes" if p95 < TARGET_MS else "**no**") if ok else "not served"
        lines.append(
            f"| {name} | {statuses} | {pct(t.server_ms, 50):.1f} | {p95:.1f} | {top:.1f} | {pct(t.wall_ms, 50):.1f}"
            f" | {pct(t.wall_ms, 95):.1f} | {1000 * t.cpu_s / max(1, len(t.server_ms)):.0f} | {t.bytes / 1024:.0f}"
            f" | {t.points or '–'} | {verdict} |"
        )
    lines += [
        "",
        f"![Server time per page]({path.with_suffix('.png').name})",
        "",
        "Example paths (project `bench`):",
        "",
        *[f"- {name}: `{t.example}`" for name, t in results.items()],
        "",
        "The trend pages read the whole window (one index range scan) and draw at most"
        " `settings.dashboard.series_points` (600) points: the lowest and highest of each stretch plus every marked"
        " run; the table below the chart pages through all of them, 50 a page.",
        "",
        f"Worst single request: {worst:.1f} ms. Figures on a shared 2-core machine: the load average above says how"
        " busy it was; the CPU column is the server process's own CPU time per request.",
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


# --- main ---------------------------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pg", default=seeding.PG_ADMIN, help="an admin connection to the Postgres server")
    ap.add_argument("--database", default="attnprof_dashboard")
    ap.add_argument("--reuse", action="store_true", help="measure on the database a previous run left")
    ap.add_argument("--runs", type=int, default=10_000)
    ap.add_argument("--samples-per-case", type=int, default=10, help="10 x 10 cases x 10,000 runs = 1,000,000")
    ap.add_argument("--repeat", type=int, default=30, help="measured requests per page kind")
    ap.add_argument("--jobs", type=int, default=120, help="queued jobs to add for the jobs pages")
    ap.add_argument("--report", type=Path, help="default: bench/reports/dashboard-load.md")
    ap.add_argument("--quiet-below", type=float, default=1.5, help="wait for a 1-minute load average under this")
    ap.add_argument("--quiet-wait-s", type=float, default=600, help="but measure anyway after this long")
    ap.add_argument(
        "--quick",
        action="store_true",
        help="a smoke run: 500 runs, 5 jobs, 3 requests a page, no wait for a quiet machine, the database dropped "
        "after; --report defaults to a temporary folder",
    )
    args = ap.parse_args()
    if args.quick:
        if args.reuse:
            ap.error("--quick seeds a small database of its own and drops it: it does not go with --reuse")
        args.runs, args.repeat, args.jobs, args.quiet_wait_s = 500, 3, 5, 0.0
        (args.report,) = quick.place(ap, "dashboard-load", (args.report, "dashboard-load.md"))
    args.report = args.report or REPORT
    started, t0 = datetime.now(UTC), time.perf_counter()
    info = Path(f"/tmp/{args.database}.json")
    if args.reuse:
        seeded = seeding.Seeded(**json.loads(info.read_text()))
        from attnprof.server import migrate

        migrate.upgrade(seeded.url)  # a database seeded before a newer migration
        print(f"reusing {seeded.database}: {seeded.runs} runs", flush=True)
    else:
        print(f"seeding {args.database}: {args.runs} runs ...", flush=True)
        seeded = seeding.seed(
            admin=args.pg, database=args.database, runs=args.runs, samples_per_case=args.samples_per_case
        )
        if not args.quick:  # a quick run's database goes at its end: nothing to --reuse
            info.write_text(seeded.to_json())
        print(f"seeded in {seeded.seconds['total']:.0f} s", flush=True)
    try:
        server = Server.start(seeded.url)
        try:
            print("adding a feature upload, a pin, an exclusion and jobs ...", flush=True)
            objects = add_objects(server, seeded, args.jobs)
            client = sign_in(server, seeded.admin_token)
            waited_s = wait_quiet(args.quiet_below, args.quiet_wait_s)
            load_before = loadavg()
            print(f"load average before: {load_before}", flush=True)
            try:
                results = measure(client, server, page_kinds(seeded, objects, args.repeat))
            finally:
                client.close()
            load_after = loadavg()
        finally:
            server.stop()
    finally:
        if args.quick:
            seeding.drop_database(args.pg, args.database)
    command = "python -m bench.dashboard_load " + " ".join(sys.argv[1:])
    write_report(
        args.report,
        command=command.strip(),
        seeded=seeded,
        objects=objects,
        results=results,
        load_before=load_before,
        load_after=load_after,
        repeat=args.repeat,
        waited=(waited_s, args.quiet_below),
        started=started,
        elapsed_s=time.perf_counter() - t0,
    )
    plot(results, args.report.with_suffix(".png"))
    print(f"wrote {args.report} and {args.report.with_suffix('.png')}")


if __name__ == "__main__":
    main()
