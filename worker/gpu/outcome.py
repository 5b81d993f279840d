"""What one attempt's subprocess amounts to: a result to upload, or a failure with a reason a person can act on.

The rule: a suite that ran is a result, even with failed cases (the comparison fails a case that ran in the
baseline and fails now, naming its error). A suite that could not run at all is a failure of the job:

- stopped at the wall-clock limit: ``timed_out``;
- stopped by the host-memory watchdog: out of host memory (a GPU out-of-memory is a case error instead:
  PyTorch raises it inside the case, and the case is recorded as failed);
- bad input (exit code 2: the suite file or the device);
- a crash (a signal, or an exit without a result document);
- a document in which no case ran and at least one failed: the code could not be imported or every case
  raised. Each case's error is in the reason.

A failure caused by the host rather than the job (a download that failed) is retried; these are not: running
the same code again gives the same answer.
"""

from __future__ import annotations

import json
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from worker.gpu.sandbox import Finished

REASON_MAX_CHARS = 9000  # the service takes 10,000
_CASES_NAMED = 8


@dataclass(frozen=True)
class JobFailure:
    """A failed attempt: ``reason`` for people, ``timed_out`` for the state, ``retry`` when the host is to blame."""

    reason: str
    timed_out: bool = False
    retry: bool = False


def _mib(n: int) -> str:
    return f"{n / (1024 * 1024):,.0f} MiB"


def _seconds(s: float) -> str:
    return f"{s:,.0f} s" if s >= 10 else f"{s:.1f} s"


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def with_output(head: str, tail: list[str]) -> str:
    """``head`` and then the last lines of output, cut to fit the service's limit (the head always stays)."""
    if not tail:
        return head[:REASON_MAX_CHARS]
    lines = list(tail)
    while True:
        text = f"{head}\nlast {len(lines)} line(s) of output:\n" + "\n".join(lines)
        if len(text) <= REASON_MAX_CHARS or len(lines) == 1:
            return text[:REASON_MAX_CHARS]
        lines = lines[1:]


def read_document(path: Path) -> dict[str, Any] | None:
    """The result document the subprocess wrote, or ``None`` (absent, unreadable, not a JSON object)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _case_errors(cases: list[dict[str, Any]]) -> tuple[list[str], bool]:
    errors = []
    imports = False
    for c in cases:
        if c.get("status") != "failed":
            continue
        err = c.get("error") or {}
        kind = str(err.get("type") or "error")
        imports = imports or kind in ("ImportError", "ModuleNotFoundError")
        errors.append(f"{c.get('id', '?')}: {kind}: {err.get('message') or 'no message'}")
    return errors, imports


def decide(
    finished: Finished, document: dict[str, Any] | None, *, timeout_s: float, memory_limit_bytes: int
) -> dict[str, Any] | JobFailure:
    """The result document to upload, or the ``JobFailure`` to report. ``finished.stopped == "cancelled"`` is the
    caller's to handle (nothing is reported for a cancelled job)."""
    tail = finished.tail
    if finished.stopped == "timeout":
        head = (
            f"timed out: the suite ran for more than the worker's wall-clock limit of {_seconds(timeout_s)} "
            "and was stopped"
        )
        return JobFailure(with_output(head, tail), timed_out=True)
    if finished.stopped == "memory":
        head = (
            f"out of host memory: the profiling processes held {_mib(finished.peak_rss_bytes)} of resident memory, "
            f"over the worker's limit of {_mib(memory_limit_bytes)}, and were stopped"
        )
        return JobFailure(with_output(head, tail))
    code = finished.exit_code
    if code == 2:
        return JobFailure(with_output("the suite could not run (bad input, exit code 2)", tail))
    if code is not None and code < 0:
        head = f"the profiler crashed: killed by {_signal_name(code)} (exit code {code})"
        return JobFailure(with_output(head, tail))
    if document is None:
        return JobFailure(with_output(f"the profiler exited with code {code} and wrote no result document", tail))
    cases = [c for c in document.get("cases", []) if isinstance(c, dict)]
    ran = any(c.get("status") == "ok" for c in cases)
    errors, imports = _case_errors(cases)
    if errors and not ran:
        what = "the suite's code could not be imported" if imports else f"every case failed ({len(errors)})"
        named = "; ".join(errors[:_CASES_NAMED]) + ("; …" if len(errors) > _CASES_NAMED else "")
        return JobFailure(with_output(f"{what}: {named}", tail))
    return document


def note_foreign_gpu_processes(document: dict[str, Any], pids: list[int]) -> None:
    """Mark a jailed job's run suspect (in place) when the worker saw processes on the GPU that were not the job's
    while it ran (``gpu.GpuWatch``); the profiler in its PID namespace counted none itself."""
    run = document.get("run")
    if pids and isinstance(run, dict):
        shown = ", ".join(str(p) for p in pids[:8]) + (", …" if len(pids) > 8 else "")
        reason = f"{len(pids)} other process(es) on the GPU while the job ran (host PIDs {shown})"
        run["suspect"] = [*(run.get("suspect") or []), reason]
