"""What the profiler leaves allocated on the GPU after a run: cuBLAS's workspaces, one per (handle, stream).

    PYTHONPATH=. python3 bench/h200_cublas_workspaces.py SUITE... --variant release|keep --out FILE   (GPU host)
    .venv/bin/python bench/h200_cublas_workspaces.py --report DATA_DIR --out REPORT.md                (here)

The runner times each case-round on a stream of PyTorch's pool (``round_stream``), and PyTorch keeps a cuBLAS
workspace for every stream a matrix product ran on, for the life of the process. ``release`` is the runner as it
is (``release_stream_workspaces`` after each round); ``keep`` turns that call off. One process per variant profiles
the suites (no traces), then, with the session gone and the garbage collected, reads what is still allocated and
reserved, and the peak; each case's median is kept beside them. Writes one JSON document; ``--report`` turns a
folder of them (``ws-<variant>-<n>.json``, with ``gpu.txt``) into the markdown report.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics as st
import sys
import time
from pathlib import Path
from typing import Any

MIB = 2**20
ROOT = Path(__file__).resolve().parents[1]
COMMAND = (
    "for v in keep release keep release; do python3 bench/h200_cublas_workspaces.py examples/llama7b.toml "
    "bench/validation/suite.toml --variant $v --out ws-$v-$SECONDS.json; done"
)


def measure(suites: list[str], variant: str) -> dict[str, Any]:
    import torch

    import attnprof.core.measure.runner as runner
    from attnprof.core.measure.runner import ProfileOptions, profile_suite
    from attnprof.core.suite import load_suite

    if variant == "keep":
        runner.release_stream_workspaces = lambda device: None  # type: ignore[attr-defined]
    torch.cuda.init()  # type: ignore[no-untyped-call]
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    out: dict[str, Any] = {"variant": variant, "torch": torch.__version__, "suites": {}, "medians": {}}
    started = time.perf_counter()
    for path in suites:
        suite = load_suite(path)
        options = ProfileOptions(device="cuda", cache_dir=Path("/tmp/attnprof-cache"), command="h200_cublas_workspaces")
        doc = profile_suite(suite, options)
        out["suites"][suite.name] = suite.timing.effective_rounds
        for case in doc.cases:
            if case.latency_us is not None:
                out["medians"][f"{suite.name}/{case.id}"] = case.latency_us.median
        del doc
        gc.collect()
        torch.cuda.synchronize()
        left = (torch.cuda.memory_allocated() - before) / MIB
        out[f"allocated_after_{suite.name}_mib"] = left
        print(f"{variant}: {suite.name} done, {left:.1f} MiB still allocated", flush=True)
    out["wall_s"] = time.perf_counter() - started
    out["allocated_after_mib"] = (torch.cuda.memory_allocated() - before) / MIB
    out["reserved_after_mib"] = torch.cuda.memory_reserved() / MIB
    out["peak_allocated_mib"] = torch.cuda.max_memory_allocated() / MIB
    torch.cuda.empty_cache()
    out["reserved_after_empty_cache_mib"] = torch.cuda.memory_reserved() / MIB
    return out


def report(data: Path) -> str:
    """The markdown report over a folder of this script's documents."""
    runs = [json.loads(p.read_text()) for p in sorted(data.glob("ws-*.json"), key=lambda p: int(p.stem.split("-")[-1]))]
    by = {v: [r for r in runs if r["variant"] == v] for v in ("keep", "release")}
    keys = sorted(set.intersection(*(set(r["medians"]) for r in runs)))
    ratios = {
        k: st.mean(r["medians"][k] for r in by["release"]) / st.mean(r["medians"][k] for r in by["keep"]) - 1
        for k in keys
    }
    gpu = (data / "gpu.txt").read_text().strip() if (data / "gpu.txt").exists() else "?"

    def cells(key: str, fmt: str = "{:,.0f}") -> str:
        return " | ".join(" / ".join(fmt.format(r[key]) for r in by[v]) for v in ("keep", "release"))

    lines = [
        "# cuBLAS workspaces: what a run leaves allocated on the GPU",
        "",
        f"One H200 (`{gpu}`), torch {runs[0]['torch']}; the example suite and the validation set profiled in one "
        f"process per run, {len(by['keep'])} processes without the release and {len(by['release'])} with it, in "
        "turn. Produced by (on the GPU host, from the repository root, then here):",
        "",
        "```bash",
        COMMAND,
        f"python bench/h200_cublas_workspaces.py --report {data.relative_to(ROOT)} --out "
        "bench/reports/h200-cublas-workspaces.md",
        "```",
        "",
        "PyTorch keeps a cuBLAS workspace for each (handle, stream) a matrix product ran on, for the life of the "
        "process. The runner times each case-round on a stream of PyTorch's pool of 32, so without a release a run "
        "keeps one for every pool stream that a case with matrix products met. `keep` is the runner with "
        "`release_stream_workspaces` turned off, `release` the runner as it is (the workspaces freed into the "
        "allocator's cache after each round). MiB, one figure per process:",
        "",
        "| after the run | keep | release |",
        "|---|---:|---:|",
        f"| still allocated, the session gone | {cells('allocated_after_mib')} |",
        f"| reserved by the allocator | {cells('reserved_after_mib')} |",
        f"| reserved after `torch.cuda.empty_cache()` | {cells('reserved_after_empty_cache_mib')} |",
        f"| peak allocated during the run | {cells('peak_allocated_mib')} |",
        "",
        f"Kept, the workspaces stay allocated after the run and hold segments the allocator cannot hand back: "
        f"{st.mean(r['reserved_after_empty_cache_mib'] for r in by['keep']):,.0f} MiB stay reserved after "
        "`empty_cache`, memory no other process on the GPU can have and the process itself can reuse only in the "
        "pieces that fit between the workspaces; the peak is higher by the workspaces too. Released, nothing stays. "
        "The case "
        f"medians of the two variants ({len(keys)} cases, the mean of each variant's processes) differ by a median of "
        f"{st.median(ratios.values()):+.2%} (from {min(ratios.values()):+.2%} to {max(ratios.values()):+.2%}; "
        "two processes a side say nothing finer about the level).",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("suites", nargs="*")
    parser.add_argument("--variant", choices=("release", "keep"))
    parser.add_argument("--report", type=Path, help="a folder of this script's documents: write the report to --out")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.report is not None:
        args.out.write_text(report(args.report.resolve()))
        print(f"wrote {args.out}")
        return 0
    if not args.suites or args.variant is None:
        parser.error("profiling takes SUITE... and --variant")
    result = measure(args.suites, args.variant)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(
        f"{args.variant}: {result['allocated_after_mib']:.1f} MiB allocated after the run, "
        f"{result['reserved_after_empty_cache_mib']:.1f} MiB reserved after empty_cache, "
        f"peak {result['peak_allocated_mib']:.0f} MiB, {result['wall_s']:.1f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
