"""Counters kept by kernel identity: a real ``--counters ncu`` run on an H200 (``tests/data/h200/attnprof/
result-ncu.json``) fills the cache; the same run without counters reads every heavy kernel's class back from it; a
change of software, launch configuration or shapes is another kernel; a hostile cache file is read as data."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from pathlib import Path

from attnprof.core.counter_cache import (
    MAX_CACHE_BYTES,
    CounterCache,
    apply_cached,
    counters_path,
    coverage,
    kernel_identity,
    store_measured,
)
from attnprof.core.documents import ResultDocument, load_result
from attnprof.core.measure.counters import MIN_SHARE
from attnprof.core.report import counter_class, counters_line
from tests.profiling_support import DATA

NCU_RUN = DATA / "h200" / "attnprof" / "result-ncu.json"
MEASURED = datetime(2026, 12, 4, 10, 0, tzinfo=UTC)


def measured_run() -> ResultDocument:
    """The real run, its counters marked as read by ncu in that run (as ``merge_counters`` marks them now)."""
    doc = load_result(NCU_RUN)
    for case in doc.cases:
        for k in case.kernels:
            if k.counters is not None:
                k.counters_from, k.counters_measured_at = "ncu", MEASURED
    return doc


def bare(doc: ResultDocument) -> ResultDocument:
    """The same run as a later run without counters would record it."""
    out = copy.deepcopy(doc)
    out.run.counters = "cached"
    for case in out.cases:
        for k in case.kernels:
            k.counters, k.counter_bound, k.counters_from, k.counters_measured_at = None, None, None, None
    return out


def test_a_later_run_reads_every_heavy_kernels_class_from_the_cache(tmp_path: Path) -> None:
    doc = measured_run()
    cache = CounterCache.load(counters_path(tmp_path / "counters", doc.environment.testbed_key))
    stored = store_measured(doc.cases, cache, doc.environment)
    assert stored == sum(1 for c in doc.cases for k in c.kernels if k.counters is not None) > 0
    cache.save()

    later = bare(doc)
    reread = CounterCache.load(counters_path(tmp_path / "counters", doc.environment.testbed_key))
    todo = apply_cached(later.cases, reread, later.environment, MIN_SHARE)
    assert todo == []  # nothing left to replay under ncu
    with_class, heavy = coverage(later.cases, MIN_SHARE)
    assert heavy > 20 and with_class == heavy
    for before, after in zip(doc.cases, later.cases, strict=True):
        for k0, k1 in zip(before.kernels, after.kernels, strict=True):
            if (k1.share or 0) >= MIN_SHARE:
                # the same kernel in two cases (a forward kernel of fwd and of fwd_bwd) is one identity: it reads
                # one of its two measurements, which agree on the class
                assert k1.counter_bound == k0.counter_bound and k1.counters is not None
                assert k1.counters.keys() == (k0.counters or {}).keys()
                assert k1.counters_from == "cache" and k1.counters_measured_at == MEASURED
    line = counters_line(later)
    assert line == (
        f"counter class for {heavy} of {heavy} kernels >= 5% of a case (0 replayed under ncu now, "
        f"{heavy} from the cache); the model's guess for 0"
    )
    k = next(k for c in later.cases for k in c.kernels if k.counters_from == "cache")
    assert counter_class(k) == f"{k.counter_bound} (cached 2026-12-04)"


def test_other_software_launch_configuration_or_shapes_make_another_kernel(tmp_path: Path) -> None:
    doc = measured_run()
    case = next(c for c in doc.cases if c.kernels and c.kernels[0].counters)
    kernel = case.kernels[0]
    key = kernel_identity(kernel, case, doc.environment)
    assert key == kernel_identity(copy.deepcopy(kernel), copy.deepcopy(case), doc.environment)
    newer = doc.environment.model_copy(update={"software": {**doc.environment.software, "triton": "9.9.9"}})
    other_grid = kernel.model_copy(update={"grid": [1, 1, 1]})
    other_shape = case.model_copy(update={"params": {**case.params, "seq_q": 12345}})
    others = {
        kernel_identity(kernel, case, newer),
        kernel_identity(other_grid, case, doc.environment),
        kernel_identity(kernel, other_shape, doc.environment),
    }
    assert key not in others and len(others) == 3
    # a cache of the old software leaves the kernel to ncu
    cache = CounterCache(tmp_path / "c.json")
    store_measured(doc.cases, cache, doc.environment)
    later = bare(doc)
    later.environment = newer
    todo = apply_cached(later.cases, cache, later.environment, MIN_SHARE)
    assert len(todo) == len([c for c in later.cases if any((k.share or 0) >= MIN_SHARE for k in c.kernels)])


def test_a_hostile_cache_file_is_read_as_data(tmp_path: Path) -> None:
    path = tmp_path / "counters.json"
    good = measured_run()
    cache = CounterCache(path)
    store_measured(good.cases, cache, good.environment)
    cache.save()
    data = json.loads(path.read_text())
    keys = list(data["entries"])
    data["entries"][keys[0]]["counters"] = {"sm__throughput": "lots"}  # not a number
    data["entries"][keys[1]]["counter_bound"] = "teapot"  # not a class
    data["entries"]["../../etc/passwd"] = data["entries"][keys[2]]  # not an identity
    data["entries"][keys[3]]["extra"] = 1
    path.write_text(json.dumps(data))
    loaded = CounterCache.load(path)
    assert loaded.ignored == 4 and len(loaded.entries) == len(keys) - 3
    path.write_text("{not json")
    assert CounterCache.load(path).entries == {}
    path.write_text(" " * (MAX_CACHE_BYTES + 1))
    assert CounterCache.load(path).entries == {}
    path.write_text(json.dumps({"version": 999, "entries": data["entries"]}))
    assert CounterCache.load(path).entries == {}
    assert CounterCache.load(tmp_path / "missing.json").entries == {}


def test_the_file_is_named_by_testbed_and_never_leaves_its_folder(tmp_path: Path) -> None:
    assert counters_path(tmp_path, "h200-580.159-cuda") == tmp_path / "h200-580.159-cuda.json"
    hostile = counters_path(tmp_path, "../../x/../y")
    assert hostile.parent == tmp_path and "/" not in hostile.name


def test_a_run_without_counters_says_nothing_and_a_fresh_class_says_ncu() -> None:
    doc = measured_run()
    doc.run.counters = "none"
    assert counters_line(doc) is None
    k = next(k for c in doc.cases for k in c.kernels if k.counter_bound)
    assert counter_class(k) == f"{k.counter_bound} (ncu)"
    k.counters_from = None  # an older document: the class alone
    assert counter_class(k) == k.counter_bound


def test_a_failing_ncu_in_cached_mode_leaves_the_models_class_and_says_why(tmp_path: Path) -> None:
    """``--counters cached``: an ncu that fails (here a stand-in that exits 1) costs the run nothing but the counters
    it could not read; ``--counters ncu`` fails the run instead."""
    import pytest

    from attnprof.core.errors import CountersUnavailable
    from attnprof.core.measure.runner import ProfileOptions, SuiteSession
    from attnprof.core.suite import parse_suite

    fake = tmp_path / "ncu"
    fake.write_text("#!/bin/sh\necho 'ERR_NVGPUCTRPERM: no permission to read the counters' >&2\nexit 1\n")
    fake.chmod(0o755)
    suite = parse_suite(
        '[suite]\nname = "s"\n[[cases]]\nname = "a"\ntarget = "sdpa"\nq_heads = 2\nseq_q = 8\nhead_dim = 8\n'
        'dtype = "fp32"\n',
        source=str(tmp_path / "s.toml"),
    )
    later = bare(measured_run())
    for mode in ("cached", "ncu"):
        options = ProfileOptions(device="cpu", cache_dir=tmp_path / "cache", counters="none")
        session = SuiteSession(suite, options)
        session.options = ProfileOptions(device="cpu", cache_dir=tmp_path / "cache", counters=mode)
        session.ncu = str(fake)
        cases = copy.deepcopy(later.cases)
        if mode == "ncu":
            with pytest.raises(CountersUnavailable, match="ERR_NVGPUCTRPERM"):
                session._counters(cases, None)
            continue
        session._counters(cases, None)
        assert session.counters_note is not None and "ERR_NVGPUCTRPERM" in session.counters_note
        assert all(k.counters is None for c in cases for k in c.kernels)
