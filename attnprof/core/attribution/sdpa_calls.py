"""The ``scaled_dot_product_attention`` calls a trace holds, and how to say what changed between two of them.

Kineto records, with ``record_shapes``, each input of ``aten::scaled_dot_product_attention``: the shapes, strides and
dtypes of query, key, value and the mask, and the scalars (``dropout_p``, ``is_causal``, ``scale``, ``enable_gqa``) as
its concrete inputs. That is everything PyTorch's backend selection reads, so the calls can be asked about again
after the case (``attnprof.core.measure.sdpa_reasons``) without touching the workload, compiled or not.

A call made inside compiled code is not in this list: Inductor picks the backend when it compiles and the trace holds
the backend's own op (``_scaled_dot_product_flash_attention``), not the call. Torch-free.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from attnprof.core.attribution.kineto import CpuOp, ParsedTrace
from attnprof.core.documents.result import SDPA_FUSED, SdpaBackend, SdpaCall, SdpaTensor

SDPA_OP = "aten::scaled_dot_product_attention"
# aten::scaled_dot_product_attention(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
_MASK, _DROPOUT, _CAUSAL, _SCALE, _GQA = 3, 4, 5, 6, 7
_TYPES = {
    "c10::BFloat16": "bfloat16",
    "c10::Half": "float16",
    "float": "float32",
    "double": "float64",
    "bool": "bool",
}


def _tensor(op: CpuOp, i: int) -> SdpaTensor | None:
    dims = op.input_dims[i] if i < len(op.input_dims) else ()
    dtype = op.input_types[i] if i < len(op.input_types) else ""
    if not dtype or dtype == "Scalar" or (not dims and i < _MASK):
        return None
    strides = op.input_strides[i] if i < len(op.input_strides) else ()
    return SdpaTensor(
        shape=list(dims)[:8],
        strides=list(strides)[:8] if strides and len(strides) == len(dims) else None,
        dtype=dtype[:40],
    )


def _scalar(op: CpuOp, i: int) -> str:
    return op.concrete_inputs[i].strip() if i < len(op.concrete_inputs) else ""


def _float(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if value == value and abs(value) != float("inf") else None


def call_of(op: CpuOp) -> SdpaCall | None:
    """The call ``op`` made, or None where the trace lacks its query, key or value."""
    q, k, v = (_tensor(op, i) for i in range(3))
    if q is None or k is None or v is None:
        return None
    return SdpaCall(
        query=q,
        key=k,
        value=v,
        attn_mask=_tensor(op, _MASK),
        dropout_p=max(_float(_scalar(op, _DROPOUT)) or 0.0, 0.0),
        is_causal=_scalar(op, _CAUSAL) == "True",
        scale=_float(_scalar(op, _SCALE)),
        enable_gqa=_scalar(op, _GQA) == "True",
    )


def _signature(call: SdpaCall) -> str:
    return call.model_dump_json(include={"query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale"})


_EXPAND_OPS = ("aten::repeat_interleave", "aten::reshape", "aten::_unsafe_view", "aten::view")


def _int(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


def expanded_from(ops: Iterable[CpuOp], key: SdpaTensor) -> int | None:
    """The heads the key had before the iteration repeated them to its shape, where an op shows it: a
    ``repeat_interleave`` of [B, h, S, D] by h' / h along dim 1, or a reshape of [B, h, g, S, D] (an ``expand`` of
    [B, h, 1, S, D]) into [B, h * g, S, D]. None where no op does, or the key is not four-dimensional."""
    if len(key.shape) != 4:
        return None
    b, heads, s, d = key.shape
    for op in ops:
        if op.name not in _EXPAND_OPS or not op.input_dims or len(op.input_dims[0]) not in (4, 5):
            continue
        dims = op.input_dims[0]
        if op.name == "aten::repeat_interleave" and len(dims) == 4:
            repeats = _int(_scalar(op, 1))
            along_heads = _scalar(op, 2) in ("1", "-3")
            if repeats and along_heads and (dims[0], dims[2], dims[3]) == (b, s, d) and dims[1] * repeats == heads:
                return dims[1] if dims[1] < heads else None
        elif (
            len(dims) == 5
            and (dims[0], dims[3], dims[4]) == (b, s, d)
            and dims[1] * dims[2] == heads
            and dims[2] > 1
            and _scalar(op, 1).replace(" ", "") == f"[{b},{heads},{s},{d}]"
        ):
            return dims[1]
    return None


def sdpa_calls(parsed: ParsedTrace, *, limit: int = 64) -> list[SdpaCall]:
    """The distinct SDPA calls of one iteration (the trace's first), in the order first made, each with how many times
    per iteration it was made and, where the iteration expanded the key and value heads to the query's before the
    call, how many there were. Empty where the trace holds none (or no shapes)."""
    first = parsed.iterations[0] if parsed.iterations else 0
    ops = [op for op in parsed.ops if op.name == SDPA_OP and op.iteration in (first, None)]
    others = [op for op in parsed.ops if op.name in _EXPAND_OPS and op.iteration in (first, None)]
    found: dict[str, SdpaCall] = {}
    since = float("-inf")  # the previous call's end: an expand before it fed that call, not this one
    for op in sorted(ops, key=lambda o: o.ts_us):
        window, since = since, op.end_us
        call = call_of(op)
        if call is None:
            continue
        key = _signature(call)
        if key in found:
            found[key].calls += 1
        elif len(found) < limit:
            if call.query.shape[1:2] == call.key.shape[1:2] and not call.enable_gqa:
                before = [o for o in others if window <= o.ts_us <= op.ts_us]
                call.kv_heads_expanded_from = expanded_from(before, call.key)
            found[key] = call
    return list(found.values())


def _dtype(name: str) -> str:
    return _TYPES.get(name, name)


def tensor_words(t: SdpaTensor) -> str:
    """``bfloat16 [1, 32, 2048, 128]``, with ``non-contiguous`` where its strides say so."""
    words = f"{_dtype(t.dtype)} {list(t.shape)}"
    if t.strides is not None and not is_contiguous(t):
        words += f" non-contiguous (strides {list(t.strides)})"
    return words


def is_contiguous(t: SdpaTensor) -> bool:
    """Whether the strides are the row-major ones of the shape (size-1 dimensions may have any stride)."""
    if t.strides is None:
        return True
    expected = 1
    for size, stride in zip(reversed(t.shape), reversed(t.strides), strict=True):
        if size != 1 and stride != expected:
            return False
        expected *= max(size, 1)
    return True


def call_words(call: SdpaCall) -> str:
    """One line: ``q bfloat16 [1, 32, 2048, 128], k ..., v ..., mask bool [1, 1, 2048, 2048], causal``."""
    parts = [f"q {tensor_words(call.query)}", f"k {tensor_words(call.key)}", f"v {tensor_words(call.value)}"]
    parts.append(f"attn_mask {tensor_words(call.attn_mask)}" if call.attn_mask is not None else "no attn_mask")
    if call.is_causal:
        parts.append("is_causal")
    if call.dropout_p:
        parts.append(f"dropout_p {call.dropout_p:g}")
    if call.enable_gqa:
        parts.append("enable_gqa")
    if call.scale is not None:
        parts.append(f"scale {call.scale:g}")
    if call.calls > 1:
        parts.append(f"{call.calls} calls per iteration")
    if call.kv_heads_expanded_from:
        parts.append(f"key and value expanded from {call.kv_heads_expanded_from} heads")
    return ", ".join(parts)


def _fields(call: SdpaCall) -> dict[str, str]:
    return {
        "query": tensor_words(call.query),
        "key": tensor_words(call.key),
        "value": tensor_words(call.value),
        "attn_mask": tensor_words(call.attn_mask) if call.attn_mask is not None else "none",
        "is_causal": str(call.is_causal),
        "dropout_p": f"{call.dropout_p:g}",
        "enable_gqa": str(call.enable_gqa),
        "scale": "default" if call.scale is None else f"{call.scale:g}",
    }


def call_changes(base: Sequence[SdpaCall], cand: Sequence[SdpaCall]) -> list[str]:
    """What differs between the two sides' calls, field by field, for calls paired in order (the case's first call
    against the base's first, ...), plus calls one side made and the other did not. Empty where they match."""
    out: list[str] = []
    for b, c in zip(base, cand, strict=False):
        fb, fc = _fields(b), _fields(c)
        out += [f"{name} {fb[name]} → {fc[name]}" for name in fb if fb[name] != fc[name]]
    if len(cand) > len(base):
        out.append(f"{len(cand) - len(base)} more SDPA call(s): {call_words(cand[len(base)])}")
    elif len(base) > len(cand):
        out.append(f"{len(base) - len(cand)} SDPA call(s) fewer" + ("" if cand else ": no SDPA call now"))
    return out


def refusals(calls: Iterable[SdpaCall], backend: str) -> list[str] | None:
    """PyTorch's reasons for refusing ``backend`` (one of the fused ones) on any of ``calls``, each once; [] where it
    refused none, None where it was not asked (or ``backend`` is not one it can refuse)."""
    if backend not in SDPA_FUSED:
        return None
    asked = [c for c in calls if c.refused is not None]
    if not asked:
        return None
    reasons: dict[str, None] = {}
    for call in asked:
        for reason in (call.refused or {}).get(backend, []):
            reasons[reason] = None
    return list(reasons)


def refusal_words(calls: Sequence[SdpaCall], backend: str, *, limit: int = 3) -> str | None:
    """``flash refused: <reason>; <reason>`` for the first ``limit`` reasons, or None where there are none to give."""
    reasons = refusals(calls, backend)
    if not reasons:
        return None
    shown = "; ".join(reasons[:limit]) + (f"; and {len(reasons) - limit} more" if len(reasons) > limit else "")
    return f"PyTorch refused {backend}: {shown}"


def backends_line(calls: Sequence[SdpaCall], ran: str | None) -> str | None:
    """For a report: which backend ran and why each fused one it skipped was refused, or why nobody asked."""
    if not calls:
        return None
    head = f"SDPA ({len(calls)} distinct call{'s' if len(calls) > 1 else ''}): ran {ran or 'unknown'}"
    not_asked = next((c.not_asked for c in calls if c.not_asked), None)
    if all(c.refused is None for c in calls):
        return head + (f"; reasons not asked: {not_asked}" if not_asked else "")
    parts = []
    for backend in SDPA_FUSED:
        if backend == ran:
            continue
        reasons = refusals(calls, backend)
        if reasons:
            parts.append(f"{backend} refused ({'; '.join(reasons[:2])}{'; …' if len(reasons) > 2 else ''})")
        elif reasons is not None:
            parts.append(f"{backend} eligible")
    return head + ("; " + "; ".join(parts) if parts else "")


BACKENDS: tuple[SdpaBackend, ...] = (*SDPA_FUSED, "math")
