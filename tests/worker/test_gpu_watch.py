"""The worker judges a jailed job's GPU processes by the profiler's definition of the job's own
(``attnprof.core.own_processes``): the job's tree (``sandbox.tree``) is that definition, and ``GpuWatch`` names only
what lies outside it. Real processes on the CPU; NVML faked, listing their PIDs."""

from __future__ import annotations

from pathlib import Path

import pytest

from attnprof.core.own_processes import own_processes, process_table
from attnprof.worker.profile import sandbox
from attnprof.worker.profile.device import GpuWatch
from tests.core.processes import fake_nvml, family, stranger

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="the process tree is read from /proc")


def test_the_jobs_tree_is_the_profilers_own_processes_and_the_watch_names_only_the_stranger() -> None:
    with family() as fam, stranger() as other:
        table = process_table()
        tree = sandbox.tree(fam.root, table)
        assert tree == own_processes(fam.root, table)
        assert set(fam.members) <= tree and other not in tree
        watch = GpuWatch(interval_s=0.0)
        watch._nvml, watch._handle = fake_nvml([*fam.members, other]), object()
        watch(tree)
        assert watch.foreign(frozenset(tree)) == [other]
        watch.close()
