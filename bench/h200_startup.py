"""What one profiling process pays once, piece by piece, on the paired suite's cases (bench/paired/suite.toml).

A paired run starts two such processes, one per tree, so every one-off cost below is paid twice; what runs before
the first case (the imports, the device, the flush buffer, the profiler's first start) runs on both sides at once,
and a case's first build runs one side after the other unless `attnprof ab --first-builds together`. This prints
one JSON line per piece (seconds, wall clock on this host), so the cost table of bench/reports/h200-paired.md can
say where a paired job's extra time goes.

    PYTHONPATH=. python3 bench/h200_startup.py            # on the GPU host, from the repository root
"""

from __future__ import annotations

import json
import time

started = time.perf_counter()
last = started


def lap(piece: str, **extra: object) -> None:
    global last
    now = time.perf_counter()
    print(json.dumps({"piece": piece, "s": round(now - last, 4), **extra}), flush=True)
    last = now


import torch  # noqa: E402

lap("import torch")
torch.zeros(1, device="cuda")
torch.cuda.synchronize()
lap("CUDA context")
from attnprof.core.measure.timing import Flusher  # noqa: E402
from attnprof.core.measure.trace import start_profiler_once  # noqa: E402

flusher = Flusher("cuda")
torch.cuda.synchronize()
lap("flush buffer")
start_profiler_once("cuda", flusher)
lap("profiler, first start")
start_profiler_once("cuda", flusher)
lap("profiler, second start")

import torch.nn.functional as F  # noqa: E402


def qkv(b: int, hq: int, hkv: int, sq: int, skv: int, d: int, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    return tuple(torch.randn(b, h, s, d, device="cuda", dtype=dtype) for h, s in ((hq, sq), (hkv, skv), (hkv, skv)))


def calls(piece: str, fn: object, args: tuple[torch.Tensor, ...], n: int = 2) -> None:
    for i in range(n):
        fn(*args)  # type: ignore[operator]
        torch.cuda.synchronize()
        lap(f"{piece}, call {i + 1}")


fused = qkv(8, 32, 32, 2048, 2048, 128, torch.bfloat16)
lap("fused inputs")
calls(
    "fused (SDPA causal, as PyTorch picks)",
    lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
    fused,
)
decode = qkv(16, 32, 8, 1, 8192, 128, torch.bfloat16)
calls("decode (SDPA GQA)", lambda q, k, v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True), decode)
from bench.validation.triton_attention import make_case  # noqa: E402

case = make_case(
    {
        "batch": 4,
        "q_heads": 16,
        "kv_heads": 16,
        "seq_q": 2048,
        "seq_kv": 2048,
        "head_dim": 64,
        "dtype": "fp16",
        "causal": False,
        "args": {"declare": True},
    },
    "cuda",
)
lap("triton inputs")
calls("triton kernel (compiled, or from the disk cache)", case["fn"], tuple(case["args"]))
print(json.dumps({"piece": "total", "s": round(time.perf_counter() - started, 4)}), flush=True)
