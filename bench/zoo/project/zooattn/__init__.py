"""A small attention library, as a user's repository would hold one: a Triton forward kernel, a GQA decode step and a
long-context prefill through SDPA, a compiled soft-capped softmax. Each module has an attnprof factory
(``factory(params, device) -> {"fn", "args", "reference"}``) that the suites in ``perf/`` name as custom targets.

Modules import each other relatively, so one process can load two copies of the package under different names.
Triton is imported only where a kernel is launched: the package imports on a host without a GPU.
"""
