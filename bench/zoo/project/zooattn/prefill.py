"""Causal prefill through SDPA. The projections hand q, k and v over as [B, S, H, D] (tokens first, as a linear layer
writes them); attention wants [B, H, S, D], a transposed view of the same memory."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from . import _common, config


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal attention of q [B, S, Hq, D] over k and v [B, S, Hkv, D]; returns [B, Hq, S, D]."""
    q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=q.shape[1] != k.shape[1])


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return _common.reference_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=True)


def _inputs(b: int, s: int, hq: int, hkv: int, d: int, device: str, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    gen = _common.generator(device)
    q = _common.randn((b, s, hq, d), device=device, dtype=dtype, gen=gen)
    k = _common.randn((b, s, hkv, d), device=device, dtype=dtype, gen=gen)
    v = _common.randn((b, s, hkv, d), device=device, dtype=dtype, gen=gen)
    return q, k, v


def make_case(params: dict[str, Any], device: str) -> dict[str, Any]:
    """The attnprof factory: a prompt of ``seq_q`` tokens, the suite's heads and head size."""
    b, s, d = params["batch"], params["seq_q"], params["head_dim"]
    args = _inputs(b, s, params["q_heads"], params["kv_heads"], d, device, _common.dtype_of(params))
    return {"fn": attend, "args": args, "reference": reference}


def make_model_case(params: dict[str, Any], device: str) -> dict[str, Any]:
    """The attnprof factory of the model's own geometry (``config``): a prompt of ``seq_q`` tokens."""
    b, s = params["batch"], params["seq_q"]
    args = _inputs(b, s, config.HEADS, config.HEADS, config.HEAD_DIM, device, _common.dtype_of(params))
    return {"fn": attend, "args": args, "reference": reference}
