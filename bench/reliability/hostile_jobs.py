"""``hostile-jobs``: ``tests/worker/test_jail.py`` and ``tests/worker/test_hostile_jobs.py`` against this scenario's
own Postgres and Redis: their outcome, test by test."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.reliability.common import ROOT, say
from bench.reliability.servers import OwnRedis, admin_url, own_postgres

HOSTILE_TESTS = ("tests/worker/test_jail.py", "tests/worker/test_hostile_jobs.py")


def _outcomes(junit: Path) -> list[dict[str, Any]]:
    """Each test of pytest's JUnit XML: its name, its outcome (with the message of a failure, error or skip), its
    seconds."""
    import xml.etree.ElementTree as ET

    tests: list[dict[str, Any]] = []
    if not junit.is_file():
        return tests
    for case in ET.parse(junit).getroot().iter("testcase"):
        outcome = "passed"
        for tag in ("failure", "error", "skipped"):
            found = case.find(tag)
            if found is not None:
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
                outcome += f": {(found.get('message') or '')[:200]}"
        tests.append(
            {
                "test": f"{case.get('classname')}::{case.get('name')}",
                "outcome": outcome,
                "seconds": float(case.get("time") or 0),
            }
        )
    return tests


def scenario_hostile_jobs(args: argparse.Namespace) -> dict[str, Any]:
    """The jail's tests and the hostile job through the real stack, run by pytest against this scenario's own
    Postgres and Redis (``ATTNPROF_TEST_PG``, ``ATTNPROF_TEST_WORKER_REDIS``); their outcome, test by test."""
    workdir = Path(tempfile.mkdtemp(prefix="attnprof-rel-hostile-"))
    redis_server = OwnRedis(workdir / "redis", aof=False)
    try:
        redis_server.start()
        with own_postgres() as cluster:
            junit = workdir / "junit.xml"
            env = {k: v for k, v in os.environ.items() if not k.startswith("ATTNPROF_")}
            env.update(
                ATTNPROF_TEST_PG=admin_url(cluster),
                ATTNPROF_TEST_WORKER_REDIS=redis_server.url(12),
                ATTNPROF_TEST_REDIS=redis_server.url(11),
                PYTHONPATH=os.pathsep.join([str(ROOT), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]),
            )
            # The venv by its real path: the jail binds the interpreter's installation, not a link to it.
            python = Path(sys.prefix).resolve() / "bin" / Path(sys.executable).name
            argv = [
                str(python if python.exists() else sys.executable),
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                f"--junitxml={junit}",
                *HOSTILE_TESTS,
            ]
            t0 = time.monotonic()
            try:
                done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=args.hostile_s)
                code, output = done.returncode, done.stdout + done.stderr
            except subprocess.TimeoutExpired as exc:
                code, output = None, f"pytest ran past {args.hostile_s:.0f} s: {exc}"
            seconds = round(time.monotonic() - t0, 1)
            tests = _outcomes(junit)
            for t in tests:
                say(f"  {t['outcome'][:60]:<10} {t['test']}")
            passed = sum(1 for t in tests if t["outcome"] == "passed")
            return {
                "command": " ".join(["pytest -q", *HOSTILE_TESTS]),
                "exit_code": code,
                "seconds": seconds,
                "tests": tests,
                "passed": passed,
                "total": len(tests),
                "summary": output.strip().splitlines()[-1] if output.strip() else "",
                "output_tail": output[-3000:] if code != 0 else "",
                "ok": code == 0 and passed == len(tests) and bool(tests),
            }
    finally:
        redis_server.stop()
        shutil.rmtree(workdir, ignore_errors=True)
