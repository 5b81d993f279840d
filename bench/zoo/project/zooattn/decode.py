"""One decode step: rotary embedding of the new token's queries, then attention over the KV cache through SDPA with
grouped-query attention (each KV head serves ``q_heads // kv_heads`` query heads)."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from . import _common

# Replay the decode step as a CUDA graph (captured once per set of buffers) instead of launching its kernels one by
# one.
USE_CUDA_GRAPHS = True


def rope_tables(position: int, head_dim: int, *, device: str, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of the rotary angles at ``position``, shaped [1, 1, 1, head_dim] to broadcast over q."""
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    angles = position * inv_freq
    angles = torch.cat((angles, angles))
    shape = (1, 1, 1, head_dim)
    return angles.cos().view(shape).to(device, dtype), angles.sin().view(shape).to(device, dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    rotated = torch.cat((-x2, x1), dim=-1)
    return x * cos + rotated * sin


def decode_step(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
) -> torch.Tensor:
    """q [B, Hq, 1, D] of the new token; k_cache and v_cache [B, Hkv, S, D]; returns [B, Hq, 1, D]."""
    q = apply_rope(q, cos, sin)
    return F.scaled_dot_product_attention(q, k_cache, v_cache, enable_gqa=True)


def reference(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
) -> torch.Tensor:
    return _common.reference_attention(apply_rope(q, cos, sin), k_cache, v_cache)


def _inputs(params: dict[str, Any], device: str) -> tuple[torch.Tensor, ...]:
    dtype = _common.dtype_of(params)
    gen = _common.generator(device)
    b, hq, hkv = params["batch"], params["q_heads"], params["kv_heads"]
    s, d = params["seq_kv"], params["head_dim"]
    q = _common.randn((b, hq, 1, d), device=device, dtype=dtype, gen=gen)
    k_cache = _common.randn((b, hkv, s, d), device=device, dtype=dtype, gen=gen)
    v_cache = _common.randn((b, hkv, s, d), device=device, dtype=dtype, gen=gen)
    cos, sin = rope_tables(s - 1, d, device=device, dtype=dtype)
    return q, k_cache, v_cache, cos, sin


def make_case(params: dict[str, Any], device: str) -> dict[str, Any]:
    """The attnprof factory: one decode step against a KV cache of ``seq_kv`` tokens."""
    return {"fn": decode_step, "args": _inputs(params, device), "reference": reference}


def _graphed(args: tuple[torch.Tensor, ...]) -> Any:
    """``decode_step`` on ``args`` captured as a CUDA graph: each call replays it on the same buffers."""
    side = torch.cuda.Stream()  # type: ignore[no-untyped-call]
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):  # warm-up outside the capture: workspaces, kernel selection
            decode_step(*args)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = decode_step(*args)

    def replay(*_: torch.Tensor) -> torch.Tensor:
        graph.replay()
        return out

    return replay


def make_graphed_case(params: dict[str, Any], device: str) -> dict[str, Any]:
    """The attnprof factory of the serving loop's decode step: replayed as a CUDA graph where graphs are on."""
    args = _inputs(params, device)
    fn = _graphed(args) if USE_CUDA_GRAPHS and device == "cuda" else decode_step
    return {"fn": fn, "args": args, "reference": reference}
