"""Record the CPU Kineto traces under ``tests/data/cpu/`` that the attribution tests read.

Each trace follows the measuring side's conventions: every profiled iteration runs inside
``record_function("attnprof/iter/<i>")`` and the backward call inside
``record_function("attnprof/backward")``. Shapes are small so each gzip file stays well under
300 KB and the tests stay fast.

    .venv/bin/python tests/data/make_cpu_traces.py            # rewrite all traces
    .venv/bin/python tests/data/make_cpu_traces.py naive_fwd  # one of them

Traces (``trace_<name>.json.gz``):

``sdpa_math_fwd``      SDPA forced to the math backend, forward only
``sdpa_fwd_bwd``       SDPA with the default CPU backend (the fused flash CPU kernel), forward + backward
``naive_fwd``          q·kᵀ·scale, causal mask (``masked_fill``), softmax, ·v in eager mode
``naive_fwd_bwd``      the same, forward + backward

All use B=1, H=2, S_q=S_kv=64, D=32, fp32, ITERATIONS iterations after WARMUP untraced ones.
Recorded with PyTorch 2.13 (CPU build); rerun after a PyTorch upgrade if the tests change.
"""

from __future__ import annotations

import gzip
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile, record_function

OUT = Path(__file__).resolve().parent / "cpu"
B, H, S, D = 1, 2, 64, 32
ITERATIONS = 3
WARMUP = 2


def _inputs(requires_grad: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    q, k, v, grad = (torch.randn(B, H, S, D, generator=g) for _ in range(4))
    for t in (q, k, v):
        t.requires_grad_(requires_grad)
    return q, k, v, grad


def _naive(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    scores = torch.matmul(q, k.transpose(-2, -1)) * (q.shape[-1] ** -0.5)
    causal = torch.ones(S, S, dtype=torch.bool).triu(1)
    scores = scores.masked_fill(causal, float("-inf"))
    return torch.matmul(torch.softmax(scores, dim=-1), v)


def _sdpa_math(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    with sdpa_kernel([SDPBackend.MATH]):
        return F.scaled_dot_product_attention(q, k, v)


def _sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v)


Fn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
CASES: dict[str, tuple[Fn, bool]] = {
    "sdpa_math_fwd": (_sdpa_math, False),
    "sdpa_fwd_bwd": (_sdpa, True),
    "naive_fwd": (_naive, False),
    "naive_fwd_bwd": (_naive, True),
}


def _step(fn: Fn, backward: bool, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, grad: torch.Tensor) -> None:
    out = fn(q, k, v)
    if backward:
        with record_function("attnprof/backward"):
            torch.autograd.backward(out, grad)


def record(name: str) -> Path:
    """Record one case and write ``trace_<name>.json.gz``; return its path."""
    fn, backward = CASES[name]
    q, k, v, grad = _inputs(backward)
    for _ in range(WARMUP):
        _step(fn, backward, q, k, v, grad)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for i in range(ITERATIONS):
            with record_function(f"attnprof/iter/{i}"):
                _step(fn, backward, q, k, v, grad)
    OUT.mkdir(parents=True, exist_ok=True)
    target = OUT / f"trace_{name}.json.gz"
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(raw))
        # mtime=0 keeps the gzip header stable, so an unchanged trace does not show up as a diff.
        target.write_bytes(gzip.compress(raw.read_bytes(), compresslevel=9, mtime=0))
    return target


def main(argv: list[str]) -> int:
    names = argv or list(CASES)
    unknown = [n for n in names if n not in CASES]
    if unknown:
        print(f"unknown trace(s) {unknown}; known: {list(CASES)}", file=sys.stderr)
        return 2
    for n in names:
        path = record(n)
        print(f"{path.relative_to(OUT.parent.parent.parent)}: {path.stat().st_size / 1024:.1f} KiB")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
