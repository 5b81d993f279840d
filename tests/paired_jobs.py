"""A paired job's parts as they travel through the service: the two source trees it is submitted with, and the GPU
worker's result of it (the head's and the base's result documents and the paired document of their interleaved
rounds), as JSON bodies. Used by the service's paired-job tests and the dashboard crawl.

The result documents are the committed H200 run (``tests.server.documents``), the head's latencies scaled by a planted
ratio; each pair's head round is that ratio times its base round, with 0.1% noise. (``tests.core.paired_docs`` builds
the typed paired documents the renderers' tests draw.)
"""

from __future__ import annotations

import random
from typing import Any, NamedTuple

from tests.profiling_support import tar_gz
from tests.server import documents as docs

MODULE = "pkg/mod.py"
MIN_PAIRS = 4
"""The rule's first look, and the step between looks."""


def trees(head: bytes, base: bytes) -> dict[str, bytes]:
    """A paired job's two trees as its submission's files: ``bundle`` (the head) and ``base_bundle`` (its merge
    base), each holding one module (``MODULE``) of the given source."""
    return {"bundle": tar_gz({MODULE: head}), "base_bundle": tar_gz({MODULE: base})}


class PairedResult(NamedTuple):
    """The worker's result of a paired job: the head's and the base's result documents and the paired document."""

    head: dict[str, Any]
    base: dict[str, Any]
    paired: dict[str, Any]

    def body(self, attempt: int = 1) -> dict[str, Any]:
        """The result's body as the worker posts it to ``/internal/jobs/{id}/result``."""
        return {"attempt": attempt, "result": self.head, "base": self.base, "paired": self.paired}


def paired_result(
    ratio: float, *, pairs: int, seed: int, max_pairs: int | None = None, wall_s: float | None = None
) -> PairedResult:
    """A paired job's result with the head ``ratio`` times the base's time (a planted change: above 1.01 each case
    stopped slower, else same), each case with ``pairs`` pairs of rounds drawn from ``seed``.

    ``max_pairs``: the rule's most pairs (``pairs`` when None), its looks every ``MIN_PAIRS`` pairs up to it.
    ``wall_s``: the paired run's wall time, recorded when given.
    """
    max_pairs = pairs if max_pairs is None else max_pairs
    base, head = docs.h200(), docs.h200(slower=ratio)
    rng = random.Random(seed)
    cases = []
    for case in head["cases"]:
        rounds = []
        for i in range(pairs):
            base_us = 100.0 * (1 + 0.001 * rng.gauss(0, 1))
            head_us = base_us * ratio * (1 + 0.001 * rng.gauss(0, 1))
            rounds.append(
                {"order": "AB" if i % 2 == 0 else "BA", "base_us": base_us, "head_us": head_us}
                | {"base_samples": 5, "head_samples": 5}
            )
        stopped = "slower" if ratio > 1.01 else "same"
        cases.append({"case": case["id"], "min_effect": 0.005, "stopped_by": stopped, "pairs": rounds})
    paired: dict[str, Any] = {
        "schema": "attnprof.paired/v1",
        "mode": head["run"]["mode"],
        "base_run": base["run"]["id"],
        "head_run": head["run"]["id"],
        "rule": {
            "min_effect": 0.005,
            "alpha": 0.05,
            "min_pairs": MIN_PAIRS,
            "max_pairs": max_pairs,
            "looks": list(range(MIN_PAIRS, max_pairs + 1, MIN_PAIRS)),
            "samples_per_round": "as a profile run's round",
        },
        "cases": cases,
    }
    if wall_s is not None:
        paired["wall_s"] = wall_s
    return PairedResult(head, base, paired)
