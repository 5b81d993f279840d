"""Advice with its counterfactual measured: each rule changes one SDPA call of the case and times the change against
the call as it is, here, on the same shapes.

The call is rebuilt from what the trace recorded (``attnprof.core.attribution.sdpa_calls``) with random data; the
call as it is and each change are timed interleaved (rounds of a few calls each, CUDA events on a GPU), forward
only, and the medians compared. A change is advice only when it is faster by more than ``ADVICE_MIN_GAIN``; the others
stay in the document with ``helps`` false, so that a reader sees what was tried. The rules
(``[suite.advice] off`` switches any of them off):

``backend``     each other SDPA backend PyTorch takes for the call, forced with ``sdpa_kernel``
``mask``        a float mask passed as a boolean one; ``is_causal`` in place of a mask; no mask where it keeps all
``contiguous``  query, key and value made contiguous once, where the call got a strided view
``head_dim``    the head dimension padded to the next size the fused kernels are built for (32, 64, 96, 128, 192, 256)
``gqa``         key and value heads the iteration expanded to the query's (``repeat_interleave``, ``expand``) passed
                unexpanded with ``enable_gqa=True``
``sdpa``        a case that computes attention without SDPA (the unfused ``naive`` path, a custom kernel) beside
                PyTorch's SDPA on the case's shapes: how far the user's step is from PyTorch's best fused kernel
``output``      a ``block`` case's path from the QKV projection into the output projection with query, key and value
                made contiguous: the copies that costs and, where SDPA then writes its output in the query's layout,
                the copy of attention's output into the projection's input, measured where the next layer reads it

Each suggestion says what it assumes of the data (a mask of only 0 and -inf, a causal pattern): the timing cannot see
values, only shapes.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from attnprof.core.attribution.sdpa_calls import is_contiguous
from attnprof.core.documents.result import Advice, AdviceRule, SdpaCall, SdpaTensor
from attnprof.core.measure.sdpa_reasons import dtype_of
from attnprof.core.measure.targets import block_heads, block_merged

ADVICE_MIN_GAIN = 0.05
"""A change is advice when its median is at least this much below the call's own."""
HEAD_DIMS = (32, 64, 96, 128, 192, 256)
_BACKENDS = {
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "flash": SDPBackend.FLASH_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "math": SDPBackend.MATH,
}
_RAN_AS = {"cpu_flash": "flash"}  # the CPU's fused path is SDPBackend.FLASH_ATTENTION there
_BUDGET_S = 0.5  # per call: every variant's timing together, after one calibration call each (3 rounds at least)


@dataclass
class _Variant:
    rule: AdviceRule | None  # None: the call as it is
    suggestion: str
    note: str | None
    run: Callable[[], object]


def _filled(t: SdpaTensor, device: str, *, shape: list[int] | None = None, contiguous: bool = False) -> torch.Tensor:
    dtype = dtype_of(t.dtype)
    size = shape or t.shape
    if contiguous or shape is not None or t.strides is None:
        out = torch.empty(size, dtype=dtype, device=device)
    else:
        out = torch.empty_strided(size, t.strides, dtype=dtype, device=device)
    if dtype == torch.bool:
        return out.fill_(True)
    return out.normal_() if dtype.is_floating_point else out.zero_()


def _sdpa(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None,
    call: SdpaCall,
    backend: str | None,
    *,
    causal: bool | None = None,
) -> Callable[[], object]:
    kwargs = {"dropout_p": 0.0, "is_causal": call.is_causal if causal is None else causal, "scale": call.scale}
    if call.enable_gqa:
        kwargs["enable_gqa"] = True
    chosen = _BACKENDS.get(_RAN_AS.get(backend or "", backend or ""))

    def run() -> object:
        if chosen is None:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, **kwargs)  # type: ignore[arg-type]
        with sdpa_kernel([chosen]):
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, **kwargs)  # type: ignore[arg-type]

    return run


