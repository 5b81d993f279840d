"""Does drawing each round's memory afresh narrow the spread between processes? The suite profiled both ways.

    PYTHONPATH=. python3 bench/h200_redraw.py SUITE... --variant VARIANT [--case GLOB ...]
        [--rounds R] [--label NAME] --out DIR

``bench/h200_workspace.py`` found that some kernels' levels follow where their tensors land in physical memory. A
profile run builds each case again in each round, its tensors taken from PyTorch's caching allocator; here the run
is made both ways:

  reuse    the profiler as it is: each round's tensors come from the blocks the allocator holds, each case-round
           on a stream of its own (before the runner took that up, 2026-12-03, every round on the process's
           current stream: the committed data's ``reuse`` is what the runner was at the commit its provenance names)
  redraw   the allocator's cached blocks given back to the driver (``torch.cuda.empty_cache``) right before each
           round's build, so that its tensors come fresh from the driver (what a paired run's side processes do
           after each round)
  persist  what a process otherwise keeps for its whole life drawn again before each round's build: the flush
           buffer allocated anew behind a pad of random size (0-512 MiB, held until the next draw) while the old
           one is still held, and cuBLAS's workspaces freed (``torch._C._cuda_clearCublasWorkspaces``); the
           allocator may hand the buffer a block freed in an earlier round, so it lands on one of several places,
           not always a new one; the case's own tensors come from the allocator as in ``reuse``
  stream   each case-round (its build, warm-up and timing) on a stream of its own: a new ``torch.cuda.Stream()``,
           which PyTorch hands out from its pool of streams in turn. The runner does this itself now; before, it ran
           every round on the process's current stream, and the committed data's ``stream`` is measured against that
  current-stream
           every round on the process's current stream (the default stream): the runner before it took up a stream
           per case-round, against ``reuse`` now
  one-stream
           every round on one stream from the pool, the same for the whole process: a non-default stream, nothing
           else changed (against the current stream: is it the default stream?)
  round-stream
           a new stream from the pool for each round of the suite, shared by every case of that round (against
           ``stream``: is it a new stream per case-round, or per stretch of time?)
  shuffle  each round's tensors placed anew: right before each round's build the allocator's cache is emptied and a
           pad of random size (0-62 MiB in 2 MiB steps, what ``h200_workspace.py``'s rebuilt rounds draw) allocated
           and held until the next round's, so that the build lands on other memory; a process's median then pools
           as many placements as it has rounds, where ``reuse`` mostly lands every round of a case on one. (PyTorch's
           allocator gives a pad of 2-8 MiB a 20 MiB segment that the build's smaller tensors may share, so those
           sizes move fewer of them.) The pads' sizes are written to DIR/<label>-<pid>.pads.json

Since the runner took up a stream per case-round, ``redraw``, ``persist`` and ``shuffle`` draw their placements on
top of it (the allocator keeps each stream's blocks apart: a pad taken on the default stream no longer shares a
segment with the build), and ``current-stream``, ``one-stream`` and ``round-stream`` documents name their own
streams in ``attnprof timing``.

``bench/reports/h200-stream.md`` found that ``stream`` averages a level four cases share per process, and that within
a process the four still move together from round to round; ``one-stream`` and ``round-stream`` split what
``stream`` changes.

``--rounds`` overrides the suites' rounds (1-20, ``min_samples`` raised to 3 per round where lower). Given several
suites, each ``--case`` pattern must match in at least one of them.

``h200_truth.sh redraw`` runs a variant under ``taskset`` to pin the process to chosen CPUs (``--label`` names the
files apart: ``reuse`` pinned to two CPUs at one end of the host, two at the other, and unpinned).

(The committed data, ``bench/reports/data/h200-spread-causes-2026-12-03/redraw``, was gathered when the release
was a step of the runner's own; it ran at the same point, right before the build.)

Writes DIR/<label>-<pid>.json.gz (the result document; the label is the variant unless given); given several suites,
one per suite, DIR/<suite name>/<label>-<pid>.json.gz. ``--addresses`` records, for every case-round, the stream its
build ran on and the (address, bytes) of each block the allocator handed out for the build and warm-up (from its
recorded history, as ``h200_workspace.py`` reads it), to DIR/<label>-<pid>.addresses.json: whether a level follows
the blocks a round lands on or the stream it runs on.
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from attnprof.core.errors import SuiteError
from attnprof.core.measure import runner
from attnprof.core.suite import CaseSpec, Suite, load_suite, select_cases


def _chosen(suite: Suite, patterns: list[str]) -> list[CaseSpec]:
    """The cases of ``suite`` matching any of ``patterns`` (none where none matches), in suite order."""
    picked: set[str] = set()
    for pattern in patterns:
        try:
            picked |= {c.id for c in select_cases(suite, [pattern])}
        except SuiteError:
            continue
    return [c for c in suite.cases if c.id in picked]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("suites", nargs="+")
    parser.add_argument(
        "--variant",
        choices=("reuse", "redraw", "persist", "stream", "current-stream", "one-stream", "round-stream", "shuffle"),
        required=True,
    )
    parser.add_argument("--case", action="append", default=[], help="only the cases matching this pattern")
    parser.add_argument("--rounds", type=int, help="the suites' rounds, overridden")
    parser.add_argument("--label", help="the output files' name (default: the variant)")
    parser.add_argument("--addresses", action="store_true", help="record each case-round's stream and blocks")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.rounds is not None and not 1 <= args.rounds <= 20:
        parser.error(f"--rounds must be in 1..20 passes over the suite, got {args.rounds}")
    suites = [load_suite(path) for path in args.suites]
    chosen = {suite.name: _chosen(suite, args.case) for suite in suites} if args.case else {}
    unmatched = [p for p in args.case if not any(_chosen(suite, [p]) for suite in suites)]
    if unmatched:
        parser.error(f"--case {unmatched[0]!r} matches no case of {' '.join(args.suites)}")
    pad_sizes: list[list[Any]] = []  # shuffle: [case id, bytes] per round
    if args.variant == "redraw":
        import torch

        build = runner.build_workload  # type: ignore[attr-defined]

        def build_in_fresh_memory(spec: Any, device: str, *, seed: int = 0) -> Any:
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            return build(spec, device, seed=seed)

        runner.build_workload = build_in_fresh_memory  # type: ignore[attr-defined,assignment]
    if args.variant == "persist":
        import random

        import torch

        from attnprof.core.measure.timing import Flusher

        prepare = runner.SuiteSession.prepare
        clear = torch._C._cuda_clearCublasWorkspaces  # a CUDA build's; fails loudly elsewhere
        held: list[Any] = []

        def prepare_with_fresh_process_state(self: Any, spec: Any) -> Any:
            torch.cuda.synchronize()
            pad = torch.empty(random.randrange(0, 512 << 20, 1 << 20), dtype=torch.uint8, device="cuda")
            self.flusher = Flusher("cuda")  # allocated while the old one is still held: it cannot land on it
            held[:] = [pad]
            clear()
            return prepare(self, spec)

        runner.SuiteSession.prepare = prepare_with_fresh_process_state  # type: ignore[method-assign]
    if args.variant == "shuffle":
        import random

        import torch

        prepare = runner.SuiteSession.prepare
        pad: list[Any] = []

        def prepare_in_new_place(self: Any, spec: Any) -> Any:
            torch.cuda.synchronize()
            pad.clear()  # the previous round's workload is dropped once it is timed: the cache empties whole
            torch.cuda.empty_cache()
            size = random.randrange(0, 64 << 20, 2 << 20)
            pad_sizes.append([spec.id, size])
            pad.append(torch.empty(size, dtype=torch.uint8, device="cuda"))
            return prepare(self, spec)

        runner.SuiteSession.prepare = prepare_in_new_place  # type: ignore[method-assign]
    if args.variant in ("stream", "current-stream", "one-stream", "round-stream"):
        import torch

        streams: dict[int, Any] = {}  # one-stream: one, under 0; round-stream: one per round number
        rounds_run: dict[str, int] = {}

        def stream_for(self: Any, case_id: str) -> Any:  # in place of the runner's new_round_stream
            if args.variant == "stream":
                return torch.cuda.Stream()  # type: ignore[no-untyped-call]
            if args.variant == "current-stream":
                return None
            rounds_run[case_id] = rounds_run.get(case_id, 0) + 1
            key = rounds_run[case_id] if args.variant == "round-stream" else 0
            if key not in streams:
                streams[key] = torch.cuda.Stream()  # type: ignore[no-untyped-call]
            return streams[key]

        runner.SuiteSession.new_round_stream = stream_for  # type: ignore[method-assign]
        words = {
            "current-stream": "every round on the process's current stream",
            "one-stream": "every round on one pool stream",
            "round-stream": "a stream per round of the suite",
        }
        if args.variant in words:  # the document says how this process timed, not how the runner does
            from attnprof.core.measure.timing import TIMING_METHOD

            method = TIMING_METHOD["cuda"].replace("a stream per case-round", words[args.variant])
            runner.TIMING_METHOD = {**TIMING_METHOD, "cuda": method}  # type: ignore[attr-defined]
    placed: list[dict[str, Any]] = []  # --addresses: per case-round, in the order they ran
    if args.addresses:
        import torch

        from bench.h200_workspace import allocations

        prepare_here = runner.SuiteSession.prepare  # around any variant's own wrapper: a shuffle pad is a block too
        choose = runner.SuiteSession.new_round_stream  # any variant's own choice of the round's stream
        handed: list[Any] = [None]

        def stream_noted(self: Any, case_id: str) -> Any:
            handed[0] = choose(self, case_id)
            return handed[0]

        def prepare_and_record(self: Any, spec: Any) -> Any:
            failed, blocks = allocations(lambda: prepare_here(self, spec))
            stream = handed[0] if handed[0] is not None else torch.cuda.current_stream()
            placed.append({"case": spec.id, "stream": int(stream.cuda_stream), "blocks": blocks})
            return failed

        runner.SuiteSession.new_round_stream = stream_noted  # type: ignore[method-assign]
        runner.SuiteSession.prepare = prepare_and_record  # type: ignore[method-assign]
    stem = f"{args.label or args.variant}-{os.getpid()}"
    rounds = f" --rounds {args.rounds}" if args.rounds is not None else ""
    for suite in suites:
        if args.case and not chosen[suite.name]:
            continue
        if args.rounds is not None:
            timing = suite.timing
            suite = dataclasses.replace(
                suite,
                timing=dataclasses.replace(
                    timing, rounds=args.rounds, min_samples=max(timing.min_samples, 3 * args.rounds)
                ),
            )
        started = time.perf_counter()
        doc = runner.profile_suite(
            suite,
            runner.ProfileOptions(
                device="cuda",
                cache_dir=Path("/tmp/attnprof-cache"),
                command=f"h200_redraw {args.label or args.variant} --variant {args.variant}{rounds}",
                cases=chosen[suite.name] if args.case else None,
            ),
        )
        out = args.out / suite.name if len(suites) > 1 else args.out
        out.mkdir(parents=True, exist_ok=True)
        with gzip.open(out / f"{stem}.json.gz", "wt") as f:
            f.write(doc.to_json())
        print(f"{stem}: {suite.name} profiled in {time.perf_counter() - started:.1f} s", flush=True)
    if args.variant == "shuffle":
        (args.out / f"{stem}.pads.json").write_text(json.dumps(pad_sizes))
    if args.addresses:
        (args.out / f"{stem}.addresses.json").write_text(json.dumps(placed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
