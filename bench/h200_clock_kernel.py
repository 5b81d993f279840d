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


@triton.jit
def span_probe(out_ptr, count_ptr, flag_ptr, target, n, every):  # type: ignore[no-untyped-def]
    """One warp records (``%globaltimer``, ``%clock64``) into ``out_ptr[2 * i]`` and ``out_ptr[2 * i + 1]``, one pair
    every ``every`` SM cycles, until ``*flag_ptr`` reaches ``target`` (the step's stream sets it after the step) or
    ``n`` pairs are taken; the count goes to ``*count_ptr``. The SM clock over any stretch it spans, by difference."""
    c_last = tl.inline_asm_elementwise("mov.u64 $0, %clock64;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)
    t = tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)
    tl.store(out_ptr, t)
    tl.store(out_ptr + 1, c_last)
    i = 1
    f = tl.load(flag_ptr, volatile=True)
    while (i < n) & (f < target):
        c = c_last
        while c - c_last < every:
            c = tl.inline_asm_elementwise("mov.u64 $0, %clock64;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)
        t = tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)
        tl.store(out_ptr + 2 * i, t)
        tl.store(out_ptr + 2 * i + 1, c)
        c_last = c
        f = tl.load(flag_ptr, volatile=True)
        i += 1
    tl.store(count_ptr, i)
