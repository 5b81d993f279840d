"""A job's own processes (``attnprof.core.own_processes``), judged with real processes on the CPU: a root's children,
grandchildren and a daemon that double-forked out of its tree are its own, a process outside its tree is a stranger;
the GPU health judgement (NVML faked, listing those PIDs) counts only the stranger, for ``attnprof profile`` (this
process is the root) and for both sides of ``attnprof paired`` started as its coordinator starts them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from attnprof.core.measure import runner, side
from attnprof.core.measure.environment import Nvml, suspect_reasons
from attnprof.core.measure.paired import PairedOptions, _ready, _start
from attnprof.core.own_processes import Process, other_processes, own_processes, process_table, strangers
from tests.core.processes import fake_nvml, family, stranger
from tests.profiling_support import suite_text

CASE = '[[cases]]\nname = "s"\ntarget = "sdpa"\nq_heads = 2\nseq_q = 16\nhead_dim = 16\n'

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="the process tree is read from /proc")


def test_children_grandchildren_and_a_daemon_of_the_session_are_the_roots_and_an_unrelated_process_is_not() -> None:
    with family() as fam, stranger() as other:
        table = process_table()
        # The daemon really left the tree: its parent is none of the family's (init, or a subreaper above us).
        assert table[fam.daemon].parent not in fam.members
        assert table[fam.daemon].session == fam.root
        assert table[other].session == other != fam.root
        own = own_processes(fam.root, table)
        assert set(fam.members) <= own
        assert other not in own and os.getpid() not in own
        assert other_processes([*fam.members, other], fam.root, table) == [other]


def test_the_health_judgement_counts_only_the_stranger_among_the_pids_nvml_lists() -> None:
    with family() as fam, stranger() as other:
        listed = [*fam.members, other]
        health = Nvml(handle=object(), module=fake_nvml(listed), job_root=fam.root).health()
        assert health.gpu_pids == sorted(listed)
        assert health.other_processes == 1
        assert suspect_reasons(health, health) == [
            "1 other process(es) on the GPU at start",
            "1 other process(es) on the GPU at end",
        ]
        # Judged by the job's root and nothing else: from the other's side, the whole family is others.
        seen_by_stranger = Nvml(handle=object(), module=fake_nvml(listed), job_root=other).health()
        assert seen_by_stranger.other_processes == len(fam.members)


def test_attnprof_profile_is_its_own_root_so_its_children_are_not_others() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        with stranger() as other:
            listed = [os.getpid(), child.pid, other]
            health = Nvml(handle=object(), module=fake_nvml(listed)).health()
            assert health.other_processes == 1
            alone = Nvml(handle=object(), module=fake_nvml([os.getpid(), child.pid])).health()
            assert alone.other_processes == 0 and suspect_reasons(alone, alone) == []
    finally:
        child.kill()
        child.wait()


def test_in_a_pid_namespace_of_its_own_the_profiler_judges_nothing() -> None:
    with stranger() as other:
        health = Nvml(handle=object(), module=fake_nvml([other]), own_pid_namespace=True).health()
        assert health.gpu_pids == [other] and health.other_processes is None


def test_a_recorded_table_judges_what_a_gpu_listed_elsewhere() -> None:
    # What a GPU host showed (pids from NVML, the process table beside them): a coordinator started from a shell and
    # its two sides; a training run started from the same shell, in the shell's session; a daemon of a job that led
    # its own session.
    shell, coordinator, base, head, training = 150, 200, 201, 202, 300
    table = {
        shell: Process(1, shell, 0),
        coordinator: Process(shell, shell, 0),
        base: Process(coordinator, shell, 0),
        head: Process(coordinator, shell, 0),
        training: Process(shell, shell, 0),
    }
    # Each side judges by the coordinator: its sibling is the job's own, the training run is not, though it shares
    # the shell's session (a session the root does not lead is no part of the job).
    assert other_processes([base, head, training], coordinator, table) == [training]
    job, daemon = 400, 401
    led = {**table, job: Process(shell, job, 0), daemon: Process(1, job, 0)}
    assert other_processes([job, daemon, training], job, led) == [training]
    # The pids a worker saw on the GPU, against the job's tree it saw: the same rule.
    assert strangers([977, 4100, 4100], {4000, 4100}) == [977]


def test_a_side_is_told_the_coordinator_as_its_root_and_counts_its_sibling_as_its_own(
    tmp_path: Path, peaks_cache: Path
) -> None:
    suite = tmp_path / "attnprof.toml"
    suite.write_text(suite_text("own", CASE))
    roots = {"base": tmp_path / "base", "head": tmp_path / "head"}
    for root in roots.values():
        root.mkdir()
    options = PairedOptions(device="cpu", cache_dir=peaks_cache)
    sides: dict[str, Any] = {}
    try:
        for name in ("base", "head"):
            sides[name] = _start(name, suite, roots, options)
        for started in sides.values():
            _ready(started)  # the side read its arguments and opened its session: it accepted --job-root
        pids = {name: s.process.pid for name, s in sides.items()}
        with stranger() as other:
            listed = [*pids.values(), other]
            for name, pid in pids.items():
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
                root = int(argv[argv.index("--job-root") + 1])
                assert root == os.getpid(), name  # the coordinator: this process
                sibling = pids["head" if name == "base" else "base"]
                assert other_processes([sibling, other], root) == [other]
                health = Nvml(handle=object(), module=fake_nvml(listed), job_root=root).health()
                assert health.other_processes == 1, name
    finally:
        for started in sides.values():
            started.commands.close()  # a side ends when its commands end
            started.replies.close()
            try:
                started.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                started.process.kill()
                started.process.wait()


def test_the_side_passes_the_root_it_is_told_to_its_session(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, runner.ProfileOptions] = {}

    class Stop(Exception):
        pass

    def session(suite: Any, options: runner.ProfileOptions, **kw: Any) -> Any:
        seen["options"] = options
        raise Stop

    monkeypatch.setattr(runner, "SuiteSession", session)
    suite = tmp_path / "attnprof.toml"
    suite.write_text(suite_text("own", CASE))
    cmd_read, cmd_write = os.pipe()
    reply_read, reply_write = os.pipe()
    argv = ["--suite", str(suite), "--cmd-fd", str(cmd_read), "--reply-fd", str(reply_write)]
    assert side.main([*argv, "--device", "cpu", "--job-root", "4242"]) == 2
    with os.fdopen(reply_read) as replies:
        os.close(cmd_write)
        assert json.loads(replies.readline())["ready"] is False
    assert seen["options"].job_root == 4242


def test_what_nvml_listed_on_an_h100_during_attnprof_ab_counts_only_the_stranger() -> None:
    # Recorded by bench/own_processes_gpu.py: a CUDA process started first from the same shell (the same session),
    # then `python -m attnprof.core ab`; NVML listed the stranger and both sides, sampled with the process table.
    record = json.loads((Path(__file__).resolve().parents[1] / "data" / "h100" / "own-processes.json").read_text())
    coordinator, other = record["coordinator"], record["stranger"]
    assert record["samples"]
    for sample in record["samples"]:
        table = {int(pid): Process(parent, session, 0) for pid, (parent, session) in sample["table"].items()}
        sides = [pid for pid in sample["nvml_pids"] if pid != other]
        assert len(sides) == 2 and all(table[pid].parent == coordinator for pid in sides)
        assert table[other].session == table[coordinator].session  # one shell's session: still a stranger
        assert other_processes(sample["nvml_pids"], coordinator, table) == [other]
        # Judged from the stranger's side, both of the job's sides are others.
        assert other_processes(sample["nvml_pids"], other, table) == sides
    # And each side's own document, written on the GPU, counted exactly the stranger at start and at end.
    for side_doc in record["sides"].values():
        assert side_doc["other_processes"] == [1, 1]
        assert all(other in pids for pids in side_doc["gpu_pids"])
