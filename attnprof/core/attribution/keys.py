"""Stable short names ("keys") for kernels, so that trends survive recompiles and library updates.

A key keeps what says which algorithm ran and drops what a library or autotuner picks per shape.
Rules, in order:

- **Demangled C++** (``void ns::f<...>(...)``): the return type, every template argument list and the
  parameter list are dropped, as are ``(anonymous namespace)`` and ``at::native::``; other
  namespaces stay (``pytorch_flash::flash_fwd_kernel``). Generic wrappers (``cutlass::Kernel``,
  ``cutlass::Kernel2``, ``cutlass::device_kernel``) are replaced by the kernel type they wrap.
- **ATen elementwise and reduce kernels** are named by their functor or lambda owner:
  ``elementwise:mul``, ``elementwise:copy`` (``direct_copy_kernel_cuda``), ``elementwise:copy_bf16``
  (``bfloat16_copy_kernel_cuda``), ``elementwise:where``, ``elementwise:fill``, ``reduce:and``.
- **cuDNN generated kernels**: the knob id and everything after it (tile, cluster shape) are
  dropped; a kernel index other than 0 is kept as ``_kernel<i>`` because it names a different
  kernel of the same engine.
- **Tiles, stages, warp layouts, alignments** (``64x128``, ``tilesize64x256x8``, ``stage3``,
  ``warpsize1x4x1``, ``aligna4``, ``cga1x1x1``) and library tags (``execute_kernel__5x_cublas``) are
  dropped everywhere. Tile configurations are autotuning picks of one algorithm; the kept tokens
  (data types, layout ``tn``/``nn``, math pipe ``ffma``/``hmma``, architecture) are what
  distinguishes algorithms.
- **nvjet** GEMMs keep architecture, variant and layout (``nvjet_sm90_tst_NNT``): the tokens in
  between (tile, cluster, raster, cooperative schedule) are heuristic picks for the shape.
- **FMHA (CUTLASS memory-efficient attention)** drops tile, ``rf``/``gmem`` accumulator choice and
  the ``k<max head dim>`` bucket: ``fmha_cutlassF_bf16_aligned_sm80``.
- **Triton** kernels drop Inductor's numeric suffix: ``triton_red_fused__softmax_0`` →
  ``triton_red_fused__softmax``.
- Keys are at most 120 characters; a longer one is cut and ends with a hash of the whole key.
"""

from __future__ import annotations

import hashlib
import re

MAX_KEY_LEN = 120

_TILE = re.compile(r"^\d+(x\d+)+$")
_DROP_TOKEN = re.compile(
    r"^(?:tilesize\d+(?:x\d+)*|stage\d+|warpsize\d+(?:x\d+)*|warpgroupsize\d+(?:x\d+)*"
    r"|cga\d+(?:x\d+)*|align[a-z]?\d+)$"
)
_CUBLAS_TAIL = re.compile(r"_+(?:execute_)?(?:segment_k_\w+?_)?kernel_+\d*x?_*cublas\w*$")
_CUDNN_KNOB = re.compile(r"_knob_\d+.*?(?:_kernel(\d+)(?:_\d+)?)?$")
_WRAPPERS = ("cutlass::Kernel", "cutlass::Kernel2", "cutlass::device_kernel")
_ELEMENTWISE = {
    "vectorized_elementwise_kernel": "elementwise",
    "unrolled_elementwise_kernel": "elementwise",
    "elementwise_kernel": "elementwise",
    "elementwise_kernel_with_index": "elementwise",
    "index_elementwise_kernel": "elementwise",
    "reduce_kernel": "reduce",
}
_LAMBDA_OWNER = re.compile(r"(?<![\w])(\w+?)_kernel_(?:cuda|impl)\b")
_NOT_OWNERS = {"gpu", "launch", "elementwise", "vectorized_elementwise", "unrolled_elementwise"}
_CUDA_FUNCTOR = re.compile(r"CUDAFunctor(?:OnSelf|OnOther)?_(\w+?)\b")
_FUNCTOR = re.compile(r"(\w+?)Functor\b")
_FUNCTOR_WRAPPERS = {"AUnary", "BUnary", "Binary", "Unary", "Ternary", "CUDA", "Opmath"}
_REDUCE_FUNCTOR = re.compile(r"(\w+?)_functor\b|(\w+?)Ops<")
_DTYPE_SHORT = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float8": "fp8", "float": "fp32"}


