"""The advice benchmark's cases: each a user's SDPA call as written, and the same call with one rule's advice applied
by hand, as custom targets of ``suite.toml``. ``args.variant`` picks which; the shapes come from the case.

``float_mask`` / ``causal``: a causal mask built as a float tensor of 0 and -inf, against ``is_causal=True``.
``all_true_mask`` / ``no_mask``: an all-true boolean padding mask, against none.
``strided`` / ``contiguous``: q, k and v as views of a [B, S, H, D] projection, against contiguous copies made once.
``hd80`` / ``hd96``: head dimension 80, against 80 padded with zeros to 96 (scale kept at 1/sqrt(80)).
``math`` / ``default``: the math backend forced by ``sdpa_kernel``, against PyTorch's own choice.
``gqa_repeat`` / ``gqa_enable``: key and value heads repeated to the query's before the call, against ``enable_gqa``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

Fn = Callable[..., torch.Tensor]
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}


def _qkv(params: dict[str, Any], device: str, head_dim: int | None = None) -> list[torch.Tensor]:
    dtype = DTYPES[params["dtype"]]
    b, h, s, d = params["batch"], params["q_heads"], params["seq_q"], head_dim or params["head_dim"]
    gen = torch.Generator(device=device).manual_seed(0)
    return [torch.randn(b, h, s, d, device=device, generator=gen).to(dtype) for _ in range(3)]


def _variant(params: dict[str, Any], device: str) -> tuple[Fn, list[Any]]:
    variant = params.get("args", {}).get("variant")
    q, k, v = _qkv(params, device)
    s, d = params["seq_q"], params["head_dim"]
    if variant == "float_mask":
        mask = torch.full((s, s), float("-inf"), device=device, dtype=q.dtype).triu(1)
        return (lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m)), [q, k, v, mask]
    if variant == "causal":
        return (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)), [q, k, v]
    if variant == "all_true_mask":
        mask = torch.ones(s, s, device=device, dtype=torch.bool)
        return (lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m)), [q, k, v, mask]
    if variant in ("no_mask", "default", "contiguous"):
        return (lambda q, k, v: F.scaled_dot_product_attention(q, k, v)), [q, k, v]
    if variant == "strided":
        # one [B, S, H, D] projection's views, as a model that never transposes back hands them over
        views = [t.transpose(1, 2).contiguous().transpose(1, 2) for t in (q, k, v)]
        return (lambda q, k, v: F.scaled_dot_product_attention(q, k, v)), views
    if variant == "math":

        def forced(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            with sdpa_kernel([SDPBackend.MATH]):
                return F.scaled_dot_product_attention(q, k, v)

        return forced, [q, k, v]
    if variant == "hd96":
        padded = [F.pad(t, (0, 96 - d)) for t in (q, k, v)]
        return (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, scale=d**-0.5)), padded
    if variant in ("gqa_repeat", "gqa_enable"):
        group = params["q_heads"] // params["kv_heads"]
        kv = [t[:, : params["kv_heads"]].contiguous() for t in (k, v)]
        if variant == "gqa_enable":
            return (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True)), [q, *kv]

        def repeated(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
            return F.scaled_dot_product_attention(q, k, v)

        return repeated, [q, *kv]
    if variant == "hd80":
        return (lambda q, k, v: F.scaled_dot_product_attention(q, k, v)), [q, k, v]
    raise ValueError(f"args.variant: unknown variant {variant!r}")


def make_case(params: dict[str, Any], device: str) -> dict[str, Any]:
    fn, args = _variant(params, device)
    return {"fn": fn, "args": tuple(args)}
