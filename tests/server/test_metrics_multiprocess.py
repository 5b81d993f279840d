"""``/metrics`` of a real ``attnprof serve --workers 2``, parsed by prometheus_client's own parser, checked by
``promtool check metrics`` and scraped by a real Prometheus (Debian's ``prometheus`` package: ``.ci/lint-api.sh``
installs it): counters that add up whichever process answers, queue depths that are 0 for an empty queue and absent
(with ``attnprof_broker_up 0``) while the broker is down, and each live server process's ``process_*`` metrics; and
the per-token rate limit shared by two server processes through Redis."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from fastapi.testclient import TestClient
from prometheus_client.mmap_dict import MmapedDict
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from attnprof.server.app import create_app
from attnprof.server.config import RateLimit
from attnprof.server.ratelimit import describe
from tests.pgcluster import free_port
from tests.pgtest import create_database, drop_database
from tests.server.process import Seeded, Server, seed, serve
from tests.server.stack import REDIS_URL, make_settings

pytestmark = pytest.mark.slow

RUNS = "/api/v1/projects/{project}/runs"
MISSING = "not installed: apt-get install prometheus (Debian's package has promtool; .ci/lint-api.sh installs it)"
SECRET = {"ATTNPROF_DASHBOARD__SESSION_SECRET": "metrics-test-" + "x" * 40}


@pytest.fixture(scope="module")
def database() -> Iterator[tuple[str, Seeded]]:
    name, url = create_database()
    try:
        yield url, seed(url)
    finally:
        drop_database(name)


@pytest.fixture(scope="module")
def two_workers(database: tuple[str, Seeded], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    url, _ = database
    with serve(url, tmp_path_factory.mktemp("serve"), workers=2, env=SECRET) as server:
        yield server


def _get(server: Server, path: str, token: str | None = None) -> httpx.Response:
    """One request on a connection of its own, so that the kernel may hand it to either worker process."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with httpx.Client(base_url=server.url, headers=headers, timeout=30) as http:
        return http.get(path)


def _scrape(get: httpx.Response) -> dict[str, list[Sample]]:
    assert get.status_code == 200, get.text
    assert get.headers["content-type"].startswith("text/plain; version=")
    return {family.name: family.samples for family in text_string_to_metric_families(get.text)}


