"""Assign each kernel a phase of the attention computation (docs/architecture.md, "Documents") and a stable key.

Rules, first match wins:

1. ``backward``: the kernel's op stack holds ``attnprof/backward``, an
   ``autograd::engine::evaluate_function`` op or an op whose name ends in ``Backward<n>``; or the
   kernel's own name is a backward one (``bprop``, ``flash_bwd``, ``fmha_cutlassB``).
2. An explicit ``attnprof/phase/<phase>`` annotation (the innermost one) names the phase.
3. ``fused_attention``: the kernel is a fused attention kernel by name (cuDNN SDPA, ``flash_fwd``,
   ``fmha_cutlass``, ``flex_attention``, ``flash_attn``, anything with ``attention``), or it runs
   under a fused attention op (``_flash_attention_forward``, ``_efficient_attention_forward``,
   ``_cudnn_attention_forward``, ``_scaled_dot_product_flash_attention_for_cpu``, ...): helper
   kernels of a fused op are part of its cost.
4. ``cast``: a dtype conversion: ``aten::copy_`` whose destination and source dtypes differ, a copy
   under ``aten::to``/``aten::_to_copy`` when dtypes were not recorded, a dtype-specific copy
   kernel (``bfloat16_copy_kernel_cuda``) or an Inductor ``_to_copy`` kernel.
5. ``softmax``: anything under ``aten::_safe_softmax``/``softmax``/``_softmax``/``log_softmax`` or
   with ``softmax`` in its name. The safe-softmax passes (``isneginf``, ``all``, ``where``, the
   fill of ``scalar_tensor``) are launched by ``aten::_safe_softmax`` and are the price of a safe
   softmax, so they are softmax here; each keeps its own key, so its cost stays visible.
6. Inside the attention region only (under an attention op, or anywhere in an iteration that has
   no attention op, as in the naive target):

   - ``qk_matmul``/``av_matmul``: a GEMM (launched by ``aten::bmm``/``mm``/``matmul``/``baddbmm``/
     ``einsum``, or a GEMM kernel by name) that is not a projection (``aten::linear``/``addmm``
     in its stack: those get a phase only from an explicit annotation). Operand dims decide
     when they can: QKᵀ contracts over the head dim and yields ``S_kv`` columns, PV contracts over
     ``S_kv`` and yields the head dim. When ``S_kv`` equals the head dim or dims are missing,
     position decides: before the iteration's first softmax kernel QKᵀ, after it PV; with no
     softmax at all, the order of GEMM ops alternates QKᵀ, PV.
   - ``mask``: masks and score scaling: ``where``, ``masked_fill``, ``triu``/``tril``,
     ``mul``/``div`` (the scale on q, k or the scores), ``add`` (of a mask), ``scalar_tensor``,
     ``fill_``, comparisons and logical ops, and the ``isneginf``/``all`` passes outside a softmax.
7. ``other``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import cast

from attnprof.core.attribution.cpu import cpu_kernels
from attnprof.core.attribution.keys import kernel_key
from attnprof.core.attribution.kineto import (
    BACKWARD_ANNOTATION,
    PHASE_PREFIX,
    CpuOp,
    KernelEvent,
    ParsedTrace,
)
from attnprof.core.documents.result import PHASES, Phase

_BACKWARD_OP = re.compile(r"^autograd::engine::evaluate_function|Backward\d+$")
_BACKWARD_KERNEL = re.compile(r"bprop|flash_bwd|fmha_cutlassB|_backward\b", re.IGNORECASE)
_FUSED_KERNEL = re.compile(r"sdpa|flash_fwd|fmha_cutlass|flex_attention|flash_attn|attention", re.IGNORECASE)
_FUSED_OP = re.compile(r"_(?:flash|efficient|cudnn)_attention|flash_attention_for_cpu|flex_attention|fused_attention")
_ATTENTION_OP = re.compile(r"attention", re.IGNORECASE)
_SOFTMAX_OPS = frozenset(
    {"aten::softmax", "aten::_softmax", "aten::_safe_softmax", "aten::log_softmax", "aten::_log_softmax"}
)
_GEMM_OPS = frozenset({"aten::bmm", "aten::mm", "aten::matmul", "aten::baddbmm", "aten::einsum"})
_PROJECTION_OPS = frozenset({"aten::linear", "aten::addmm", "aten::_addmm_activation", "aten::addmv"})
_GEMM_KERNEL = re.compile(
    r"gemm|nvjet|xmma|cutlass.*(?:tensorop|simt)|triton_tem_fused_(?:mm|bmm|addmm)|splitkreduce",
    re.IGNORECASE,
)
_CAST_OPS = frozenset({"aten::to", "aten::_to_copy"})
_MASK_OP_NAMES = (
    "where masked_fill masked_fill_ triu tril triu_ tril_ mul mul_ div div_ add add_ sub sub_ "
    "scalar_tensor fill_ full full_like ones ones_like isneginf isinf isnan all any logical_not "
    "logical_and logical_or eq ne lt le gt ge bitwise_and bitwise_or bitwise_not arange"
)
_MASK_OPS = frozenset("aten::" + n for n in _MASK_OP_NAMES.split())
_MASK_KEY = re.compile(
    r"^elementwise:(?:where|masked_fill|mul|div|add|sub|fill|isneginf|isinf)$|^reduce:(?:and|or)$|triu_tril"
)
_TRITON_MASK = re.compile(r"fused_.*(?:_mul|_div|where|masked_fill|triu|tril|scalar_tensor)")


@dataclass(frozen=True)
class PhaseContext:
    """What :func:`classify_phase` needs to know about the kernel's iteration.

    ``attention_region``: the kernel runs under an attention op, or its iteration has none.
    ``gemm_index``: 0-based order of the kernel's GEMM op among the region's GEMM ops in the
    iteration. ``seq_kv``/``head_dim``: the attention shape, when an attention op or the softmax
    input recorded it. ``after_softmax``: whether a softmax kernel ran earlier in the iteration
    (``None``: the iteration has no softmax).
    """

    attention_region: bool = True
    gemm_index: int = 0
    seq_kv: int | None = None
    head_dim: int | None = None
    after_softmax: bool | None = None


@dataclass(frozen=True)
class AttributedKernel:
    """A kernel with its stable key and its phase."""

    kernel: KernelEvent
    key: str
    phase: Phase


def _explicit_phase(stack: tuple[str, ...]) -> Phase | None:
    for name in reversed(stack):
        if name.startswith(PHASE_PREFIX):
            p = name[len(PHASE_PREFIX) :]
            if p in PHASES:
                return cast(Phase, p)
    return None


def is_backward(kernel: KernelEvent) -> bool:
    """Whether the kernel belongs to the backward pass (rule 1)."""
    if _BACKWARD_KERNEL.search(kernel.name):
        return True
    return any(n == BACKWARD_ANNOTATION or _BACKWARD_OP.search(n) for n in kernel.op_stack)


def _is_cast(kernel: KernelEvent, key: str) -> bool:
    if key.startswith("elementwise:copy_") or (key.startswith("triton_") and "_to_copy" in key):
        return True
    if kernel.op == "aten::copy_" or key == "elementwise:copy":
        types = [t for t in kernel.input_types[:2] if t]
        if kernel.op == "aten::copy_" and len(types) == 2:
            return types[0] != types[1]
        return any(n in _CAST_OPS for n in kernel.op_stack)
    return False


def _mkn(kernel: KernelEvent) -> tuple[int, int] | None:
    """(K, N) of the GEMM the kernel's op computes, from its recorded operand dims."""
    dims = kernel.input_dims
    if kernel.op == "aten::baddbmm":
        dims = dims[1:]
    if kernel.op not in _GEMM_OPS or kernel.op == "aten::einsum" or len(dims) < 2:
        return None
    a, b = dims[0], dims[1]
    if len(a) < 2 or len(b) < 2 or a[-1] != b[-2]:
        return None
    return a[-1], b[-1]


