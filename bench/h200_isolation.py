"""Each kernel as Nsight Compute replays it, timed without Nsight Compute: the cause of per-kernel gaps.

    PYTHONPATH=. python3 bench/h200_isolation.py SUITE... [--case GLOB...] --out FILE [--gap-ms 1]

ncu replays every kernel alone: caches flushed before it (its default cache control) and the GPU idle while it
saves and restores memory between passes. The profiler's trace pass times the kernels where they run: back to
back after one flush per iteration, each starting on the L2 its predecessor left. Here every case's kernels are
traced (Kineto, as the trace pass does) in four contexts, interleaved in blocks so that drift cancels:

  sequence    zero_grads, flush, step: the trace pass itself
  flush       the clean flush queued before every operator (and every Triton launch): no predecessor's lines
  idle        before every operator, the host synchronises and waits --gap-ms: the kernel starts on an idle GPU
  flush-idle  both, as ncu's replay

and, with ``--extra``, contexts that test what else ncu's replay may leave behind:

  tlb         before every operator, a read of one byte in every 64 KiB of a 32 GiB buffer: the GPU's address
              translations evicted (about 16,000 at 2 MiB pages); the reads also bring 16-64 MiB into L2, which
              the flush context tells apart, since it replaces all of L2
  unmap       before every operator, the host synchronises and allocates and frees 64 MiB through the driver
              (``cuMemAlloc``/``cuMemFree``), as a tool that maps and unmaps memory between launches does

Operators are intercepted with a TorchDispatchMode (eager PyTorch, autograd's backward included) and Triton
launches with Triton's launch_enter_hook (custom Triton kernels, Inductor's kernels when it honours the hook). A
case whose kernel sequence differs between contexts (e.g. a compiled graph that falls back to eager under the
mode) is recorded as not covered, with the reason. The flush's own kernels are recognised by their name, grid and
block, measured alone first, and dropped.

Writes {case: {"kernels": [{"name", "grid", "us": {context: median per launch}, "after_flush": share}],
"iterations": n} or
{"error": ...}} and prints one line per case.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile
from torch.utils._python_dispatch import TorchDispatchMode

from attnprof.core.measure.clock import kernel_events
from attnprof.core.measure.targets import SkipCase, WorkloadError, build_workload
from attnprof.core.measure.timing import Flusher
from attnprof.core.measure.triton_hooks import launch_enter_hook

CONTEXTS = ("sequence", "flush", "idle", "flush-idle")
EXTRA = ("tlb", "unmap")
TLB_SPAN, TLB_STRIDE = 32 << 30, 64 << 10
Launch = tuple[str, tuple[int, ...], tuple[int, ...], float]  # name, grid, block, µs
Event = tuple[str, tuple[int, ...], tuple[int, ...], float, float]  # name, grid, block, start µs, duration µs


class _Before(TorchDispatchMode):
    """Runs ``hook`` before every operator the step dispatches."""

    def __init__(self, hook: Callable[[], None]) -> None:
        super().__init__()
        self.hook = hook

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.hook()
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def _before_each(hook: Callable[[], None]) -> Iterator[None]:
    """Run ``hook`` before every operator dispatched inside the block (autograd's backward included)."""
    with _Before(hook):
        yield


class _Switch:
    """What runs before each operator and Triton launch; set per context, nothing outside one."""

    def __init__(self) -> None:
        self.hook: Callable[[], None] | None = None
        self.triton_calls = 0

    def __call__(self, *_: Any) -> None:
        if self.hook is not None:
            self.triton_calls += 1
            self.hook()


def _events(prof: Any) -> list[Event]:
    """The trace's kernels in start order: name, grid, block, start µs, duration µs."""
    return [
        (
            e["name"],
            tuple(e.get("args", {}).get("grid", ())),
            tuple(e.get("args", {}).get("block", ())),
            float(e["ts"]),
            float(e["dur"]),
        )
        for e in kernel_events(prof)
    ]


def _kernels(prof: Any) -> list[Launch]:
    """The trace's kernels in start order, without their start: name, grid, block, duration µs."""
    return [(name, grid, block, dur) for name, grid, block, _ts, dur in _events(prof)]


def _marker() -> None:
    """A spin kernel of one cycle: the step's kernels are those between two of them (not zero_grads')."""
    torch.cuda._sleep(1)  # type: ignore[no-untyped-call]


def _between_markers_flagged(
    launches: list[Launch], drop: set[tuple[str, tuple[int, ...], tuple[int, ...]]]
) -> list[tuple[Launch, bool]]:
    """The step's kernels (between two markers, the flush's own dropped), each with whether a flush kernel ran right
    before it: the hook runs once per operator, so the second kernel of one operator call starts without its own."""
    out: list[tuple[Launch, bool]] = []
    inside, after_flush = False, False
    for k in launches:
        if "spin_kernel" in k[0]:
            inside, after_flush = not inside, False
        elif k[:3] in drop:
            after_flush = True
        elif inside:
            out.append((k, after_flush))
            after_flush = False
    return out


def _tlb_hook() -> Callable[[], None]:
    """One byte read in every ``TLB_STRIDE`` of a ``TLB_SPAN`` buffer: every page of it touched (about 16,000 at 2 MiB
    pages), so the translations cached for other buffers are evicted; each read brings a sector or more into L2."""
    span = torch.empty(TLB_SPAN, dtype=torch.uint8, device="cuda")
    strided = span[::TLB_STRIDE]

    def hook() -> None:
        strided.sum(dtype=torch.int64)

    return hook


def _unmap_hook() -> Callable[[], None]:
    """Synchronise, then allocate and free 64 MiB through the driver API (the context torch made current)."""
    import ctypes

    cuda = ctypes.CDLL("libcuda.so.1")
    size = ctypes.c_size_t(64 << 20)

    def hook() -> None:
        torch.cuda.synchronize()
        ptr = ctypes.c_uint64()
        if cuda.cuMemAlloc_v2(ctypes.byref(ptr), size) != 0:
            raise RuntimeError("cuMemAlloc failed")
        cuda.cuMemsetD8_v2(ptr, ctypes.c_ubyte(0), size)  # touched, so its pages are really mapped
        if cuda.cuMemFree_v2(ptr) != 0:
            raise RuntimeError("cuMemFree failed")

    return hook


def _signature(launches: list[Launch]) -> set[tuple[str, tuple[int, ...], tuple[int, ...]]]:
    return {(n, g, b) for n, g, b, _ in launches}


def flush_and_signature() -> tuple[Flusher, set[tuple[str, tuple[int, ...], tuple[int, ...]]]]:
    """The clean flush and its kernels' (name, grid, block), for dropping them from a trace; Inductor's regular
    launcher set, since its static launcher skips Triton's launch hooks. Call before anything compiles."""
    with contextlib.suppress(Exception):
        import torch._inductor.config as inductor_config

        inductor_config.use_static_cuda_launcher = False  # type: ignore[attr-defined]
    flush = Flusher("cuda")
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        flush()
        torch.cuda.synchronize()
    return flush, _signature(_kernels(prof))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("suites", nargs="+")
    parser.add_argument("--case", action="append", default=None)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--gap-ms", type=float, default=1.0)
    parser.add_argument("--blocks", type=int, default=4)
    parser.add_argument("--per-block", type=int, default=12)
    parser.add_argument("--extra", action="append", choices=EXTRA, default=[])
    args = parser.parse_args()
    contexts = CONTEXTS + tuple(args.extra)
    from bench.h200_hold import cases_matching

    flush, flush_kernels = flush_and_signature()
    gap_s = args.gap_ms / 1000.0

    def idle() -> None:
        torch.cuda.synchronize()
        time.sleep(gap_s)

    def flush_idle() -> None:
        flush()
        idle()

    hooks: dict[str, Callable[[], None] | None] = {
        "sequence": None, "flush": flush, "idle": idle, "flush-idle": flush_idle,
    }  # fmt: skip
    makers = {"tlb": _tlb_hook, "unmap": _unmap_hook}
    for extra in args.extra:
        hooks[extra] = makers[extra]()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            hooks[extra]()  # type: ignore[misc]
            torch.cuda.synchronize()
        flush_kernels |= _signature(_kernels(prof))  # the hook's own kernels are dropped like the flush's
    switch = _Switch()
    results: dict[str, Any] = {}
    started = time.perf_counter()
    # installed before anything compiles, so launchers built later see it
    with launch_enter_hook(switch):
        chosen = cases_matching(args.suites, args.case or ["*"])
        for n, (suite, spec) in enumerate(chosen, 1):
            key = f"{suite.name}/{spec.id}"
            try:
                results[key] = _case(spec, flush, flush_kernels, hooks, switch, args.blocks, args.per_block, contexts)
            except (SkipCase, WorkloadError, RuntimeError) as exc:
                results[key] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
            torch.cuda.empty_cache()
            r = results[key]
            line = r.get("error") or ", ".join(
                f"{k['name'][:40]} " + "/".join(f"{k['us'][c]:.1f}" for c in contexts) for k in r["kernels"][:4]
            )
            print(f"[{n}/{len(chosen)} {time.perf_counter() - started:.0f}s] {key}: {line}", flush=True)
            args.out.write_text(json.dumps({"gap_ms": args.gap_ms, "contexts": contexts, "cases": results}, indent=1))
    return 0


def trace_block(
    w: Any,
    flush: Flusher,
    hook: Callable[[], None] | None,
    switch: _Switch,
    per_block: int,
    alongside: contextlib.AbstractContextManager[Any] | None = None,
) -> Any:
    """``per_block`` iterations as the trace pass runs them (zero_grads, flush, marker, step, marker), ``hook`` run
    before every operator and Triton launch of the step, traced by Kineto (``alongside`` entered with the trace): the
    profile."""
    with alongside or contextlib.nullcontext(), profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(per_block):
            w.zero_grads()
            flush()  # the trace pass's own flush, once per iteration
            _marker()
            switch.hook = hook
            try:
                with _before_each(hook) if hook is not None else contextlib.nullcontext():
                    w.step()
            finally:  # a step that raises must not leave the hook on for the next case
                switch.hook = None
            _marker()
        torch.cuda.synchronize()
    return prof


def _case(
    spec: Any,
    flush: Flusher,
    flush_kernels: set[tuple[str, tuple[int, ...], tuple[int, ...]]],
    hooks: dict[str, Callable[[], None] | None],
    switch: _Switch,
    blocks: int,
    per_block: int,
    contexts: tuple[str, ...] = CONTEXTS,
) -> dict[str, Any]:
    switch.triton_calls = 0
    switch.hook = None
    # a case that failed under the dispatch mode can leave Dynamo's caches holding an eager fallback for the next
    torch._dynamo.reset()
    w = build_workload(spec, "cuda")
    per_iter: dict[str, list[list[Launch]]] = {c: [] for c in contexts}
    reference: list[tuple[str, tuple[int, ...]]] = []
    after_flush: list[bool] = []  # under the flush context, per launch in order
    with w.context():
        for _ in range(3):
            w.zero_grads()
            w.step()
        torch.cuda.synchronize()
        for b in range(blocks):
            for context in contexts if b % 2 == 0 else tuple(reversed(contexts)):
                hook = hooks[context]
                prof = trace_block(w, flush, hook, switch, per_block)
                flagged = _between_markers_flagged(_kernels(prof), flush_kernels)
                launches = [k for k, _ in flagged]
                if context == "flush":
                    after_flush += [flag for _, flag in flagged]
                if not reference:  # the first block is the trace pass's context
                    if len(launches) % per_block:
                        raise RuntimeError(f"{len(launches)} launches in {per_block} iterations: not covered")
                    reference = [(n, g) for n, g, _, _ in launches[: len(launches) // per_block]]
                k = len(reference)
                names = [(n, g) for n, g, _, _ in launches]
                if names != reference * per_block:
                    shown = [n[:30] for n, _ in names[:6]]
                    raise RuntimeError(
                        f"kernel sequence under {context} differs from the trace pass ({len(names)} launches in "
                        f"{per_block} iterations against {k} each; first {shown}): not covered"
                    )
                per_iter[context] += [launches[i * k : (i + 1) * k] for i in range(per_block)]
    return {
        "iterations": blocks * per_block,
        "triton_hook_calls": switch.triton_calls,
        "kernels": [
            {
                "name": name,
                "grid": list(grid),
                "us": {c: statistics.median(it[j][3] for it in per_iter[c]) for c in contexts},
                # the share of its launches under the flush context that came right after a flush of their own
                "after_flush": sum(after_flush[j :: len(reference)]) / max(1, len(after_flush[j :: len(reference)])),
            }
            for j, (name, grid) in enumerate(reference)
        ],
    }


if __name__ == "__main__":
    sys.exit(main())