def _value(samples: list[Sample], name: str, **labels: str) -> float:
    found = [s.value for s in samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(found) == 1, (name, labels, samples)
    return found[0]


def test_counters_add_up_across_two_worker_processes(two_workers: Server, database: tuple[str, Seeded]) -> None:
    _, seeded = database
    route = RUNS.format(project=seeded.project)
    n = 30
    for _ in range(n):
        assert _get(two_workers, route, seeded.read).status_code == 200
    scrapes = [_scrape(_get(two_workers, "/metrics")) for _ in range(12)]

    pids: set[str] = set()
    for i, families in enumerate(scrapes):
        requests = families["attnprof_http_requests"]
        assert _value(requests, "attnprof_http_requests_total", method="GET", route=RUNS, status="200") == n
        latency = families["attnprof_http_request_duration_seconds"]
        assert _value(latency, "attnprof_http_request_duration_seconds_count", method="GET", route=RUNS) == n
        assert _value(latency, "attnprof_http_request_duration_seconds_bucket", route=RUNS, le="+Inf") == n
        # Each scrape is counted once it has answered: the i-th sees the i before it, whichever process counted them.
        if i:
            assert _value(requests, "attnprof_http_requests_total", route="/metrics", status="200") == i
        memory = families["process_resident_memory_bytes"]
        assert all(s.value > 10e6 for s in memory)
        assert {s.name for s in families["process_cpu_seconds"]} == {"process_cpu_seconds_total"}
        pids |= {s.labels["pid"] for s in memory}
    # Every scrape reports the two live server processes (itself and its sibling) ...
    assert len(pids) == 2
    # ... and both served the requests: each one's own file in the folder the server printed holds a share.
    shares = _requests_by_process(two_workers, RUNS)
    assert sorted(shares) == sorted(int(pid) for pid in pids)
    assert sum(shares.values()) == n and all(share > 0 for share in shares.values()), shares
    assert all(len(families["process_resident_memory_bytes"]) == 2 for families in scrapes)
    assert _value(scrapes[-1]["attnprof_server_process_starts"], "attnprof_server_process_starts_total") == 2


def test_promtool_accepts_the_exposition(two_workers: Server, database: tuple[str, Seeded]) -> None:
    promtool = shutil.which("promtool")
    assert promtool, f"promtool {MISSING}"
    _, seeded = database
    _get(two_workers, RUNS.format(project=seeded.project), seeded.read)
    text = _get(two_workers, "/metrics").text
    assert "attnprof_http_requests_total" in text and "process_cpu_seconds_total" in text
    check = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert (check.returncode, check.stdout + check.stderr) == (0, "")


def test_a_prometheus_scraping_two_workers_sees_no_counter_reset(
    two_workers: Server, database: tuple[str, Seeded], tmp_path: Path
) -> None:
    prometheus = shutil.which("prometheus")
    assert prometheus, f"prometheus {MISSING}"
    _, seeded = database
    config = tmp_path / "prometheus.yml"
    target = {"job_name": "attnprof", "static_configs": [{"targets": [two_workers.url.removeprefix("http://")]}]}
    settings = {"global": {"scrape_interval": "1s", "scrape_timeout": "1s"}, "scrape_configs": [target]}
    config.write_text(json.dumps(settings))  # YAML reads JSON
    port = free_port()
    log = tmp_path / "prometheus.log"
    argv = [prometheus, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'data'}"]
    argv += [f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"]
    with log.open("wb") as out:
        server = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)

    def query(expr: str) -> list[Any]:
        answer = httpx.get(f"http://127.0.0.1:{port}/api/v1/query", params={"query": expr}, timeout=10).json()
        assert answer["status"] == "success", answer
        return list(answer["data"]["result"])

    def scrapes() -> float:
        found = query("sum(count_over_time(up[5m]))")
        return float(found[0]["value"][1]) if found else 0.0

    try:
        deadline = time.monotonic() + 60
        while True:
            assert server.poll() is None, log.read_text()
            try:
                if scrapes() >= 1:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, f"Prometheus did not scrape: {log.read_text()}"
            time.sleep(0.5)
        # Requests while Prometheus scrapes every second. It keeps its connection open, so its scrapes mostly reach
        # one worker: what it stores must still be every worker's count (the test above scrapes each worker).
        route = RUNS.format(project=seeded.project)
        for _ in range(10):
            for _ in range(3):
                assert _get(two_workers, route, seeded.read).status_code == 200
            time.sleep(0.5)
        time.sleep(2.5)
        assert scrapes() >= 6
        assert [r["value"][1] for r in query("up")] == ["1"]
        requests = "resets(attnprof_http_requests_total[5m]) > 0"
        durations = "resets(attnprof_http_request_duration_seconds_count[5m]) > 0"
        assert query(f"{requests} or {durations}") == []
        # What Prometheus holds last is what a scrape reads now (no request of that route came since).
        stored = query(f'attnprof_http_requests_total{{route="{RUNS}",status="200"}}')
        requests_now = _scrape(_get(two_workers, "/metrics"))["attnprof_http_requests"]
        direct = _value(requests_now, "attnprof_http_requests_total", method="GET", route=RUNS, status="200")
        assert [float(r["value"][1]) for r in stored] == [direct]
        assert len(query("count(process_resident_memory_bytes) by (pid)")) == 2
    finally:
        server.terminate()
        server.wait(timeout=30)


def _requests_by_process(server: Server, route: str) -> dict[int, float]:
    """Requests to ``route`` answered 200, by the process that counted them, read from each process's own counter
    file (prometheus_client's format: a JSON key per series)."""
    match = re.search(r"kept in (\S+)", server.text())
    assert match, server.text()
    shares: dict[int, float] = {}
    for path in Path(match.group(1)).glob("counter_*.db"):
        pid = int(path.stem.rpartition("_")[2])
        for key, value, _, _ in MmapedDict.read_all_values_from_file(str(path)):
            _, sample, labels, _ = json.loads(key)
            if sample == "attnprof_http_requests_total" and labels == {
                "method": "GET",
                "route": route,
                "status": "200",
            }:
                shares[pid] = shares.get(pid, 0) + value
    return shares


def test_queue_depth_is_zero_for_known_empty_queues_and_counts_priorities(
    two_workers: Server, database: tuple[str, Seeded]
) -> None:
    _, seeded = database
    queue = f"profile.{seeded.testbed}"
    families = _scrape(_get(two_workers, "/metrics"))
    assert _value(families["attnprof_broker_up"], "attnprof_broker_up") == 1
    assert _value(families["attnprof_queue_depth"], "attnprof_queue_depth", queue=queue) == 0
    assert {s.labels["queue"] for s in families["attnprof_queue_depth"]} >= {queue, "analysis"}
    states = {s.labels["state"]: s.value for s in families["attnprof_jobs"]}
    assert set(states) >= {"queued", "running", "analyzing", "done", "failed", "cancelled"}
    assert set(states.values()) == {0}

    # Messages as kombu's Redis transport keeps them: priority 0 in the queue's list, others in sibling lists.
    r = redis.Redis.from_url(REDIS_URL)
    keys = [queue, f"{queue}\x06\x163"]
    try:
        r.lpush(keys[0], b"m1", b"m2")
        r.lpush(keys[1], b"m3")
        families = _scrape(_get(two_workers, "/metrics"))
        assert _value(families["attnprof_queue_depth"], "attnprof_queue_depth", queue=queue) == 3
        assert not [s for s in families["attnprof_queue_depth"] if "\x06" in s.labels["queue"]]
    finally:
        r.delete(*keys)
        r.close()
    families = _scrape(_get(two_workers, "/metrics"))
    assert _value(families["attnprof_queue_depth"], "attnprof_queue_depth", queue=queue) == 0


def test_broker_down_is_unknown_not_the_last_value(pg_url: str) -> None:
    # Nothing listens on port 1: the scrape still answers, says the broker is down and gives no queue depth.
    app = create_app(make_settings(pg_url, broker_url="redis://127.0.0.1:1/0"))
    with TestClient(app) as client:
        families = _scrape(client.get("/metrics"))
    assert _value(families["attnprof_broker_up"], "attnprof_broker_up") == 0
    assert "attnprof_queue_depth" not in families
    assert "attnprof_jobs" in families
    assert [s.labels["pid"] for s in families["process_resident_memory_bytes"]] == [str(os.getpid())]


def test_the_embedded_broker_counts_its_message_files(pg_url: str, tmp_path: Path) -> None:
    settings = make_settings(pg_url, broker_url="filesystem://", broker_folder=str(tmp_path / "queue"))
    with TestClient(create_app(settings)) as client:
        empty = _scrape(client.get("/metrics"))  # makes the broker's folders
        assert {s.labels["queue"] for s in empty["attnprof_queue_depth"]} >= {"analysis"}
        assert {s.value for s in empty["attnprof_queue_depth"]} == {0}
        out = tmp_path / "queue" / "out"
        for i in range(2):
            (out / f"{i}_{uuid.uuid4()}.profile.tb-a.msg").write_text("{}")
        families = _scrape(client.get("/metrics"))
    assert _value(families["attnprof_broker_up"], "attnprof_broker_up") == 1
    depths = {s.labels["queue"]: s.value for s in families["attnprof_queue_depth"]}
    assert depths["profile.tb-a"] == 2 and depths["analysis"] == 0


def test_two_server_processes_share_one_tokens_rate_limit(database: tuple[str, Seeded], tmp_path: Path) -> None:
    url, seeded = database
    # Bursts of 5, refilled at one request every 10 s: what the two servers let through together is the burst.
    limit = {"ATTNPROF_RATE_LIMIT__REQUESTS_PER_MINUTE": "6", "ATTNPROF_RATE_LIMIT__BURST": "5"}
    token = seeded.submit  # a token no other test of this module spends
    route = RUNS.format(project=seeded.project)
    with serve(url, tmp_path, env=limit) as first, serve(url, tmp_path, env=limit) as second:
        for server in (first, second):
            assert "6 requests/min per token, bursts of 5, shared by every server process" in server.text()
        start = time.monotonic()
        answers = [(server, _get(server, route, token)) for _ in range(8) for server in (first, second)]
        elapsed_s = time.monotonic() - start
    allowed = [server for server, answer in answers if answer.status_code == 200]
    refused = [answer for _, answer in answers if answer.status_code == 429]
    assert len(allowed) + len(refused) == len(answers)
    assert 5 <= len(allowed) <= 5 + int(elapsed_s / 10) + 1
    assert {s.url for s in allowed} == {first.url, second.url}  # both took from the one bucket
    assert all(int(a.headers["Retry-After"]) >= 1 and a.json()["error"] == "rate_limited" for a in refused)


def test_the_effective_limit_is_said_in_words() -> None:
    limit = RateLimit(requests_per_minute=600, burst=20)
    shared = make_settings("sqlite://", rate_limit=limit)
    assert describe(shared, 4) == (
        "rate limit: 600 requests/min per token, bursts of 20, shared by every server process through the broker's "
        "Redis"
    )
    embedded = make_settings("sqlite://", rate_limit=limit, broker_url="filesystem://")
    assert (
        describe(embedded, 1)
        == "rate limit: 600 requests/min per token, bursts of 20 (one process; buckets in its memory)"
    )
    assert describe(embedded, 3) == (
        "rate limit: 600 requests/min per token, bursts of 20 in each of the 3 processes (buckets in memory, no "
        "Redis): up to 1800 requests/min and bursts of 60 per token"
    )
