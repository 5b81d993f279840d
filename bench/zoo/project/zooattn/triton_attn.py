"""Prefill attention through the hand-written Triton kernel, with a fixed launch configuration."""

from __future__ import annotations

from typing import Any

import torch

from . import _common

# Launch configuration for head_dim 64 in fp16: 128 queries by 64 keys per step, four warps, three pipeline stages.
BLOCK_M = 128
BLOCK_N = 64
NUM_WARPS = 4
NUM_STAGES = 3


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """softmax(q kᵀ / √D) v, non-causal; q [B, Hq, Sq, D], k and v [B, Hkv, Skv, D]."""
    import triton

    from . import _flash_kernel as kernel

    b, h, n_q, d = q.shape
    out = torch.empty_like(q)
    grid = (triton.cdiv(n_q, BLOCK_M), b * h)
    kernel.attn_fwd[grid](
        q, k, v, out, d**-0.5,
        *kernel.strides(q), *kernel.strides(k), *kernel.strides(v), *kernel.strides(out),
        h, h // k.shape[1], n_q, k.shape[2],
        HEAD_DIM=d, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, num_warps=NUM_WARPS, num_stages=NUM_STAGES,
    )  # fmt: skip
    return out


def make_case(params: dict[str, Any], device: str) -> dict[str, Any]:
    """The attnprof factory: random q, k, v of the case's shape and the Triton forward."""
    if device != "cuda":
        raise RuntimeError("the Triton kernel needs a CUDA device")
    dtype = _common.dtype_of(params)
    gen = _common.generator(device)
    b, hq, hkv = params["batch"], params["q_heads"], params["kv_heads"]
    sq, skv, d = params["seq_q"], params["seq_kv"], params["head_dim"]
    q = _common.randn((b, hq, sq, d), device=device, dtype=dtype, gen=gen)
    k = _common.randn((b, hkv, skv, d), device=device, dtype=dtype, gen=gen)
    v = _common.randn((b, hkv, skv, d), device=device, dtype=dtype, gen=gen)
    return {"fn": attention, "args": (q, k, v), "reference": _common.reference_attention}