def _split_top(name: str) -> tuple[str, list[str]]:
    """Drop bracketed groups at depth 0; return what is left and the top-level template args text."""
    out: list[str] = []
    templates: list[str] = []
    depth = 0
    start = 0
    opening = {"<": ">", "(": ")", "{": "}", "[": "]"}
    stack: list[str] = []
    for i, ch in enumerate(name):
        if ch in opening:
            if depth == 0:
                start = i
            stack.append(opening[ch])
            depth += 1
        elif stack and ch == stack[-1]:
            stack.pop()
            depth -= 1
            if depth == 0 and name[start] == "<":
                templates.append(name[start + 1 : i])
        elif depth == 0:
            out.append(ch)
    return "".join(out), templates


def _snake(camel: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", camel).lower()


def _aten_key(kind: str, body: str) -> str:
    """``elementwise:<op>`` / ``reduce:<op>`` from the template arguments of an ATen kernel."""
    for m in _LAMBDA_OWNER.finditer(body):
        owner = m.group(1).split("::")[-1]
        if owner in _NOT_OWNERS:
            continue
        if owner.endswith("_copy"):
            dtype = owner[: -len("_copy")]
            return f"{kind}:copy" if dtype == "direct" else f"{kind}:copy_{_DTYPE_SHORT.get(dtype, dtype)}"
        return f"{kind}:{owner}"
    cm = _CUDA_FUNCTOR.search(body)
    if cm:
        return f"{kind}:{cm.group(1).lower()}"
    for fm in _FUNCTOR.finditer(body):
        short = fm.group(1).split("::")[-1]
        if short and short not in _FUNCTOR_WRAPPERS:
            return f"{kind}:{_snake(short)}"
    if kind == "reduce":
        red = _REDUCE_FUNCTOR.search(body)
        if red:
            return f"reduce:{_snake((red.group(1) or red.group(2)).split('::')[-1])}"
    return kind


def _clean_tokens(name: str) -> str:
    """Drop tile/stage/alignment/library tokens from an ``_``-separated kernel name."""
    name = _CUBLAS_TAIL.sub("", name)
    kept = [t for t in name.split("_") if t and not _TILE.match(t) and not _DROP_TOKEN.match(t)]
    return "_".join(kept)


def _flat_key(name: str) -> str:
    """Key of a name without C++ syntax (cuBLAS, cuDNN generated, nvjet, Triton, CUTLASS)."""
    if name.startswith("triton_"):
        return re.sub(r"_\d+$", "", name)
    if name.startswith("cudnn_generated"):
        m = _CUDNN_KNOB.search(name)
        if m:
            base = name[: m.start()]
            index = m.group(1)
            return base + (f"_kernel{index}" if index not in (None, "0") else "")
        return _clean_tokens(name)
    if name.startswith("nvjet_"):
        tokens = name.split("_")
        layout = tokens[-1] if len(tokens) > 3 and re.fullmatch(r"[NT]{2,3}", tokens[-1]) else ""
        return "_".join(t for t in (*tokens[:3], layout) if t)
    if name.startswith("fmha_cutlass"):
        tokens = [t for t in name.split("_") if t and not _TILE.match(t)]
        return "_".join(t for t in tokens if t not in ("rf", "gmem") and not re.fullmatch(r"k\d+", t))
    return _clean_tokens(name) or name


def kernel_key(name: str) -> str:
    """The stable short name of a kernel as launched (see the module docstring for the rules)."""
    raw = name.strip()
    if not raw:
        return raw
    text = raw.replace("(anonymous namespace)::", "")
    if "<" in text or "(" in text:
        head, templates = _split_top(text)
        func = head.strip().split(" ")[-1] if head.strip() else text
        if func.startswith("at::native::"):
            func = func[len("at::native::") :]
        if func in _ELEMENTWISE:
            key = _aten_key(_ELEMENTWISE[func], templates[0] if templates else "")
        elif func in _WRAPPERS and templates:
            inner = templates[0].split(",")[0].strip()
            key = kernel_key(inner) if inner else func
        elif "::" in func:
            key = func
        else:
            key = _flat_key(func)
    else:
        key = text if "::" in text else _flat_key(text)
    return _bound(key)


def _bound(key: str) -> str:
    if len(key) <= MAX_KEY_LEN:
        return key
    digest = hashlib.sha1(key.encode()).hexdigest()[:8]
    return key[: MAX_KEY_LEN - 9] + "~" + digest