def variants(
    call: SdpaCall, ran: str | None, device: str, off: Sequence[str], forced: str | None = None
) -> list[_Variant]:
    """The call as it is first (on the backend that ran), then each change the rules not in ``off`` make to it, on
    PyTorch's own choice of backend or, where the suite asked for one (``forced``), on that one."""
    q, k, v = (_filled(t, device) for t in (call.query, call.key, call.value))
    mask = _filled(call.attn_mask, device) if call.attn_mask is not None else None
    current = _RAN_AS.get(ran or "", ran)
    # math ran though PyTorch would have taken a fused backend: the user's code forced it (sdpa_kernel), which the
    # trace cannot show; the changes keep it forced, as applying them by hand would
    if forced is None and current == "math" and call.eligible and any(b != "math" for b in call.eligible):
        forced = "math"
    # as it is: on the backend that ran
    out = [_Variant(None, "as it is", None, _sdpa(q, k, v, mask, call, current if current in _BACKENDS else forced))]
    if "backend" not in off and current in _BACKENDS:
        for name in _BACKENDS:
            if name != current and (call.eligible is None or name in call.eligible):
                words = f"take the {name} backend for this call: `with sdpa_kernel(SDPBackend.{_BACKENDS[name].name})`"
                out.append(_Variant("backend", words, None, _sdpa(q, k, v, mask, call, name)))
    if "mask" not in off and call.attn_mask is not None and mask is not None:
        if mask.is_floating_point():
            as_bool = torch.ones(mask.shape, dtype=torch.bool, device=device)
            out.append(
                _Variant(
                    "mask",
                    "pass the mask as a boolean tensor (True where a query may attend) instead of a float one",
                    "where the float mask holds only 0 and -inf",
                    _sdpa(q, k, v, as_bool, call, forced),
                )
            )
        if not call.is_causal and call.query.shape[-2] <= call.key.shape[-2]:
            out.append(
                _Variant(
                    "mask",
                    "pass is_causal=True instead of the mask",
                    "where the mask is the causal pattern (bottom-right aligned)",
                    _sdpa(q, k, v, None, call, forced, causal=True),
                )
            )
        out.append(
            _Variant(
                "mask",
                "drop the mask",
                "where it keeps every position (an all-true padding mask)",
                _sdpa(q, k, v, None, call, forced),
            )
        )
    strided = [t for t in (call.query, call.key, call.value) if not is_contiguous(t)]
    if "contiguous" not in off and strided:
        qc, kc, vc = (_filled(t, device, contiguous=True) for t in (call.query, call.key, call.value))
        out.append(
            _Variant(
                "contiguous",
                "make query, key and value contiguous once where they are made, not as views on every call",
                None,
                _sdpa(qc, kc, vc, mask, call, forced),
            )
        )
    groups = call.kv_heads_expanded_from
    if "gqa" not in off and groups and len(call.key.shape) == 4:
        kv_shape = [call.key.shape[0], groups, *call.key.shape[2:]]
        kg, vg = (_filled(t, device, shape=kv_shape) for t in (call.key, call.value))
        out.append(
            _Variant(
                "gqa",
                f"pass key and value with their {groups} heads and enable_gqa=True instead of expanding them to "
                f"{call.key.shape[1]}",
                "the expand's own time, saved as well, is not in the figures",
                _sdpa(q, kg, vg, mask, call.model_copy(update={"enable_gqa": True}), forced),
            )
        )
    d = call.query.shape[-1] if call.query.shape else 0
    padded = next((h for h in HEAD_DIMS if h > d), None)
    if "head_dim" not in off and d and d not in HEAD_DIMS and padded is not None and call.value.shape[-1] == d:
        qp, kp, vp = (_filled(t, device, shape=[*t.shape[:-1], padded]) for t in (call.query, call.key, call.value))
        out.append(
            _Variant(
                "head_dim",
                f"pad the head dimension from {d} to {padded} (zeros in query and key leave the scores as they are; "
                "slice the output back)",
                "the scale must stay 1/sqrt of the unpadded head dimension",
                _sdpa(qp, kp, vp, mask, call.model_copy(update={"scale": call.scale or d**-0.5}), forced),
            )
        )
    return out


# Cycles of a blocking kernel per microsecond of host time to cover: at or above every data-centre GPU's top SM clock
# (1,980 MHz on an H100 or H200), so the hold lasts at least as long as asked.
_HOLD_CYCLES_PER_US = 2000


