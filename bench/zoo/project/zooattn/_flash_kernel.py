"""The Triton attention forward (FlashAttention-2 style: one program per block of queries and head, online softmax
over blocks of keys). Non-causal; q [B, Hq, Sq, D], k and v [B, Hkv, Skv, D] with their last dimension contiguous,
GQA when Hkv < Hq; D a power of two. Imported only by the launchers, so Triton is needed only where a kernel runs."""

from __future__ import annotations

import torch
import triton
import triton.language as tl


def _attn_fwd(
    Q, K, V, Out, sm_scale,
    stride_qb, stride_qh, stride_qm,
    stride_kb, stride_kh, stride_kn,
    stride_vb, stride_vh, stride_vn,
    stride_ob, stride_oh, stride_om,
    H, GROUP, N_Q, N_KV,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    start_m = tl.program_id(0)
    off_bh = tl.program_id(1)
    off_b = off_bh // H
    off_h = off_bh % H
    off_kvh = off_h // GROUP
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    q_ptrs = Q + off_b * stride_qb + off_h * stride_qh + offs_m[:, None] * stride_qm + offs_d[None, :]
    q = tl.load(q_ptrs, mask=offs_m[:, None] < N_Q, other=0.0)
    k_base = K + off_b * stride_kb + off_kvh * stride_kh
    v_base = V + off_b * stride_vb + off_kvh * stride_vh
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    # exp2 instead of exp: fold log2(e) into the scale once.
    qk_scale = sm_scale * 1.4426950408889634
    for start_n in range(0, N_KV, BLOCK_N):
        cols = start_n + offs_n
        k = tl.load(k_base + cols[None, :] * stride_kn + offs_d[:, None], mask=cols[None, :] < N_KV, other=0.0)
        qk = tl.dot(q, k) * qk_scale
        qk = tl.where(cols[None, :] < N_KV, qk, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        p = tl.math.exp2(qk - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_base + cols[:, None] * stride_vn + offs_d[None, :], mask=cols[:, None] < N_KV, other=0.0)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
        m_i = m_new
    acc = acc / l_i[:, None]
    o_ptrs = Out + off_b * stride_ob + off_h * stride_oh + offs_m[:, None] * stride_om + offs_d[None, :]
    tl.store(o_ptrs, acc.to(Out.dtype.element_ty), mask=offs_m[:, None] < N_Q)


attn_fwd = triton.jit(_attn_fwd)


def autotuned(configs: list[tuple[int, int, int, int]]) -> triton.runtime.Autotuner:
    """The same kernel tuned over ``configs``: (BLOCK_M, BLOCK_N, num_warps, num_stages) each, keyed on the shape."""
    choices = [
        triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=warps, num_stages=stages)
        for bm, bn, warps, stages in configs
    ]
    return triton.autotune(configs=choices, key=["N_Q", "N_KV", "HEAD_DIM"])(triton.jit(_attn_fwd))


def strides(t: torch.Tensor) -> tuple[int, int, int]:
    """The batch, head and row strides of a [B, H, S, D] tensor."""
    s = t.stride()
    return s[0], s[1], s[2]
