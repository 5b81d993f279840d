"""Which processes are a job's own: the one definition behind every judgement of "another process on the GPU".

A process is the job's own when it is the job's root process, descends from it (its chain of parents, read from
``/proc``, reaches the root), or belongs to the session the root leads, or descends from one that does. The session
keeps a process that double-forked to leave the tree (a daemon re-parented to init). Any other process is a stranger,
and a stranger on the GPU makes a run suspect (``measure.environment``).

The root, by path:

- ``attnprof profile``: the profiler's own process;
- ``attnprof paired``: the coordinator (``measure.paired``), which starts one process per source tree and tells each its
  pid (``python -m attnprof.core.measure.side --job-root PID``), so that each side counts the other side, its sibling,
  as the job's own;
- a job on a GPU worker: the process the worker's sandbox starts, a session leader. In the jail the profiler sees
  only its own PID namespace and judges nothing; the worker, outside it, judges with this definition
  (``attnprof.worker.profile.sandbox.tree``, ``attnprof.worker.profile.device.GpuWatch``).

Only a session the root leads counts. Started from a shell, the profiler is in the shell's session with whatever
else that terminal started (a training run in the background), which is no part of the job.

Torch-free, standard library only: the GPU worker, which never imports torch, reads it too.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterable, Mapping
from typing import NamedTuple

__all__ = ["Process", "other_processes", "own_processes", "process_table", "strangers"]

_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


class Process(NamedTuple):
    """One line of ``/proc/PID/stat``, the fields the job's tree and its memory are read from."""

    parent: int  # parent pid
    session: int  # session id: the pid of the session's leader
    resident_bytes: int  # resident memory, bytes (what the worker's memory watchdog sums)


def process_table() -> dict[int, Process]:
    """Every process this one can read in ``/proc``, by pid; empty where there is no ``/proc``."""
    out: dict[int, Process] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return out
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                raw = f.read().decode("ascii", "replace")
        except OSError:  # it exited meanwhile
            continue
        # The command name is in parentheses and may hold spaces: the fields that follow come after the last ')'.
        fields = raw[raw.rfind(")") + 2 :].split()
        try:
            out[int(name)] = Process(int(fields[1]), int(fields[3]), int(fields[21]) * _PAGE_BYTES)
        except (IndexError, ValueError):
            continue
    return out


def own_processes(root: int, table: Mapping[int, Process] | None = None, *, alive: bool = True) -> set[int]:
    """The pids of ``root``'s job in ``table`` (default: read now): ``root``, every process of the session it leads,
    and every descendant of those.

    ``alive=False`` once ``root`` was reaped: its pid may then name another process, so only the session (whose id
    the kernel does not hand out again while a member lives) and its descendants count.
    """
    table = process_table() if table is None else table
    found = {pid for pid, entry in table.items() if entry.session == root}
    if alive:
        found.add(root)
    children: dict[int, list[int]] = {}
    for pid, entry in table.items():
        children.setdefault(entry.parent, []).append(pid)
    todo = list(found)
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def strangers(pids: Iterable[int], own: Collection[int]) -> list[int]:
    """Those of ``pids`` (as the GPU's driver lists them) that are not in ``own``, sorted, each once."""
    return sorted(set(pids) - set(own))


def other_processes(pids: Iterable[int], root: int, table: Mapping[int, Process] | None = None) -> list[int]:
    """Those of ``pids`` that are not ``root``'s job's own (``table``: the processes to judge by, default read now;
    a recorded one judges what a GPU listed elsewhere)."""
    return strangers(pids, own_processes(root, table))
