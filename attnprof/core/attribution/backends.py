"""Which attention implementation actually ran, read from the kernels and ops of a trace.

Checked in this order, first match wins (a fused backend's trace also holds GEMMs or softmax
ops of its own helpers, so the fused ones come first):

``cudnn``      cuDNN SDPA kernels, or ``aten::_scaled_dot_product_cudnn_attention``/``_cudnn_attention_*``
``flash``      ``pytorch_flash::``/``flash_fwd``/``flash_bwd`` kernels, or ``_scaled_dot_product_flash_attention``
               (GPU) / ``_flash_attention_forward``
``efficient``  ``fmha_cutlass*`` kernels, or ``_scaled_dot_product_efficient_attention``/``_efficient_attention_*``
``cpu_flash``  ``aten::_scaled_dot_product_flash_attention_for_cpu``: PyTorch's fused CPU path
``flex``       FlexAttention: a ``flex_attention`` kernel (Triton template) or op
``math``       ``aten::_scaled_dot_product_attention_math``
``triton``     other Triton kernels of compiled code that computes a softmax
``compiled``   Inductor's C++ kernels (``cpp_fused_*``, compiled code on CPU) that compute a softmax
``eager``      plain aten GEMMs and a softmax, no SDPA op: the naive target in eager mode
``None``       no attention ran
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from attnprof.core.attribution.kineto import ParsedTrace

_RULES: tuple[tuple[str, re.Pattern[str] | None, re.Pattern[str] | None], ...] = (
    (
        "cudnn",
        re.compile(r"cudnn.*(?:sdpa|flash_[fb]prop)|cudnn::fusion::compute_dot_do_o", re.IGNORECASE),
        re.compile(r"cudnn_attention"),
    ),
    (
        "flash",
        re.compile(r"pytorch_flash::|flash_fwd|flash_bwd"),
        re.compile(r"_scaled_dot_product_flash_attention(?!_for_cpu)|_flash_attention_(?:forward|backward)"),
    ),
    ("efficient", re.compile(r"fmha_cutlass"), re.compile(r"efficient_attention")),
    ("cpu_flash", None, re.compile(r"_scaled_dot_product_flash_attention_for_cpu")),
    ("flex", re.compile(r"flex_attention"), re.compile(r"flex_attention")),
    ("math", None, re.compile(r"_scaled_dot_product_attention_math")),
)
_SOFTMAX = re.compile(r"softmax", re.IGNORECASE)
_GEMM_OPS = frozenset({"aten::bmm", "aten::mm", "aten::matmul", "aten::baddbmm", "aten::einsum"})


def detect_backend(kernel_names: Iterable[str], ops: Iterable[str]) -> str | None:
    """The attention backend that ran, from kernel names (as launched) and host op names.

    Returns one of ``cudnn``, ``flash``, ``efficient``, ``cpu_flash``, ``flex``, ``math``,
    ``triton``, ``compiled``, ``eager``, or ``None`` when nothing looks like attention.
    """
    kernels = list(dict.fromkeys(kernel_names))
    op_names = list(dict.fromkeys(ops))
    for backend, kernel_re, op_re in _RULES:
        if kernel_re is not None and any(kernel_re.search(k) for k in kernels):
            return backend
        if op_re is not None and any(op_re.search(o) for o in op_names):
            return backend
    everything = kernels + op_names
    softmax = any(_SOFTMAX.search(n) for n in everything)
    if softmax and any(n.startswith("triton_") for n in everything):
        return "triton"
    if softmax and any("cpp_fused" in n for n in everything):
        return "compiled"
    if softmax and any(o in _GEMM_OPS for o in op_names):
        return "eager"
    return None


def backend_of(parsed: ParsedTrace) -> str | None:
    """:func:`detect_backend` over the kernels and the ops of the trace's iterations."""
    wanted = set(parsed.iterations)
    kernels = (k.name for k in parsed.kernels if k.iteration in wanted)
    ops = (op.name for op in parsed.ops if op.iteration in wanted)
    return detect_backend(kernels, ops)
