"""Prometheus metrics (``GET /metrics``): requests by route and status, their latency, jobs by state, queue depths,
whether the broker answers, and each server process's CPU, memory and file descriptors.

Several server processes (``attnprof serve --workers N``) share one port, so a scrape reaches whichever process
the kernel hands the connection to. They run prometheus_client's multiprocess mode: ``attnprof serve`` gives them a
fresh folder in ``PROMETHEUS_MULTIPROC_DIR`` (or empties the one set there), every process writes its counters and
histograms to its own files in it, and a scrape, in any process, sums the files of every process that ever served,
so counters never go back when another process answers or one is restarted. Without that variable (one process,
as the tests' in-process apps) each app keeps its own registry, so that several apps in one process do not collide.

What is not a count of this process's own work is read when the scrape comes, in the process that answers it, and
stored nowhere, so no value outlives what it describes:

* ``attnprof_jobs{state}``: jobs by state, from the database (a series per state, 0 included);
* ``attnprof_queue_depth{queue}``: messages waiting in each known queue (``analysis`` and ``profile.<testbed>``
  for every testbed in the database, plus any other profile queue the broker holds), 0 for an empty one;
* ``attnprof_broker_up``: 1 when the broker answered this scrape, else 0; while it is 0 there is no
  ``attnprof_queue_depth`` series at all (unknown, not the last value seen);
* ``process_*`` (prometheus_client's ``ProcessCollector``, read from ``/proc``) with a ``pid`` label, one set per
  live server process: the scraping one and its sibling workers under the same supervisor.
"""

from __future__ import annotations

import functools
import os
import re
import time
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Histogram, ProcessCollector, generate_latest, values
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

LATENCY_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
# prometheus_client names a process's files <kind>_<pid>.db (gauges: gauge_<mode>_<pid>.db).
_PID_FILE = re.compile(r"_(\d+)\.db$")


def multiprocess_folder() -> Path | None:
    """The folder of the multiprocess mode, when this process runs in it."""
    folder = os.environ.get(MULTIPROC_ENV)
    return Path(folder) if folder else None


def prepare_multiprocess_folder(folder: Path) -> None:
    """Make ``folder`` ready for a new server: created, and emptied of the files a previous one left (the
    multiprocess mode requires it, or the old run's counts would be added to the new one's)."""
    folder.mkdir(parents=True, exist_ok=True)
    for stale in folder.glob("*.db"):
        stale.unlink()


class Metrics:
    """The metrics one server process counts, and the scrape that reports them with the shared state. In the
    multiprocess mode a process makes one (its app's): two would write the same series of the same file."""

    def __init__(self) -> None:
        self.folder = multiprocess_folder()
        if self.folder is not None and not _values_are_shared():
            # prometheus_client chooses where values live when it is first imported.
            raise RuntimeError(f"{MULTIPROC_ENV} was set after prometheus_client was imported")
        self._own = None if self.folder is not None else CollectorRegistry()
        self.requests = Counter(
            "attnprof_http_requests",
            "HTTP requests by route and status",
            ["method", "route", "status"],
            registry=self._own,
        )
        self.latency = Histogram(
            "attnprof_http_request_duration_seconds",
            "request latency, seconds",
            ["method", "route"],
            buckets=LATENCY_BUCKETS_S,
            registry=self._own,
        )
        # Also gives every server process a file of its own from the start: a scrape finds the live ones by them.
        self.starts = Counter(
            "attnprof_server_process_starts", "server processes started (restarts included)", registry=self._own
        )
        self.starts.inc()

    def exposition(self, *, jobs: Mapping[str, int], queue_depths: Mapping[str, int] | None) -> bytes:
        """The text exposition of a scrape: ``jobs`` by state; ``queue_depths`` by queue, None when the broker
        could not be read."""
        sources: list[Collector] = [_SharedState(jobs, queue_depths), _ServerProcesses(self.folder)]
        if self.folder is not None:
            merged = CollectorRegistry()
            MultiProcessCollector(merged, path=str(self.folder))  # type: ignore[no-untyped-call]
            sources.insert(0, merged)
        else:
            assert self._own is not None
            sources.insert(0, self._own)
        return generate_latest(_Scrape(sources))


def _values_are_shared() -> bool:
    return values.ValueClass is not values.MutexValue


class _Scrape(Collector):
    def __init__(self, sources: Iterable[Collector]) -> None:
        self.sources = list(sources)

    def collect(self) -> Iterator[Metric]:
        for source in self.sources:
            yield from source.collect()


class _SharedState(Collector):
    """Jobs and queues as the database and the broker hold them now."""

    def __init__(self, jobs: Mapping[str, int], queue_depths: Mapping[str, int] | None) -> None:
        self.jobs = jobs
        self.queue_depths = queue_depths

    def collect(self) -> Iterator[Metric]:
        jobs = GaugeMetricFamily("attnprof_jobs", "jobs by state", labels=["state"])
        for state, n in sorted(self.jobs.items()):
            jobs.add_metric([state], n)
        yield jobs
        up = GaugeMetricFamily(
            "attnprof_broker_up", "1 when the broker answered this scrape, else 0 (queue depths unknown)"
        )
        up.add_metric([], 0 if self.queue_depths is None else 1)
        yield up
        if self.queue_depths is not None:
            depth = GaugeMetricFamily(
                "attnprof_queue_depth", "messages waiting in a broker queue (0: empty)", labels=["queue"]
            )
            for queue, n in sorted(self.queue_depths.items()):
                depth.add_metric([queue], n)
            yield depth


class _ServerProcesses(Collector):
    """``ProcessCollector``'s metrics for every live server process, each under its ``pid``."""

    def __init__(self, folder: Path | None) -> None:
        self.folder = folder

    def pids(self) -> list[int]:
        """This process, and the live processes with files in the folder that share its parent (the other workers
        of one ``attnprof serve``; a file of a dead one stays, for its counts, and a pid reused by a stranger does
        not share the parent)."""
        me, parent = os.getpid(), os.getppid()
        found = {me}
        if self.folder is not None and parent > 1:
            for path in self.folder.glob("*.db"):
                if (match := _PID_FILE.search(path.name)) is not None:
                    found.add(int(match.group(1)))
        return sorted(pid for pid in found if pid == me or _parent(pid) == parent)

    def collect(self) -> Iterator[Metric]:
        families: dict[str, Metric] = {}
        for pid in self.pids():
            for family in ProcessCollector(pid=functools.partial(int, pid), registry=None).collect():
                merged = families.setdefault(family.name, Metric(family.name, family.documentation, family.type))
                for sample in family.samples:
                    merged.add_sample(sample.name, {**sample.labels, "pid": str(pid)}, sample.value)
        yield from families.values()


def _parent(pid: int) -> int | None:
    """The parent of a live process, from ``/proc``; None when it is gone (or there is no ``/proc``)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (2nd field) is in parentheses and may hold spaces: the parent is the 2nd field after it.
    return int(stat.rpartition(")")[2].split()[1])


class MetricsMiddleware:
    """Counts every HTTP request under its route template (``/api/v1/jobs/{job_id}``), never the raw path."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            route = scope.get("route")
            path = getattr(route, "path", None) or "(unmatched)"
            method = scope.get("method", "")
            self.metrics.requests.labels(method, path, str(status)).inc()
            self.metrics.latency.labels(method, path).observe(time.perf_counter() - start)
