"""The profile worker's counter cache: one per project on the host, read-only in the jail, written by the worker from
the job's document after the job; a paired job's sides take no counters."""

from __future__ import annotations

from pathlib import Path

from attnprof.core.counter_cache import CounterCache, counters_path
from attnprof.core.documents import load_result
from attnprof.worker.profile import jail as jails
from attnprof.worker.profile.profile import ProfileConfig, keep_counters, profiler_argv, project_counters

NCU_RUN = Path(__file__).resolve().parents[1] / "data" / "h200" / "attnprof" / "result-ncu.json"


def config(tmp_path: Path, counters: str = "cached") -> ProfileConfig:
    return ProfileConfig(
        service_url="http://service",
        token="t",
        device="cuda",
        timeout_s=60,
        memory_limit_bytes=2**30,
        heartbeat_s=10,
        scratch_root=tmp_path / "jobs",
        cache_dir=tmp_path / "cache",
        output_lines=10,
        pass_env=(),
        bundle_bytes=1,
        bundle_unpacked_bytes=1,
        bundle_members=1,
        counters=counters,
    )


def test_an_unpaired_job_reads_its_projects_cache_and_a_paired_one_takes_no_counters(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    argv = profiler_argv(cfg, jails.JOB_ROOT, jails.PEAKS_DIR, counters_dir=jails.COUNTERS_DIR)
    assert argv[argv.index("--counters") + 1] == "cached"
    assert argv[argv.index("--counters-dir") + 1] == "/counters"
    assert "--counters" not in profiler_argv(cfg, jails.JOB_ROOT, jails.PEAKS_DIR, is_paired=True)
    assert "--counters" not in profiler_argv(config(tmp_path, "none"), jails.JOB_ROOT, jails.PEAKS_DIR)


def test_each_project_has_a_folder_of_its_own_named_by_a_hash(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    a, b = project_counters(cfg, "flash"), project_counters(cfg, "../flash")
    assert a is not None and b is not None and a != b and a.is_dir() and b.is_dir()
    assert a.parent == b.parent == tmp_path / "cache" / "counters-by-project"
    assert project_counters(cfg, None) is None and project_counters(config(tmp_path, "none"), "flash") is None


def test_the_worker_keeps_what_ncu_read_for_that_project_only(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    doc = load_result(NCU_RUN)
    for case in doc.cases:
        for k in case.kernels:
            if k.counters is not None:
                k.counters_from = "ncu"
    mine, theirs = project_counters(cfg, "mine"), project_counters(cfg, "theirs")
    assert mine is not None and theirs is not None
    stored = keep_counters(mine, doc)
    assert stored > 20
    kept = CounterCache.load(counters_path(mine, doc.environment.testbed_key))
    assert len(kept.entries) > 0
    assert not counters_path(theirs, doc.environment.testbed_key).exists()
    # counters the job did not read in this run (from the cache, or an older document's) are not stored again
    for case in doc.cases:
        for k in case.kernels:
            k.counters_from = "cache" if k.counters is not None else None
    assert keep_counters(theirs, doc) == 0
    assert keep_counters(None, doc) == 0
