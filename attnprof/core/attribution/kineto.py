"""Parse a Kineto (``torch.profiler``) Chrome trace into host ops and device kernels.

Times are microseconds, as Kineto writes them. The measuring side wraps each profiled iteration in
``record_function("attnprof/iter/<i>")``, the backward call in ``record_function("attnprof/backward")``
and may mark phases with ``record_function("attnprof/phase/<phase>")``; see :mod:`.phases`.

A kernel is joined to the host op that launched it by ``External id``; failing that, through its
``correlation`` to the runtime/driver launch call and from there to the innermost op that encloses
the call on the same thread. Autograd runs backward ops on a thread of its own that carries no
``attnprof/`` annotation: ops there inherit the annotations that enclose them in time on the other
threads, so a backward op inside iteration 3 lands in iteration 3.

A trace without any ``attnprof/iter/`` annotation is one iteration, numbered 0.
"""

from __future__ import annotations

import gzip
import json
import re
import zlib
from bisect import bisect_right
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from attnprof.core.errors import AttnprofError

ANNOTATION_PREFIX = "attnprof/"
ITER_PREFIX = "attnprof/iter/"
BACKWARD_ANNOTATION = "attnprof/backward"
PHASE_PREFIX = "attnprof/phase/"

# Kineto rounds to nanoseconds and a child's end can pass its parent's by that rounding.
_EPS_US = 0.01
_ITER_RE = re.compile(r"^attnprof/iter/(\d+)$")

# Older Kineto releases wrote capitalised category names.
_CATEGORY_ALIASES = {"operator": "cpu_op", "user annotation": "user_annotation", "concurrent_kernel": "kernel"}
_CATEGORY_ALIASES |= {
    "runtime": "cuda_runtime",
    "driver": "cuda_driver",
    "memcpy": "gpu_memcpy",
    "memset": "gpu_memset",
}
_HOST_CATEGORIES = {"cpu_op", "user_annotation"}
_LAUNCH_CATEGORIES = {"cuda_runtime", "cuda_driver"}
_MEMORY_CATEGORIES = {"gpu_memcpy", "gpu_memset"}

Dims = tuple[tuple[int, ...], ...]


class _Launch(NamedTuple):
    pid: Any
    tid: Any
    ts_us: float
    external_id: int | None


class TraceError(AttnprofError):
    """A trace file that cannot be read or is not a Kineto Chrome trace."""


@dataclass(slots=True)
class CpuOp:
    """One host-side range: an aten op, an autograd node or a ``record_function`` annotation."""

    name: str
    ts_us: float
    dur_us: float
    tid: int | str
    external_id: int | None
    input_dims: Dims
    input_types: tuple[str, ...]
    parent: int | None = None
    depth: int = 0
    pid: int | str = 0
    category: str = "cpu_op"
    iteration: int | None = None
    stack: tuple[str, ...] = ()
    """Enclosing op names outermost→innermost, this op last, with inherited annotations first."""
    input_strides: Dims = ()
    """Each input's strides, as ``input_dims`` (Kineto records them with ``record_shapes``; () where absent)."""
    concrete_inputs: tuple[str, ...] = ()
    """Each input's value where it is a scalar (``"0."``, ``"False"``), else ``""``."""

    @property
    def end_us(self) -> float:
        """End time of the range, microseconds."""
        return self.ts_us + self.dur_us


@dataclass(slots=True)
class KernelEvent:
    """A device activity (kernel, memcpy, memset) or, on a CPU trace, an aten op playing a kernel."""

    name: str
    ts_us: float
    dur_us: float
    stream: int | None
    external_id: int | None
    correlation: int | None
    grid: tuple[int, ...] | None
    block: tuple[int, ...] | None
    registers_per_thread: int | None
    shared_mem_bytes: int | None
    op: str | None
    op_stack: tuple[str, ...]
    iteration: int | None
    input_dims: Dims = ()
    input_types: tuple[str, ...] = ()
    op_index: int | None = None
    category: str = "kernel"
    device: int | None = None
    launch_ts_us: float | None = None


