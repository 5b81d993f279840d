"""Prefill attention through the Triton kernel, its launch configuration chosen by Triton's autotuner."""

from __future__ import annotations

from typing import Any

import torch

from . import _common

# (BLOCK_M, BLOCK_N, num_warps, num_stages): the autotuner times each at the first call of a shape and keeps the best.
AUTOTUNE_CONFIGS = [
    (128, 64, 8, 3),
    (128, 32, 4, 3),
    (64, 64, 4, 3),
    (64, 32, 4, 2),
]

_tuned: dict[tuple[tuple[int, int, int, int], ...], Any] = {}


def _kernel() -> Any:
    key = tuple(AUTOTUNE_CONFIGS)
    if key not in _tuned:
        from . import _flash_kernel

        _tuned[key] = _flash_kernel.autotuned(list(key))
    return _tuned[key]


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """softmax(q kᵀ / √D) v, non-causal; q [B, Hq, Sq, D], k and v [B, Hkv, Skv, D]."""
    import triton

    from . import _flash_kernel as kernel

    b, h, n_q, d = q.shape
    out = torch.empty_like(q)

    def grid(meta: dict[str, Any]) -> tuple[int, int]:
        return (triton.cdiv(n_q, meta["BLOCK_M"]), b * h)

    _kernel()[grid](
        q, k, v, out, d**-0.5,
        *kernel.strides(q), *kernel.strides(k), *kernel.strides(v), *kernel.strides(out),
        h, h // k.shape[1], n_q, k.shape[2],
        HEAD_DIM=d,
    )  # fmt: skip
    return out


def make_case(params: dict[str, Any], device: str) -> dict[str, Any]:
    """The attnprof factory: random q, k, v of the case's shape and the autotuned Triton forward."""
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
