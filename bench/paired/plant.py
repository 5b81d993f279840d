"""The planted change of bench/h200_paired.py: each case's real work, then a spin of a known number of cycles.

A tree made by ``h200_paired.py plant`` holds this module and ``plant_config.py`` (``CYCLES``: case name -> cycles).
Every tree spins, the base and the A/A head zero cycles: both sides launch the same kernels, and a planted head only
spins longer (``torch.cuda._sleep`` counts SM clock cycles: 1,980 cycles are 1 µs at the H200's top clock).
"""

from __future__ import annotations

from typing import Any

import plant_config  # type: ignore[import-not-found]  # written beside this module in each tree
import torch
import torch.nn.functional as F


def _spinning(fn: Any, name: str) -> Any:
    cycles = int(plant_config.CYCLES.get(name, 0))

    def run(*args: Any) -> Any:
        out = fn(*args)
        torch.cuda._sleep(cycles)  # type: ignore[no-untyped-call]
        return out

    return run


def _qkv(params: dict[str, Any], device: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[params["dtype"]]
    b, hq, hkv = params["batch"], params["q_heads"], params["kv_heads"]
    sq, skv, d = params["seq_q"], params["seq_kv"], params["head_dim"]
    q = torch.randn(b, hq, sq, d, device=device, dtype=dtype)
    k = torch.randn(b, hkv, skv, d, device=device, dtype=dtype)
    v = torch.randn(b, hkv, skv, d, device=device, dtype=dtype)
    return q, k, v


def fused(params: dict[str, Any], device: str) -> dict[str, Any]:
    """Causal prefill through SDPA (cuDNN or flash, as PyTorch picks): compute-bound."""
    q, k, v = _qkv(params, device)

    def fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    return {"fn": _spinning(fn, "fused"), "args": (q, k, v)}


def decode(params: dict[str, Any], device: str) -> dict[str, Any]:
    """One query token against the KV cache, GQA: memory-bound."""
    q, k, v = _qkv(params, device)

    def fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)

    return {"fn": _spinning(fn, "decode"), "args": (q, k, v)}


def triton_kernel(params: dict[str, Any], device: str) -> dict[str, Any]:
    """The validation set's Triton flash-attention forward (it declares its work through launch_metadata)."""
    from bench.validation.triton_attention import make_case

    built = make_case(params, device)
    built["fn"] = _spinning(built["fn"], "triton")
    built.pop("reference", None)
    return built
