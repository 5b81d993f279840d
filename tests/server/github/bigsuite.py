"""A large suite of real H200 kernel tables for the PR comment's size tests: the committed H200 result documents
(``tests/data/h200/attnprof/result.json``, and ``tests/data/h200/truth``: the example suite and the validation suite
of one run; 60 cases with their kernels) replicated under distinct case ids, and a candidate in which chosen cases
regressed: one kernel of each (the case's longest, or each of its kernels) made slower by a known factor, the case's
samples by the microseconds it added, its rates divided.
"""

from __future__ import annotations

import copy
import gzip
import json
import uuid
from pathlib import Path
from typing import Any

from attnprof.core.analysis import compare
from attnprof.core.documents import parse_result
from attnprof.core.documents.comparison import ComparisonDocument
from attnprof.core.documents.result import ResultDocument

H200 = Path(__file__).resolve().parents[2] / "data" / "h200" / "attnprof" / "result.json"
TRUTH = H200.parents[1] / "truth"
_RATES = ("tflops", "gbps", "compute_util", "bandwidth_util")


def _load(name: str) -> dict[str, Any]:
    with gzip.open(TRUTH / name, "rt") as fh:
        return dict(json.load(fh))


def _copy_id(case_id: str, copy_no: int) -> str:
    """``sdpa[backend=math,pass=fwd]`` → ``sdpa[backend=math,pass=fwd,copy=2]``; a bare name gets ``[copy=2]``."""
    if copy_no == 0:
        return case_id
    if case_id.endswith("]"):
        return f"{case_id[:-1]},copy={copy_no}]"
    return f"{case_id}[copy={copy_no}]"


def suite(cases: int) -> dict[str, Any]:
    """A result document (as JSON) of ``cases`` cases that ran, with real kernel tables: the run of
    ``tests/data/h200/attnprof/result.json`` (its testbed, the one the service tests' workers serve) holding its own
    cases, then the committed example and validation suites' cases, then again, each id made distinct by a ``copy``
    grid key."""
    doc = json.loads(H200.read_text())
    pool = [*doc["cases"], *_load("llama7b.json.gz")["cases"], *_load("validation.json.gz")["cases"]]
    real = [c for c in pool if c["status"] == "ok" and c["kernels"]]
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    while len(out) < cases:
        one = copy.deepcopy(real[len(out) % len(real)])
        copy_no = 0
        while _copy_id(one["id"], copy_no) in seen:
            copy_no += 1
        one["id"] = _copy_id(one["id"], copy_no)
        one["trace"] = None
        seen.add(one["id"])
        out.append(one)
    doc["cases"] = out
    return doc


def planted(doc: dict[str, Any], slower: dict[str, float], *, every_kernel: bool = False) -> dict[str, Any]:
    """A candidate: ``doc`` under a new run id with, for each case id in ``slower``, its longest kernel (or, with
    ``every_kernel``, each of its kernels) that many times slower; the case's samples and statistics grow by the
    microseconds the kernels added."""
    out = copy.deepcopy(doc)
    out["run"]["id"] = str(uuid.uuid4())
    for case in out["cases"]:
        factor = slower.get(case["id"])
        if factor is None:
            continue
        longest = max(case["kernels"], key=lambda k: k["duration_us"]["median"])
        added_us = 0.0
        for kernel in case["kernels"] if every_kernel else [longest]:
            added_us += kernel["duration_us"]["median"] * (factor - 1.0)
            for q in ("median", "p25", "p75"):
                kernel["duration_us"][q] *= factor
            for q in _RATES:
                if kernel.get(q) is not None:
                    kernel[q] /= factor
        lat = case["latency_us"]
        scale = (lat["median"] + added_us) / lat["median"]
        lat["samples"] = [v + added_us for v in lat["samples"]]
        for q in ("median", "p25", "p75", "min", "max"):
            lat[q] += added_us
        achieved = case.get("achieved") or {}
        for q in _RATES:
            if achieved.get(q) is not None:
                achieved[q] /= scale
    return out


def regressed(
    cases: int, regressions: int, *, every_kernel: bool = False
) -> tuple[ResultDocument, ResultDocument, ComparisonDocument]:
    """(baseline, candidate, their comparison): a suite of ``cases`` cases, the first ``regressions`` of them
    slower in the candidate by factors from 1.10 to 1.60 (each case its own; ``planted`` says how)."""
    base = suite(cases)
    ids = [c["id"] for c in base["cases"]][:regressions]
    factors = {case_id: 1.10 + 0.5 * i / max(1, len(ids) - 1) for i, case_id in enumerate(ids)}
    baseline = parse_result(base)
    candidate = parse_result(planted(base, factors, every_kernel=every_kernel))
    return baseline, candidate, compare([baseline], candidate)
