"""What one attempt's subprocess amounts to: a result to upload, or a failure with a reason a person can act on.

The rule: a suite that ran is a result, even with failed cases (the comparison fails a case that ran in the
baseline and fails now, naming its error). A suite that could not run at all is a failure of the job:

- stopped at the wall-clock limit: ``timed_out``;
- stopped at the memory limit (the job's cgroup's, which counts memfd, tmpfs and dirty page cache too, or the
  watchdog's): out of host memory (a GPU out-of-memory is a case error instead: PyTorch raises it inside the case,
  and the case is recorded as failed);
- stopped for printing more than the output limit, or for filling its folder past the disk quota;
- bad input (exit code 2: the suite file or the device);
- a crash (a signal, or an exit without a result document);
- a document its model refuses (the service would refuse it too, and the same code writes it again);
- a document in which no case ran and at least one failed: the code could not be imported or every case
  raised. Each case's error is in the reason.

A failure caused by the host rather than the job (a download that failed) is retried; these are not: running
the same code again gives the same answer.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass

from attnprof.core.documents import Case, ResultDocument, decode_json, parse_result
from attnprof.core.errors import DocumentError
from attnprof.worker.profile import handback
from attnprof.worker.profile.sandbox import Finished

REASON_MAX_CHARS = 9000  # the service takes 10,000
_CASES_NAMED = 8
# The most a result document may hold as the job hands it back, in bytes (gzip inflated within the same bound): the
# service's own limit on a JSON body (ATTNPROF_LIMITS__JSON_BODY_BYTES, 32 MiB), past which it could not be stored.
# Parsing JSON costs the worker several times the document's size, up to ~28x for a document of empty arrays.
DOCUMENT_MAX_BYTES = 32 * 1024 * 1024


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


def read_json(folder: handback.Folder, path: str) -> object:
    """The JSON value of ``path`` in the job's folder (plain or gzip), read as hostile input (``handback``: no link
    followed, a regular file only, within ``DOCUMENT_MAX_BYTES`` read and inflated); ``None`` when absent;
    ``DocumentError`` naming ``/job/...`` when it is not one."""
    shown = f"{folder.shown}/{path}"
    try:
        raw = folder.read(path, max_bytes=DOCUMENT_MAX_BYTES)
    except handback.Missing:
        return None
    except handback.Refused as exc:
        raise DocumentError(str(exc)) from None
    return decode_json(raw, source=shown, max_bytes=DOCUMENT_MAX_BYTES)


def read_document(folder: handback.Folder, path: str) -> ResultDocument | DocumentError | None:
    """The result document the subprocess wrote at ``path`` in the job's folder, read through its model (the one
    validation on this side); ``None`` when it wrote none; or the ``DocumentError`` saying why what it wrote is not
    one (not a regular file, too big, not JSON, or the first fields the model refuses), named as the job sees it."""
    try:
        data = read_json(folder, path)
        if data is None:
            return None
        return parse_result(data, source=f"{folder.shown}/{path}")
    except DocumentError as exc:
        return exc


def _case_errors(cases: list[Case]) -> tuple[list[str], bool]:
    errors = []
    imports = False
    for c in cases:
        if c.status != "failed":
            continue
        kind = (c.error.type if c.error else "") or "error"
        imports = imports or kind in ("ImportError", "ModuleNotFoundError")
        errors.append(f"{c.id}: {kind}: {(c.error.message if c.error else '') or 'no message'}")
    return errors, imports


def decide(
    finished: Finished,
    document: ResultDocument | DocumentError | None,
    *,
    timeout_s: float,
    memory_limit_bytes: int,
    disk_limit_bytes: int = 0,
    output_limit_bytes: int = 0,
    max_processes: int = 0,
) -> ResultDocument | JobFailure:
    """The result document to upload, or the ``JobFailure`` to report. ``finished.stopped == "cancelled"`` is the
    caller's to handle (nothing is reported for a cancelled job)."""
    tail = finished.tail
    if finished.stopped == "output":
        head = (
            f"too much output: the job printed more than the worker's limit of {_mib(output_limit_bytes)} "
            "(stdout and stderr together) and was stopped"
        )
        return JobFailure(with_output(head, tail))
    if finished.stopped == "disk":
        head = (
            f"out of disk: the job's folder (/job) reached the worker's quota of {_mib(disk_limit_bytes)} "
            f"({_mib(finished.disk_bytes)} held) and the job was stopped"
        )
        return JobFailure(with_output(head, tail))
    if finished.stopped == "timeout":
        head = (
            f"timed out: the suite ran for more than the worker's wall-clock limit of {_seconds(timeout_s)} "
            "and was stopped"
        )
        return JobFailure(with_output(head, tail), timed_out=True)
    if finished.stopped == "memory":
        head = (
            f"out of host memory: the job reached the worker's limit of {_mib(memory_limit_bytes)} (its processes, "
            f"and any memfd, /tmp, /dev/shm and /job files they wrote: {_mib(finished.peak_rss_bytes)} at the last "
            "check) and was stopped"
        )
        return JobFailure(with_output(head, tail))
    decided = _ran(finished, document)
    if isinstance(decided, JobFailure) and finished.processes_refused:
        note = (
            f"; the job reached its limit of {max_processes:,} processes and threads "
            f"({finished.processes_refused:,} refused)"
        )
        head, _, rest = decided.reason.partition("\n")
        return JobFailure(head + note + ("\n" + rest if rest else ""), timed_out=decided.timed_out)
    return decided


def _ran(finished: Finished, document: ResultDocument | DocumentError | None) -> ResultDocument | JobFailure:
    tail = finished.tail
    code = finished.exit_code
    if code == 2:
        return JobFailure(with_output("the suite could not run (bad input, exit code 2)", tail))
    if code is not None and code < 0:
        head = f"the profiler crashed: killed by {_signal_name(code)} (exit code {code})"
        return JobFailure(with_output(head, tail))
    if document is None:
        return JobFailure(with_output(f"the profiler exited with code {code} and wrote no result document", tail))
    if isinstance(document, DocumentError):
        head = f"the profiler exited with code {code} and wrote no valid result document: {document}"
        return JobFailure(with_output(head, tail))
    ran = any(c.status == "ok" for c in document.cases)
    errors, imports = _case_errors(document.cases)
    if errors and not ran:
        what = "the suite's code could not be imported" if imports else f"every case failed ({len(errors)})"
        named = "; ".join(errors[:_CASES_NAMED]) + ("; …" if len(errors) > _CASES_NAMED else "")
        return JobFailure(with_output(f"{what}: {named}", tail))
    return document


def note_foreign_gpu_processes(document: ResultDocument, pids: list[int]) -> None:
    """Mark a jailed job's run suspect (in place) when the worker saw processes on the GPU that were not the job's
    while it ran (``gpu.GpuWatch``); the profiler in its PID namespace counted none itself."""
    if pids:
        shown = ", ".join(str(p) for p in pids[:8]) + (", …" if len(pids) > 8 else "")
        reason = f"{len(pids)} other process(es) on the GPU while the job ran (host PIDs {shown})"
        document.run.suspect = [*(document.run.suspect or []), reason]
