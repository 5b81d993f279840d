"""A custom Triton kernel for the validation set: a FlashAttention-style forward (online softmax).

Used as a custom target, ``bench.validation.triton_attention:make_case``, so the profiler meets a kernel
it has no model for. With ``args = { declare = true }`` the kernel declares its work through Triton's
``launch_metadata`` hook (what proton reads: ``flops`` and ``bytes``); without, the profiler falls back to
the case's attention formula for the kernel that holds the case's time.

Shapes: q [B, Hq, Sq, D], k and v [B, Hkv, Skv, D] (GQA when Hkv < Hq), fp16 or bf16, D a power of two
<= 128; causal masks align bottom-right (the last query sees every key).
"""

from __future__ import annotations

import math
from typing import Any

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # the CPU test machines have no Triton: the factory says so when called
    triton = None


def _metadata(grid: Any, metadata: Any, args: dict[str, Any]) -> dict[str, Any]:
    """Useful FLOPs (4·B·Hq·pairs·D) and minimum bytes (q, k, v read once, o written once) of one launch."""
    q, k, o = args["Q"], args["K"], args["Out"]
    b, hq, sq, d = q.shape
    hkv, skv = k.shape[1], k.shape[2]
    causal = bool(args.get("CAUSAL", False))
    pairs = sq * skv - (sq * (sq - 1) // 2 if sq != skv else sq * sq // 2) if causal else sq * skv
    e = q.element_size()
    return {
        "name": f"triton_attention_fwd[B={b},H={hq},Sq={sq},Skv={skv},D={d}]",
        "flops": 4 * b * hq * pairs * d,
        "bytes": e * (q.numel() + o.numel() + 2 * b * hkv * skv * d),
    }


if triton is not None:

    def _attn_fwd_body(  # type: ignore[no-untyped-def]  # a Triton kernel: its arguments' types are Triton's
        Q, K, V, Out, sm_scale,
        stride_qz, stride_qh, stride_qm,
        stride_kz, stride_kh, stride_kn,
        stride_vz, stride_vh, stride_vn,
        stride_oz, stride_oh, stride_om,
        H, GROUP, N_Q, N_KV,
        HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr,
    ):  # fmt: skip
        start_m = tl.program_id(0)
        off_hz = tl.program_id(1)
        off_z = off_hz // H
        off_h = off_hz % H
        off_kvh = off_h // GROUP
        offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = tl.arange(0, BLOCK_N)
        offs_d = tl.arange(0, HEAD_DIM)
        q_ptrs = Q + off_z * stride_qz + off_h * stride_qh + offs_m[:, None] * stride_qm + offs_d[None, :]
        q = tl.load(q_ptrs, mask=offs_m[:, None] < N_Q, other=0.0)
        k_base = K + off_z * stride_kz + off_kvh * stride_kh
        v_base = V + off_z * stride_vz + off_kvh * stride_vh
        m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
        qk_scale = sm_scale * 1.4426950408889634
        shift = N_KV - N_Q
        hi = N_KV
        if CAUSAL:
            hi = tl.minimum(N_KV, (start_m + 1) * BLOCK_M + shift)
        for start_n in range(0, hi, BLOCK_N):
            cols = start_n + offs_n
            k = tl.load(k_base + cols[None, :] * stride_kn + offs_d[:, None], mask=cols[None, :] < N_KV, other=0.0)
            qk = tl.dot(q, k) * qk_scale
            valid = cols[None, :] < N_KV
            if CAUSAL:
                valid = valid & (cols[None, :] <= offs_m[:, None] + shift)
            qk = tl.where(valid, qk, float("-inf"))
            m_ij = tl.maximum(m_i, tl.max(qk, 1))
            p = tl.math.exp2(qk - m_ij[:, None])
            alpha = tl.math.exp2(m_i - m_ij)
            l_i = l_i * alpha + tl.sum(p, 1)
            v = tl.load(v_base + cols[:, None] * stride_vn + offs_d[None, :], mask=cols[:, None] < N_KV, other=0.0)
            acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
            m_i = m_ij
        acc = acc / l_i[:, None]
        o_ptrs = Out + off_z * stride_oz + off_h * stride_oh + offs_m[:, None] * stride_om + offs_d[None, :]
        tl.store(o_ptrs, acc.to(Out.dtype.element_ty), mask=offs_m[:, None] < N_Q)

    # One kernel that declares its work, and the same kernel that does not (the same name is launched).
    _attn_fwd_declared = triton.jit(launch_metadata=_metadata)(_attn_fwd_body)
    _attn_fwd_silent = triton.jit(_attn_fwd_body)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool, declare: bool) -> torch.Tensor:
    """softmax(q kᵀ / √D) v through the Triton kernel."""
    b, hq, sq, d = q.shape
    hkv, skv = k.shape[1], k.shape[2]
    out = torch.empty_like(q)
    block_m, block_n = (128, 64) if d <= 64 else (64, 64)
    grid = (triton.cdiv(sq, block_m), b * hq)
    kernel = _attn_fwd_declared if declare else _attn_fwd_silent
    kernel[grid](
        q, k, v, out, 1.0 / math.sqrt(d),
        q.stride(0), q.stride(1), q.stride(2),
        k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2),
        out.stride(0), out.stride(1), out.stride(2),
        hq, hq // hkv, sq, skv,
        HEAD_DIM=d, BLOCK_M=block_m, BLOCK_N=block_n, CAUSAL=causal,
        num_warps=4 if d <= 64 else 8, num_stages=3,
    )  # fmt: skip
    return out


def _reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    rep = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    if causal:
        sq, skv = q.shape[-2], k.shape[-2]
        i = torch.arange(sq, device=q.device)[:, None] + (skv - sq)
        j = torch.arange(skv, device=q.device)[None, :]
        scores = scores.masked_fill(j > i, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def make_case(params: dict[str, Any], device: str) -> dict[str, Any]:
    """The custom target's factory: random q, k, v of the case's shape and the Triton forward."""
    if triton is None or device != "cuda":
        raise RuntimeError("the Triton attention kernel needs Triton and a CUDA device")
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[params["dtype"]]
    b, hq, hkv = params["batch"], params["q_heads"], params["kv_heads"]
    sq, skv, d = params["seq_q"], params["seq_kv"], params["head_dim"]
    causal = bool(params.get("causal"))
    declare = bool(params.get("args", {}).get("declare", True))
    gen = torch.Generator(device=device).manual_seed(0)
    q = torch.randn(b, hq, sq, d, device=device, generator=gen).to(dtype)
    k = torch.randn(b, hkv, skv, d, device=device, generator=gen).to(dtype)
    v = torch.randn(b, hkv, skv, d, device=device, generator=gen).to(dtype)

    def fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return attention(q, k, v, causal=causal, declare=declare)

    def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return _reference(q, k, v, causal)

    return {"fn": fn, "args": (q, k, v), "reference": reference}
