"""Result documents for the service tests, made from the real runs committed under tests/data."""

from __future__ import annotations

import copy
import json
import uuid
from functools import cache
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parents[1] / "data"
H200 = DATA / "h200" / "attnprof" / "result.json"
CPU = DATA / "service" / "cpu-run-1.json"
# The suite the job tests submit: one small SDPA case.
SPEC = """
[suite]
name = "s"

[[cases]]
name = "prefill"
target = "sdpa"
q_heads = 4
seq_q = 128
head_dim = 64
"""


@cache
def _load(path: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(path.read_text())
    return loaded


def h200(**kw: Any) -> dict[str, Any]:
    return variant(_load(H200), **kw)


def cpu(**kw: Any) -> dict[str, Any]:
    return variant(_load(CPU), **kw)


def variant(
    doc: dict[str, Any],
    *,
    slower: float = 1.0,
    cases: list[str] | None = None,
    suspect: bool | None = None,
    jitter: float = 0.0,
) -> dict[str, Any]:
    """A copy with a new run id, every latency (and kernel duration) times ``slower``, rates divided by it.

    ``cases``: only those case ids slow down (all when None). ``jitter``: an extra relative offset.
    """
    out = copy.deepcopy(doc)
    out["run"]["id"] = str(uuid.uuid4())
    if suspect is not None:
        out["run"]["suspect"] = ["test: marked suspect"] if suspect else None
    for case in out["cases"]:
        s = (slower if cases is None or case["id"] in cases else 1.0) * (1.0 + jitter)
        if s == 1.0:
            continue
        lat = case.get("latency_us")
        if lat:
            lat["samples"] = [v * s for v in lat["samples"]]
            for k in ("median", "p25", "p75", "min", "max"):
                lat[k] *= s
        ach = case.get("achieved")
        if ach:
            for k in ("tflops", "gbps", "compute_util", "bandwidth_util"):
                if ach.get(k) is not None:
                    ach[k] /= s
        for k in case.get("kernels", []):
            for q in ("median", "p25", "p75"):
                k["duration_us"][q] *= s
            for q in ("tflops", "gbps", "compute_util", "bandwidth_util"):
                if k.get(q) is not None:
                    k[q] /= s
    return out


def upload_body(doc: dict[str, Any], *, branch: str = "main", commit: str = "c0", **kw: Any) -> dict[str, Any]:
    return {"result": doc, "branch": branch, "commit": commit, **kw}