def _gemm_phase(kernel: KernelEvent, ctx: PhaseContext) -> Phase:
    kn = _mkn(kernel)
    if kn is not None:
        k, n = kn
        qk = (ctx.seq_kv is not None and n == ctx.seq_kv and k != ctx.seq_kv) or (
            ctx.head_dim is not None and k == ctx.head_dim and n != ctx.head_dim
        )
        av = (ctx.seq_kv is not None and k == ctx.seq_kv and n != ctx.seq_kv) or (
            ctx.head_dim is not None and n == ctx.head_dim and k != ctx.head_dim
        )
        if qk != av:
            return "qk_matmul" if qk else "av_matmul"
    if ctx.after_softmax is not None:
        return "av_matmul" if ctx.after_softmax else "qk_matmul"
    return "av_matmul" if ctx.gemm_index % 2 else "qk_matmul"


def is_attention_gemm(kernel: KernelEvent, key: str | None = None) -> bool:
    """Whether the kernel is a GEMM that can be QKᵀ or PV (not a projection)."""
    if any(n in _PROJECTION_OPS for n in kernel.op_stack):
        return False
    return kernel.op in _GEMM_OPS or bool(_GEMM_KERNEL.search(key or kernel_key(kernel.name)))


def classify_phase(kernel: KernelEvent, *, context: PhaseContext | None = None) -> Phase:
    """The phase of one kernel by the rules of this module's docstring."""
    ctx = context or PhaseContext()
    key = kernel_key(kernel.name)
    stack = kernel.op_stack
    if is_backward(kernel):
        return "backward"
    explicit = _explicit_phase(stack)
    if explicit is not None:
        return explicit
    if _FUSED_KERNEL.search(kernel.name) or any(_FUSED_OP.search(n) for n in stack):
        return "fused_attention"
    # A kernel that computes a softmax is a softmax even when Inductor fused a cast into it
    # (``triton_red_fused__softmax__to_copy_...``): the cast is the cheap part of it.
    if "softmax" in key.lower() and key.startswith("triton_"):
        return "softmax"
    if _is_cast(kernel, key):
        return "cast"
    if any(n in _SOFTMAX_OPS for n in stack) or "softmax" in key.lower():
        return "softmax"
    if not ctx.attention_region:
        return "other"
    if is_attention_gemm(kernel, key):
        return _gemm_phase(kernel, ctx)
    if any(n in _MASK_OPS for n in stack) or _MASK_KEY.search(key):
        return "mask"
    if key.startswith("triton_") and _TRITON_MASK.search(key):
        return "mask"
    return "other"


