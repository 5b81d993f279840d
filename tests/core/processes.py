"""Real processes for the tests of a job's own processes (``attnprof.core.own_processes``): a family under one root
and a stranger, each killed by its own pid or group when the test ends; and an NVML module that lists given PIDs.

A plain module: tests import helpers from here, never from a conftest."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from attnprof.core.own_processes import process_table

# A root that forks a child, which forks a grandchild, and a daemon: a process whose parent exits at once, so that
# it is re-parented out of the root's tree and only its session ties it to the root. Prints the pids, then waits.
ROOT = """
import json, os, time

def hold():
    time.sleep(120)
    os._exit(0)

r, w = os.pipe()
child = os.fork()
if child == 0:
    grandchild = os.fork()
    if grandchild == 0:
        hold()
    os.write(w, b"%d\\n" % grandchild)
    hold()
middle = os.fork()
if middle == 0:
    daemon = os.fork()
    if daemon == 0:
        hold()
    os.write(w, b"%d\\n" % daemon)
    os._exit(0)
os.waitpid(middle, 0)
forks = os.fdopen(r)
first, second = int(forks.readline()), int(forks.readline())
print(json.dumps({"child": child, "grandchild_or_daemon": [first, second]}), flush=True)
hold()
"""

# A process unrelated to whoever starts this: it forks, the fork leaves for a session of its own, and the starter
# exits, so the fork descends from nobody the test knows. Prints its pid.
STRANGER = """
import os, time
pid = os.fork()
if pid == 0:
    os.setsid()
    quiet = os.open(os.devnull, os.O_WRONLY)
    os.dup2(quiet, 1)  # the starter's output ends when the starter does
    os.dup2(quiet, 2)
    time.sleep(120)
    os._exit(0)
print(pid, flush=True)
os._exit(0)
"""


@dataclass
class Family:
    root: int
    child: int
    grandchild: int
    daemon: int

    @property
    def members(self) -> list[int]:
        return [self.root, self.child, self.grandchild, self.daemon]


@contextlib.contextmanager
def family() -> Iterator[Family]:
    # A session leader, as the worker's sandbox starts a job's root.
    proc = subprocess.Popen([sys.executable, "-c", ROOT], stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert proc.stdout is not None
        said = json.loads(proc.stdout.readline())
        table = process_table()
        # The child's fork is the grandchild; the other is the daemon, whose parent is no longer the root's.
        a, b = said["grandchild_or_daemon"]
        grandchild, daemon = (a, b) if table[a].parent == said["child"] else (b, a)
        assert table[grandchild].parent == said["child"]
        yield Family(proc.pid, said["child"], grandchild, daemon)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # the root leads the group: every process it forked is in it
        proc.wait()


@contextlib.contextmanager
def stranger() -> Iterator[int]:
    done = subprocess.run([sys.executable, "-c", STRANGER], capture_output=True, text=True, check=True, timeout=30)
    pid = int(done.stdout)
    try:
        yield pid
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def fake_nvml(pids: list[int]) -> Any:
    """An NVML module that lists ``pids`` on the GPU and answers nothing else (every other reading is ``None``)."""
    return SimpleNamespace(
        NVML_CLOCK_SM=0,
        NVML_CLOCK_MEM=1,
        NVML_TEMPERATURE_GPU=0,
        nvmlDeviceGetComputeRunningProcesses=lambda handle: [SimpleNamespace(pid=p) for p in pids],
    )
