"""A custom case's work: what its factory declares, else the case's formula shared among its kernels.

Custom targets are real modules written to a temporary directory and imported by the runner on the CPU,
where aten ops play the kernels. (What a Triton kernel declares through ``launch_metadata`` needs a GPU:
tests/core/test_measure_h200_truth.py reads it from a real H200 trace.)
"""

from __future__ import annotations

import math
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from attnprof.core.attribution import KernelSummary
from attnprof.core.attribution.declared import DeclaredWork
from attnprof.core.documents import Case, ResultDocument
from attnprof.core.documents.result import WorkSource
from attnprof.core.measure.kernels import CASE_WORK_SHARE, _declared, _share_case_work
from attnprof.core.measure.runner import ProfileOptions, profile_suite
from attnprof.core.measure.timing import Flusher
from attnprof.core.measure.triton_hooks import record_of
from attnprof.core.model.work import CaseWork, case_work
from attnprof.core.suite import parse_suite
from tests.profiling_support import suite_text

MODULE = "attnprof_test_work_factories"

FACTORIES = """
import torch


def _qkv(params, device):
    b, h, s, d = params["batch"], params["q_heads"], params["seq_q"], params["head_dim"]
    gen = torch.Generator(device=device).manual_seed(0)
    return [torch.randn(b, h, s, d, generator=gen, device=device) for _ in range(3)]


def _attention(q, k, v):
    return torch.softmax(q @ k.transpose(-2, -1) * q.shape[-1] ** -0.5, dim=-1) @ v


def declared(params, device):
    # 4*B*H*S*S*D per matmul pair, but the factory says what its bmm kernels do, bytes unknown
    return {"fn": _attention, "args": _qkv(params, device), "work": {"bmm": {"flops": 1.5e6}}}


def _unmodelled(q, k, v):
    # ops no work model covers, standing in for a kernel the profiler knows nothing about
    return torch.sort(q, dim=-1).values.cumsum(-1) + torch.sort(k, dim=-2).values.cumsum(-2)


def undeclared(params, device):
    return {"fn": _unmodelled, "args": _qkv(params, device)}


def bad_work(params, device):
    return {"fn": _attention, "args": _qkv(params, device), "work": {"bmm": {"flops": -1}}}


def unknown_key(params, device):
    return {"fn": _attention, "args": _qkv(params, device), "speed": "fast"}
"""

SHAPE = 'batch = 1\nq_heads = 2\nseq_q = 32\nhead_dim = 16\ndtype = "fp32"\n'
CASES = "".join(
    f'[[cases]]\nname = "{name}"\ntarget = "{MODULE}:{name}"\n{SHAPE}\n'
    for name in ("declared", "undeclared", "bad_work", "unknown_key")
)


@pytest.fixture(scope="module")
def doc(tmp_path_factory: pytest.TempPathFactory, peaks_cache: Path) -> Iterator[ResultDocument]:
    src = tmp_path_factory.mktemp("user-src")
    (src / f"{MODULE}.py").write_text(textwrap.dedent(FACTORIES))
    suite = parse_suite(suite_text("work", CASES), source="work.toml")
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(src))
        yield profile_suite(suite, ProfileOptions(device="cpu", cache_dir=peaks_cache))
    sys.modules.pop(MODULE, None)


def case(doc: ResultDocument, case_id: str) -> Case:
    found = doc.case(case_id)
    assert found is not None
    return found


def test_a_factory_declares_the_work_of_the_kernels_it_names(doc: ResultDocument) -> None:
    c = case(doc, "declared")
    assert c.status == "ok", c.error
    bmm = [k for k in c.kernels if "bmm" in k.name]
    assert bmm and all(k.work_source == "factory" and k.flops == 1.5e6 and k.bytes is None for k in bmm)
    # the other ops keep their models (softmax, the scale) or none
    assert all(k.work_source != "factory" for k in c.kernels if "bmm" not in k.name)


def test_undeclared_kernels_of_a_custom_case_share_its_attention_work(doc: ResultDocument) -> None:
    c = case(doc, "undeclared")
    assert c.status == "ok", c.error
    work = case_work(c.target, None, c.params)
    assert work is not None
    shared = [k for k in c.kernels if k.work_source == "case"]
    # the factory's unmodelled ops (which of them holds >= 5% of a CPU case's time depends on the host's load)
    assert shared and {k.key for k in shared} & {"aten::sort", "aten::cumsum"}
    # every kernel without a model that takes >= 5% of the time has a share, and a bound
    for k in c.kernels:
        if k.work_source is None:
            assert (k.share or 0) < 0.05
        else:
            assert k.bound is not None
    # one kernel holding >= 90% gets it all; otherwise the shares add up to it: the modelled kernels do other work
    # and take no part, and none of this case's kernels declared any
    assert sum(k.flops or 0 for k in shared) == pytest.approx(work.flops)
    assert sum(k.bytes or 0 for k in shared) == pytest.approx(work.bytes_min)


@pytest.mark.parametrize(
    ("case_id", "words"),
    [("bad_work", "work['bmm']['flops'] must be a finite number >= 0, got -1"), ("unknown_key", "unknown: ['speed']")],
)
def test_a_bad_declaration_fails_its_case_naming_the_field(doc: ResultDocument, case_id: str, words: str) -> None:
    c = case(doc, case_id)
    assert c.status == "failed" and c.error is not None
    assert words in c.error.message