def _is_attention_op(op: CpuOp) -> bool:
    return not op.name.startswith("attnprof/") and bool(_ATTENTION_OP.search(op.name))


@dataclass
class _IterationInfo:
    has_attention: bool = False
    seq_kv: int | None = None
    head_dim: int | None = None


def _iteration_info(parsed: ParsedTrace) -> dict[int, _IterationInfo]:
    infos: dict[int, _IterationInfo] = {}
    for op in sorted(parsed.ops, key=lambda o: o.ts_us):
        if op.iteration is None or any(_BACKWARD_OP.search(n) for n in op.stack):
            continue
        info = infos.setdefault(op.iteration, _IterationInfo())
        dims = op.input_dims
        if _is_attention_op(op):
            info.has_attention = True
            # SDPA-style signatures start with q [.., S_q, D], k [.., S_kv, D].
            if info.seq_kv is None and len(dims) >= 2 and len(dims[0]) >= 2 and len(dims[1]) >= 2:
                info.head_dim, info.seq_kv = dims[0][-1], dims[1][-2]
        elif op.name in _SOFTMAX_OPS and info.seq_kv is None and dims and len(dims[0]) >= 2:
            info.seq_kv = dims[0][-1]
    return infos


def attribute(parsed: ParsedTrace) -> list[AttributedKernel]:
    """Key and phase for every kernel that lies in an iteration, in (iteration, start) order.

    On a CPU trace (``parsed.on_gpu`` false) the ops chosen by :func:`cpu_kernels` are the kernels.
    Kernels outside every iteration (set-up, warm-up) are left out.
    """
    source = parsed.kernels if parsed.on_gpu else cpu_kernels(parsed)
    wanted = set(parsed.iterations)
    kernels = sorted((k for k in source if k.iteration in wanted), key=lambda k: (k.iteration or 0, k.ts_us))
    infos = _iteration_info(parsed)
    has_softmax: set[int] = set()
    for k in kernels:
        if not is_backward(k) and classify_phase(k) == "softmax":
            has_softmax.add(k.iteration or 0)

    out: list[AttributedKernel] = []
    current: int | None = None
    softmax_seen = False
    gemm_ops: list[int | None] = []
    for k in kernels:
        it = k.iteration or 0
        if it != current:
            current, softmax_seen, gemm_ops = it, False, []
        info = infos.get(it, _IterationInfo())
        region = not info.has_attention or any(
            _ATTENTION_OP.search(n) and not n.startswith("attnprof/") for n in k.op_stack
        )
        gemm_index = len(gemm_ops) - 1 if gemm_ops and gemm_ops[-1] == k.op_index else len(gemm_ops)
        ctx = PhaseContext(
            attention_region=region,
            gemm_index=gemm_index,
            seq_kv=info.seq_kv,
            head_dim=info.head_dim,
            after_softmax=softmax_seen if it in has_softmax else None,
        )
        phase = classify_phase(k, context=ctx)
        if phase == "softmax":
            softmax_seen = True
        elif phase in ("qk_matmul", "av_matmul") and (not gemm_ops or gemm_ops[-1] != k.op_index):
            gemm_ops.append(k.op_index)
        out.append(AttributedKernel(kernel=k, key=kernel_key(k.name), phase=phase))
    return out
