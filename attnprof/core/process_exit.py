"""How a process of ours that has loaded torch ends: at once, once its output is written (``exit_with``).

Used by the command line and by a paired run's sides (``measure.side``), whose interpreter teardown (torch's, CUDA's,
Inductor's compile workers') would otherwise hold the device and the job for seconds after the work is done.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
from collections.abc import Callable
from typing import NoReturn


def exit_with(run: Callable[[], object]) -> NoReturn:
    """Run a command line (``run`` raises ``SystemExit``, as Typer's apps do) and end the process with its code.

    Once torch is loaded, the process ends without the interpreter's teardown, which took 7-10 s after a
    profiling run with warm compile caches on an H200 (docs/findings.md#the-end-of-a-profiling-process); nothing of ours
    needs it: the result and the traces are written and closed before the verb returns. The processes it started are
    killed first: Inductor's compile workers, which that teardown would have stopped (6-7 s of it, shut down
    politely), and which left alone would outlive it by up to a minute. Standard output and error are flushed.
    """
    try:
        run()
        code: int | str | None = 0
    except SystemExit as exc:
        code = exc.code
    if "torch" not in sys.modules:
        sys.exit(code)
    if isinstance(code, str):
        print(code, file=sys.stderr)
    _kill_descendants()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code if isinstance(code, int) else 0 if code is None else 1)


def _descendants(pid: int) -> list[int]:
    """The processes below ``pid`` (children first), from /proc; empty where there is no /proc."""
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:  # ended meanwhile
            continue
        # pid (comm) state ppid ...: comm may hold spaces and parentheses, so split after its last ')'.
        ppid = int(stat[stat.rindex(b")") + 2 :].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    found: list[int] = []
    queue = [pid]
    while queue:
        for child in children.get(queue.pop(0), []):
            found.append(child)
            queue.append(child)
    return found


def _kill_descendants() -> None:
    for pid in _descendants(os.getpid()):
        with contextlib.suppress(OSError):  # ended meanwhile
            os.kill(pid, signal.SIGKILL)
