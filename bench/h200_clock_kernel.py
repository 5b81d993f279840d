"""The clock probe of ``bench/h200_clock.py``: one warp spins ``cycles`` SM cycles and stores the cycles it counted
and the nanoseconds ``%globaltimer`` advanced meanwhile (its own module so that the CPU tests import the rest)."""

import triton
import triton.language as tl


@triton.jit
def clock_probe(out_ptr, slot, cycles):  # type: ignore[no-untyped-def]
    t0 = tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)
    c0 = tl.inline_asm_elementwise("mov.u64 $0, %clock64;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)
    c1 = c0
    while c1 - c0 < cycles:
        c1 = tl.inline_asm_elementwise("mov.u64 $0, %clock64;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)
    t1 = tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)
    tl.store(out_ptr + 2 * slot, c1 - c0)
    tl.store(out_ptr + 2 * slot + 1, t1 - t0)