@dataclass(slots=True)
class ParsedTrace:
    """What :func:`parse_trace` read. ``iterations`` is sorted; ``[0]`` for an unannotated trace.

    On a CPU trace ``kernels`` is empty: ``attribution.cpu.cpu_kernels`` picks the ops that play them.
    """

    device_properties: list[dict[str, Any]]
    ops: list[CpuOp]
    kernels: list[KernelEvent]
    iterations: list[int]
    on_gpu: bool
    annotated: bool = False
    memory_events: list[KernelEvent] = field(default_factory=list)
    other_events: dict[str, int] = field(default_factory=dict)
    """Counts of device-side events that are not kernels, by category (``gpu_memset``: 1)."""


def load_trace(path: str | Path) -> ParsedTrace:
    """Read a Chrome trace written by ``export_chrome_trace`` (``.json`` or ``.json.gz``) and parse it."""
    p = Path(path)
    try:
        raw = p.read_bytes()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        data = json.loads(raw)
    except (OSError, EOFError, zlib.error) as exc:
        raise TraceError(f"{p}: cannot read the trace ({exc}); is the file complete?") from exc
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TraceError(f"{p}: not valid JSON ({exc}); the trace may be truncated") from exc
    try:
        return parse_trace(data)
    except TraceError as exc:
        raise TraceError(f"{p}: {exc}") from exc


def _num(v: Any) -> float | None:
    if isinstance(v, int | float) and not isinstance(v, bool):
        return float(v)
    try:
        return float(v) if isinstance(v, str) else None
    except ValueError:
        return None


def _int(v: Any) -> int | None:
    f = _num(v)
    return None if f is None else int(f)


def _ext_id(v: Any) -> int | None:
    # Kineto writes 0 (or nothing) where an activity has no enclosing op.
    i = _int(v)
    return i if i is not None and i > 0 else None


def _dim3(v: Any) -> tuple[int, ...] | None:
    if isinstance(v, list) and v and all(isinstance(x, int | float) for x in v):
        return tuple(int(x) for x in v)
    return None


def _dims(v: Any) -> Dims:
    # TensorList inputs come as nested lists; the work model only reads plain tensors, so they read ().
    if not isinstance(v, list):
        return ()
    return tuple(tuple(d) if isinstance(d, list) and all(type(x) is int for x in d) else () for d in v)


def _category(ev: dict[str, Any]) -> str:
    cat = str(ev.get("cat", "")).strip().lower()
    return _CATEGORY_ALIASES.get(cat, cat)


def _args(ev: dict[str, Any]) -> dict[str, Any]:
    a = ev.get("args")
    return a if isinstance(a, dict) else {}


def _iteration_of(name: str) -> int | None:
    m = _ITER_RE.match(name)
    return int(m.group(1)) if m else None


def _build_trees(ops: list[CpuOp]) -> dict[tuple[Any, Any], list[int]]:
    """Set parent and depth by time containment per thread; return each thread's ops by start."""
    threads: dict[tuple[Any, Any], list[int]] = {}
    for i, op in enumerate(ops):
        threads.setdefault((op.pid, op.tid), []).append(i)
    for idxs in threads.values():
        idxs.sort(key=lambda i: (ops[i].ts_us, -ops[i].dur_us, i))
        stack: list[int] = []
        for i in idxs:
            op = ops[i]
            while stack:
                top = ops[stack[-1]]
                if op.ts_us >= top.ts_us - _EPS_US and op.end_us <= top.end_us + _EPS_US:
                    break
                stack.pop()
            if stack:
                op.parent = stack[-1]
                op.depth = ops[stack[-1]].depth + 1
            stack.append(i)
    return threads


def _innermost_at(ops: list[CpuOp], idxs: list[int], starts: list[float], t: float) -> int | None:
    """The deepest op of one thread that encloses time ``t``, or None."""
    pos = bisect_right(starts, t + _EPS_US) - 1
    cur: int | None = idxs[pos] if pos >= 0 else None
    while cur is not None and not (ops[cur].ts_us - _EPS_US <= t <= ops[cur].end_us + _EPS_US):
        cur = ops[cur].parent
    return cur


