"""Causal self-attention through PyTorch's fused SDPA (on CPU: its flash kernel, one fused op)."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """The same function in float64 (the profiler checks accuracy against it)."""
    scores = (q @ k.transpose(-2, -1)) / q.shape[-1] ** 0.5
    mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).tril()
    return torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1) @ v


def make_case(params: dict, device: str):
    """The attnprof factory: ``(fn, args, reference)`` for one case of the suite."""
    gen = torch.Generator(device="cpu").manual_seed(0)
    shape = (params["batch"], params["q_heads"], params["seq_q"], params["head_dim"])
    q, k, v = (torch.randn(shape, generator=gen).to(device) for _ in range(3))
    return attention, (q, k, v), reference