def _clock(device: str) -> Callable[[Callable[[], object], int], float]:
    """Seconds per call of ``fn`` over ``n`` calls: CUDA events on a GPU, the wall clock on the CPU.

    On a GPU the calls are queued behind a blocking kernel as long as the host took to queue them once (and half
    again), as the timing pass holds the stream (``attnprof.core.measure.timing``): the events then time the device's
    work, not the host's launches. Unheld, a call whose kernels take 27 µs read 124 to 155 µs on an H100, its host's
    launch time (``bench/reports/advice.md``, the ``math`` rows)."""

    def on_gpu(fn: Callable[[], object], n: int) -> float:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        host_us = (time.perf_counter() - t0) * 1e6
        torch.cuda.synchronize()
        start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        torch.cuda._sleep(int((1.5 * host_us + 50.0) * _HOLD_CYCLES_PER_US))  # type: ignore[no-untyped-call]
        start.record()
        for _ in range(n):
            fn()
        end.record()
        end.synchronize()
        return float(start.elapsed_time(end)) / 1e3 / n

    def on_cpu(fn: Callable[[], object], n: int) -> float:
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        return (time.perf_counter() - t0) / n

    return on_gpu if device.startswith("cuda") else on_cpu


def _timed(found: list[_Variant], device: str) -> list[tuple[_Variant, float]]:
    """Each variant that runs, with its median seconds per call over interleaved rounds."""
    clock = _clock(device)
    runnable, first = [], []
    for variant in found:
        try:
            variant.run()  # warm: a backend that refuses the call, or an allocation that fails, drops the variant
            first.append(clock(variant.run, 1))
            runnable.append(variant)
        except (RuntimeError, ValueError):
            if variant.rule is None:
                return []
    if not runnable:
        return []
    per_round = sum(first)
    rounds = max(3, min(15, int(_BUDGET_S / max(per_round * 4, 1e-9))))
    inner = 4 if per_round * rounds * 4 <= _BUDGET_S else 1
    samples: list[list[float]] = [[] for _ in runnable]
    for r in range(rounds):
        order = range(len(runnable)) if r % 2 == 0 else reversed(range(len(runnable)))
        for i in order:
            samples[i].append(clock(runnable[i].run, inner))
    return [(v, statistics.median(s)) for v, s in zip(runnable, samples, strict=True)]


def advise(
    calls: list[SdpaCall], ran: str | None, *, device: str, off: Sequence[str] = (), forced: str | None = None
) -> list[Advice]:
    """Every rule's change to each of ``calls``, timed against the call as it is; empty where no rule applies."""
    out: list[Advice] = []
    with torch.no_grad():
        for index, call in enumerate(calls):
            try:
                found = variants(call, ran, device, off, forced)
            except (RuntimeError, ValueError, TypeError):
                continue  # a call that cannot be rebuilt here (memory, a dtype): no advice, not a failure
            if len(found) < 2:
                continue
            timed = _timed(found, device)
            if not timed or timed[0][0].rule is not None:
                continue
            base_s = timed[0][1]
            for variant, seconds in timed[1:]:
                assert variant.rule is not None
                out.append(
                    Advice(
                        rule=variant.rule,
                        call=index,
                        suggestion=variant.suggestion,
                        current_us=round(base_s * 1e6, 3),
                        alternative_us=round(seconds * 1e6, 3),
                        helps=seconds < base_s * (1.0 - ADVICE_MIN_GAIN),
                        note=variant.note,
                    )
                )
    return out[:32]


