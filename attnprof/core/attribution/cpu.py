"""On a CPU trace there are no device kernels: the aten ops that do the work play them."""

from __future__ import annotations

import re

from attnprof.core.attribution.kineto import CpuOp, KernelEvent, ParsedTrace, launch_inputs

_AUTOGRAD_NODE = re.compile(r"Backward\d+$")
_METADATA_OP_NAMES = (
    "empty empty_like empty_strided new_empty new_empty_strided as_strided transpose t permute view "
    "_unsafe_view reshape _reshape_alias expand expand_as unsqueeze squeeze select slice narrow "
    "detach detach_ alias lift_fresh resize_ set_ unbind split chunk view_as numpy_T mT flatten "
    "unflatten movedim swapaxes contiguous to result_type size stride dim is_same_size "
    "_has_compatible_shallow_copy_type"
)
# Ops that only allocate or reinterpret metadata: they do no work of their own.
METADATA_OPS = frozenset("aten::" + n for n in _METADATA_OP_NAMES.split())
# SDPA's entry point and its math path only dispatch to the ops that compute (mul, bmm, softmax, ...): their own
# time is the dispatcher's. Counted as work, a tiny case's wrapper can outweigh its children on a busy host and
# turn up as a "fused attention" kernel of the math backend.
_DISPATCH_ONLY = frozenset({"aten::scaled_dot_product_attention", "aten::_scaled_dot_product_attention_math"})
_NO_WORK = METADATA_OPS | _DISPATCH_ONLY | {"aten::resolve_conj", "aten::resolve_neg", "aten::_conj", "aten::_neg_view"}
# Output initialisation inside an op that does the work (``aten::all`` fills its result first).
_INIT_OPS = frozenset({"aten::fill_", "aten::zero_"})
_NON_TENSOR_TYPES = frozenset({"", "Scalar", "ScalarList", "TensorList", "GenericList", "String", "Device"})
_EPS_US = 0.01


def _scalar_only(op: CpuOp) -> bool:
    """Every tensor input is 0-d: a Python scalar wrapped and converted (``aten::mul(t, 0.5)``)."""
    tensors = [i for i, t in enumerate(op.input_types) if t not in _NON_TENSOR_TYPES and "List" not in t]
    return bool(tensors) and all(i < len(op.input_dims) and op.input_dims[i] == () for i in tensors)


def _is_autograd_node(name: str) -> bool:
    return name.startswith(("autograd::", "torch::autograd::")) or _AUTOGRAD_NODE.search(name) is not None


def _works(ops: list[CpuOp]) -> list[bool]:
    works = [False] * len(ops)
    # Shallower first: whether a fill counts depends on whether its parent works.
    for i in sorted(range(len(ops)), key=lambda i: ops[i].depth):
        op = ops[i]
        folded_init = op.name in _INIT_OPS and op.parent is not None and works[op.parent]
        works[i] = (
            op.category == "cpu_op"
            and op.name not in _NO_WORK
            and not _is_autograd_node(op.name)
            and not _scalar_only(op)
            and not folded_init
        )
    return works


def cpu_kernels(parsed: ParsedTrace) -> list[KernelEvent]:
    """The aten ops that play the kernels on a CPU trace, in start order. Durations in µs.

    An op *works* unless it is a metadata op (allocation, view: ``METADATA_OPS``), an autograd
    node, a scalar conversion (all tensor inputs 0-d) or a ``fill_``/``zero_`` that initialises
    the output of a working parent. A working op's *delegated* time is the duration of its nearest
    working descendants; it becomes a record when its self time (duration minus all children) is
    at least its delegated time, i.e. when it does its own work rather than wrapping others
    (``aten::matmul`` wraps ``aten::bmm``: only ``bmm`` is a record). The record's duration is the
    op's duration minus its delegated time, so no time is counted twice.

    Why not "every leaf op": ``aten::bmm`` has ``resolve_conj`` children, ``aten::mul`` by a Python
    scalar converts the scalar in a child op, and the fused CPU attention ops compute in their own
    body between allocations and views; a leaf rule would keep the views and lose the work.
    """
    ops = parsed.ops
    works = _works(ops)
    delegated = [0.0] * len(ops)
    child_time = [0.0] * len(ops)
    for i, op in enumerate(ops):
        if op.parent is not None:
            child_time[op.parent] += op.dur_us
        if works[i]:
            p = op.parent
            while p is not None and not works[p]:
                p = ops[p].parent
            if p is not None:
                delegated[p] += op.dur_us
    out: list[KernelEvent] = []
    for i, op in enumerate(ops):
        own = op.dur_us - delegated[i]
        self_time = op.dur_us - child_time[i]
        if not works[i] or op.iteration is None or own <= 0 or self_time + _EPS_US < delegated[i]:
            continue
        dims, types = launch_inputs(ops, i)
        out.append(
            KernelEvent(
                name=op.name,
                ts_us=op.ts_us,
                dur_us=own,
                stream=None,
                external_id=op.external_id,
                correlation=None,
                grid=None,
                block=None,
                registers_per_thread=None,
                shared_mem_bytes=None,
                op=op.name,
                op_stack=op.stack,
                iteration=op.iteration,
                input_dims=dims,
                input_types=types,
                op_index=i,
                category="cpu_op",
                launch_ts_us=op.ts_us,
            )
        )
    out.sort(key=lambda k: (k.ts_us, k.op_index or 0))
    return out