@dataclass
class _Collected:
    ops: list[CpuOp] = field(default_factory=list)
    launches: dict[int, _Launch] = field(default_factory=dict)  # by correlation id
    device: list[tuple[str, dict[str, Any], float, float]] = field(default_factory=list)
    flow_ends: dict[tuple[Any, Any, float], int] = field(default_factory=dict)
    counts: Counter[str] = field(default_factory=Counter)


def _collect(events: list[Any]) -> _Collected:
    """Sort the trace's events into host ops, launch calls, device activities and flow ends."""
    c = _Collected()
    for ev in events:
        if not isinstance(ev, dict):
            continue
        cat = _category(ev)
        ph = ev.get("ph", "X")
        if ph == "f" and cat == "ac2g":
            fid, fts = _int(ev.get("id")), _num(ev.get("ts"))
            if fid is not None and fts is not None:
                c.flow_ends[(ev.get("pid"), ev.get("tid"), fts)] = fid
            continue
        name, ts = ev.get("name"), _num(ev.get("ts"))
        if ph != "X" or not isinstance(name, str) or ts is None:
            continue
        args = _args(ev)
        dur = max(_num(ev.get("dur")) or 0.0, 0.0)
        ext = _ext_id(args.get("External id", args.get("external id")))
        if cat in _HOST_CATEGORIES:
            raw_types = args.get("Input type")
            types = tuple(str(t) for t in raw_types) if isinstance(raw_types, list) else ()
            dims = _dims(args.get("Input Dims", args.get("Input dims")))
            raw_concrete = args.get("Concrete Inputs")
            concrete = tuple(str(v) for v in raw_concrete) if isinstance(raw_concrete, list) else ()
            c.ops.append(
                CpuOp(
                    name,
                    ts,
                    dur,
                    ev.get("tid", 0),
                    ext,
                    dims,
                    types,
                    pid=ev.get("pid", 0),
                    category=cat,
                    input_strides=_dims(args.get("Input Strides")),
                    concrete_inputs=concrete,
                )
            )
        elif cat in _LAUNCH_CATEGORIES:
            corr = _int(args.get("correlation"))
            if corr is not None:
                c.launches[corr] = _Launch(ev.get("pid", 0), ev.get("tid", 0), ts, ext)
        elif cat == "kernel" or cat in _MEMORY_CATEGORIES:
            c.device.append((cat, ev, ts, dur))
            if cat != "kernel":
                c.counts[cat] += 1
    return c


def _assign_stacks(ops: list[CpuOp], annotated: bool) -> None:
    """Fill each op's ``stack`` and ``iteration``; ops of unannotated threads inherit by time."""
    marks = sorted(
        (op for op in ops if op.category == "user_annotation" and op.name.startswith(ANNOTATION_PREFIX)),
        key=lambda o: (o.ts_us, -o.dur_us),
    )
    annotated_threads = {(m.pid, m.tid) for m in marks}
    # Shallower ops first, so a parent's stack exists before its children's.
    for op in sorted(ops, key=lambda o: (o.depth, o.ts_us)):
        if op.parent is not None:
            op.stack = (*ops[op.parent].stack, op.name)
        elif (op.pid, op.tid) in annotated_threads:
            op.stack = (op.name,)
        else:
            inherited = tuple(m.name for m in marks if m.ts_us - _EPS_US <= op.ts_us <= m.end_us + _EPS_US)
            op.stack = (*inherited, op.name)
        op.iteration = _stack_iteration(op.stack) if annotated else 0


