"""The fleet page: a testbed's hosts (live and silent, what each runs: this project's job linked, another project's
counted but never named), its queue, waits, utilisation and GPU time, this project's beside all others'; the chart
draws in a real browser; a bad window is a 422 page."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from sqlalchemy.orm import Session

from attnprof.contract.worker_api import Canary as CanaryBody
from attnprof.server.config import Health
from attnprof.server.db import make_engine, utcnow
from attnprof.server.hosts import service as hosts
from attnprof.server.jobs.models import Job
from attnprof.server.projects import repository as projects
from attnprof.server.runs.models import Run
from attnprof.server.testbeds import service as testbeds
from attnprof.server.testbeds.models import Worker
from tests.server.web.pages import fresh_project, http, upload, watch_errors
from tests.server.web.stack import Site, docs, sign_in


def _job(project_id: int, testbed_id: int, status: str, **kw: Any) -> Job:
    now = utcnow()
    kw.setdefault("created_at", now)
    return Job(
        id=str(uuid.uuid4()),
        project_id=project_id,
        testbed_id=testbed_id,
        spec="",
        suite_name="s",
        branch="main",
        commit="c",
        status=status,
        attempts=1 if status != "queued" else 0,
        max_attempts=3,
        updated_at=now,
        **kw,
    )


def test_the_fleet_shows_hosts_queue_waits_and_gpu_time_without_naming_other_projects(site: Site, page: Any) -> None:
    mine, theirs = fresh_project(site, "fleet"), fresh_project(site, "fleet-other")
    tb = f"tb-fleet-{uuid.uuid4().hex[:6]}"
    now = utcnow()
    engine = make_engine(site.db_url)
    try:
        with Session(engine) as session:
            own = projects.get_by_name(session, mine.name)
            other = projects.get_by_name(session, theirs.name)
            assert own is not None and other is not None
            testbed = testbeds.ensure(session, tb)
            for name, ago in (("gpu0", 2), ("gpu1", 3), ("gpu2", 3600)):
                session.add(
                    Worker(
                        testbed_id=testbed.id,
                        name=name,
                        first_seen_at=now - timedelta(hours=5),
                        last_seen_at=now - timedelta(seconds=ago),
                    )
                )
            running = _job(
                own.id,
                testbed.id,
                "running",
                claimed_by="gpu0",
                started_at=now - timedelta(minutes=1),
                created_at=now - timedelta(seconds=90),
            )
            session.add(running)
            session.add(
                _job(
                    other.id,
                    testbed.id,
                    "running",
                    claimed_by="gpu1",
                    started_at=now - timedelta(minutes=2),
                    created_at=now - timedelta(seconds=150),
                )
            )
            for owner in (own.id, other.id, other.id):
                session.add(_job(owner, testbed.id, "queued"))
            done_at = now - timedelta(hours=1)
            session.add(
                _job(
                    own.id,
                    testbed.id,
                    "done",
                    started_at=done_at,
                    gpu_seconds=1800.0,
                    claimed_by="gpu2",
                    created_at=done_at - timedelta(seconds=40),
                )
            )
            session.add(
                _job(
                    other.id,
                    testbed.id,
                    "done",
                    started_at=done_at,
                    gpu_seconds=3600.0,
                    created_at=done_at - timedelta(seconds=20),
                )
            )
            session.commit()
            own_job = running.id
    finally:
        engine.dispose()
    with http(site, mine.tokens.read) as client:
        html = client.get(f"/ui/p/{mine.name}/fleet").text
        section = html[html.index(f">{tb}</h2>") :]
        section = section[: section.index("</section>")]
        assert "2 live of 3 seen" in section and "silent" in section
        gpu2 = section[section.index("<code>gpu2</code>") :]
        assert "<td>30.0 min</td>" in gpu2[: gpu2.index("</tr>")]  # the GPU time of the jobs the host ran
        assert "3 waiting (1 of this project's), 2 running" in section
        assert f"/ui/p/{mine.name}/jobs/{own_job}" in section and "another project's job" in section
        assert theirs.name not in html  # another project is counted, never named
        assert "median 30 s" in section and "over 4 jobs started" in section
        assert "30.0 min this project's, 60.0 min other projects'" in section
        bad = client.get(f"/ui/p/{mine.name}/fleet?window=forever")
        assert bad.status_code == 422 and "window: one of 24h, 7d, 30d" in bad.text
    errors = watch_errors(page)
    sign_in(page, site, mine.tokens.read, next_path=f"/ui/p/{mine.name}/fleet")
    page.wait_for_selector("#fleet-gpu .main-svg")
    assert page.locator("nav a[aria-current=page]").inner_text() == "Fleet"
    assert errors == []


def test_a_waiting_jobs_page_says_it_waits_for_the_next_day_past_the_projects_gpu_quota(site: Site) -> None:
    made = fresh_project(site, "quota")
    tb = f"tb-quota-{uuid.uuid4().hex[:6]}"
    now = utcnow()
    engine = make_engine(site.db_url)
    try:
        with Session(engine) as session:
            project = projects.get_by_name(session, made.name)
            assert project is not None
            project.gpu_seconds_per_day = 60.0
            testbed = testbeds.ensure(session, tb)
            session.add(Worker(testbed_id=testbed.id, name="gpu0", last_seen_at=now, first_seen_at=now))
            session.add(_job(project.id, testbed.id, "done", started_at=now - timedelta(minutes=5), gpu_seconds=90.0))
            waiting = _job(project.id, testbed.id, "queued")
            session.add(waiting)
            session.commit()
            waiting_id = waiting.id
    finally:
        engine.dispose()
    with http(site, made.tokens.read) as client:
        html = client.get(f"/ui/p/{made.name}/jobs/{waiting_id}").text
        assert "Why it waits: the project used its GPU quota for the day (90 s of 60 s since 00:00 UTC)" in html


def _canary(worker: str, testbed: str, copy_gbps: float) -> CanaryBody:
    return CanaryBody(
        worker=worker,
        testbed=testbed,
        device="NVIDIA H100 80GB HBM3",
        mode="cuda",
        figures={"copy_gbps": copy_gbps, "matmul_tflops_bf16": 760.0, "attention_us": 640.0},
        seconds=7.5,
    )


def test_the_fleet_shows_each_hosts_health_the_band_and_a_quarantine(site: Site, page: Any) -> None:
    mine = fresh_project(site, "health")
    tb = f"tb-health-{uuid.uuid4().hex[:6]}"
    run_id = upload(site, mine, docs.h200(), testbed=tb)["run_id"]
    engine = make_engine(site.db_url)
    try:
        with Session(engine) as session:
            testbed = testbeds.ensure(session, tb)
            run = session.get(Run, run_id)
            assert run is not None
            run.host = "node-d/gpu0"  # measured by the host that degrades
            session.commit()
            for i, (host, copy) in enumerate(
                (("node-a", 3300.0), ("node-b", 3280.0), ("node-c", 3290.0), ("node-a", 3306.0))
            ):
                hosts.record(
                    session,
                    testbed_id=testbed.id,
                    body=_canary(f"{host}/pid{i}/gpu0", tb, copy),
                    cfg=Health(),
                    now=utcnow(),
                )
            hosts.record(
                session, testbed_id=testbed.id, body=_canary("node-d/pid9/gpu0", tb, 2805.0), cfg=Health(), now=utcnow()
            )
            # Its worker is the testbed's only live one, and a job of the project waits.
            testbeds.worker_alive(session, testbed_id=testbed.id, name="node-d/pid9/gpu0", now=utcnow(), live_s=30)
            own = projects.get_by_name(session, mine.name)
            assert own is not None
            session.add(_job(own.id, testbed.id, "queued"))
            session.commit()
    finally:
        engine.dispose()
    with http(site, mine.tokens.read) as client:
        html = client.get(f"/ui/p/{mine.name}/fleet").text
        section = html[html.index(f">{tb}</h2>") :]
        section = section[: section.index("</section>")]
        assert "1 host of " in section and "<code>node-d/gpu0</code> claims no jobs until its canary passes" in section
        held = section[section.index('<tr class="quarantined"><td><code>node-d/gpu0</code>') :]
        held = held[: held.index("</tr>")]
        assert "<td>quarantined</td>" in held and "2805 GB/s" in held and "<td>never</td>" in held
        assert "copy_gbps 2,805 GB/s is 15% under the best host&#39;s 3,303" in held
        assert "copy_gbps &gt;= 2,907 GB/s (0.88 x 3,303, the median of host node-a/gpu0" in section
        assert "Canaries took 38 s of its devices" in section  # five of 7.5 s
        run_page = client.get(f"/ui/p/{mine.name}/runs/{run_id}").text
        assert "Its host is in doubt: this run serves no baseline." in run_page
        assert "host node-d/gpu0 failed its canary" in run_page and "(host <code>node-d/gpu0</code>)" in run_page
        assert "host in doubt" in client.get(f"/ui/p/{mine.name}/runs").text
        queue = client.get(f"/ui/p/{mine.name}/jobs").text
        assert f"Why jobs wait: every live worker of testbed {tb} is on a quarantined host (node-d/gpu0: copy_gbps" in (
            queue
        )
    errors = watch_errors(page)
    sign_in(page, site, mine.tokens.read, next_path=f"/ui/p/{mine.name}/fleet")
    page.wait_for_selector("tr.quarantined")
    assert errors == []
