"""Inputs and float64 references shared by the factories."""

from __future__ import annotations

import math
from typing import Any

import torch

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def dtype_of(params: dict[str, Any]) -> torch.dtype:
    return DTYPES[params.get("dtype", "bf16")]


def generator(device: str, seed: int = 0) -> torch.Generator:
    return torch.Generator(device=device).manual_seed(seed)


def randn(shape: tuple[int, ...], *, device: str, dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    return torch.randn(shape, device=device, generator=gen, dtype=torch.float32).to(dtype)


def reference_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """softmax(q kᵀ / √D) v in the inputs' dtype (float64 when the profiler checks accuracy), one query head at a time
    so that long sequences never hold every head's score matrix at once. q [B, Hq, Sq, D], k and v [B, Hkv, Skv, D];
    a causal mask aligns bottom-right (the last query sees every key)."""
    hq, hkv = q.shape[1], k.shape[1]
    sq, skv = q.shape[2], k.shape[2]
    out = torch.empty((*q.shape[:-1], v.shape[-1]), dtype=q.dtype, device=q.device)
    keep = None
    if causal:
        rows = torch.arange(sq, device=q.device)[:, None] + (skv - sq)
        keep = torch.arange(skv, device=q.device)[None, :] <= rows
    for h in range(hq):
        g = h // (hq // hkv)
        scores = (q[:, h] @ k[:, g].transpose(-2, -1)) / math.sqrt(q.shape[-1])
        if keep is not None:
            scores = scores.masked_fill(~keep, float("-inf"))
        if mask is not None:
            scores = scores.masked_fill(~mask[:, 0], float("-inf"))
        out[:, h] = torch.softmax(scores, dim=-1) @ v[:, g]
    return out
