"""A paired job's parts for the dashboard crawl (``tests/web/test_crawl.py``): its two trees, and the worker's
result of it (the head's and the base's result documents and the paired document of their interleaved rounds)."""

from __future__ import annotations

import io
import random
import tarfile
from typing import Any

from tests.web.webstack import docs


def tree(source: bytes) -> bytes:
    """A source bundle (tar.gz) holding one module."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo("pkg/mod.py")
        info.size = len(source)
        tar.addfile(info, io.BytesIO(source))
    return buf.getvalue()


def result(ratio: float, *, pairs: int = 8) -> dict[str, Any]:
    """The paired job's result body (attempt 1): the head ``ratio`` times the base's time, each pair's head round
    ``ratio`` times its base round with 0.1% noise."""
    base, head = docs.h200(), docs.h200(slower=ratio)
    rng = random.Random(5)
    cases = []
    for case in head["cases"]:
        rounds = []
        for i in range(pairs):
            base_us = 100.0 * (1 + 0.001 * rng.gauss(0, 1))
            head_us = base_us * ratio * (1 + 0.001 * rng.gauss(0, 1))
            rounds.append({"order": "AB" if i % 2 == 0 else "BA", "base_us": base_us, "head_us": head_us})
            rounds[-1] |= {"base_samples": 5, "head_samples": 5}
        stopped = "slower" if ratio > 1.01 else "same"
        cases.append({"case": case["id"], "min_effect": 0.005, "stopped_by": stopped, "pairs": rounds})
    paired = {
        "schema": "attnprof.paired/v1",
        "mode": head["run"]["mode"],
        "base_run": base["run"]["id"],
        "head_run": head["run"]["id"],
        "rule": {
            "min_effect": 0.005,
            "alpha": 0.05,
            "min_pairs": 4,
            "max_pairs": 8,
            "looks": [4, 8],
            "samples_per_round": "as a profile run's round",
        },
        "cases": cases,
        "wall_s": 42.0,
    }
    return {"attempt": 1, "result": head, "base": base, "paired": paired}
