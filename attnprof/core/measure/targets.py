"""Workloads: turn a suite case into a callable the profiler times and traces.

Every target builds random inputs (never zeros: they run faster than real data and hide unwritten
outputs) and returns a :class:`Workload`: ``step()`` runs one iteration (forward, or forward and
backward with a fixed random output gradient), ``reference()`` recomputes the same function in
float64 for the accuracy check.

Phases that the code itself knows (the projections and FFN of the ``block`` target) are marked with
``record_function("attnprof/phase/<phase>")``; the trace parser reads those marks.
"""

from __future__ import annotations

import contextlib
import importlib
import math
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from attnprof.core.suite import CaseSpec

TORCH_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
SDPA_BACKENDS = {
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "flash": SDPBackend.FLASH_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "math": SDPBackend.MATH,
}
# Backends with no CPU implementation in PyTorch: on a CPU-only host these cases are `skipped`.
GPU_ONLY_BACKENDS = frozenset({"cudnn", "efficient"})


class SkipCase(Exception):
    """The case cannot run on this device (not a failure: a backend this device does not have)."""


class WorkloadError(Exception):
    """The case could not be built or run; ``type`` names the cause for the result document."""

    def __init__(self, type_: str, message: str) -> None:
        super().__init__(message)
        self.type = type_


@dataclass
class Workload:
    """One case ready to run. ``step`` returns the output tensor of one iteration."""

    step: Callable[[], Any]
    reference: Callable[[], dict[str, torch.Tensor]] | None
    outputs: Callable[[], dict[str, torch.Tensor]]
    context: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext
    leaves: list[torch.Tensor] = field(default_factory=list)
    # A custom factory's own word on its kernels' work: kernel-name fragment -> {"flops", "bytes"} per iteration.
    declared_work: dict[str, dict[str, float | None]] | None = None

    def zero_grads(self) -> None:
        for t in self.leaves:
            t.grad = None


@contextlib.contextmanager
def phase(name: str) -> Iterator[None]:
    with torch.profiler.record_function(f"attnprof/phase/{name}"):
        yield


def _randn(shape: tuple[int, ...], dtype: torch.dtype, device: str, gen: torch.Generator) -> torch.Tensor:
    return torch.randn(shape, dtype=torch.float32, device=device, generator=gen).to(dtype)


def _qkv(case: CaseSpec, device: str, gen: torch.Generator, grad: bool) -> list[torch.Tensor]:
    dt = TORCH_DTYPES[case.dtype]
    b, hq, hkv, sq, skv, d = case.batch, case.q_heads, case.kv_heads, case.seq_q, case.seq_kv, case.head_dim
    tensors = [
        _randn((b, hq, sq, d), dt, device, gen),
        _randn((b, hkv, skv, d), dt, device, gen),
        _randn((b, hkv, skv, d), dt, device, gen),
    ]
    for t in tensors:
        t.requires_grad_(grad)
    return tensors


