"""Whose is a leftover: the tag a worker puts in the names of what it makes on the host (attempt folders, job
cgroups), and whether the worker behind a tag is gone.

A pid alone does not name a worker: workers in containers of their own share a host's scratch volume or cgroup
hierarchy but not a PID namespace, and a pid another container's worker holds reads as dead from here. So the tag is
the pid and the PID namespace's inode (``p<pid>n<inode>``), and only a tag of this worker's own namespace whose
process is gone is ever reaped: never another namespace's, alive or not.
"""

from __future__ import annotations

import functools
import os
import re

TAG = re.compile(r"p(\d+)n(\d+)")


@functools.cache
def _namespace() -> int:
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


def tag() -> str:
    """This worker's tag: its pid and its PID namespace."""
    return f"p{os.getpid()}n{_namespace()}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def gone(pid: int, namespace: int) -> bool:
    """Whether the worker of this tag is known to be gone: of this worker's own PID namespace, and not running."""
    return namespace == _namespace() and not _alive(pid)
