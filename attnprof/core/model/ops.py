"""Work of one aten op, read from the input shapes and types that Kineto records (``record_shapes``).

Used for the kernels of the unfused paths (math backend, naive attention, the backward of either), where
each kernel is launched by one aten op whose operands the trace lists.

GEMMs (``aten::mm``, ``bmm``, ``addmm``, ``baddbmm``, ``matmul``, ``linear``), A of shape [b, m, k] times
B of shape [b, k, n]:

* FLOPs = 2·b·m·n·k (one multiply and one add per term; a bias adds m·n, left out as noise);
* bytes = (|A| + |B| + |C| + |bias|) elements × element size: every operand read once and the output
  written once, the minimum any GEMM moves. C takes A's element type.

Elementwise, softmax, cast, mask and reduction ops:

* bytes = the input tensors read + the output written, the output shaped like the largest input and
  typed like it, except: ``copy_`` writes its first operand (its type) and reads only the second;
  ``fill_``/``zero_`` only write; predicates (``isneginf``, ``eq``, ...) write 1-byte bools; reductions
  (``all``, ``sum``, ``amax``, ...) write an output smaller than the input by the reduced extent, which
  the record does not give, so it is left out; an input beyond the op's arity is an ``out=`` tensor
  (``aten::where`` records one) and is counted as the output, not read;
* FLOPs = output elements × a per-op factor: 5 for softmax (max, subtract, exp, sum, divide), 4 for its
  backward, 1 for arithmetic and comparisons, 0 for copies, fills and selections (``where``,
  ``masked_fill``, ``triu``/``tril``), which move data without arithmetic.

Zero-dimensional operands (Python scalars, 0-d tensors) are recorded with dims ``[]``; they are a few
bytes and are ignored. An op, dims or type outside these tables gives ``(None, None)``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

# Kineto writes the C++ type name of each tensor operand.
ELEMENT_BYTES: dict[str, int] = {
    "double": 8,
    "float": 4,
    "c10::Half": 2,
    "c10::BFloat16": 2,
    "c10::Float8_e4m3fn": 1,
    "c10::Float8_e5m2": 1,
    "c10::Float8_e4m3fnuz": 1,
    "c10::Float8_e5m2fnuz": 1,
    "long int": 8,
    "int": 4,
    "short int": 2,
    "signed char": 1,
    "unsigned char": 1,
    "bool": 1,
    "c10::complex<float>": 8,
    "c10::complex<double>": 16,
}

GEMM_OPS = frozenset({"aten::mm", "aten::bmm", "aten::addmm", "aten::baddbmm", "aten::matmul", "aten::linear"})

_SOFTMAX = {"aten::_softmax": 5, "aten::softmax": 5, "aten::_log_softmax": 5, "aten::log_softmax": 5}
_SOFTMAX_BWD = {"aten::_softmax_backward_data": 4, "aten::_log_softmax_backward_data": 4}
_MOVES = (
    "aten::copy_",
    "aten::clone",
    "aten::contiguous",
    "aten::fill_",
    "aten::zero_",
    "aten::where",
    "aten::masked_fill",
    "aten::masked_fill_",
    "aten::triu",
    "aten::triu_",
    "aten::tril",
    "aten::tril_",
)
_ARITH = (
    "aten::add",
    "aten::add_",
    "aten::sub",
    "aten::sub_",
    "aten::rsub",
    "aten::mul",
    "aten::mul_",
    "aten::div",
    "aten::div_",
    "aten::exp",
    "aten::exp_",
    "aten::neg",
    "aten::sqrt",
    "aten::rsqrt",
    "aten::tanh",
    "aten::sigmoid",
    "aten::relu",
    "aten::gelu",
    "aten::silu",
    "aten::pow",
    "aten::maximum",
    "aten::minimum",
)
_PREDICATES = frozenset(
    {
        "aten::isneginf",
        "aten::isposinf",
        "aten::isinf",
        "aten::isnan",
        "aten::eq",
        "aten::ne",
        "aten::lt",
        "aten::le",
        "aten::gt",
        "aten::ge",
        "aten::logical_not",
        "aten::logical_and",
        "aten::logical_or",
    }
)
_REDUCTIONS = frozenset(
    {
        "aten::all",
        "aten::any",
        "aten::sum",
        "aten::mean",
        "aten::amax",
        "aten::amin",
        "aten::max",
        "aten::min",
        "aten::logsumexp",
    }
)
FLOP_FACTOR: dict[str, int] = {
    **_SOFTMAX,
    **_SOFTMAX_BWD,
    **dict.fromkeys(_MOVES, 0),
    **dict.fromkeys(_ARITH, 1),
    **dict.fromkeys(_PREDICATES, 1),
    **dict.fromkeys(_REDUCTIONS, 1),
}
ELEMENTWISE_OPS = frozenset(FLOP_FACTOR)

_WRITE_ONLY = frozenset({"aten::fill_", "aten::zero_"})
# Tensor operands of the functional form; a further tensor operand is the ``out=`` argument.
_ARITY = {"aten::where": 3, "aten::masked_fill": 3, "aten::mul": 2, "aten::div": 2}

Dims = Sequence[Sequence[int]]


def element_bytes(type_name: str) -> int | None:
    """Bytes per element of a Kineto operand type name (``'c10::BFloat16'`` -> 2), or None if unknown."""
    return ELEMENT_BYTES.get(type_name)


def _numel(dims: Sequence[int]) -> int:
    return math.prod(dims)


def _operands(dims: Dims, types: Sequence[str]) -> list[tuple[int, Sequence[int], int]] | None:
    """(position, dims, element bytes) of the tensor operands; None if a tensor's type is unknown."""
    out: list[tuple[int, Sequence[int], int]] = []
    for i, (d, t) in enumerate(zip(dims, types, strict=False)):
        if len(d) == 0:
            continue
        size = ELEMENT_BYTES.get(t)
        if size is None:
            return None
        out.append((i, d, size))
    return out


