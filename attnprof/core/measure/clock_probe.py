"""The probe of :mod:`attnprof.core.measure.clock`, a Triton kernel: its own module, imported only where Triton is."""

import triton  # type: ignore[import-not-found,unused-ignore]
import triton.language as tl  # type: ignore[import-not-found,unused-ignore]


@triton.jit  # type: ignore[misc,unused-ignore]
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
