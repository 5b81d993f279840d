"""Why PyTorch refused each fused SDPA backend for a call: asked again after the case, from the call's recorded shapes.

``torch.backends.cuda.can_use_{cudnn,flash,efficient}_attention(params, debug=True)`` run the same checks as
SDPA's own backend selection and say, one warning per failed check, why a backend cannot take the call ("Flash
attention does not support non-null attn_mask", "... requires query, key and value to have the same num_heads ...
enable_gqa"). The call is rebuilt from what the trace recorded (:mod:`attnprof.core.attribution.sdpa_calls`): empty
tensors with the recorded shapes, strides and dtypes on the case's GPU, so compiled workloads, custom targets and
SDPA inside a block are asked alike, and nothing of the workload runs again. The checks read metadata only; the
tensors are allocated (never written) for the moment of the question.

PyTorch answers these questions for CUDA devices only: on the CPU each call says so in ``not_asked``.
"""

from __future__ import annotations

import re
import warnings
from typing import Any

import torch

from attnprof.core.documents.result import SDPA_FUSED, SdpaBackend, SdpaCall, SdpaTensor

_DTYPES = {
    "c10::BFloat16": torch.bfloat16,
    "c10::Half": torch.float16,
    "float": torch.float32,
    "double": torch.float64,
    "bool": torch.bool,
    "c10::Float8_e4m3fn": torch.float8_e4m3fn,
}
TRIGGERED_AT = re.compile(r"\s*\(Triggered internally at [^)]*\)\s*$")
"""The source location PyTorch appends to warnings raised from C++."""
# PyTorch's header before the checks that failed; the checks themselves are the reasons.
_HEADER = re.compile(r"not used because:?\s*$")
NOT_ON_CPU = "PyTorch gives its reasons for refusing a backend only for CUDA devices"


def dtype_of(name: str) -> torch.dtype:
    """The torch dtype a trace's type name stands for; ValueError for one this module cannot rebuild."""
    dtype = _DTYPES.get(name)
    if dtype is None:
        raise ValueError(f"dtype {name} is not one this check can rebuild")
    return dtype


def _tensor(t: SdpaTensor, device: str, requires_grad: bool) -> torch.Tensor:
    dtype = dtype_of(t.dtype)
    strides = t.strides if t.strides is not None else _contiguous(t.shape)
    out = torch.empty_strided(t.shape, strides, dtype=dtype, device=device)
    return out.requires_grad_(requires_grad and dtype.is_floating_point)


def _contiguous(shape: list[int]) -> list[int]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return strides[::-1]


def _params(call: SdpaCall, device: str, requires_grad: bool) -> Any:
    q = _tensor(call.query, device, requires_grad)
    k = _tensor(call.key, device, requires_grad)
    v = _tensor(call.value, device, requires_grad)
    mask = _tensor(call.attn_mask, device, False) if call.attn_mask is not None else None
    params_type: Any = torch.backends.cuda.SDPAParams
    try:
        return params_type(q, k, v, mask, call.dropout_p, call.is_causal, call.enable_gqa)
    except TypeError:  # PyTorch before enable_gqa
        return params_type(q, k, v, mask, call.dropout_p, call.is_causal)


def reasons_of(messages: list[str]) -> list[str]:
    out: dict[str, None] = {}
    for message in messages:
        for line in message.splitlines():
            text = TRIGGERED_AT.sub("", line).strip()
            if text and not _HEADER.search(text):
                out[text[:1000]] = None
    return list(out)


def _ask(params: Any, backend: SdpaBackend) -> tuple[bool, list[str]] | None:
    check = getattr(torch.backends.cuda, f"can_use_{backend}_attention", None)
    if check is None:  # a PyTorch without this backend's check
        return None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ok = bool(check(params, True))
    reasons = reasons_of([str(w.message) for w in caught])
    return ok, reasons or ([] if ok else ["refused (PyTorch gave no reason)"])


def ask_backends(calls: list[SdpaCall], *, device: str, requires_grad: bool) -> list[SdpaCall]:
    """``calls`` with ``eligible`` and ``refused`` filled from PyTorch's own checks on ``device`` (``cuda``), or with
    ``not_asked`` saying why they could not be asked."""
    if not device.startswith("cuda"):
        return [c.model_copy(update={"not_asked": NOT_ON_CPU}) for c in calls]
    out = []
    for call in calls:
        try:
            params = _params(call, device, requires_grad)
            answers = {backend: _ask(params, backend) for backend in SDPA_FUSED}
        except (RuntimeError, ValueError, TypeError) as exc:  # incl. out of memory: the question is not worth a case
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            out.append(call.model_copy(update={"not_asked": f"the call could not be rebuilt: {reason}"[:500]}))
            continue
        eligible: list[SdpaBackend] = [b for b, a in answers.items() if a is not None and a[0]]
        refused = {b: a[1] for b, a in answers.items() if a is not None and not a[0]}
        out.append(
            call.model_copy(
                update={"eligible": [*eligible, "math"], "refused": refused, "requires_grad": requires_grad}
            )
        )
    return out
