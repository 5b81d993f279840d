"""Useful work of an attention case and of its kernels: FLOPs and minimum DRAM bytes.

Notation: B batch, Hq query heads, Hkv key/value heads (GQA/MQA when Hkv < Hq), Sq and Skv query and
key sequence lengths, D head dim, e bytes per element of the case dtype.

Attended pairs (score entries per batch and head that the mask keeps):

* non-causal: Sq·Skv;
* causal self-attention (Sq = Skv): exactly Sq·Skv / 2, the convention of the FlashAttention and Triton
  benchmarks, so causal FLOPs are exactly half the non-causal ones (the diagonal's Sq/2 extra pairs are
  not counted);
* causal cross-attention (Sq != Skv): the mask aligned to the bottom right, as inference with a KV cache
  uses it (query i sits at key position i + Skv - Sq; PyTorch's ``causal_lower_right``), which keeps
  Σ_{i<Sq} clamp(i + 1 + Skv - Sq, 0, Skv) pairs: Sq·Skv - Sq·(Sq - 1)/2 when Sq < Skv, so a decode
  step (Sq = 1) attends all Skv keys;
* with a sliding window W (``flex``): query i also sees no key W or more positions behind its own
  (i + Skv - Sq), ahead of it too when not causal: the unwindowed count less the Σ_i max(0, i + Skv - Sq - W + 1)
  pairs behind the windows, so causal self-attention keeps its convention (half the diagonal uncounted) and
  a narrower window never counts more.

FLOPs: forward 4·B·Hq·pairs·D (two matmuls of 2 FLOPs per multiply-add: QKᵀ and PV), which is
4·B·Hq·Sq·Skv·D without a mask; backward 2.5× forward (five matmuls to the forward's two); a forward and
backward pass 3.5× forward. Softmax and scaling are not counted, as in the benchmarks. All exact integers.

Minimum bytes of a fused kernel (each tensor crosses DRAM once):

* forward: e·(B·Hq·Sq·D [q] + 2·B·Hkv·Skv·D [k, v] + B·Hq·Sq·D [o]) + 4·B·Hq·Sq [fp32 logsumexp];
* backward: read q, o, dO and write dq: 4·e·B·Hq·Sq·D; read k, v and write dk, dv: 4·e·B·Hkv·Skv·D;
  read the fp32 logsumexp 4·B·Hq·Sq; write and read the fp32 delta = rowsum(dO∘o) 8·B·Hq·Sq; so
  e·4·(B·Hq·Sq·D + B·Hkv·Skv·D) + 12·B·Hq·Sq;
* forward and backward: the sum;
* with a sliding window W, k and v are read only for the last min(Skv, Sq + W - 1) keys, the ones some query
  sees (dk and dv are still written whole).

The unfused path (math backend, naive attention) materialises the Sq×Skv scores, whatever the mask. Its
minimum adds to the fused one, with eₛ the score element size: forward write S, read S (softmax), write
P, read P (PV matmul): 4·B·Hq·Sq·Skv·eₛ; backward read P, write and read dP, write dS and read it twice
(dQ and dK matmuls): 6·B·Hq·Sq·Skv·eₛ. The math backend upcasts fp16/bf16 to fp32, so its eₛ is 4. Mask
construction and the safe-softmax passes come on top and are not part of the minimum.

Which formula a case gets (``case_work``): fused for ``sdpa`` with the cudnn, flash, efficient or default
backend, ``flex``, custom targets and ``compiled_naive`` (Inductor's attention pattern rewrites
matmul-softmax-matmul into SDPA: on the H200 it ran in 0.114 ms, where materialising the bf16 scores
moves 1.07 GB and needs at least 0.25 ms); unfused for ``sdpa`` math (eₛ = 4) and ``naive`` (eₛ = e).
``block`` adds to fused attention its four matmuls, H = Hq·D the model width, T = B·Sq tokens, F the
FFN width (``ffn_hidden``, default 4·H): QKV projection 2·T·H·(Hq + 2·Hkv)·D, output projection
2·T·H·H, FFN 2·2·T·H·F FLOPs; each reads its input and weight and writes its output once
(e·(T·K + K·N + T·N) bytes for a [T, K]·[K, N] matmul); a backward pass adds dX and dW: twice the FLOPs
and the bytes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from attnprof.core.documents.result import Work
from attnprof.core.model.ops import ELEMENTWISE_OPS, GEMM_OPS, elementwise_work, gemm_work

Pass = Literal["fwd", "fwd_bwd"]
Direction = Literal["fwd", "bwd", "fwd_bwd"]

_DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2}
_DTYPE_ALIASES = {"float32": "fp32", "float": "fp32", "float16": "fp16", "half": "fp16", "bfloat16": "bf16"}


def dtype_bytes(dtype: str) -> int:
    """Bytes per element of ``fp32``/``fp16``/``bf16`` (``float32``/``float16``/``bfloat16`` too)."""
    key = _DTYPE_ALIASES.get(dtype, dtype)
    if key not in _DTYPE_BYTES:
        raise ValueError(f"unknown dtype {dtype!r}: expected one of {sorted(_DTYPE_BYTES)}")
    return _DTYPE_BYTES[key]


@dataclass(frozen=True)
class AttentionShape:
    """The attention problem of a case: sizes in elements, ``dtype`` one of fp32, fp16, bf16."""

    batch: int
    q_heads: int
    kv_heads: int
    seq_q: int
    seq_kv: int
    head_dim: int
    causal: bool = False
    dtype: str = "bf16"
    window: int | None = None  # sliding window: keys fewer than ``window`` positions behind the query's

    def __post_init__(self) -> None:
        for name in ("batch", "q_heads", "kv_heads", "seq_q", "seq_kv", "head_dim"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.window is not None and self.window <= 0:
            raise ValueError(f"window must be positive, got {self.window}")
        dtype_bytes(self.dtype)

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> AttentionShape | None:
        """The shape named by a case's parameters, or None when q_heads, seq_q or head_dim is missing.

        Defaults: ``kv_heads`` = q_heads, ``seq_kv`` = seq_q, ``batch`` = 1, ``causal`` False, ``dtype`` bf16,
        no ``window``.
        """
        if any(params.get(k) is None for k in ("q_heads", "seq_q", "head_dim")):
            return None
        q_heads = int(params["q_heads"])
        seq_q = int(params["seq_q"])
        kv_heads = params.get("kv_heads")
        seq_kv = params.get("seq_kv")
        dtype = str(params.get("dtype") or "bf16")
        return cls(
            batch=1 if params.get("batch") is None else int(params["batch"]),
            q_heads=q_heads,
            kv_heads=q_heads if kv_heads is None else int(kv_heads),
            seq_q=seq_q,
            seq_kv=seq_q if seq_kv is None else int(seq_kv),
            head_dim=int(params["head_dim"]),
            causal=bool(params.get("causal", False)),
            dtype=_DTYPE_ALIASES.get(dtype, dtype),
            window=None if params.get("window") is None else int(params["window"]),
        )

    def describe(self) -> str:
        """The sizes in words, for formulas shown to people."""
        mask = "causal" if self.causal else "non-causal"
        if self.window is not None:
            mask += f" window={self.window}"
        return (
            f"B={self.batch} Hq={self.q_heads} Hkv={self.kv_heads} Sq={self.seq_q} Skv={self.seq_kv} "
            f"D={self.head_dim} {self.dtype} {mask}"
        )


def _behind_window(shape: AttentionShape) -> int:
    """Pairs a sliding window removes: Σ_{i<Sq} max(0, i + c), c = Skv - Sq - W + 1 (query i sits at key
    position i + Skv - Sq and sees no key W or more positions behind it)."""
    if shape.window is None:
        return 0
    c = shape.seq_kv - shape.seq_q - shape.window + 1
    first = max(0, -c)  # the first query with keys behind its window
    if first >= shape.seq_q:
        return 0
    n = shape.seq_q - first
    return n * ((first + c) + (shape.seq_q - 1 + c)) // 2


def _double_pairs(shape: AttentionShape) -> int:
    """Twice the attended pairs: exact even for causal self-attention of odd length."""
    sq, skv = shape.seq_q, shape.seq_kv
    removed = _behind_window(shape)
    if removed:
        return _double_pairs(replace(shape, window=None)) - 2 * removed
    if not shape.causal:
        return 2 * sq * skv
    if sq == skv:
        return sq * skv
    if sq < skv:
        return 2 * sq * skv - sq * (sq - 1)
    # Bottom-right with more queries than keys: the first Sq - Skv queries see no key.
    return skv * (skv + 1)


def attended_pairs(shape: AttentionShape) -> int:
    """Score entries per (batch, head) that the mask keeps (rule in the module docstring).

    Causal self-attention of odd length has a half pair, rounded down here; the FLOPs stay exact.
    """
    return _double_pairs(shape) // 2


def attention_flops(shape: AttentionShape, pass_: Direction) -> int:
    """Useful FLOPs of attention: forward 4·B·Hq·pairs·D, backward 2.5×, forward and backward 3.5×."""
    fwd = 2 * shape.batch * shape.q_heads * shape.head_dim * _double_pairs(shape)
    if pass_ == "fwd":
        return fwd
    if pass_ == "bwd":
        return 5 * fwd // 2
    if pass_ == "fwd_bwd":
        return 7 * fwd // 2
    raise ValueError(f"unknown pass {pass_!r}: expected fwd, bwd or fwd_bwd")


def _q_elems(shape: AttentionShape) -> int:
    return shape.batch * shape.q_heads * shape.seq_q * shape.head_dim


def _kv_elems(shape: AttentionShape) -> int:
    return shape.batch * shape.kv_heads * shape.seq_kv * shape.head_dim


def _kv_read_elems(shape: AttentionShape) -> int:
    """Key (or value) elements some query sees: under a sliding window only the last Sq + W - 1 keys."""
    keys = shape.seq_kv if shape.window is None else min(shape.seq_kv, shape.seq_q + shape.window - 1)
    return shape.batch * shape.kv_heads * keys * shape.head_dim


def _rows(shape: AttentionShape) -> int:
    return shape.batch * shape.q_heads * shape.seq_q


def fused_bytes_min(shape: AttentionShape, pass_: Direction) -> int:
    """Minimum DRAM bytes of fused attention (formulas in the module docstring), bytes."""
    e = dtype_bytes(shape.dtype)
    # a sliding window leaves the keys behind every query's window unread; dk and dv are written whole
    fwd = e * (2 * _q_elems(shape) + 2 * _kv_read_elems(shape)) + 4 * _rows(shape)
    bwd = e * (4 * _q_elems(shape) + 2 * _kv_read_elems(shape) + 2 * _kv_elems(shape)) + 12 * _rows(shape)
    if pass_ == "fwd":
        return fwd
    if pass_ == "bwd":
        return bwd
    if pass_ == "fwd_bwd":
        return fwd + bwd
    raise ValueError(f"unknown pass {pass_!r}: expected fwd, bwd or fwd_bwd")


def score_bytes_min(shape: AttentionShape, pass_: Direction, score_bytes: int) -> int:
    """Minimum DRAM bytes of the materialised score matrix: 4 passes forward, 6 backward, bytes."""
    passes = {"fwd": 4, "bwd": 6, "fwd_bwd": 10}[pass_]
    return passes * shape.batch * shape.q_heads * shape.seq_q * shape.seq_kv * score_bytes


def unfused_bytes_min(shape: AttentionShape, pass_: Direction, score_bytes: int) -> int:
    """Minimum DRAM bytes of unfused attention: the fused minimum plus the score round trips, bytes."""
    return fused_bytes_min(shape, pass_) + score_bytes_min(shape, pass_, score_bytes)


@dataclass(frozen=True)
class CaseWork:
    """Useful FLOPs and minimum DRAM bytes of one iteration of a case, and how they were counted."""

    flops: int
    bytes_min: int
    formula: str

    def to_document(self) -> Work:
        """The ``work`` object of the result document."""
        return Work(flops=self.flops, bytes_min=self.bytes_min, formula=self.formula)


def _matmul(m: int, k: int, n: int, e: int, pass_: Pass) -> tuple[int, int]:
    """FLOPs and minimum bytes of X[m,k]·W[k,n]; backward computes dX and dW (twice the FLOPs)."""
    flops = 2 * m * k * n
    data = e * (m * k + k * n + m * n)
    if pass_ == "fwd":
        return flops, data
    return 3 * flops, 3 * data


def _block_extra(shape: AttentionShape, params: Mapping[str, Any], pass_: Pass) -> tuple[int, int, str]:
    """The projections and FFN of the ``block`` target: FLOPs, bytes and their formula."""
    e = dtype_bytes(shape.dtype)
    width = shape.q_heads * shape.head_dim
    tokens = shape.batch * shape.seq_q
    ffn = 4 * width if params.get("ffn_hidden") is None else int(params["ffn_hidden"])
    qkv_out = (shape.q_heads + 2 * shape.kv_heads) * shape.head_dim
    parts = [
        _matmul(tokens, width, qkv_out, e, pass_),
        _matmul(tokens, width, width, e, pass_),
        _matmul(tokens, width, ffn, e, pass_),
        _matmul(tokens, ffn, width, e, pass_),
    ]
    formula = (
        f"+ QKV projection 2·B·Sq·H·(Hq+2·Hkv)·D, output projection 2·B·Sq·H·H, FFN 2·2·B·Sq·H·F "
        f"(H = Hq·D = {width}, F = {ffn}), each matmul reading its inputs and weights and writing its "
        "output once" + ("; backward 2× the FLOPs (dX and dW)" if pass_ == "fwd_bwd" else "")
    )
    return sum(p[0] for p in parts), sum(p[1] for p in parts), formula


def case_work(target: str, backend: str | None, params: Mapping[str, Any]) -> CaseWork | None:
    """FLOPs and minimum bytes of one iteration of a case, or None when its parameters give no shape.

    Fused formulas for ``sdpa`` with the cudnn, flash, efficient or default backend, ``flex``,
    ``compiled_naive`` and custom targets; unfused for ``sdpa`` math (fp32 scores) and ``naive`` (scores
    in the case dtype); ``block`` adds its projections and FFN to fused attention.
    """
    shape = AttentionShape.from_params(params)
    if shape is None:
        return None
    pass_: Pass = "fwd_bwd" if params.get("pass") == "fwd_bwd" else "fwd"
    flops = attention_flops(shape, pass_)
    flops_formula = "4·B·Hq·pairs·D" + (" × 3.5 (forward and backward)" if pass_ == "fwd_bwd" else "")
    pairs = (
        "Sq·Skv"
        if not shape.causal
        else ("Sq·Skv/2" if shape.seq_q == shape.seq_kv else "Sq·Skv - Sq·(Sq-1)/2 (bottom-right causal)")
    )
    if _behind_window(shape):
        pairs = f"{pairs} - Σ_i max(0, i + Skv - Sq - W + 1) (sliding window W={shape.window})"
    score_bytes: int | None = None
    if target == "sdpa" and backend == "math":
        # The math backend upcasts fp16/bf16 inputs to fp32 before QKᵀ: its scores are fp32.
        score_bytes = 4
    elif target == "naive":
        score_bytes = dtype_bytes(shape.dtype)
    # compiled_naive is not here: Inductor may run it fused, and a minimum must hold for every correct
    # execution (module docstring).

    if score_bytes is None:
        bytes_min = fused_bytes_min(shape, pass_)
        bytes_formula = "fused: e·(2·B·Hq·Sq·D + 2·B·Hkv·Skv·D) + 4·B·Hq·Sq"
        if pass_ == "fwd_bwd":
            bytes_formula += " + backward e·4·(B·Hq·Sq·D + B·Hkv·Skv·D) + 12·B·Hq·Sq"
    else:
        bytes_min = unfused_bytes_min(shape, pass_, score_bytes)
        passes = 10 if pass_ == "fwd_bwd" else 4
        bytes_formula = f"unfused: fused minimum + {passes}·B·Hq·Sq·Skv·{score_bytes} (scores materialised)"
    formula = f"FLOPs {flops_formula}, pairs = {pairs}; bytes {bytes_formula}; {shape.describe()}"
    if target == "block":
        extra_flops, extra_bytes, extra_formula = _block_extra(shape, params, pass_)
        flops += extra_flops
        bytes_min += extra_bytes
        formula += " " + extra_formula
    return CaseWork(flops=flops, bytes_min=bytes_min, formula=formula)


# Kernels of fused backward passes that are not the main kernel (names as launched).
_BWD_PREPROCESS = ("dot_do_o", "bwd_preprocess")
_BWD_CONVERT = ("convert_dq",)
# Kernel-name fragments of fused attention backward kernels (cuDNN, FlashAttention, CUTLASS, Triton).
_BWD_KERNEL_MARKERS = ("bprop", "_bwd", "cutlassb", *_BWD_PREPROCESS, *_BWD_CONVERT)
_ATTENTION_MARKERS = ("attention", "attn", "fmha", "sdpa", "flash", "cudnn", *_BWD_KERNEL_MARKERS)


_SPLIT_COMBINE = ("combine",)


def _fused_kernel_work(
    shape: AttentionShape, direction: Literal["fwd", "bwd"], kernel_name: str | None
) -> tuple[int, int]:
    if direction == "fwd":
        if any(m in (kernel_name or "").lower() for m in _SPLIT_COMBINE):
            # Split-KV (decode) combine step: the main kernel wrote one fp32 partial output and
            # logsumexp per split; the combine reads at least two of them and writes o once. Its
            # FLOPs (a rescale and a sum per element) are ~3 per partial element.
            e = dtype_bytes(shape.dtype)
            partials = 2 * (4 * _q_elems(shape) + 4 * _rows(shape))
            return 3 * 2 * _q_elems(shape), partials + e * _q_elems(shape)
        return attention_flops(shape, "fwd"), fused_bytes_min(shape, "fwd")
    name = (kernel_name or "").lower()
    e = dtype_bytes(shape.dtype)
    # FlexAttention's delta pre-pass is the Inductor reduction beside its backward template.
    if any(m in name for m in _BWD_PREPROCESS) or name.startswith(("triton_per_", "triton_red_")):
        # delta = rowsum(dO∘o): read o and dO, write fp32 delta.
        return 2 * _q_elems(shape), 2 * e * _q_elems(shape) + 4 * _rows(shape)
    if any(m in name for m in _BWD_CONVERT):
        # dq accumulated in fp32 by the main kernel, cast to the case dtype.
        return 0, (4 + e) * _q_elems(shape)
    return attention_flops(shape, "bwd"), fused_bytes_min(shape, "bwd")


def kernel_work(
    phase: str,
    op: str | None,
    input_dims: Sequence[Sequence[int]] | None,
    input_types: Sequence[str] | None,
    shape: AttentionShape | None,
    pass_: Pass,
    *,
    kernel_name: str | None = None,
) -> tuple[int | None, int | None]:
    """FLOPs and minimum DRAM bytes of one kernel launch, or None where nothing is known.

    A kernel launched by a GEMM or elementwise aten op is modelled from that op's recorded operands
    (see ``attnprof.core.model.ops``). A kernel of the ``fused_attention`` or ``backward`` phase that
    belongs to fused attention gets the case-level fused formulas: forward work for forward kernels,
    backward work for the main backward kernel, and their own small models for the delta pre-pass
    (``dot_do_o``: 2·B·Hq·Sq·D FLOPs, e·2·B·Hq·Sq·D + 4·B·Hq·Sq bytes), the dq cast (``convert_dq``:
    (4 + e)·B·Hq·Sq·D bytes) and the split-KV combine step of decode kernels (``..._combine``: read two
    fp32 partials and their logsumexps, write o: 8·(B·Hq·Sq·D + B·Hq·Sq) + e·B·Hq·Sq·D bytes, 6·B·Hq·Sq·D
    FLOPs), while the split-KV main kernel gets the whole forward; pass ``kernel_name`` so they are told
    apart. ``pass_`` is the case's
    pass: a forward-only case has no backward kernels, so all its fused kernels get forward work.
    """
    if op is not None and input_dims is not None and input_types is not None:
        if op in GEMM_OPS:
            return gemm_work(op, input_dims, input_types)
        if op in ELEMENTWISE_OPS:
            return elementwise_work(op, input_dims, input_types)
    name = kernel_name or ""
    if shape is not None and name.startswith("triton_") and (phase == "softmax" or "softmax" in name):
        # An Inductor-fused softmax over the score matrix (its launching op records no operands):
        # forward, read the scores and write the probabilities once, ~5 FLOPs per element (max, sub,
        # exp, sum, div); backward, read P and dP and write dS, ~4 (mul, sum, sub, mul).
        elems = shape.batch * shape.q_heads * shape.seq_q * shape.seq_kv  # the whole matrix, masked or not
        if "backward" in name:
            return 4 * elems, 3 * dtype_bytes(shape.dtype) * elems
        return 5 * elems, 2 * dtype_bytes(shape.dtype) * elems
    if shape is None or phase not in ("fused_attention", "backward"):
        return None, None
    labels = f"{op or ''} {kernel_name or ''}".lower()
    if phase == "backward" and not any(m in labels for m in _ATTENTION_MARKERS):
        # A backward kernel of some other op (an accumulation add, a matmul without its operands).
        return None, None
    is_backward = phase == "backward" or "backward" in labels or any(m in labels for m in _BWD_KERNEL_MARKERS)
    return _fused_kernel_work(shape, "bwd" if is_backward and pass_ == "fwd_bwd" else "fwd", kernel_name)
