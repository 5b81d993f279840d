"""Kernel attribution: parse a Kineto trace, key and phase every kernel, fold them into a table.

Torch-free: it reads the JSON that ``torch.profiler`` exported. Durations are microseconds.
"""

from attnprof.core.attribution.aggregate import KernelSummary, aggregate, quantile
from attnprof.core.attribution.backends import backend_of, detect_backend
from attnprof.core.attribution.cpu import METADATA_OPS, cpu_kernels
from attnprof.core.attribution.declared import DECLARED_KEY, DeclaredWork, factory_work_for, launch_metadata_work
from attnprof.core.attribution.keys import MAX_KEY_LEN, kernel_key
from attnprof.core.attribution.kineto import (
    BACKWARD_ANNOTATION,
    ITER_PREFIX,
    PHASE_PREFIX,
    CpuOp,
    KernelEvent,
    ParsedTrace,
    TraceError,
    load_trace,
    parse_trace,
)
from attnprof.core.attribution.phases import (
    AttributedKernel,
    PhaseContext,
    attribute,
    classify_phase,
    is_attention_gemm,
    is_backward,
)
from attnprof.core.attribution.reconcile import IterationTime, iteration_times, reconcile

__all__ = [
    "BACKWARD_ANNOTATION",
    "DECLARED_KEY",
    "ITER_PREFIX",
    "MAX_KEY_LEN",
    "METADATA_OPS",
    "PHASE_PREFIX",
    "AttributedKernel",
    "CpuOp",
    "DeclaredWork",
    "IterationTime",
    "KernelEvent",
    "KernelSummary",
    "ParsedTrace",
    "PhaseContext",
    "TraceError",
    "aggregate",
    "attribute",
    "backend_of",
    "classify_phase",
    "cpu_kernels",
    "detect_backend",
    "factory_work_for",
    "is_attention_gemm",
    "is_backward",
    "iteration_times",
    "kernel_key",
    "launch_metadata_work",
    "load_trace",
    "parse_trace",
    "quantile",
    "reconcile",
]