def beside_sdpa(
    step: Callable[[], object],
    *,
    device: str,
    dtype: torch.dtype,
    shape: tuple[int, int, int, int, int, int],
    causal: bool,
    off: Sequence[str] = (),
) -> list[Advice]:
    """The case's whole step (a forward without SDPA: the unfused path or a custom kernel) timed beside PyTorch's SDPA,
    on PyTorch's own choice of backend, on the case's shapes ``(batch, q_heads, kv_heads, seq_q, seq_kv, head_dim)``."""
    if "sdpa" in off:
        return []
    b, hq, hkv, sq, skv, d = shape
    with torch.no_grad():
        try:
            q = torch.randn(b, hq, sq, d, device=device, dtype=dtype)
            k, v = (torch.randn(b, hkv, skv, d, device=device, dtype=dtype) for _ in range(2))
        except (RuntimeError, ValueError):
            return []
        gqa = {"enable_gqa": True} if hq != hkv else {}

        def sdpa() -> object:
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, **gqa)  # type: ignore[arg-type]

        found = [_Variant(None, "as it is", None, step), _Variant("sdpa", "", None, sdpa)]
        timed = _timed(found, device)
    if len(timed) < 2 or timed[0][0].rule is not None:
        return []
    (_, mine), (_, theirs) = timed
    words = (
        "PyTorch's SDPA on these shapes (`F.scaled_dot_product_attention`"
        + (", is_causal=True" if causal else "")
        + (", enable_gqa=True" if gqa else "")
        + ") in place of this step's attention"
    )
    return [
        Advice(
            rule="sdpa",
            call=None,
            suggestion=words,
            current_us=round(mine * 1e6, 3),
            alternative_us=round(theirs * 1e6, 3),
            helps=theirs < mine * (1.0 - ADVICE_MIN_GAIN),
            note="the step as a whole (its attention and anything else it does) against SDPA alone",
        )
    ]


def block_output(
    *,
    device: str,
    dtype: torch.dtype,
    shape: tuple[int, int, int, int, int, int],
    causal: bool,
    off: Sequence[str] = (),
) -> list[Advice]:
    """The ``block`` target's path from its fused QKV projection's output to its output projection's, as the block
    takes it (head views of the projection, SDPA on PyTorch's own choice of backend, its output merged into
    (batch, seq, heads * head_dim), ``x + o @ w_o``), timed against the same with query, key and value made
    contiguous first, on the case's shapes ``(batch, q_heads, kv_heads, seq_q, seq_kv, head_dim)``.

    The merge is a view where SDPA writes its output (batch, seq, heads, head_dim), a copy where it writes it as
    (batch, heads, seq, head_dim); which one it writes can follow the query's layout, so a change to the heads is
    timed up to the projection that reads attention's output, not at the SDPA call alone (the ``contiguous`` rule)."""
    if "output" in off:
        return []
    b, hq, hkv, s, _, d = shape
    with torch.no_grad():
        try:
            qkv = torch.randn(b, s, (hq + 2 * hkv) * d, device=device, dtype=dtype)
            x = torch.randn(b, s, hq * d, device=device, dtype=dtype)
            w_o = torch.randn(hq * d, hq * d, device=device, dtype=dtype)
        except (RuntimeError, ValueError):
            return []
        gqa = {"enable_gqa": True} if hq != hkv else {}

        def path(contiguous: bool) -> Callable[[], object]:
            def run() -> object:
                heads = block_heads(qkv, hq, hkv, d)
                q, k, v = [t.contiguous() for t in heads] if contiguous else heads
                o = F.scaled_dot_product_attention(q, k, v, is_causal=causal, **gqa)  # type: ignore[arg-type]
                return x + block_merged(o) @ w_o

            return run

        found = [_Variant(None, "as it is", None, path(False)), _Variant("output", "", None, path(True))]
        timed = _timed(found, device)
    if len(timed) < 2 or timed[0][0].rule is not None:
        return []
    (_, views), (_, copies) = timed
    return [
        Advice(
            rule="output",
            call=None,
            suggestion="copy query, key and value into contiguous (batch, heads, seq, head_dim) tensors after the "
            "QKV projection (`.contiguous()`) instead of passing SDPA the projection's head views",
            current_us=round(views * 1e6, 3),
            alternative_us=round(copies * 1e6, 3),
            helps=copies < views * (1.0 - ADVICE_MIN_GAIN),
            note="from the QKV projection's output to the output projection's, each layout's copies included (the "
            "head copies; attention's output copied into (batch, seq, heads * head_dim) where SDPA writes it head "
            "by head); assumes query, key and value are views of one fused projection, as in the block",
        )
    ]
