"""Causal self-attention, "simplified" to plain tensor ops: the regression the demo plants.

It computes the same thing (accuracy still passes), but as separate matmul, mask, softmax and matmul ops
instead of SDPA's fused kernel: the backend that runs changes from ``cpu_flash`` to ``eager``, which fails
the comparison whatever the timing noise, and it is slower too.
"""

from __future__ import annotations

import torch


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    scores = (q @ k.transpose(-2, -1)) / q.shape[-1] ** 0.5
    mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).tril()
    return torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1) @ v


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """The same function in float64 (the profiler checks accuracy against it)."""
    return attention(q, k, v)


def make_case(params: dict, device: str):
    """The attnprof factory: ``(fn, args, reference)`` for one case of the suite."""
    gen = torch.Generator(device="cpu").manual_seed(0)
    shape = (params["batch"], params["q_heads"], params["seq_q"], params["head_dim"])
    q, k, v = (torch.randn(shape, generator=gen).to(device) for _ in range(3))
    return attention, (q, k, v), reference