def parse_trace(data: dict[str, Any]) -> ParsedTrace:
    """Parse a loaded Chrome trace (the JSON object ``export_chrome_trace`` writes).

    Raises :class:`TraceError` when ``data`` is not a trace. Unknown or missing fields in single
    events are tolerated: an event without a name or a start time is skipped.
    """
    if not isinstance(data, dict):
        raise TraceError(f"a Kineto trace is a JSON object, got {type(data).__name__}")
    events = data.get("traceEvents")
    if not isinstance(events, list):
        raise TraceError("no 'traceEvents' list: not a Chrome trace from torch.profiler")
    props = data.get("deviceProperties")
    device_properties = [p for p in props if isinstance(p, dict)] if isinstance(props, list) else []

    c = _collect(events)
    ops = c.ops
    threads = _build_trees(ops)
    starts = {k: [ops[i].ts_us for i in idxs] for k, idxs in threads.items()}
    windows = [(n, op) for op in ops if op.category == "user_annotation" and (n := _iteration_of(op.name)) is not None]
    annotated = bool(windows)
    _assign_stacks(ops, annotated)

    ext_map: dict[int, int] = {}
    for i, op in enumerate(ops):
        if op.external_id is not None:
            prev = ext_map.get(op.external_id)
            # Ids are unique per session; if a range and an op ever share one, the aten op launched it.
            if prev is None or (ops[prev].category != "cpu_op" and op.category == "cpu_op"):
                ext_map[op.external_id] = i

    kernels: list[KernelEvent] = []
    memory: list[KernelEvent] = []
    for cat, ev, ts, dur in c.device:
        args = _args(ev)
        ext = _ext_id(args.get("External id", args.get("external id")))
        corr = _int(args.get("correlation"))
        if corr is None:
            # Without a correlation field the flow arrow that ends on this event still names it.
            corr = c.flow_ends.get((ev.get("pid"), ev.get("tid"), ts))
        launch = c.launches.get(corr) if corr is not None else None
        idx = ext_map.get(ext) if ext is not None else None
        if idx is None and launch is not None:
            if launch.external_id is not None:
                idx = ext_map.get(launch.external_id)
            key = (launch.pid, launch.tid)
            if idx is None and key in threads:
                idx = _innermost_at(ops, threads[key], starts[key], launch.ts_us)
        owner = ops[idx] if idx is not None else None
        launch_ts = launch.ts_us if launch is not None else (owner.ts_us if owner is not None else None)
        if owner is not None:
            iteration = owner.iteration
        elif not annotated:
            iteration = 0
        else:
            t = launch_ts if launch_ts is not None else float("nan")
            iteration = next((n for n, w in windows if w.ts_us <= t <= w.end_us + _EPS_US), None)
        dims, types = launch_inputs(ops, idx)
        record = KernelEvent(
            name=str(ev["name"]),
            ts_us=ts,
            dur_us=dur,
            stream=_int(args.get("stream", ev.get("tid"))),
            external_id=ext,
            correlation=corr,
            grid=_dim3(args.get("grid")),
            block=_dim3(args.get("block")),
            registers_per_thread=_int(args.get("registers per thread")),
            shared_mem_bytes=_int(args.get("shared memory")),
            op=owner.name if owner is not None else None,
            op_stack=owner.stack if owner is not None else (),
            iteration=iteration,
            input_dims=dims,
            input_types=types,
            op_index=idx,
            category=cat,
            device=_int(args.get("device", ev.get("pid"))),
            launch_ts_us=launch_ts,
        )
        (kernels if cat == "kernel" else memory).append(record)

    kernels.sort(key=lambda k: (k.ts_us, k.name))
    memory.sort(key=lambda k: k.ts_us)
    return ParsedTrace(
        device_properties=device_properties,
        ops=ops,
        kernels=kernels,
        iterations=sorted({n for n, _ in windows}) if annotated else [0],
        on_gpu=bool(c.device or c.launches),
        annotated=annotated,
        memory_events=memory,
        other_events=dict(c.counts),
    )


def _stack_iteration(stack: tuple[str, ...]) -> int | None:
    return next((n for name in reversed(stack) if (n := _iteration_of(name)) is not None), None)


def launch_inputs(ops: list[CpuOp], idx: int | None) -> tuple[Dims, tuple[str, ...]]:
    """Input dims/types of the launching op, else of its nearest ancestor that recorded any.

    A ``record_function`` range (Inductor names one after each Triton kernel) records no inputs.
    """
    cur = idx
    while cur is not None:
        op = ops[cur]
        if op.input_dims or op.input_types:
            return op.input_dims, op.input_types
        cur = op.parent
    return (), ()