def _mkn(op: str, dims: Dims) -> tuple[int, int, int, int, list[int]] | None:
    """(batch, m, k, n, extra bias/addend elements) of a GEMM, or None if the dims do not fit."""
    if op == "aten::mm" and len(dims) >= 2 and len(dims[0]) == 2 and len(dims[1]) == 2:
        (m, k), (_, n) = dims[0], dims[1]
        return 1, m, k, n, []
    if op == "aten::bmm" and len(dims) >= 2 and len(dims[0]) == 3 and len(dims[1]) == 3:
        (b, m, k), (_, _, n) = dims[0], dims[1]
        return b, m, k, n, []
    if op == "aten::addmm" and len(dims) >= 3 and len(dims[1]) == 2 and len(dims[2]) == 2:
        (m, k), (_, n) = dims[1], dims[2]
        return 1, m, k, n, [_numel(dims[0])]
    if op == "aten::baddbmm" and len(dims) >= 3 and len(dims[1]) == 3 and len(dims[2]) == 3:
        (b, m, k), (_, _, n) = dims[1], dims[2]
        return b, m, k, n, [_numel(dims[0])]
    if op == "aten::linear" and len(dims) >= 2 and len(dims[0]) >= 1 and len(dims[1]) == 2:
        k = dims[0][-1]
        n = dims[1][0]
        m = _numel(dims[0][:-1])
        bias = [_numel(dims[2])] if len(dims) >= 3 and len(dims[2]) > 0 else []
        return 1, m, k, n, bias
    if op == "aten::matmul" and len(dims) >= 2 and dims[0] and dims[1]:
        a, b_ = list(dims[0]), list(dims[1])
        # 1-D operands are promoted to matrices as torch.matmul does.
        a = [1, *a] if len(a) == 1 else a
        b_ = [*b_, 1] if len(b_) == 1 else b_
        m, k = a[-2], a[-1]
        n = b_[-1]
        batch_a, batch_b = a[:-2], b_[:-2]
        width = max(len(batch_a), len(batch_b))
        batch_a = [1] * (width - len(batch_a)) + batch_a
        batch_b = [1] * (width - len(batch_b)) + batch_b
        batch = math.prod(max(x, y) for x, y in zip(batch_a, batch_b, strict=True))
        return batch, m, k, n, []
    return None


def gemm_work(op: str, dims: Dims, types: Sequence[str]) -> tuple[int | None, int | None]:
    """FLOPs and minimum DRAM bytes of one GEMM op from its recorded operands.

    FLOPs = 2·b·m·n·k; bytes = (A + B + C [+ bias]) elements × element size, C typed like A.
    Returns ``(None, None)`` when the op or its operands are not understood.
    """
    shape = _mkn(op, dims)
    if shape is None:
        return None, None
    b, m, k, n, extra = shape
    flops = 2 * b * m * n * k
    a_pos = 1 if op in ("aten::addmm", "aten::baddbmm") else 0
    if len(types) <= a_pos + 1:
        return flops, None
    a_size = ELEMENT_BYTES.get(types[a_pos])
    b_size = ELEMENT_BYTES.get(types[a_pos + 1])
    if a_size is None or b_size is None:
        return flops, None
    a_elems = _numel(dims[a_pos])
    b_elems = _numel(dims[a_pos + 1])
    bias_bytes = 0
    if extra:
        bias_pos = 0 if a_pos == 1 else 2
        bias_size = ELEMENT_BYTES.get(types[bias_pos], a_size) if len(types) > bias_pos else a_size
        bias_bytes = extra[0] * bias_size
    c_elems = b * m * n
    return flops, a_elems * a_size + b_elems * b_size + c_elems * a_size + bias_bytes


def elementwise_work(op: str, dims: Dims, types: Sequence[str]) -> tuple[int | None, int | None]:
    """FLOPs and minimum DRAM bytes of one elementwise, softmax, cast, mask or reduction op.

    Bytes = inputs read + output written (rules in the module docstring); FLOPs = output elements ×
    the op's factor (softmax 5, arithmetic 1, copies 0). Returns ``(None, None)`` for an unknown op.
    """
    factor = FLOP_FACTOR.get(op)
    if factor is None:
        return None, None
    operands = _operands(dims, types)
    if operands is None or not operands:
        return (0, 0) if operands is not None else (None, None)

    if op == "aten::copy_":
        if len(operands) < 2:
            return None, None
        (_, dst, dst_size), (_, src, src_size) = operands[0], operands[1]
        return 0, _numel(dst) * dst_size + _numel(src) * src_size
    if op in _WRITE_ONLY:
        _, target, size = operands[0]
        return 0, _numel(target) * size

    arity = _ARITY.get(op)
    reads = [o for o in operands if arity is None or o[0] < arity]
    outs = [o for o in operands if arity is not None and o[0] >= arity]
    if not reads:
        return None, None
    largest = max(reads, key=lambda o: _numel(o[1]))
    out_elems = _numel(outs[0][1]) if outs else _numel(largest[1])
    out_size = outs[0][2] if outs else largest[2]
    if op in _PREDICATES:
        out_size = 1
    read_bytes = sum(_numel(d) * size for _, d, size in reads)
    if op in _REDUCTIONS:
        return factor * _numel(largest[1]), read_bytes
    if op.endswith("_"):
        # In place: self is read (counted above) and written back; no separate output tensor.
        return factor * out_elems, read_bytes + _numel(reads[0][1]) * reads[0][2]
    return factor * out_elems, read_bytes + out_elems * out_size
