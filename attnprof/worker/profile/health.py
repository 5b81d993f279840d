"""This host's canary, run by its profile worker (docs/service.md, "Host health"): when the worker starts, before it
consumes; then every ``ATTNPROF_WORKER__CANARY_EVERY_JOBS`` jobs (before the next claim) or
``ATTNPROF_WORKER__CANARY_EVERY_S`` seconds (while idle). Never while a job runs: one lock holds either.

The canary is the worker's own code (``python -m attnprof.core canary``) in a subprocess with the environment the
peaks' calibration gets: no user code, no secret. Its figures go to the service, which judges them against the
testbed's band and answers; a quarantined host claims no jobs (the service refuses its claims and puts the job back
in the queue), so its worker stops consuming: it shuts Celery down warm, runs the canary again every ``retry_s`` the
service names until one passes, and then starts again (``restart``).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from attnprof.contract.worker_api import CanaryAnswer
from attnprof.worker.profile.api import ServiceAPIError, WorkerAPI

log = logging.getLogger(__name__)

CANARY_TIMEOUT_S = 600.0
# An idle worker looks whether its canary is due this often (at most).
WATCH_S = 30.0


class CanaryFailed(Exception):
    """The canary could not run, or the service could not judge it."""


def scaled(figures: dict[str, float], scale_file: str) -> dict[str, float]:
    """``figures`` times the factors in ``scale_file`` (a test's setting; empty: as measured). The file is read at
    each canary, so a test can degrade a running host."""
    if not scale_file:
        return figures
    try:
        factors = json.loads(Path(scale_file).read_text())
    except FileNotFoundError:
        return figures
    except (OSError, ValueError) as exc:
        log.warning("canary_scale_file %s unreadable (%s): figures sent as measured", scale_file, exc)
        return figures
    if not isinstance(factors, dict):
        return figures
    return {k: v * float(factors[k]) if isinstance(factors.get(k), int | float) else v for k, v in figures.items()}


class Health:
    """The canary schedule of one profile worker, and its host's standing with the service."""

    def __init__(
        self,
        api: Callable[[], WorkerAPI],
        *,
        worker: str,
        testbed: str,
        device: str,
        env: dict[str, str],
        every_jobs: int,
        every_s: float,
        scale_file: str = "",
        stop: Callable[[], None] | None = None,
    ) -> None:
        self._api = api
        self._stop = stop or stop_consuming
        self.worker = worker
        self.testbed = testbed
        self.device = device
        self._env = env
        self.every_jobs = every_jobs
        self.every_s = every_s
        self.scale_file = scale_file
        self.lock = threading.Lock()
        self.jobs_since = 0
        self.last_at: float | None = None
        self.answer: CanaryAnswer | None = None
        self._done = threading.Event()
        self._watch: threading.Thread | None = None

    @property
    def quarantined(self) -> bool:
        return self.answer is not None and self.answer.state == "quarantined"

    def measure(self) -> dict[str, Any]:
        """Run the canary subprocess: its figures, as the service takes them."""
        argv = [sys.executable, "-m", "attnprof.core", "canary", "--device", self.device]
        try:
            done = subprocess.run(
                argv, env=self._env, capture_output=True, text=True, timeout=CANARY_TIMEOUT_S, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise CanaryFailed(f"the canary did not run: {exc}") from None
        if done.returncode != 0:
            raise CanaryFailed(f"the canary failed (exit {done.returncode}): {(done.stderr or done.stdout)[-500:]}")
        try:
            found: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise CanaryFailed(f"the canary printed no figures: {done.stdout[-300:]}") from None
        found["figures"] = scaled(found.get("figures", {}), self.scale_file)
        return found

    def run(self) -> CanaryAnswer:
        """One canary, sent: the service's answer (also kept in ``answer``). Holds nothing: callers hold ``lock``."""
        found = self.measure()
        body = {"worker": self.worker, "testbed": self.testbed, **found}
        try:
            with self._api() as api:
                answer = api.canary(body)
        except ServiceAPIError as exc:
            raise CanaryFailed(f"the service did not take the canary: {exc}") from None
        self.answer = answer
        self.jobs_since = 0
        self.last_at = time.monotonic()
        figures = ", ".join(f"{k} {v:.4g}" for k, v in sorted(found["figures"].items()))
        if answer.state == "quarantined":
            log.error("canary: host %s is quarantined: %s", answer.host, "; ".join(answer.reasons))
        else:
            log.info("canary: host %s %s in %.1f s (%s)", answer.host, answer.state, found.get("seconds", 0), figures)
        return answer

    def due(self) -> bool:
        if self.last_at is None:
            return True
        if self.every_jobs and self.jobs_since >= self.every_jobs:
            return True
        return bool(self.every_s) and time.monotonic() - self.last_at >= self.every_s

    def until_healthy(self, *, say: Callable[[str], None] = log.warning) -> None:
        """Run the canary until the service takes this host (the worker's start, and its return from quarantine):
        a quarantined host, or a canary that cannot run or be judged, tries again after the service's
        ``retry_s``."""
        wait_s = 60.0
        while True:
            with self.lock:
                try:
                    answer = self.run()
                except CanaryFailed as exc:
                    say(f"canary: {exc}; trying again in {wait_s:.0f} s")
                    answer = None
            if answer is not None:
                if answer.state != "quarantined":
                    return
                wait_s = answer.retry_s
                say(
                    f"canary: host {answer.host} is quarantined: it claims no jobs; its canary runs again in "
                    f"{wait_s:.0f} s"
                )
            time.sleep(wait_s)

    def before_job(self) -> None:
        """Before a claim: the canary, if it is due. A canary that cannot run is logged: the claim goes on (the
        service refuses it if the host is quarantined). A host found quarantined stops consuming once this job's
        message is handled (its claim refused, the job back in the queue)."""
        with self.lock:
            if self.due():
                try:
                    self.run()
                except CanaryFailed as exc:
                    log.error("canary: %s", exc)
            self.jobs_since += 1
        if self.quarantined:
            self._stop()

    def watch(self) -> None:
        """While the worker consumes: a thread that runs the canary when it falls due while idle, and stops the
        worker consuming once this host is quarantined."""

        def loop() -> None:
            while not self._done.wait(min(WATCH_S, self.every_s or WATCH_S)):
                if self.due() and self.lock.acquire(blocking=False):
                    try:
                        self.run()
                    except CanaryFailed as exc:
                        log.error("canary: %s", exc)
                    finally:
                        self.lock.release()
                if self.quarantined:
                    self._stop()
                    return

        self._watch = threading.Thread(target=loop, name="canary", daemon=True)
        self._watch.start()

    def finish(self) -> None:
        self._done.set()


def stop_consuming() -> None:
    """Shut this worker's Celery down warm (the job under way, if any, ends first; nothing is taken after)."""
    os.kill(os.getpid(), signal.SIGTERM)


def restart() -> None:
    """Start this worker again, as it was started (its arguments and environment): back from quarantine."""
    os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])