def _summary(name: str, us: float) -> KernelSummary:
    return KernelSummary(name, name, "other", None, 1.0, us, us, us, [us], None, None, None, None, None, ())


def test_a_dominant_kernel_gets_all_of_the_case_work_and_others_share_by_time() -> None:
    work = CaseWork(flops=1000, bytes_min=100, formula="")
    dominant = [_summary("a", 95.0), _summary("b", 5.0)]
    figures = _share_case_work(dominant, [(None, None, None)] * 2, work, 100.0)
    assert CASE_WORK_SHARE * 100.0 <= 95.0
    assert figures == [(1000.0, 100.0, "case"), (None, None, None)]
    split = [_summary("a", 60.0), _summary("b", 37.0), _summary("c", 3.0)]
    figures = _share_case_work(split, [(None, None, None)] * 3, work, 100.0)
    assert [f[2] for f in figures] == ["case", "case", None]  # c holds under 5% of the time
    assert figures[0][0] == pytest.approx(1000 * 60 / 97) and figures[1][0] == pytest.approx(1000 * 37 / 97)
    # a kernel that declared or has a model keeps its own figures, and the others get only their part of the case's
    # work: the declared kernel's time counts among the kernels sharing it, so no work is counted twice
    own: list[tuple[float | None, float | None, WorkSource | None]] = [(5.0, 6.0, "launch_metadata")]
    figures = _share_case_work(split, own + [(None, None, None)] * 2, work, 100.0)
    assert figures[0] == (5.0, 6.0, "launch_metadata")
    assert figures[1][0] == pytest.approx(1000 * 37 / 97) and figures[1][1] == pytest.approx(100 * 37 / 97)
    assert figures[1][2] == "case"
    assert figures[2] == (None, None, None)
    # a modelled kernel (a copy, say) does other work: it keeps its figures and takes no part of the case's
    modelled: list[tuple[float | None, float | None, WorkSource | None]] = [(None, 8.0, "model")]
    figures = _share_case_work(split, modelled + [(None, None, None)] * 2, work, 100.0)
    assert figures[0] == (None, 8.0, "model") and figures[1] == (1000.0, 100.0, "case")


def test_launch_metadata_records_sum_flops_widths_and_skip_what_declares_nothing() -> None:
    assert record_of("k", {"flops16": 10, "flops32": 5, "bytes": 7}) == {"name": "k", "flops": 15.0, "bytes": 7.0}
    assert record_of(None, {"name": "k2", "bytes": 3}) == {"name": "k2", "flops": None, "bytes": 3.0}
    assert record_of("k", {"grid": (1, 2, 3)}) is None
    assert record_of("k", {"flops": float("nan"), "bytes": -1}) is None
    assert record_of("k", {"flops": True}) is None


def test_the_flush_reads_its_buffer_and_writes_none_of_it() -> None:
    flush = Flusher("cpu")
    flush.buffer[-1] = 7  # the last element: only a pass over all of it finds it
    before = flush.buffer.clone()
    with torch.profiler.profile(record_shapes=True) as prof:
        flush()
    assert torch.equal(flush.buffer, before) and int(flush.sink) == 7
    # one reduction in the buffer's own dtype: no converted copy of the buffer is written first (a sum into
    # int64 would write one); the only copies are of partial results (a few elements) into the sink
    events = list(prof.events())
    assert "aten::amax" in {e.name for e in events}
    assert not {e.name for e in events} & {"aten::to", "aten::_to_copy"}
    for e in events:
        if e.name == "aten::copy_":
            assert all(math.prod(shape) < 1024 for shape in e.input_shapes if shape is not None), e.input_shapes
    assert flush.sink.dtype == flush.buffer.dtype


def test_a_declaration_of_no_work_is_passed_over_for_the_model_or_the_case() -> None:
    k = _summary("attn_fwd", 80.0)
    said = {"attn_fwd": DeclaredWork(flops_per_launch=2e9, bytes_per_launch=None)}
    assert _declared(k, said, None) == (2e9, None, "launch_metadata")  # one half is a declaration
    for flops, nbytes in ((0.0, 0.0), (None, None), (0.0, None)):
        nothing = {"attn_fwd": DeclaredWork(flops_per_launch=flops, bytes_per_launch=nbytes)}
        assert _declared(k, nothing, None) is None, (flops, nbytes)
        assert _declared(k, {}, {"attn": {"flops": flops, "bytes": nbytes}}) is None, (flops, nbytes)
    assert _declared(k, {}, {"attn": {"flops": None, "bytes": 4e6}}) == (None, 4e6, "factory")
    # passed over, the custom case's kernel that holds the time gets the case's work
    work = CaseWork(flops=1000, bytes_min=100, formula="")
    zero = {"attn_fwd": DeclaredWork(flops_per_launch=0.0, bytes_per_launch=0.0)}
    kernels = [k, _summary("copy", 4.0)]
    declared = [_declared(s, zero, None) or (None, None, None) for s in kernels]
    assert _share_case_work(kernels, declared, work, 84.0)[0] == (1000.0, 100.0, "case")