def reference_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool, window: int | None = None
) -> torch.Tensor:
    """Attention in float64, written out: the accuracy reference for every attention target."""
    q, k, v = q.double(), k.double(), v.double()
    rep = q.shape[1] // k.shape[1]
    if rep > 1:
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    allowed = _mask(q.shape[-2], k.shape[-2], causal, window, q.device)
    if allowed is not None:
        scores = scores.masked_fill(~allowed, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def _mask(sq: int, skv: int, causal: bool, window: int | None, device: Any) -> torch.Tensor | None:
    """Boolean mask of allowed (query, key) pairs, aligned bottom-right: query ``i`` is at position
    ``i + skv - sq`` of the keys (the last query sees every key), as in inference with a KV cache.
    For self-attention (``sq == skv``) this is PyTorch's ``is_causal``."""
    if not causal and window is None:
        return None
    i = torch.arange(sq, device=device)[:, None] + (skv - sq)
    j = torch.arange(skv, device=device)[None, :]
    allowed = torch.ones(sq, skv, dtype=torch.bool, device=device)
    if causal:
        allowed &= j <= i
    if window is not None:
        allowed &= (i - j) < window
    return allowed


def _naive(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Matmul, softmax (in fp32, as careful eager code does), matmul."""
    rep = q.shape[1] // k.shape[1]
    if rep > 1:
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    probs = torch.softmax(scores.float(), dim=-1).to(q.dtype)
    return probs @ v


def _sdpa_call(causal: bool, seq_q: int, seq_kv: int, gqa: bool) -> Callable[..., torch.Tensor]:
    """SDPA with the causal mask aligned bottom-right, as inference uses it.

    PyTorch's ``is_causal`` aligns the mask top-left, so a decode query (one token against a cache of
    ``seq_kv``) would see only the first key. With ``seq_q != seq_kv`` the mask is
    ``causal_lower_right``: query ``i`` sees keys up to ``i + seq_kv - seq_q``, which FlashAttention
    runs natively and the efficient kernel through its lower-right mask type (other backends get the
    mask materialised).
    """
    if not causal or seq_q == seq_kv:

        def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)

        return sdpa
    from torch.nn.attention.bias import causal_lower_right

    bias = causal_lower_right(seq_q, seq_kv)

    def sdpa_lower_right(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, enable_gqa=gqa)

    return sdpa_lower_right


def _attention_fn(case: CaseSpec, device: str) -> tuple[Callable[..., torch.Tensor], Callable[[], Any]]:
    """The forward function of a built-in attention target and the context it runs in."""
    p = case.params
    gqa = case.kv_heads != case.q_heads
    if case.target == "sdpa":
        backend = case.backend or "default"
        if backend in GPU_ONLY_BACKENDS and device == "cpu":
            raise SkipCase(f"the {backend} backend needs a CUDA device")

        sdpa = _sdpa_call(case.causal, case.seq_q, case.seq_kv, gqa)
        if backend == "default":
            return sdpa, contextlib.nullcontext
        chosen = SDPA_BACKENDS[backend]
        return sdpa, lambda: sdpa_kernel([chosen])
    if case.target in ("naive", "compiled_naive"):
        mask = _mask(case.seq_q, case.seq_kv, case.causal, None, device)

        def naive(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            return _naive(q, k, v, mask)

        if case.target == "naive":
            return naive, contextlib.nullcontext
        return torch.compile(naive, dynamic=False), contextlib.nullcontext
    if case.target == "flex":
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        causal, window = case.causal, p.get("window")
        offset = case.seq_kv - case.seq_q  # bottom-right alignment, as ``_mask``

        def mask_mod(b: Any, h: Any, q_idx: Any, kv_idx: Any) -> Any:
            pos = q_idx + offset
            ok = q_idx >= 0
            if causal:
                ok = ok & (kv_idx <= pos)
            if window is not None:
                ok = ok & (pos - kv_idx < window)
            return ok

        block_mask = None
        if causal or window is not None:
            block_mask = create_block_mask(mask_mod, None, None, case.seq_q, case.seq_kv, device=device)
        compiled = torch.compile(flex_attention, dynamic=False)

        def flex(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            return compiled(q, k, v, block_mask=block_mask, enable_gqa=gqa)

        return flex, contextlib.nullcontext
    raise WorkloadError("ValueError", f"unknown attention target {case.target!r}")


def _wrap(
    fwd: Callable[[], torch.Tensor],
    ref_fwd: Callable[[], torch.Tensor] | None,
    leaves: list[torch.Tensor],
    names: list[str],
    case: CaseSpec,
    device: str,
    gen: torch.Generator,
    context: Callable[[], Any],
) -> Workload:
    """Add the backward pass (``out.backward(grad)``) and the gradient references for ``fwd_bwd``."""
    state: dict[str, torch.Tensor] = {}
    backward = case.pass_ == "fwd_bwd"
    grad: torch.Tensor | None = None

    def step() -> torch.Tensor:
        nonlocal grad
        out = fwd()
        if backward:
            if grad is None:
                grad = torch.randn(out.shape, generator=gen, device=device).to(out.dtype)
            with torch.profiler.record_function("attnprof/backward"):
                out.backward(grad)  # type: ignore[no-untyped-call]
        state["out"] = out
        return out

    def outputs() -> dict[str, torch.Tensor]:
        res = {"out": state["out"].detach()}
        if backward:
            for name, t in zip(names, leaves, strict=True):
                if t.grad is not None:
                    res[f"d{name}"] = t.grad.detach()
        return res

    reference = None
    if ref_fwd is not None:

        def reference() -> dict[str, torch.Tensor]:
            doubles = [t.detach().double().requires_grad_(backward) for t in leaves]
            originals = [t for t in leaves]
            leaves[:] = doubles
            try:
                out = ref_fwd()
                res = {"out": out.detach()}
                if backward:
                    assert grad is not None
                    out.backward(grad.double())  # type: ignore[no-untyped-call]
                    for name, t in zip(names, doubles, strict=True):
                        assert t.grad is not None
                        res[f"d{name}"] = t.grad
                return res
            finally:
                leaves[:] = originals

    return Workload(step=step, reference=reference, outputs=outputs, context=context, leaves=leaves)


def build_workload(case: CaseSpec, device: str, *, seed: int = 0) -> Workload:
    """Build the workload of ``case`` on ``device`` (``"cpu"`` or ``"cuda"``).

    Raises :class:`SkipCase` when this device lacks the requested backend and
    :class:`WorkloadError` when a custom target cannot be imported or built.
    """
    gen = torch.Generator(device=device).manual_seed(seed)
    if case.is_custom:
        return _custom(case, device, gen)
    if case.target == "block":
        return _block(case, device, gen)
    fn, context = _attention_fn(case, device)
    leaves = _qkv(case, device, gen, case.pass_ == "fwd_bwd")
    window = case.params.get("window")

    def fwd() -> torch.Tensor:
        return fn(*leaves)

    def ref() -> torch.Tensor:
        return reference_attention(*leaves, causal=case.causal, window=window)

    return _wrap(fwd, ref, leaves, ["q", "k", "v"], case, device, gen, context)


def block_heads(qkv: torch.Tensor, q_heads: int, kv_heads: int, head_dim: int) -> list[torch.Tensor]:
    """The ``block`` target's query, key and value: (batch, heads, seq, head_dim) views of the fused QKV projection's
    (batch, seq, (q_heads + 2 * kv_heads) * head_dim) output, not copies."""
    b, s = qkv.shape[:2]
    parts = qkv.split([q_heads * head_dim, kv_heads * head_dim, kv_heads * head_dim], dim=-1)  # type: ignore[no-untyped-call]
    return [t.view(b, s, -1, head_dim).transpose(1, 2) for t in parts]


def block_merged(o: torch.Tensor) -> torch.Tensor:
    """Attention's (batch, heads, seq, head_dim) output as the output projection's (batch, seq, heads * head_dim)
    input: a view where SDPA wrote it (batch, seq, heads, head_dim), a copy otherwise."""
    return o.transpose(1, 2).reshape(o.shape[0], o.shape[2], -1)


def _block(case: CaseSpec, device: str, gen: torch.Generator) -> Workload:
    """QKV projection, attention (SDPA, default backend), output projection and a GELU FFN."""
    if case.seq_kv != case.seq_q:
        raise WorkloadError("ValueError", "the block target is self-attention: seq_kv must equal seq_q")
    dt = TORCH_DTYPES[case.dtype]
    b, s, hq, hkv, d = case.batch, case.seq_q, case.q_heads, case.kv_heads, case.head_dim
    width = hq * d
    ffn = int(case.params.get("ffn_hidden") or 4 * width)
    scale = 1.0 / math.sqrt(width)

    def weight(rows: int, cols: int) -> torch.Tensor:
        return (_randn((rows, cols), torch.float32, device, gen) * scale).to(dt)

    x = _randn((b, s, width), dt, device, gen)
    leaves = [x, weight(width, (hq + 2 * hkv) * d), weight(width, width), weight(width, ffn), weight(ffn, width)]
    for t in leaves:
        t.requires_grad_(case.pass_ == "fwd_bwd")

    def forward(params: Sequence[torch.Tensor], attention: Callable[..., torch.Tensor]) -> torch.Tensor:
        # ``params`` is read at call time: the accuracy reference swaps float64 copies into ``leaves``.
        x, w_qkv, w_o, w1, w2 = params
        with phase("qkv_proj"):
            q, k, v = block_heads(x @ w_qkv, hq, hkv, d)
        o = block_merged(attention(q, k, v))
        with phase("out_proj"):
            h = x + o @ w_o
        with phase("ffn"):
            return h + F.gelu(h @ w1) @ w2

    gqa = hkv != hq

    def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, is_causal=case.causal, enable_gqa=gqa)

    def ref_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return reference_attention(q, k, v, causal=case.causal)

    return _wrap(
        lambda: forward(leaves, sdpa),
        lambda: forward(leaves, ref_attention),
        leaves,
        ["x", "w_qkv", "w_o", "w1", "w2"],
        case,
        device,
        gen,
        contextlib.nullcontext,
    )


_FACTORY_KEYS = ("fn", "args", "reference", "work")


def _declared_work(target: str, work: Any) -> dict[str, dict[str, float | None]]:
    """A factory's ``work``: {kernel-name fragment: {"flops": n, "bytes": n}}, numbers >= 0 per iteration."""
    if not isinstance(work, dict):
        raise WorkloadError("TypeError", f"{target}: work must be a dict of kernel-name fragment -> {{flops, bytes}}")
    out: dict[str, dict[str, float | None]] = {}
    for name, entry in work.items():
        if not isinstance(name, str) or not name:
            raise WorkloadError(
                "TypeError", f"{target}: work keys must be non-empty kernel-name fragments, got {name!r}"
            )
        if not isinstance(entry, dict) or not entry or set(entry) - {"flops", "bytes"}:
            raise WorkloadError(
                "TypeError", f"{target}: work[{name!r}] must be a dict with flops and/or bytes, got {entry!r}"
            )
        figures: dict[str, float | None] = {"flops": None, "bytes": None}
        for key, value in entry.items():
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < math.inf:
                raise WorkloadError(
                    "ValueError", f"{target}: work[{name!r}][{key!r}] must be a finite number >= 0, got {value!r}"
                )
            figures[key] = float(value)
        out[name] = figures
    return out


def _custom(case: CaseSpec, device: str, gen: torch.Generator) -> Workload:
    """``package.module:factory(params, device) -> (fn, args)`` from the user's source.

    A factory may return a third element, ``reference(*args) -> Tensor``, computing the same
    function in higher precision; the accuracy check uses it (there is no general reference for
    arbitrary code). Or it returns a dict with ``fn``, ``args`` and optionally ``reference`` and
    ``work``: ``{kernel-name fragment: {"flops": n, "bytes": n}}``, the FLOPs and bytes per iteration of
    the kernels whose names contain the fragment (what a Triton kernel declares through
    ``launch_metadata`` is read by itself and takes precedence).
    """
    module_name, _, attr = case.target.partition(":")
    if "" not in sys.path and "." not in sys.path:
        sys.path.insert(0, "")
    try:
        module = importlib.import_module(module_name)
        factory = getattr(module, attr)
    except Exception as exc:  # the user's import can raise anything
        raise WorkloadError("ImportError", f"cannot import {case.target}: {type(exc).__name__}: {exc}") from exc
    try:
        built = factory(dict(case.params), device)
    except Exception as exc:
        raise WorkloadError(type(exc).__name__, f"{case.target} raised while building the case: {exc}") from exc
    declared = None
    if isinstance(built, dict):
        unknown = sorted(set(built) - set(_FACTORY_KEYS))
        if unknown or "fn" not in built or "args" not in built:
            raise WorkloadError(
                "TypeError",
                f"{case.target} returned a dict with keys {sorted(built)}: it needs fn and args, and may have "
                f"reference and work (unknown: {unknown})",
            )
        if built.get("work") is not None:
            declared = _declared_work(case.target, built["work"])
        built = (built["fn"], built["args"], built.get("reference"))
    if not isinstance(built, tuple) or len(built) not in (2, 3) or not callable(built[0]):
        raise WorkloadError(
            "TypeError",
            f"{case.target} must return (fn, args), (fn, args, reference) or a dict of fn, args, reference, work",
        )
    fn, args = built[0], list(built[1])
    ref_fn = built[2] if len(built) == 3 else None
    leaves = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
    names = [f"arg{i}" for i, a in enumerate(args) if isinstance(a, torch.Tensor) and a.requires_grad]

    def fwd() -> torch.Tensor:
        return fn(*args)  # type: ignore[no-any-return]

    ref = None
    if ref_fn is not None:
        positions = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor) and a.requires_grad]

        def ref() -> torch.Tensor:
            call = list(args)
            for pos, leaf in zip(positions, leaves, strict=True):
                call[pos] = leaf
            return ref_fn(*[a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in call])  # type: ignore[no-any-return]

    workload = _wrap(fwd, ref, leaves, names, case, device, gen, contextlib.nullcontext)
    workload.declared_work = declared
    return workload


@contextlib.contextmanager
def capture_warnings() -> Iterator[list[str]]:
    """Collect warning texts: PyTorch says why a backend is not eligible only through warnings."""
    messages: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            yield messages
        finally:
            messages.extend(str(w.message) for w in caught)
