"""One side of a paired run: a process that imports one source tree only and profiles rounds when told.

``python -m attnprof.core.measure.side`` is started by the paired run's coordinator (``measure.paired``) with its
tree as working directory and first ``PYTHONPATH`` entry, so a custom target's ``package.module`` resolves in that
tree and no module of the other tree is ever visible. It opens the device once (``SuiteSession``), answers
``ready``, then reads one JSON command per line from ``--cmd-fd`` and answers one JSON line on ``--reply-fd``:

- ``{"op": "prepare", "case": ID}``: build the case (again: its tensors land elsewhere each round) and warm it up;
- ``{"op": "time", "case": ID}``: time one round of the prepared case (the first round also traces it and checks its
  accuracy), then drop it; with ``"warmup": true`` the round is timed and answered but not recorded (a warm-up round,
  timed only to see whether the device has settled);
- ``{"op": "finish", "out": PATH}``: pool every case's rounds into the result document, write it, exit.

Building is split from timing so that the coordinator can have both sides ready before either times: the two timed
windows of a pair then follow each other within milliseconds, where a round with its build and warm-up takes a tenth
of a second or more, long enough for a compute-bound load to move the GPU's clocks (measured on the H200:
bench/reports/h200-paired.md). A round's answer carries the round's median (microseconds), its sample count and the
median SM clock (MHz, CUDA), or the case's failure; every answer to ``prepare`` and ``time`` carries ``s``, the
seconds the command took (a case's device-time budget is weighed by them). Between rounds the side returns its cached
device memory, so the side that is not timing holds none of what the other may need. The user's code may print
anything to stdout: the commands and answers use pipes of their own.

``--job-root PID`` names the job's root process, the coordinator: the side judges "another process on the GPU" by
it (``attnprof.core.own_processes``), so the other side, a child of the same coordinator, is the job's own and a
process outside the coordinator's tree still counts. Without it the side's own process is the root, and its sibling
would read as a stranger.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any


def _round_answer(record: Any) -> dict[str, Any]:
    from attnprof.core.measure.case import _Pending, _Timing

    if isinstance(record, _Pending | _Timing):
        last = (record.timing if isinstance(record, _Pending) else record).last
        assert last is not None
        clocks = [c for c in (last.clocks_mhz or []) if c]
        return {
            "ok": True,
            "median_us": statistics.median(last.samples_us),
            "samples": len(last.samples_us),
            "mhz": statistics.median(clocks) if clocks else None,
        }
    error = record.error
    return {
        "ok": False,
        "status": record.status,
        "error": f"{error.type}: {error.message}"[:2000] if error else record.status,
    }


def serve(args: argparse.Namespace) -> int:
    from attnprof.core.measure.runner import ProfileOptions, SuiteSession
    from attnprof.core.suite import load_suite

    commands = os.fdopen(args.cmd_fd, "r", encoding="utf-8")
    replies = os.fdopen(args.reply_fd, "w", encoding="utf-8", buffering=1)

    def answer(message: dict[str, Any], started: float | None = None) -> None:
        if started is not None:  # the seconds the command took: the coordinator weighs a case's budget by them
            message = {**message, "s": round(time.perf_counter() - started, 6)}
        replies.write(json.dumps(message) + "\n")
        replies.flush()

    try:
        suite = load_suite(args.suite)
        options = ProfileOptions(
            device=args.device,
            trace_dir=Path(args.trace_dir) if args.trace_dir else None,
            cache_dir=Path(args.cache_dir) if args.cache_dir else None,
            seed=args.seed,
            command=args.command,
            own_pid_namespace=args.pid_namespace,
            job_root=args.job_root,
        )
        session = SuiteSession(suite, options, round_config=suite.timing.paired_round_config())
    except Exception as exc:  # reported to the coordinator, which names the side
        answer({"ready": False, "error": f"{type(exc).__name__}: {exc}"})
        return 2
    specs = {spec.id: spec for spec in suite.cases}
    answer({"ready": True, "mode": session.device, "testbed": session.environment.testbed_key})
    release = _releaser(session.device)
    for line in commands:
        message = json.loads(line)
        op = message.get("op")
        started = time.perf_counter()
        if op == "prepare":
            failed = session.prepare(specs[message["case"]])
            answer({"ok": True} if failed is None else _round_answer(failed), started)
            continue  # the prepared case holds its memory until it is timed
        if op == "time":
            spec = specs[message["case"]]
            timed = session.time_unrecorded(spec) if message.get("warmup") else session.time_prepared(spec)
            answer(_round_answer(timed), started)
        elif op == "finish":
            doc = session.document()
            Path(message["out"]).write_text(doc.to_json() + "\n")
            answer({"written": message["out"], "run": doc.run.id})
            return 0
        else:
            answer({"ok": False, "status": "failed", "error": f"unknown command {op!r}"})
            continue
        release()
    return 3  # the coordinator went away without a finish


def _releaser(device: str) -> Any:
    if device != "cuda":
        return lambda: None
    import torch

    return torch.cuda.empty_cache


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m attnprof.core.measure.side")
    parser.add_argument("--suite", required=True)
    parser.add_argument("--cmd-fd", type=int, required=True)
    parser.add_argument("--reply-fd", type=int, required=True)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--trace-dir")
    parser.add_argument("--cache-dir")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--command")
    parser.add_argument("--pid-namespace", action="store_true")
    parser.add_argument("--job-root", type=int, help="pid of the job's root process (the coordinator)")
    args = parser.parse_args(argv)
    # The side's tree is the working directory: custom targets import from it (``targets._custom``).
    return serve(args)


if __name__ == "__main__":
    # Ends without the interpreter's teardown once the document is written (as `attnprof profile` does).
    from attnprof.core.process_exit import exit_with

    exit_with(lambda: sys.exit(main()))
